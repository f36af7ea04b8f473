"""`dreaming ingest`, `ingest-longmemeval`, `stats`, `inspect`, `export`, `forget`, `recall`: a user's memory."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import click
import psycopg

from dreaming_dagster.cli.console import console, fail, progress_bar, wide_console
from dreaming_dagster.ingest.files import ingest_records
from dreaming_dagster.ingest.readers import LineRecord, read_jsonl, read_longmemeval
from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult
from dreaming_dagster.process_defaults import default_database, default_embedder, default_settings
from dreaming_dagster.storage.records import InvalidInputError, Rejection, validate_identifier

_ingest_options = [
    click.option("--user", "user_id", required=True, help="The user whose memory receives the pairs."),
    click.option("--kg-id", default="default", show_default=True, help="Knowledge graph id."),
    click.option("--strict", is_flag=True, help="All or nothing: store nothing if any record is invalid."),
    click.option("--defer-embedding", is_flag=True,
                 help="Store without embeddings; the memory_pairs asset embeds them later."),
]


def ingest_options(func):
    for option in reversed(_ingest_options):
        func = option(func)
    return func


def _report(result: SaveResult) -> None:
    click.echo(f"inserted {result.inserted:,} · duplicates {result.duplicates:,} · rejected "
               f"{len(result.rejected):,} · embedded {result.embedded:,} · embedding pending "
               f"{result.embedding_pending:,} · tokens {result.tokens:,}")
    for rejection in result.rejected[:20]:
        console.print(f"[yellow]rejected[/] {rejection}")
    if len(result.rejected) > 20:
        console.print(f"[yellow]… and {len(result.rejected) - 20} more rejected records")
    if result.rejected:
        sys.exit(1)


@click.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@ingest_options
def ingest(file: Path, user_id: str, kg_id: str, strict: bool, defer_embedding: bool) -> None:
    """Ingest a JSONL file of pairs (session_id, user_message, assistant_message, occurred_at), or a memory
    exported by `dreaming export` (its subjects, links and dated events come along)."""
    from dreaming_dagster.memory.export import is_export

    first = next(iter(read_jsonl(file)), None)
    if isinstance(first, LineRecord) and is_export(first.raw):
        _import_export(file, user_id, kg_id, defer_embedding)
        return
    with file.open("rb") as handle:  # bytes: a line that is not UTF-8 is the reader's to reject
        total = sum(1 for line in handle if line.strip())
    _run_ingest(lambda: read_jsonl(file), user_id, kg_id, strict, defer_embedding, total)


def _import_export(file: Path, user_id: str, kg_id: str, defer_embedding: bool) -> None:
    """An export's pairs and graph into USER's graph KG_ID, all records checked before anything is stored."""
    from dreaming_dagster.memory.export import import_records

    records = []
    for item in read_jsonl(file):
        if isinstance(item, Rejection):
            fail(str(item))
        records.append((item.where, item.raw))
    try:
        imported = import_records(records, user_id, kg_id, embed=not defer_embedding,
                                  batch_size=default_settings().embedding_batch_size)
    except InvalidInputError as exc:
        fail(str(exc))
    _report(imported.saved)
    click.echo(f"graph: {imported.subjects:,} subjects and {imported.links:,} links imported" if imported.graph_imported
               else f"graph: {user_id}/{kg_id} already had subjects; only the pairs were added (dreaming links them)")


@click.command("ingest-longmemeval")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@ingest_options
@click.option("--limit-questions", type=int, default=None, help="Only the first N questions' sessions.")
def ingest_longmemeval(file: Path, user_id: str, kg_id: str, strict: bool, defer_embedding: bool,
                       limit_questions: int | None) -> None:
    """Ingest a LongMemEval-format file (streamed): every session becomes consecutive pairs."""
    _run_ingest(lambda: read_longmemeval(file, limit_questions), user_id, kg_id, strict, defer_embedding, None)


def _run_ingest(make_items, user_id, kg_id, strict, defer_embedding, total) -> None:
    try:
        with progress_bar() as progress:
            task = progress.add_task(f"ingesting into {user_id}", total=total)
            result = ingest_records(make_items, user_id, kg_id, strict=strict, embed=not defer_embedding,
                                    on_records=lambda n: progress.advance(task, n))
    except (InvalidInputError, BatchRejectedError) as exc:
        fail(str(exc))
    except psycopg.Error as exc:
        kept = ("nothing was stored (--strict)" if strict else "pairs stored before the failure are kept; run the "
                "same command again to continue (they count as duplicates)")
        fail(f"the database failed: {str(exc).splitlines()[0][:300]}; {kept}")
    _report(result)



@click.command()
@click.option("--user", "user_id", required=True)
def stats(user_id: str) -> None:
    """What a user's memory holds, per knowledge graph."""
    from rich.table import Table

    from dreaming_dagster.ingest.embedding import user_stats

    try:
        validate_identifier(user_id, "user_id")
    except InvalidInputError as exc:
        fail(str(exc))
    default_database().ensure_schema(default_embedder().spec)
    rows = user_stats(default_database(), user_id)
    table = Table(title=f"memory of {user_id}")
    for column in ("kg", "pairs", "tokens", "sessions", "dated events", "pending embedding", "pending extraction",
                   "failed extraction", "first", "last"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["kg_id"], f"{row['pairs']:,}", f"{row['tokens']:,}", f"{row['sessions']:,}",
                      f"{row['dated_pairs']:,}", f"{row['pending_embedding']:,}", f"{row['pending_extraction']:,}",
                      f"{row['failed_extraction']:,}", str(row["first_occurred_at"]), str(row["last_occurred_at"]))
    wide_console().print(table if rows else f"{user_id} has no memory pairs")
    if rows:
        _print_graph(user_id)
    parked = sum(row["failed_extraction"] for row in rows)
    if parked:
        console.print(f"[yellow]{parked:,} pair(s) failed extraction on every attempt; they are retried after a "
                      f"cool-down, or now with `dreaming retry-failed --user {user_id}`")


def _print_graph(user_id: str) -> None:
    """The graph's shape (pipeline/graph_reports.graph_report) and its top subjects, hubs marked."""
    from rich.table import Table

    from dreaming_dagster.pipeline.graph_reports import graph_report, top_subjects

    graph = Table(title=f"graph of {user_id}")
    for column in ("kg", "subjects", "links", "singletons", "median subjects/pair", "largest subject", "hubs",
                   "generic subjects"):
        graph.add_column(column)
    for r in graph_report(default_database(), user_id):
        largest = (f"{r['largest_subject']} ({100 * r['largest_share']:.1f}% of pairs"
                   f"{', hub' if r['largest_is_hub'] else ''})" if r["largest_subject"] else "–")
        graph.add_row(r["kg_id"], f"{r['subjects']:,}", f"{r['links']:,}", f"{100 * r['singleton_share']:.0f}%",
                      str(r["median_subjects_per_pair"]), largest, str(r["hubs"]),
                      f"{r['generic_subjects']:,} ({100 * r['generic_share']:.1f}%)")
    wide_console().print(graph)
    top = Table(title=f"top subjects of {user_id}")
    for column in ("subject", "type", "linked pairs", "hub"):
        top.add_column(column)
    for row in top_subjects(default_database(), user_id, limit=10):
        top.add_row(row["subject_text"], row["subject_type"], f"{row['linked_pairs']:,}", "hub" if row["hub"] else "")
    wide_console().print(top)



@click.command()
@click.option("--user", "user_id", required=True)
@click.option("--pair", "pair_ids", multiple=True, help="A pair id to forget (repeat for several).")
@click.option("--session", "session_id", default=None, help="Forget every pair of this session.")
@click.option("--everything", is_flag=True, help="Erase the user: every graph's pairs, subjects and audit.")
@click.option("--kg-id", default=None, help="The knowledge graph (default: 'default' for --pair/--session; every "
              "graph of the user for --everything).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation of --everything.")
def forget(user_id: str, pair_ids: tuple[str, ...], session_id: str | None, everything: bool, kg_id: str | None,
           yes: bool) -> None:
    """Delete USER's pairs (--pair), a session (--session) or everything (--everything), with all that dreaming
    derived from them: subjects left without a pair, descriptions, the word index, audit text."""
    from dreaming_dagster.memory.forgetting import erase_user, forget_pairs, forget_session

    if sum((bool(pair_ids), session_id is not None, everything)) != 1:
        fail("name what to forget: --pair ID (repeatable), --session ID or --everything")
    if everything and not yes:
        click.confirm(f"erase every memory of {user_id}" + (f" in {kg_id}" if kg_id else " in every graph") + "?",
                      abort=True)
    try:
        if everything:
            result = erase_user(user_id, kg_id)
        elif session_id is not None:
            result = forget_session(user_id, session_id, kg_id or "default")
        else:
            result = forget_pairs(user_id, pair_ids, kg_id or "default")
    except InvalidInputError as exc:
        fail(str(exc))
    click.echo(f"{user_id}: forgot {result.pairs:,} pair(s) in {', '.join(result.kg_ids) or 'no graph'} · subjects "
               f"deleted {result.subjects_deleted:,}, rebuilt {result.subjects_rebuilt:,} · audit passes redacted "
               f"{result.passes_redacted:,} · {result.seconds} s")
    if result.missing:
        console.print(f"[yellow]not found in {user_id}/{kg_id or 'default'}:[/] {', '.join(result.missing)}")


@click.command()
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write here instead of stdout.")
def export(user_id: str, kg_id: str, out: Path | None) -> None:
    """USER's whole memory in KG_ID as JSONL: pairs with their subjects, links and dated events, then the
    subjects. `dreaming ingest FILE --user U` imports it on any instance."""
    from dreaming_dagster.memory.export import export_lines

    try:
        lines = export_lines(user_id, kg_id)
        handle = out.open("w", encoding="utf-8") if out else sys.stdout
        try:
            for line in lines:
                handle.write(line + "\n")
        finally:
            if out:
                handle.close()
    except InvalidInputError as exc:
        fail(str(exc))


@click.group()
def inspect() -> None:
    """What a user's memory holds: pairs, one pair, subjects, one subject."""


def _inspect_output(rows, as_json: bool, title: str, columns: dict[str, Callable]) -> None:
    from rich.table import Table

    from dreaming_dagster.memory.inspection import jsonable

    if as_json:
        click.echo(json.dumps(jsonable(rows), indent=2, ensure_ascii=False))
        return
    table = Table(title=title)
    for n, column in enumerate(columns):
        table.add_column(column, no_wrap=n == 0, min_width=36 if n == 0 else None)  # the whole id: forget needs it
    for row in rows:
        table.add_row(*[str(render(row)) for render in columns.values()])
    wide_console().print(table)


def _short(text: str, size: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[:size - 1] + "…"


@inspect.command("pairs")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
@click.option("--session", "session_id", default=None)
@click.option("--since", default=None, help="Pairs at or after this time (ISO 8601).")
@click.option("--until", default=None, help="Pairs before this time (ISO 8601).")
@click.option("--limit", default=50, show_default=True)
@click.option("--cursor", default=None, help="The next page (printed under a full page).")
@click.option("--json", "as_json", is_flag=True)
def inspect_pairs(user_id, kg_id, session_id, since, until, limit, cursor, as_json) -> None:
    """A page of USER's pairs, oldest first."""
    from dreaming_dagster.memory.inspection import list_pairs

    try:
        page = list_pairs(user_id, kg_id, session_id=session_id, since=since, until=until, limit=limit, cursor=cursor)
    except InvalidInputError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(page.as_dict(), indent=2, ensure_ascii=False))
        return
    _inspect_output(page.pairs, False, f"pairs of {user_id}/{kg_id}", {
        "pair": lambda r: r["pair_id"], "session": lambda r: r["session_id"],
        "occurred": lambda r: f"{r['occurred_at']:%Y-%m-%d %H:%M}", "user said": lambda r: _short(r["user_message"]),
        "subjects": lambda r: _short(", ".join(r["subjects"]), 40)})
    if page.next_cursor:
        click.echo(f"next page: --cursor {page.next_cursor}")


def _show_one(what: str, reader: str, help_text: str) -> None:
    """`dreaming inspect <what> ID --user U`: ``memory.inspection.<reader>(user, ID, kg)`` as JSON, or an error
    naming what USER's graph does not hold."""

    @inspect.command(what, help=help_text)
    @click.argument("identifier", metavar=f"{what.upper()}_ID")
    @click.option("--user", "user_id", required=True)
    @click.option("--kg-id", default="default", show_default=True)
    def show(identifier, user_id, kg_id) -> None:
        from dreaming_dagster.memory import inspection

        try:
            found = getattr(inspection, reader)(user_id, identifier, kg_id)
        except InvalidInputError as exc:
            fail(str(exc))
        if found is None:
            fail(f"{user_id}/{kg_id} holds no {what} {identifier}")
        click.echo(json.dumps(inspection.jsonable(found), indent=2, ensure_ascii=False))


_show_one("pair", "read_pair", "One of USER's pairs with its subjects and dated events (JSON).")
_show_one("subject", "read_subject", "One of USER's subjects with its most recent pairs (JSON).")


@inspect.command("subjects")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
@click.option("--search", default=None, help="Only subjects whose name contains this (any case).")
@click.option("--limit", default=50, show_default=True)
@click.option("--archived", "include_archived", is_flag=True, help="Archived subjects too.")
@click.option("--json", "as_json", is_flag=True)
def inspect_subjects(user_id, kg_id, search, limit, include_archived, as_json) -> None:
    """USER's subjects, most linked first."""
    from dreaming_dagster.memory.inspection import list_subjects

    try:
        rows = list_subjects(user_id, kg_id, search=search, limit=limit, include_archived=include_archived)
    except InvalidInputError as exc:
        fail(str(exc))
    _inspect_output(rows, as_json, f"subjects of {user_id}/{kg_id}", {
        "subject": lambda r: r["subject_id"], "name": lambda r: r["name"], "type": lambda r: r["type"],
        "pairs": lambda r: r["pairs"], "description": lambda r: _short(r["description"], 50),
        "state": lambda r: "archived" if r["archived_at"] else ("hub" if r["hub"] else "")})


@click.command()
@click.argument("query")
@click.option("--user", "user_id", required=True)
@click.option("-k", "k", default=10, show_default=True, help="How many memories (1–200).")
@click.option("--session", "session_id", default=None, help="The caller's current session (same-session signal).")
@click.option("--as-of", "as_of", default=None, help="Rank the memory as it was then (ISO 8601).")
@click.option("--kg-id", default="default", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def recall(query: str, user_id: str, k: int, session_id: str | None, as_of: str | None, kg_id: str,
           as_json: bool) -> None:
    """The best memories of USER for QUERY, with its signals, the weights, the score and the time it asks about."""
    from dreaming_dagster.reporting import recall_table
    from dreaming_dagster.retrieval import default_recaller

    try:
        result = default_recaller().recall(user_id, query, k, session_id=session_id, as_of=as_of, kg_id=kg_id)
    except InvalidInputError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2, default=str))
        return
    console = wide_console()
    if not result.memories:
        console.print(f"{user_id} has no memories to recall" + (f" before {as_of}" if as_of else ""))
        return
    console.print(recall_table(result))


COMMANDS = (ingest, ingest_longmemeval, stats, forget, export, inspect, recall)
