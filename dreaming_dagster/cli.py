"""The ``dreaming`` command line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

import click
import psycopg
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dreaming_dagster.config.runtime import default_database, default_embedder, default_settings
from dreaming_dagster.config.settings import DreamingSettings, describe_settings_error
from dreaming_dagster.ingest.readers import (
    LineRecord,
    read_jsonl,
    read_longmemeval,
)
from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_validated_pairs
from dreaming_dagster.storage.records import (
    InvalidInputError,
    MemoryPair,
    Rejection,
    parse_pair,
    validate_identifier,
)

console = Console(stderr=True)
CHUNK_SIZE = 256


def wide_console() -> Console:
    """stdout at 110+ columns, so tables stay readable when stdout is not a terminal (CI, logs)."""
    return Console(width=max(Console().width, 110))


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


def ingest_items(make_items: Callable[[], Iterable[LineRecord | Rejection]], user_id: str, kg_id: str, *,
                 strict: bool, embed: bool, total: int | None = None) -> SaveResult:
    """Validate and store a stream of file records in chunks; each chunk is one transaction.

    ``strict``: the whole file is validated first and nothing is stored if any record is invalid; the
    valid file is then stored in one transaction, so a failure at any point stores none of it.
    """
    user_id = validate_identifier(user_id, "user_id")
    kg_id = validate_identifier(kg_id, "kg_id")
    if strict:
        rejections = [r for r in _validated(make_items()) if isinstance(r, Rejection)]
        if rejections:
            raise BatchRejectedError(rejections)
    database, embedder = default_database(), default_embedder()
    batch_size = default_settings().embedding_batch_size
    database.ensure_schema(embedder.spec)
    result = SaveResult()
    with _progress() as progress, ExitStack() as stack:
        connection = None
        if strict:
            connection = stack.enter_context(database.connect())
            stack.enter_context(connection.transaction())
        task = progress.add_task(f"ingesting into {user_id}", total=total)

        def store(chunk: list[tuple[str, MemoryPair]]) -> None:
            result.merge(save_validated_pairs(database, embedder, user_id, kg_id, [p for _, p in chunk],
                                              embed=embed, batch_size=batch_size, connection=connection,
                                              labels=[where for where, _ in chunk]))
            progress.advance(task, len(chunk))

        chunk = []
        for item in _validated(make_items()):
            if isinstance(item, Rejection):
                result.rejected.append(item)
                progress.advance(task)
                continue
            chunk.append(item)
            if len(chunk) >= CHUNK_SIZE:
                store(chunk)
                chunk = []
        if chunk:
            store(chunk)
    return result


def _validated(items: Iterable[LineRecord | Rejection]) -> Iterator:
    for item in items:
        if isinstance(item, Rejection):
            yield item
            continue
        try:
            yield item.where, parse_pair(item.raw, record=item.where)
        except InvalidInputError as exc:
            yield Rejection(record=item.where, field=exc.field, reason=exc.reason)


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


def exit_on_sigterm() -> None:
    """Make SIGTERM a normal exit so cleanup (releasing the embedded server) runs."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _fail(message: str) -> None:
    console.print(f"[red]error:[/] {message}")
    sys.exit(2)


class _DreamingGroup(click.Group):
    """The command group: a bad DREAMING_* variable is an error naming it, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ValidationError as error:
            if error.title != DreamingSettings.__name__:
                raise
            _fail(describe_settings_error(error))


@click.group(cls=_DreamingGroup)
def main() -> None:
    """dreaming: background memory consolidation for AI companions, on Dagster + Postgres/pgvector."""


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


@main.command()
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
            _fail(str(item))
        records.append((item.where, item.raw))
    try:
        imported = import_records(records, user_id, kg_id, embed=not defer_embedding,
                                  batch_size=default_settings().embedding_batch_size)
    except InvalidInputError as exc:
        _fail(str(exc))
    _report(imported.saved)
    click.echo(f"graph: {imported.subjects:,} subjects and {imported.links:,} links imported" if imported.graph_imported
               else f"graph: {user_id}/{kg_id} already had subjects; only the pairs were added (dreaming links them)")


@main.command("ingest-longmemeval")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@ingest_options
@click.option("--limit-questions", type=int, default=None, help="Only the first N questions' sessions.")
def ingest_longmemeval(file: Path, user_id: str, kg_id: str, strict: bool, defer_embedding: bool,
                       limit_questions: int | None) -> None:
    """Ingest a LongMemEval-format file (streamed): every session becomes consecutive pairs."""
    _run_ingest(lambda: read_longmemeval(file, limit_questions), user_id, kg_id, strict, defer_embedding, None)


def _run_ingest(make_items, user_id, kg_id, strict, defer_embedding, total) -> None:
    try:
        result = ingest_items(make_items, user_id, kg_id, strict=strict, embed=not defer_embedding, total=total)
    except (InvalidInputError, BatchRejectedError) as exc:
        _fail(str(exc))
    except psycopg.Error as exc:
        kept = ("nothing was stored (--strict)" if strict else "pairs stored before the failure are kept; run the "
                "same command again to continue (they count as duplicates)")
        _fail(f"the database failed: {str(exc).splitlines()[0][:300]}; {kept}")
    _report(result)


@main.command()
@click.option("--user", "user_id", required=True)
def stats(user_id: str) -> None:
    """What a user's memory holds, per knowledge graph."""
    from rich.table import Table

    from dreaming_dagster.ingest.embedding import user_stats

    try:
        validate_identifier(user_id, "user_id")
    except InvalidInputError as exc:
        _fail(str(exc))
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


@main.command("retry-failed")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default=None, help="Only this knowledge graph (default: all of the user's).")
def retry_failed(user_id: str, kg_id: str | None) -> None:
    """Give USER's pairs that failed extraction on every attempt a fresh set of attempts (no rebuild)."""
    from dreaming_dagster.pipeline.extracting import reset_failed_extractions

    _checked_user(user_id, kg_id or "default")
    database = default_database()
    database.ensure_schema(default_embedder().spec)
    reset = reset_failed_extractions(database, user_id, kg_id)
    click.echo(f"{reset:,} pair(s) of {user_id} will be extracted again on the next run "
               "(the sensor's, or `dreaming sync`)")


@main.command()
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default=None, help="Only this knowledge graph (default: all of the user's).")
def sync(user_id: str, kg_id: str | None) -> None:
    """The fast path: run every dreaming stage for USER now, in this process (no Dagster run)."""
    from dreaming_dagster.pipeline.graph_reports import graph_stats
    from dreaming_dagster.pipeline.sync import sync_user

    exit_on_sigterm()
    try:
        result = sync_user(user_id, kg_id=kg_id, report=True)
    except InvalidInputError as exc:
        _fail(str(exc))
    graph = graph_stats(default_database(), user_id)
    hubs = sum(report["hubs"] for report in result.graph)
    click.echo(f"{user_id}: embedded {result.embedded} · dated {result.dating.get('pairs', 0)} · extracted "
               f"{result.extraction.get('pairs', 0)} (failed {result.extraction.get('failures', 0)}) · subjects created {result.merge.get('created', 0)}, "
               f"merged {result.merge.get('merged', 0)} · links {result.links.get('links', 0)} · refined "
               f"{result.refinement.get('refined', 0)} · {result.seconds} s")
    click.echo(f"graph: {graph['subjects']} subjects, {graph['links']} links over {graph['pairs']} pairs, "
               f"{hubs} hub(s)")
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)


@main.command()
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
        _fail("name what to forget: --pair ID (repeatable), --session ID or --everything")
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
        _fail(str(exc))
    click.echo(f"{user_id}: forgot {result.pairs:,} pair(s) in {', '.join(result.kg_ids) or 'no graph'} · subjects "
               f"deleted {result.subjects_deleted:,}, rebuilt {result.subjects_rebuilt:,} · audit passes redacted "
               f"{result.passes_redacted:,} · {result.seconds} s")
    if result.missing:
        console.print(f"[yellow]not found in {user_id}/{kg_id or 'default'}:[/] {', '.join(result.missing)}")


@main.command()
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
        _fail(str(exc))


@main.group()
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
        _fail(str(exc))
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
            _fail(str(exc))
        if found is None:
            _fail(f"{user_id}/{kg_id} holds no {what} {identifier}")
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
        _fail(str(exc))
    _inspect_output(rows, as_json, f"subjects of {user_id}/{kg_id}", {
        "subject": lambda r: r["subject_id"], "name": lambda r: r["name"], "type": lambda r: r["type"],
        "pairs": lambda r: r["pairs"], "description": lambda r: _short(r["description"], 50),
        "state": lambda r: "archived" if r["archived_at"] else ("hub" if r["hub"] else "")})


@main.command()
@click.option("--force", is_flag=True, help="Re-embed even when the model has not changed.")
def reembed(force: bool) -> None:
    """Re-embed every pair and subject with the configured embedder (after switching models)."""
    from dreaming_dagster.reembed import count_rows
    from dreaming_dagster.reembed import reembed as run_reembed

    database, embedder = default_database(), default_embedder()
    with _progress() as progress:
        task = progress.add_task(f"re-embedding with {embedder.spec}", total=count_rows(database))
        result = run_reembed(database, embedder, force=force, batch_size=default_settings().embedding_batch_size,
                             on_rows=lambda n: progress.advance(task, n))
    if result.skipped:
        click.echo(f"nothing to re-embed: the database already uses {result.current}")
    else:
        click.echo(f"re-embedded {result.pairs:,} pairs, {result.subjects:,} subjects and {result.keys:,} keys: "
                   f"{result.previous} → {result.current}")


@main.command()
@click.option("--users", default=5, show_default=True)
@click.option("--questions-per-user", default=8, show_default=True)
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="LongMemEval-format file (default: the shared oracle file).")
def demo(users: int, questions_per_user: int, dataset: Path | None) -> None:
    """Ingest demo users from LongMemEval and dream every user partition through Dagster."""
    from dreaming_dagster.demo import run_demo

    exit_on_sigterm()
    run_demo(users=users, questions_per_user=questions_per_user, dataset=dataset, console=wide_console())


@main.command()
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
        _fail(str(exc))
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2, default=str))
        return
    console = wide_console()
    if not result.memories:
        console.print(f"{user_id} has no memories to recall" + (f" before {as_of}" if as_of else ""))
        return
    console.print(recall_table(result))


@main.group()
def ranker() -> None:
    """The retrieval ranker's models."""


@ranker.command("train-question-type")
@click.option("--dataset", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="LongMemEval-format file (default: the shared oracle file).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the classifier (default: the file shipped in the package).")
@click.option("--seed", default=0, show_default=True)
def train_question_type(dataset: Path | None, out: Path | None, seed: int) -> None:
    """Train the question-type classifier recall uses to fill the ranker's question-type features."""
    from dreaming_dagster.ingest.readers import default_dataset_path
    from dreaming_dagster.retrieval.question_type import SHIPPED_CLASSIFIER, train_from_longmemeval

    report = train_from_longmemeval(dataset or default_dataset_path(), default_embedder(),
                                    out or SHIPPED_CLASSIFIER, seed=seed)
    per_type = ", ".join(f"{name} {value:.3f}" for name, value in report.per_type.items())
    click.echo(f"{report.questions} questions · 5-fold accuracy {report.accuracy:.3f} ({per_type}) · "
               f"wrote {report.path}")


@main.group()
def dream() -> None:
    """Token-budget consolidation passes: status, trigger, restore."""


def _checked_user(user_id: str, kg_id: str) -> None:
    try:
        validate_identifier(user_id, "user_id")
        validate_identifier(kg_id, "kg_id")
    except InvalidInputError as exc:
        _fail(str(exc))


@dream.command("status")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
def dream_status_command(user_id: str, kg_id: str) -> None:
    """Tokens since the last pass against the threshold, and the last passes."""
    from rich.table import Table

    from dreaming_dagster.consolidation.passes import dream_status

    _checked_user(user_id, kg_id)
    database = default_database()
    database.ensure_schema(default_embedder().spec)
    state, passes = dream_status(database, user_id, kg_id)
    threshold = default_settings().dream_token_threshold
    tokens = int(state.get("tokens_since_last_pass") or 0)
    click.echo(f"{user_id}/{kg_id}: {tokens:,} of {threshold:,} tokens since the last pass "
               f"({100 * tokens / threshold:.0f}%) · last pass {state.get('last_pass_at') or 'never'}")
    if passes:
        table = Table(title="last passes")
        for column in ("started", "mode", "provider", "status", "input tokens", "applied", "skipped", "decayed",
                       "summary"):
            table.add_column(column)
        for row in passes:
            table.add_row(f"{row['started_at']:%Y-%m-%d %H:%M}", row["mode"], row["provider"], row["status"],
                          f"{row['input_tokens']:,}", str(row["applied"]), str(row["skipped"]),
                          str(row["decayed"]), (row["summary"] or "")[:80])
        wide_console().print(table)


@dream.command("trigger")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
@click.option("--compact", is_flag=True, help="Compaction: the whole graph, in clusters, then across them.")
@click.option("--force", is_flag=True, help="Run even if the input is unchanged since the last pass.")
def dream_trigger(user_id: str, kg_id: str, compact: bool, force: bool) -> None:
    """Run a consolidation pass for USER now, in this process (the same pass consolidation_job runs)."""
    from dreaming_dagster.consolidation.passes import PassFailedError, PassPolicy, run_pass
    from dreaming_dagster.consolidation.providers import consolidator_from_settings

    exit_on_sigterm()
    _checked_user(user_id, kg_id)
    settings = default_settings()
    try:
        report = run_pass(default_database(), default_embedder(), consolidator_from_settings(settings), user_id,
                          kg_id, mode="compact" if compact else "auto", force=force,
                          policy=PassPolicy.from_settings(settings))
    except PassFailedError as exc:
        _fail(str(exc))
    from rich.markdown import Markdown

    wide_console().print(Markdown(report.diff_markdown()))


@dream.command("restore")
@click.argument("subject_id")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
def dream_restore(subject_id: str, user_id: str, kg_id: str) -> None:
    """Bring an archived subject back to the live graph, with its links."""
    from dreaming_dagster.consolidation.passes import RestoreError, restore_subject

    _checked_user(user_id, kg_id)
    database = default_database()
    database.ensure_schema(default_embedder().spec)
    try:
        row = restore_subject(database, user_id, kg_id, subject_id)
    except RestoreError as exc:
        _fail(str(exc))
    click.echo(f"restored {row['subject_text']!r} ({row['id']})")


# How long what a stopped command left behind has to end on SIGTERM before it is killed.
STOP_GRACE_SECONDS = 10.0


def run_with_dagster_env(argv: list[str]) -> int:
    """Run ``argv`` with Dagster pointed at the project's dagster.yaml and storage.

    On the embedded default this process holds the server for as long as ``argv`` runs, and the server
    stops when the last process using it exits.
    """
    from dreaming_dagster.config.dagster_env import configure_dagster_environment

    configure_dagster_environment(default_settings())
    # The project's own tools (dagster, dg) live beside this interpreter: `.venv/bin/dreaming exec -- dagster
    # …` must work without the venv on PATH.
    tools = str(Path(sys.executable).parent)
    os.environ["PATH"] = tools + os.pathsep + os.environ.get("PATH", "")
    # The handlers go in before the child starts: a handled signal is reset to its default in a new
    # program, an ignored one stays ignored. A script's background job (`cmd &`) starts with SIGINT
    # ignored, and Dagster's processes map SIGTERM to SIGINT's handler, so a `dg dev` that inherited the
    # ignore could not be stopped at all. A signal that arrives while the child starts is sent on after.
    started: list[subprocess.Popen] = []
    pending: list[int] = []
    asked_to_stop: list[int] = []

    def forward(signum, frame):
        asked_to_stop.append(signum)
        if started:
            signal_group(started[0].pid, signum)
        else:
            pending.append(signum)

    # Forward SIGINT/SIGTERM and wait for the child, so this process exits normally afterwards and
    # releases the embedded server (atexit does not run when a signal kills Python).
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        # Its own session: a terminal's Ctrl-C reaches only this process, which forwards it once.
        child = subprocess.Popen(argv, start_new_session=True)
    except FileNotFoundError:
        _fail(f"command not found: {argv[0]}")
    started.append(child)
    for signum in pending:
        signal_group(child.pid, signum)
    code = child.wait()
    if asked_to_stop:
        end_process_group(child.pid)
    return code


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to the command's whole process group, as a terminal's Ctrl-C reaches every process of
    its foreground group: Dagster's run workers and step processes stop their work at once instead of
    starting more steps while the UI shuts down."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def end_process_group(pgid: int, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
    """End what a stopped command left in its process group: `dg dev` stopped while its daemon launched runs
    used to leave its code server and run workers behind, re-parented to init. SIGTERM first, SIGKILL for
    whatever is still there ``grace_seconds`` later. Only after a stop was asked: a command that ends by
    itself may leave a launched run working on purpose."""
    for signum, wait_seconds in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@main.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def exec_command(command: tuple[str, ...]) -> None:
    """Run COMMAND under the project's Dagster instance (e.g. `dreaming exec -- dg check defs`)."""
    sys.exit(run_with_dagster_env(list(command)))


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("dg_args", nargs=-1, type=click.UNPROCESSED)
def ui(dg_args: tuple[str, ...]) -> None:
    """Start the Dagster UI and daemon (`dg dev`) on the configured database, sensors on."""
    dg = Path(sys.executable).with_name("dg")
    sys.exit(run_with_dagster_env([str(dg), "dev", *dg_args]))


@main.group("dagster")
def dagster_group() -> None:
    """How Dagster partitions the users: one partition a user, or hash buckets (docs/deploy.md)."""


@dagster_group.command("partitioning")
@click.option("--buckets", type=click.IntRange(1, 10_000), default=None,
              help="Switch to this many hash buckets of users (past DREAMING_DAGSTER_MAX_USER_PARTITIONS users).")
@click.option("--per-user", is_flag=True, help="Switch back to one partition a user (registers every user "
              "with memory, up to DREAMING_DAGSTER_MAX_USER_PARTITIONS).")
@click.option("--force", is_flag=True, help="Switch even with dreaming runs queued or running.")
def dagster_partitioning(buckets: int | None, per_user: bool, force: bool) -> None:
    """Show, or switch, the deployment's partitioning. The choice is kept in the memory database; Dagster's
    processes read it when the code location loads (restart `dreaming ui`, or reload the code location).
    Run history, asset events and the memory stay as they are."""
    import dagster as dg

    from dreaming_dagster.config.dagster_env import configure_dagster_environment
    from dreaming_dagster.defs.partitions import RunsInFlightError, switch_partitioning
    from dreaming_dagster.memory import ready_database
    from dreaming_dagster.pipeline import buckets as bucketing

    if buckets is not None and per_user:
        _fail("choose one: --buckets N or --per-user")
    settings = default_settings()
    database = ready_database(None)
    current = bucketing.read_layout(database)
    if buckets is None and not per_user:
        click.echo(f"partitioning: {bucketing.describe_layout(current)}")
        return
    wanted = 0 if per_user else buckets
    configure_dagster_environment(settings)
    with dg.DagsterInstance.get() as instance:
        try:
            switch = switch_partitioning(instance, database, wanted, force=force,
                                         max_user_partitions=settings.dagster_max_user_partitions)
        except RunsInFlightError as exc:
            _fail(str(exc))
    click.echo(f"partitioning: {bucketing.describe_layout(wanted)} (was {bucketing.describe_layout(current)})"
               + (f"; canceled {switch.canceled:,} run(s) of the old partitions" if switch.canceled else "")
               + ("" if wanted else f"; registered {switch.registered:,} user partition(s)")
               + (f"; {switch.reconciled:,} user(s) shown dreamed again" if switch.reconciled else ""))
    click.echo("restart `dreaming ui` (or reload the code location) to load it")


@dagster_group.command("rebuild")
@click.option("--user", "user_ids", multiple=True, required=True, help="A user whose graph to rebuild (repeat it).")
def dagster_rebuild(user_ids: tuple[str, ...]) -> None:
    """Rebuild users' graphs from their stored pairs through Dagster: an asset backfill of the dreaming assets,
    run by the daemon of `dreaming ui`, whose status in the UI follows its runs (with hash buckets, every user
    of the users' buckets is rebuilt)."""
    import dagster as dg

    from dreaming_dagster.config.dagster_env import configure_dagster_environment
    from dreaming_dagster.definitions import defs
    from dreaming_dagster.defs.partitions import request_rebuild

    users = [validate_identifier(user, "user_id") for user in user_ids]
    configure_dagster_environment(default_settings())
    with dg.DagsterInstance.get() as instance:
        try:
            backfill_id, partitions = request_rebuild(instance, defs(), users)
        except ValueError as exc:
            _fail(str(exc))
    click.echo(f"backfill {backfill_id} requested: {len(partitions)} partition(s) ({', '.join(partitions[:5])}"
               f"{', …' if len(partitions) > 5 else ''}); the daemon of `dreaming ui` runs it")


@main.group()
def db() -> None:
    """The embedded Postgres server (only when DREAMING_DATABASE_URL is unset)."""


@db.command("status")
def db_status() -> None:
    settings = default_settings()
    if not settings.uses_embedded_database:
        click.echo("using DREAMING_DATABASE_URL (no embedded server)")
        return
    running = (settings.pgdata_dir / "postmaster.pid").exists()
    click.echo(f"embedded server in {settings.pgdata_dir}: {'running' if running else 'stopped'}")


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server (e.g. one left running by a killed process)."""
    from dreaming_dagster.storage import embedded

    settings = default_settings()
    stopped = embedded.stop(settings.pgdata_dir)
    click.echo("stopped" if stopped else "not running")


# ------------------------------------------------------------------------------------------- the service
@main.command()
@click.option("--host", default=None, help="Listen address (default: DREAMING_SERVE_HOST, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default: DREAMING_SERVE_PORT, 8765; 0 picks one).")
def serve(host: str | None, port: int | None) -> None:
    """The HTTP API: save, recall, sync and stats for companion backends in any language (docs at /docs).

    Stops gracefully on SIGTERM or Ctrl-C: requests in flight finish (DREAMING_SERVE_SHUTDOWN_SECONDS),
    every save is one transaction, so nothing is left half-written."""
    from dreaming_dagster.service.server import PortInUseError
    from dreaming_dagster.service.server import serve as run_service

    try:
        run_service(default_settings(), host, port)
    except PortInUseError as exc:
        _fail(str(exc))


@main.command()
@click.option("--kg-id", default="default", show_default=True, help="The tenant whose memory the tools use.")
def mcp(kg_id: str) -> None:
    """MCP tools over stdio (remember, recall) for agent frameworks: `dreaming mcp` as the server command."""
    from dreaming_dagster.service.mcp_tools import build_mcp_server, run_stdio

    try:
        server = build_mcp_server(default_settings(), kg_id)
    except InvalidInputError as exc:
        _fail(str(exc))
    run_stdio(server)


@main.group()
def keys() -> None:
    """API keys of the HTTP service: each bound to one tenant (kg_id), stored hashed."""


@keys.command("create")
@click.option("--tenant", "kg_id", required=True, help="The kg_id every request with this key reads and writes.")
@click.option("--name", default="", help="What the key is for (shown by `keys list`).")
def keys_create(kg_id: str, name: str) -> None:
    """Print a new key once: store it now, it cannot be shown again."""
    from dreaming_dagster.service import keys as api_keys

    try:
        secret, row = api_keys.create_key(default_database(), default_embedder().spec, kg_id, name)
    except (InvalidInputError, ValueError) as exc:
        _fail(str(exc))
    click.echo(f"key {row['id']} for tenant {row['kg_id']} (shown once):", err=True)
    click.echo(secret)


@keys.command("list")
def keys_list() -> None:
    from dreaming_dagster.service import keys as api_keys

    for row in api_keys.list_keys(default_database(), default_embedder().spec):
        state = f"revoked {row['revoked_at']:%Y-%m-%d %H:%M}" if row["revoked_at"] else "live"
        click.echo(f"{row['id']}  {row['prefix']}…  tenant={row['kg_id']}  {state}  {row['name']}")


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke the key KEY_ID (from `keys list`): its next request gets 401."""
    from dreaming_dagster.service import keys as api_keys

    row = api_keys.revoke_key(default_database(), default_embedder().spec, key_id)
    if row is None:
        _fail(f"no key {key_id!r}")
    click.echo(f"revoked {row['id']} ({row['prefix']}…, tenant {row['kg_id']})")


if __name__ == "__main__":
    main()
