"""What every dreaming stage shares: its write transaction, its batches of pending rows, its failure counts.

Each stage selects the rows whose previous checkpoint is set and whose own is NULL, and writes a batch's
results together with their checkpoints in one transaction. So every stage is restartable from the
database: a killed run leaves whole batches done or not done, and re-running never duplicates. Callers
hold :func:`dreaming_dagster.storage.user_graphs.user_graph_lock` so nothing writes one user's graph
concurrently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import psycopg

from dreaming_dagster.dates.ranges import TimeRange
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.storable import clean_text

# What a stage row's write may raise because of that row's data (a value the database refuses): recorded
# against the row, in its own savepoint, so the rest of the batch commits.
ROW_DATA_ERRORS = (psycopg.DataError, psycopg.IntegrityError, ValueError, TypeError)


@contextmanager
def stage_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """A stage's write transaction, committed without waiting for the WAL flush (synchronous_commit off,
    for this transaction only). Safe because a stage's output is derived and its checkpoint commits with it:
    a crash can lose only the last few milliseconds of stage commits, never corrupt anything, and whatever it
    loses is still pending and done again on the next run. Saves (the user's own data) stay synchronous."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO off")
        yield


def pending_batches(database: Database, model: str, params: dict) -> Iterator[list[dict]]:
    """Batches of a stage's pending rows (``model``, bound with ``params``), until none is left. The query is
    run again for each batch, so rows done by the previous batch drop out; rows a stage wants to leave for a
    later run go into the list ``params["skip_ids"]``, which the query reads afresh each time."""
    while True:
        with database.connect() as conn:
            rows = conn.execute(load_sql(model), params).fetchall()
        if not rows:
            return
        yield rows


@dataclass
class Failures:
    """How many rows of a stage failed in a run, and why the last one did."""

    failures: int = 0
    last_error: str | None = None

    def record(self, error: BaseException) -> str:
        self.failures += 1
        self.last_error = f"{type(error).__name__}: {error}"
        return self.last_error


def write_each_if_refused(conn: psycopg.Connection, items: list, write) -> list[tuple[object, Exception]]:
    """``write(items)`` in one savepoint; if the database refuses a value, ``write([item])`` for each item in
    its own savepoint, so only the refused ones fail. Returns the refused items with their errors."""
    try:
        with conn.transaction():
            write(items)
        return []
    except ROW_DATA_ERRORS:
        refused = []
        for item in items:
            try:
                with conn.transaction():
                    write([item])
            except ROW_DATA_ERRORS as exc:
                refused.append((item, exc))
        return refused


def write_pair_times(conn: psycopg.Connection, user_id: str, kg_id: str, source: str,
                     times: Iterable[tuple[str, int, str, TimeRange]]) -> int:
    """Store (pair id, position, expression, range) rows for ``source`` ('text' or 'llm'); returns how many."""
    rows = list(times)
    if rows:
        conn.execute(load_sql("pipeline/insert_pair_times"), {
            "user_id": user_id, "kg_id": kg_id, "source": source,
            "pair_ids": [pair_id for pair_id, *_ in rows], "positions": [position for _, position, _, _ in rows],
            "expressions": [clean_text(expression)[:200] for _, _, expression, _ in rows],
            "first_days": [r.first_day for *_, r in rows], "last_days": [r.last_day for *_, r in rows],
            "granularities": [r.granularity for *_, r in rows], "certainties": [r.certainty for *_, r in rows]})
    return len(rows)


def accumulate(total: dict, stats) -> None:
    """Add a stage's counts into ``total`` (summing numbers, joining lists, keeping the latest error text)."""
    for key, value in stats_dict(stats).items():
        if key == "merge_ratio":
            continue  # a ratio does not sum; callers recompute it from the totals
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, list):
            total[key] = [*total.get(key, []), *value]
        elif value is not None:
            total[key] = value


def stats_dict(stats) -> dict:
    data = asdict(stats)
    if hasattr(stats, "merge_ratio"):  # a property of the merge stage's counts, not a field
        data["merge_ratio"] = stats.merge_ratio
    return data
