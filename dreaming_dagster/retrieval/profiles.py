"""Per-user retrieval profiles: the ranker's per-user inputs, cached in ``recall_profiles``.

Dreaming calls :func:`refresh_profile` after it changes a user's graph (subjects change nowhere else), so
a query reads one row instead of averaging every subject vector; :func:`read_profile` falls back to live
figures for a user never dreamed and for historical (as_of) queries.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import psycopg

from dreaming_dagster.retrieval.features import UserProfile
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database


def read_profile(conn: psycopg.Connection, *, user_id: str, kg_id: str, query_embedding: np.ndarray,
                 as_of: datetime | None, session_id: str | None) -> UserProfile:
    row = conn.execute(load_sql("retrieval/user_profile"), {
        "user_id": user_id, "kg_id": kg_id, "query": np.asarray(query_embedding, dtype=np.float32),
        "as_of": as_of, "session_id": session_id}).fetchone()
    return UserProfile(memory_count=row["memory_count"], first_memory_at=row["first_memory_at"],
                       last_query_at=row["last_query_at"], subject_count=row["subject_count"],
                       mean_subject_similarity=row["mean_subject_similarity"],
                       session_pair_count=row["session_pair_count"])


# The subject centroid is recomputed once more than this share of the live subjects changed since it was
# (retrieval/refresh_profile.sql): the mean of thousands of vectors barely moves with a few of them, and
# averaging them all costs time in proportion to the graph on every fast-path sync.
CENTROID_TOLERANCE = 0.02


def refresh_profile(database: Database, user_id: str, kg_id: str, *,
                    centroid_tolerance: float = CENTROID_TOLERANCE) -> None:
    """Recompute the user's cached counts, and the subject centroid when more than ``centroid_tolerance``
    of the live subjects changed since it was computed (after a dreaming run; 0 recomputes it always)."""
    with database.connect() as conn:
        conn.execute(load_sql("retrieval/refresh_profile"), {"user_id": user_id, "kg_id": kg_id,
                                                             "centroid_tolerance": centroid_tolerance})
