from datetime import UTC, datetime

from dreaming_dagster.pipeline.pending_work import RETRY_AFTER_SECONDS, pending_work_run_key

NEWEST = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_same_work_in_the_same_window_has_one_key():
    start = 1_000 * RETRY_AFTER_SECONDS
    assert pending_work_run_key("alice", 3, NEWEST, start) == pending_work_run_key(
        "alice", 3, NEWEST, start + RETRY_AFTER_SECONDS - 1)


def test_new_work_or_a_later_window_gets_a_new_key():
    now = 1_000 * RETRY_AFTER_SECONDS
    key = pending_work_run_key("alice", 3, NEWEST, now)
    assert pending_work_run_key("alice", 4, NEWEST, now) != key
    assert pending_work_run_key("alice", 3, NEWEST.replace(minute=1), now) != key
    assert pending_work_run_key("bob", 3, NEWEST, now) != key
    assert pending_work_run_key("alice", 3, NEWEST, now + RETRY_AFTER_SECONDS) != key  # retried, not forgotten
