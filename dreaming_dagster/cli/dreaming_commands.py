"""`dreaming sync`, `retry-failed`, `dream` (status, trigger, restore) and `reembed`: dreaming now, in this process."""

from __future__ import annotations

import click

from dreaming_dagster.cli.console import checked_user, exit_on_sigterm, fail, progress_bar, wide_console
from dreaming_dagster.process_defaults import default_database, default_embedder, default_settings
from dreaming_dagster.storage.records import InvalidInputError


@click.command()
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
        fail(str(exc))
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


@click.command("retry-failed")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default=None, help="Only this knowledge graph (default: all of the user's).")
def retry_failed(user_id: str, kg_id: str | None) -> None:
    """Give USER's pairs that failed extraction on every attempt a fresh set of attempts (no rebuild)."""
    from dreaming_dagster.pipeline.extracting import reset_failed_extractions

    checked_user(user_id, kg_id or "default")
    database = default_database()
    database.ensure_schema(default_embedder().spec)
    reset = reset_failed_extractions(database, user_id, kg_id)
    click.echo(f"{reset:,} pair(s) of {user_id} will be extracted again on the next run "
               "(the sensor's, or `dreaming sync`)")



@click.group()
def dream() -> None:
    """Token-budget consolidation passes: status, trigger, restore."""


@dream.command("status")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
def dream_status_command(user_id: str, kg_id: str) -> None:
    """Tokens since the last pass against the threshold, and the last passes."""
    from rich.table import Table

    from dreaming_dagster.consolidation.passes import dream_status

    checked_user(user_id, kg_id)
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
    from dreaming_dagster.consolidation.consolidators import consolidator_from_settings
    from dreaming_dagster.consolidation.passes import PassFailedError, PassPolicy, run_pass

    exit_on_sigterm()
    checked_user(user_id, kg_id)
    settings = default_settings()
    try:
        report = run_pass(default_database(), default_embedder(), consolidator_from_settings(settings), user_id,
                          kg_id, mode="compact" if compact else "auto", force=force,
                          policy=PassPolicy.from_settings(settings))
    except PassFailedError as exc:
        fail(str(exc))
    from rich.markdown import Markdown

    wide_console().print(Markdown(report.diff_markdown()))


@dream.command("restore")
@click.argument("subject_id")
@click.option("--user", "user_id", required=True)
@click.option("--kg-id", default="default", show_default=True)
def dream_restore(subject_id: str, user_id: str, kg_id: str) -> None:
    """Bring an archived subject back to the live graph, with its links."""
    from dreaming_dagster.consolidation.passes import RestoreError, restore_subject

    checked_user(user_id, kg_id)
    database = default_database()
    database.ensure_schema(default_embedder().spec)
    try:
        row = restore_subject(database, user_id, kg_id, subject_id)
    except RestoreError as exc:
        fail(str(exc))
    click.echo(f"restored {row['subject_text']!r} ({row['id']})")



@click.command()
@click.option("--force", is_flag=True, help="Re-embed even when the model has not changed.")
def reembed(force: bool) -> None:
    """Re-embed every pair and subject with the configured embedder (after switching models)."""
    from dreaming_dagster.reembed import count_rows
    from dreaming_dagster.reembed import reembed as run_reembed

    database, embedder = default_database(), default_embedder()
    with progress_bar() as progress:
        task = progress.add_task(f"re-embedding with {embedder.spec}", total=count_rows(database))
        result = run_reembed(database, embedder, force=force, batch_size=default_settings().embedding_batch_size,
                             on_rows=lambda n: progress.advance(task, n))
    if result.skipped:
        click.echo(f"nothing to re-embed: the database already uses {result.current}")
    else:
        click.echo(f"re-embedded {result.pairs:,} pairs, {result.subjects:,} subjects and {result.keys:,} keys: "
                   f"{result.previous} → {result.current}")


COMMANDS = (sync, retry_failed, dream, reembed)
