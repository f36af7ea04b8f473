"""The ranker's 18 situation features: what the model knows about the query besides its embedding.

Each feature is scaled to roughly [0, 1] (sin/cos to [-1, 1]) so no input dominates the MLP by units.

| # | name | definition |
|---|---|---|
| 0–4 | ``qtype_single_session`` … ``qtype_preference`` | question type, one-hot (predicted at serving time; all zero when unknown) |
| 5–6 | ``hour_sin``, ``hour_cos`` | time of day of the query (UTC), on the unit circle so 23:00 is near 01:00 |
| 7 | ``since_last_query`` | log1p(hours since the user's previous recall) / log1p(1 year), capped at 1; 1 when none |
| 8 | ``memory_count`` | log1p(pairs stored) / log1p(1,000,000), capped at 1 |
| 9 | ``account_age`` | log1p(days since the first stored pair) / log1p(10 years), capped at 1 |
| 10 | ``subject_drift`` | (1 − cosine(query, mean live-subject embedding)) / 2; 1 when the user has no subjects |
| 11–12 | ``weekday_sin``, ``weekday_cos`` | day of week of the query on the unit circle: weekly routines, as time of day |
| 13 | ``in_session`` | 1 when the caller names a session that already holds pairs (a follow-up question) |
| 14 | ``session_size`` | log1p(pairs in that session) / log1p(1,000), capped at 1 |
| 15 | ``subject_count`` | log1p(live subjects) / log1p(100,000), capped at 1: how much graph the graph signals stand on |
| 16 | ``query_length`` | log1p(words in the query) / log1p(200), capped at 1: short queries lean on context |
| 17 | ``window_share`` | days of the question's time window / days from the user's first pair to the query, capped at 1; 0 without a window: how little of this user's memory the window singles out |

Features 0–10 are the reference's (question type, time of day, time since the last query, total memories,
days since the first memory, drift); 11–17 are ours. ``window_share`` lets one model weigh ``time_fit``
where a window picks out a few days of years of memory and not where the whole memory spans a fortnight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np

QUESTION_TYPES: tuple[str, ...] = ("single-session", "multi-session", "knowledge-update", "temporal",
                                   "preference")
FEATURE_NAMES: tuple[str, ...] = (
    "qtype_single_session", "qtype_multi_session", "qtype_knowledge_update", "qtype_temporal",
    "qtype_preference", "hour_sin", "hour_cos", "since_last_query", "memory_count", "account_age",
    "subject_drift", "weekday_sin", "weekday_cos", "in_session", "session_size", "subject_count",
    "query_length", "window_share",
)
assert len(FEATURE_NAMES) == 18

# LongMemEval's six question types fold into the five the ranker distinguishes.
LONGMEMEVAL_TYPES: dict[str, str] = {
    "single-session-user": "single-session",
    "single-session-assistant": "single-session",
    "single-session-preference": "preference",
    "multi-session": "multi-session",
    "knowledge-update": "knowledge-update",
    "temporal-reasoning": "temporal",
    # LoCoMo's categories (training/locomo.py), as the ranker's types
    "locomo-single-hop": "single-session",
    "locomo-open-domain": "single-session",
    "locomo-multi-hop": "multi-session",
    "locomo-temporal": "temporal",
    # RealMem's query categories (training/realmem.py): a mid-conversation turn building on, updating or
    # implying what earlier sessions said
    "realmem-incremental": "multi-session",
    "realmem-updating": "knowledge-update",
    "realmem-preference": "preference",
    "realmem-temporal": "temporal",
}


def question_type_of(longmemeval_type: str) -> str:
    try:
        return LONGMEMEVAL_TYPES[longmemeval_type]
    except KeyError:
        raise ValueError(f"unknown LongMemEval question_type {longmemeval_type!r}; "
                         f"known: {sorted(LONGMEMEVAL_TYPES)}") from None


@dataclass(frozen=True)
class UserProfile:
    """What the database says about the user at query time (``sql/queries/retrieval/user_profile``)."""

    memory_count: int = 0
    first_memory_at: datetime | None = None
    last_query_at: datetime | None = None
    subject_count: int = 0
    mean_subject_similarity: float | None = None
    session_pair_count: int = 0


def _log_scaled(value: float, full_scale: float) -> float:
    return min(math.log1p(max(value, 0.0)) / math.log1p(full_scale), 1.0)


def window_share(window_days: int | None, profile: UserProfile, query_time: datetime) -> float:
    """The share of the user's memory span (first pair → query) the question's window covers, capped at 1."""
    if not window_days:
        return 0.0
    if profile.first_memory_at is None:
        return 1.0
    span_days = max((query_time - profile.first_memory_at).total_seconds() / 86400, 1.0)
    return min(window_days / span_days, 1.0)


def build_features(*, question_type: str | None, query: str, query_time: datetime, profile: UserProfile,
                   session_id: str | None, window_days: int | None = None) -> np.ndarray:
    """The 18 features in :data:`FEATURE_NAMES` order, as float32 (``window_days``: the length of the
    question's time window, None when it names no time)."""
    if question_type is not None and question_type not in QUESTION_TYPES:
        raise ValueError(f"question_type must be one of {list(QUESTION_TYPES)}, got {question_type!r}")
    if query_time.tzinfo is None:
        raise ValueError("query_time must be timezone-aware")
    one_hot = [1.0 if question_type == t else 0.0 for t in QUESTION_TYPES]
    utc = query_time.timestamp()
    hour_angle = 2 * math.pi * ((utc % 86400) / 86400)
    weekday_angle = 2 * math.pi * (((utc / 86400 + 3) % 7) / 7)  # 1970-01-01 was a Thursday (3)
    if profile.last_query_at is None:
        since_last = 1.0
    else:
        since_last = _log_scaled((query_time - profile.last_query_at).total_seconds() / 3600, 24 * 365)
    if profile.first_memory_at is None:
        account_age = 0.0
    else:
        account_age = _log_scaled((query_time - profile.first_memory_at).total_seconds() / 86400, 3650)
    if profile.mean_subject_similarity is None or profile.subject_count == 0:
        drift = 1.0
    else:
        drift = min(max((1.0 - profile.mean_subject_similarity) / 2.0, 0.0), 1.0)
    in_session = 1.0 if session_id is not None and profile.session_pair_count > 0 else 0.0
    values = one_hot + [
        math.sin(hour_angle), math.cos(hour_angle),
        since_last,
        _log_scaled(profile.memory_count, 1_000_000),
        account_age,
        drift,
        math.sin(weekday_angle), math.cos(weekday_angle),
        in_session,
        _log_scaled(profile.session_pair_count if session_id is not None else 0, 1000),
        _log_scaled(profile.subject_count, 100_000),
        _log_scaled(len(query.split()), 200),
        window_share(window_days, profile, query_time),
    ]
    return np.asarray(values, dtype=np.float32)
