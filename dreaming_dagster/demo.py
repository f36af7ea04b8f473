"""`make demo`: a few users built from the LongMemEval oracle file, ingested, then dreamed by Dagster.

Each demo user gets the sessions of a different slice of questions (every ``users``-th question, so
each user sees a mix of question types), in date order, as their conversation history.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dreaming_dagster.ingest.readers import (
    DATASET_VARIABLE,
    LineRecord,
    default_dataset_path,
    iter_longmemeval_questions,
    longmemeval_session_records,
    sessions_in_date_order,
)


@dataclass(frozen=True)
class DemoUser:
    user_id: str
    question_ids: list[str]
    records: list[dict]


def build_demo_users(dataset: Path, users: int, questions_per_user: int) -> list[DemoUser]:
    if not dataset.is_file():
        raise FileNotFoundError(f"LongMemEval file not found: {dataset} (set {DATASET_VARIABLE})")
    questions = list(iter_longmemeval_questions(dataset))
    demo_users = []
    for index in range(users):
        chosen = questions[index::users][:questions_per_user]
        records = [item.raw for item in longmemeval_session_records(sessions_in_date_order(chosen))
                   if isinstance(item, LineRecord)]
        demo_users.append(DemoUser(user_id=f"demo-user-{index + 1}",
                                   question_ids=[q["question_id"] for q in chosen], records=records))
    return demo_users


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def run_demo(users: int = 5, questions_per_user: int = 8, dataset: Path | None = None,
             console: Console | None = None) -> dict:
    """Ingest the demo users and materialize each user's partition through Dagster. Returns a summary."""
    import dagster as dg

    from dreaming_dagster.dagster_env import configure_dagster_environment
    from dreaming_dagster.definitions import defs as load_defs
    from dreaming_dagster.defs.layout import Layout, users_partitions
    from dreaming_dagster.ingest.embedding import user_stats
    from dreaming_dagster.ingest.save import save_pairs
    from dreaming_dagster.pipeline.graph_reports import graph_stats, top_subjects
    from dreaming_dagster.process_defaults import default_database, default_settings

    console = console or Console()
    started = time.perf_counter()
    settings = default_settings()
    environment = configure_dagster_environment(settings)
    console.print(f"[bold]dreaming demo[/] · Dagster home {environment['DAGSTER_HOME']} · database "
                  f"{'embedded pgserver in ' + str(settings.pgdata_dir) if settings.uses_embedded_database else 'DREAMING_DATABASE_URL'}")

    demo_users = build_demo_users(dataset or default_dataset_path(), users, questions_per_user)
    total_records = sum(len(user.records) for user in demo_users)
    ingested = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("ingesting pairs", total=total_records)
        for user in demo_users:
            inserted = duplicates = 0
            # Embedding is deferred to the memory_pairs asset: the demo shows Dagster doing the work.
            for chunk in _chunks(user.records, 200):
                result = save_pairs(user.user_id, chunk, embed=False)
                inserted, duplicates = inserted + result.inserted, duplicates + result.duplicates
                if result.rejected:
                    console.print(f"[yellow]{user.user_id}: {len(result.rejected)} rejected: {result.rejected[0]}")
                progress.advance(task, len(chunk))
            ingested[user.user_id] = (inserted, duplicates)
    ingest_seconds = time.perf_counter() - started

    definitions = load_defs()
    job = definitions.resolve_job_def("dreaming_job")
    dagster_started = time.perf_counter()
    # One run a user partition, or one a hash bucket holding demo users (dreaming dagster partitioning).
    layout = Layout.of_partitions(job.partitions_def)
    partitions = layout.partitions_of(u.user_id for u in demo_users)
    with dg.DagsterInstance.get() as instance:
        if layout.per_user:
            known = set(instance.get_dynamic_partitions(users_partitions.name))
            instance.add_dynamic_partitions(users_partitions.name, [key for key in partitions if key not in known])
        runs = {}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            task = progress.add_task(f"dreaming_job per {'user' if layout.per_user else 'bucket'} (all stages)",
                                     total=len(partitions))
            for key, users_in_partition in sorted(partitions.items()):
                result = job.execute_in_process(
                    partition_key=key, instance=instance, tags={"dreaming/source": "demo"},
                    # The full event stream is in the UI; the terminal gets warnings and the summary.
                    run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
                if not result.success:
                    raise RuntimeError(f"dreaming_job failed for {key} (run {result.run_id})")
                runs.update(dict.fromkeys(users_in_partition, result.run_id))
                progress.advance(task)
    dagster_seconds = time.perf_counter() - dagster_started

    database = default_database()
    table = Table(title="dreaming demo: each user's memory and subject graph")
    for column in ("user", "pairs", "tokens", "sessions", "subjects", "links", "top subjects (linked pairs)", "run"):
        table.add_column(column, justify="right" if column in ("pairs", "tokens", "sessions", "subjects", "links")
                         else "left", no_wrap=column != "top subjects (linked pairs)")
    totals = {"users": len(demo_users), "pairs": 0, "tokens": 0, "sessions": 0, "pending_embedding": 0,
              "subjects": 0, "links": 0}
    for user in demo_users:
        stats = user_stats(database, user.user_id)
        graph = graph_stats(database, user.user_id)
        top = top_subjects(database, user.user_id, limit=3)
        pairs, tokens = sum(r["pairs"] for r in stats), sum(r["tokens"] for r in stats)
        sessions = sum(r["sessions"] for r in stats)
        totals["pairs"] += pairs
        totals["tokens"] += tokens
        totals["sessions"] += sessions
        totals["pending_embedding"] += sum(r["pending_embedding"] for r in stats)
        totals["subjects"] += graph["subjects"]
        totals["links"] += graph["links"]
        top_text = ", ".join(f"{row['subject_text']} ({row['linked_pairs']}{', hub' if row['hub'] else ''})"
                             for row in top) or "–"
        table.add_row(user.user_id, f"{pairs:,}", f"{tokens:,}", f"{sessions:,}", f"{graph['subjects']:,}",
                      f"{graph['links']:,}", top_text, runs[user.user_id][:8])
    totals.update(ingest_seconds=round(ingest_seconds, 1), dagster_seconds=round(dagster_seconds, 1),
                  total_seconds=round(time.perf_counter() - started, 1))
    console.print(table)
    console.print(
        f"[bold]{totals['users']} users · {totals['pairs']:,} pairs · {totals['tokens']:,} tokens · "
        f"{totals['subjects']:,} subjects · {totals['links']:,} links[/] · ingest {totals['ingest_seconds']} s · "
        f"dreaming through Dagster {totals['dagster_seconds']} s · total {totals['total_seconds']} s. "
        "Explore the graph and the runs with `make ui`."
    )
    return totals
