"""A user's knowledge graphs as every domain reaches them: which graphs a read or a stage covers (always
scoped by user and graph, so nothing keyed by user alone reaches another tenant's rows), the lock one
writer of a graph holds, and when a pair whose extraction keeps failing is tried again."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager

from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

# A pair whose extraction failed this many times is parked: retried once per cool-down, so a provider
# outage of any length delays pairs but never abandons them (`dreaming retry-failed` retries them now).
MAX_EXTRACTION_ATTEMPTS = 8
EXTRACTION_RETRY_COOLDOWN_SECONDS = 6 * 3600


@contextmanager
def user_graph_lock(database: Database, user_id: str, kg_id: str) -> Iterator[bool]:
    """Hold the Postgres advisory lock of (user, kg) for the duration (its key: the SQL function
    graph_lock_key): one writer per graph, across Dagster runs, the fast path and any process. The lock's
    connection is never one the stages under it could need (Database.lock_connection: a pool of its own), so
    lock holders cannot empty a pool.

    Yields whether the graph still holds a pair or a subject, read once the lock is held: work planned before
    an erasure took the lock must write nothing for the erased graph (no profile, audit or sync record naming
    the user)."""
    params = {"user_id": user_id, "kg_id": kg_id}
    with database.lock_connection() as conn:
        conn.execute(load_sql("storage/lock_graph"), params)
        try:
            yield bool(conn.execute(load_sql("storage/graph_is_live"), params).fetchone()["live"])
        finally:
            conn.execute(load_sql("storage/unlock_graph"), params)


def user_kgs(database: Database, user_id: str) -> list[str]:
    with database.connect(vectors=False) as conn:
        return [row["kg_id"] for row in conn.execute(load_sql("storage/user_kgs"), {"user_id": user_id})]


def scoped_kgs(database: Database, user_id: str, kg_ids: Collection[str] | None) -> list[str]:
    """The graphs a user-level read or stage covers: ``kg_ids`` as given (a tenant's request names its own),
    or every graph of the user (None: the operator's Dagster runs and CLI). The SQL always filters by the
    list, so nothing keyed by user alone can reach another tenant's rows."""
    return list(kg_ids) if kg_ids is not None else user_kgs(database, user_id)


def extraction_retry_params(max_attempts: int = MAX_EXTRACTION_ATTEMPTS,
                            cooldown_seconds: float = EXTRACTION_RETRY_COOLDOWN_SECONDS) -> dict:
    """The parameters every query about parked pairs binds (stage batch, pending work, stats, check)."""
    return {"max_attempts": max_attempts, "cooldown_seconds": float(cooldown_seconds)}
