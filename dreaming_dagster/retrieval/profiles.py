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


def refresh_profile(database: Database, user_id: str, kg_id: str) -> None:
    """Recompute the user's cached counts and subject centroid (after a dreaming run)."""
    with database.connect() as conn:
        conn.execute(load_sql("retrieval/refresh_profile"), {"user_id": user_id, "kg_id": kg_id})
