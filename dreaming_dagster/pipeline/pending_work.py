"""Run keys for pending work: pure logic, used by the sensors.

A run key fingerprints a user's pending work (how many rows, the newest arrival). A tick that sees the
same work produces the same key, and Dagster launches a key only once. The key also carries a retry
window: if a run ends with the work still pending (say the embedding endpoint was down), the same work is
requested again once the window has passed, instead of never.
"""

from __future__ import annotations

from datetime import datetime

from dreaming_dagster.storage.user_graphs import extraction_retry_params

RETRY_AFTER_SECONDS = 15 * 60
# The graph of the ranker's training memory (the longmemeval_memory asset): dreamed by the training job's own
# syncs, so the sensors never request runs for it and its user is no users partition.
TRAINING_KG_ID = "ranker-training"


def pending_work_params() -> dict:
    """What the users-with-pending-work query binds: the retry rule, and the graph it leaves out."""
    return {**extraction_retry_params(), "training_kg": TRAINING_KG_ID}


def pending_work_run_key(user_id: str, pending: int, newest_at: datetime, now: float,
                         retry_after_seconds: int = RETRY_AFTER_SECONDS) -> str:
    retry_window = int(now // retry_after_seconds)
    return f"{user_id}:{pending}:{newest_at.isoformat()}:{retry_window}"
