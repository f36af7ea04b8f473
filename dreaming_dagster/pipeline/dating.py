"""The dating stage: the times each pair's user turn mentions, resolved against when it was said.

"I cleaned my white sneakers last Saturday", said on Wednesday 24 May 2023, is dated 20 May 2023 (day):
recall's ``time_fit`` signal and time-window pool then find it for "which shoes did I clean last month?"
asked in June. The grammar (``dates/``) is offline and deterministic; only the user's turn
is read (what the user says happened, not the assistant's general advice). Like every stage, a batch's
times and checkpoints commit together, so a killed run re-dates nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreaming_dagster.dates.finding import find_times
from dreaming_dagster.dates.ranges import Mention
from dreaming_dagster.pipeline.batches import pending_batches, stage_transaction, write_pair_times
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

DATING_BATCH_SIZE = 500


@dataclass
class DatingStats:
    pairs: int = 0  # pairs dated this run
    with_times: int = 0  # of which mention at least one time the grammar resolves
    times: int = 0  # mentions stored


def pair_mentions(user_message: str, occurred_at) -> list[Mention]:
    """The times a pair's user turn mentions, resolved against when it was said."""
    return find_times(user_message or "", occurred_at)


def date_pending(database: Database, user_id: str, kg_id: str, *, batch_size: int = DATING_BATCH_SIZE) -> DatingStats:
    """Date every pending pair of the graph: mentions to pair_times, then the checkpoint, a batch a
    transaction."""
    stats = DatingStats()
    for rows in pending_batches(database, "pipeline/pending_dating_batch",
                                {"user_id": user_id, "kg_id": kg_id, "limit": batch_size}):
        times = [(row["id"], mention.start, mention.text, mention.range)
                 for row in rows for mention in pair_mentions(row["user_message"], row["occurred_at"])]
        with database.connect() as conn, stage_transaction(conn):
            stats.times += write_pair_times(conn, user_id, kg_id, "text", times)
            conn.execute(load_sql("pipeline/record_dating"),
                         {"ids": [row["id"] for row in rows], "user_id": user_id, "kg_id": kg_id})
        stats.pairs += len(rows)
        stats.with_times += len({pair_id for pair_id, *_ in times})
    return stats


def dated_pair_counts(database: Database, user_id: str, kg_ids: list[str] | None = None) -> dict:
    """How many of the user's pairs there are and how many carry a dated event (every graph, or ``kg_ids``)."""
    with database.connect(vectors=False) as conn:
        return dict(conn.execute(load_sql("pipeline/dated_pair_counts"),
                                 {"user_id": user_id, "kg_ids": kg_ids}).fetchone())
