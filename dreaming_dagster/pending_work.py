"""Run keys for pending work: pure logic, used by the sensors.

A run key fingerprints a user's pending work (how many rows, the newest arrival). A tick that sees the
same work produces the same key, and Dagster launches a key only once. The key also carries a retry
window: if a run ends with the work still pending (say the embedding endpoint was down), the same work is
requested again once the window has passed, instead of never.
"""

from __future__ import annotations

from datetime import datetime

RETRY_AFTER_SECONDS = 15 * 60


def pending_work_run_key(user_id: str, pending: int, newest_at: datetime, now: float,
                         retry_after_seconds: int = RETRY_AFTER_SECONDS) -> str:
    retry_window = int(now // retry_after_seconds)
    return f"{user_id}:{pending}:{newest_at.isoformat()}:{retry_window}"
