"""The graph lock on a pooled database: one holder per (user, graph), its connection reused from a pool of
its own instead of opened per sync, returned with no advisory lock left on it, and never refused when that
pool is exhausted (real Postgres, threads)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.embedding_spec import EmbeddingSpec
from dreaming_dagster.storage.user_graphs import user_graph_lock


def advisory_locks(database_url: str, pid: int | None = None) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                            "AND (%(pid)s::int IS NULL OR pid = %(pid)s)", {"pid": pid}).fetchone()[0]


def lock_holder(database_url: str) -> int | None:
    """The backend holding the (only) granted advisory lock."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
    return row and row[0]


@pytest.fixture
def pooled(database_url):
    database = Database(database_url, pool_size=2)
    database.ensure_schema(EmbeddingSpec("lock-test", 4))  # the lock's key is a SQL function (migration 0029)
    yield database
    database.close()


def test_one_holder_at_a_time_and_the_connection_is_reused(pooled, database_url):
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with user_graph_lock(pooled, "ana", "default"):
            order.append("first in")
            held.set()
            time.sleep(0.3)
            order.append("first out")

    def second() -> None:
        held.wait(5)
        with user_graph_lock(pooled, "ana", "default"):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert order == ["first in", "first out", "second in"]
    holders = set()
    for _ in range(8):  # one sync after another: the lock is held by the pool's backends, not a new one each time
        with user_graph_lock(pooled, "ana", "default"):
            holders.add(lock_holder(database_url))
    assert None not in holders and len(holders) <= pooled.pool_size, holders
    assert _eventually_no_locks(database_url)


def _eventually_no_locks(database_url: str, seconds: float = 3.0) -> bool:
    """The pool resets a returned connection on its worker thread: give it a moment."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if advisory_locks(database_url) == 0:
            return True
        time.sleep(0.05)
    return False


def test_a_lock_connection_comes_back_with_no_lock_on_it(pooled, database_url):
    """Whatever the holder did — raised inside the lock, or took a session lock of its own and forgot it —
    the connection is handed out again holding no advisory lock."""
    with pytest.raises(RuntimeError), user_graph_lock(pooled, "bea", "default"):
        raise RuntimeError("a stage failed")
    with pooled.lock_connection() as conn:
        conn.execute("SELECT pg_advisory_lock(4242)")  # forgotten
    with pooled.lock_connection() as conn:
        pid = conn.info.backend_pid
        assert advisory_locks(database_url, pid) == 0
    assert _eventually_no_locks(database_url), "a returned connection kept an advisory lock"


def test_more_holders_than_the_lock_pool_holds_are_not_refused(database_url):
    database = Database(database_url, pool_size=1)
    database.ensure_schema(EmbeddingSpec("lock-test", 4))
    inside, errors = threading.Barrier(4, timeout=60), []

    def hold(user: str) -> None:
        try:
            with user_graph_lock(database, user, "default"):
                inside.wait()  # all four hold their locks at once
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=hold, args=(f"user-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    database.close()
    assert errors == []
    assert _eventually_no_locks(database_url)

