"""LongMemEval questions as ranking tasks: which stored pairs answer each question.

A pair (one user turn and the assistant's reply, as ingestion stores it) is **relevant** to a question
when one of its two turns has ``has_answer: true`` in that question's own copy of the session — labels are
read per question, because a session shared by two questions can carry different labels in each. Pairs
are named by their content hash, the identity ingestion stores them under: in the oracle, 47 pairs share
a (session, turn) with a differently worded copy from another question, and only the question's own copy
answers it. The
**needle** is the relevant pair of the question's latest evidence session (by session date); when that
session holds several, the last of them (the most recent statement, which is what a knowledge-update
question asks for). A question is **answerable** when it is not an abstention (``_abs``) and has at least
one relevant pair.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from dreaming_dagster.ingest.readers import iter_longmemeval_questions, session_pairs
from dreaming_dagster.retrieval.features import question_type_of
from dreaming_dagster.storage.records import MemoryPair, parse_timestamp

PairKey = str  # a pair's content hash (memory_pairs.content_hash)
MODES = ("one-user", "per-question", "per-conversation")


@dataclass(frozen=True)
class BenchmarkQuestion:
    question_id: str
    longmemeval_type: str
    question: str
    question_date: datetime
    relevant: frozenset[PairKey]
    needle: PairKey | None
    session_ids: tuple[str, ...]
    evidence_sessions: tuple[str, ...] = ()  # the sessions holding a relevant pair, needle's last

    @property
    def ranker_type(self) -> str:
        return question_type_of(self.longmemeval_type)

    @property
    def abstention(self) -> bool:
        return self.question_id.endswith("_abs")

    @property
    def answerable(self) -> bool:
        return not self.abstention and bool(self.relevant)


def parse_question(raw: dict[str, Any]) -> BenchmarkQuestion:
    question_id = str(raw["question_id"])
    relevant: set[PairKey] = set()
    evidence: list[tuple[datetime, str]] = []
    needle: PairKey | None = None
    for session_id, date, turns in zip(raw.get("haystack_session_ids") or [], raw.get("haystack_dates") or [],
                                       raw.get("haystack_sessions") or [], strict=True):
        when = parse_timestamp(date, "haystack_dates")
        found = [pair_hash(session_id, when, index, user, assistant)
                 for index, user, assistant, has_answer in session_pairs(turns) if has_answer]
        relevant.update(found)
        if found:
            if not evidence or (when, session_id) >= max(evidence):
                needle = found[-1]
            evidence.append((when, session_id))
    return BenchmarkQuestion(
        question_id=question_id, longmemeval_type=str(raw["question_type"]), question=str(raw["question"]),
        question_date=parse_timestamp(raw["question_date"], "question_date"), relevant=frozenset(relevant),
        needle=needle, session_ids=tuple(raw.get("haystack_session_ids") or []),
        evidence_sessions=tuple(session for _, session in sorted(evidence)))


def pair_hash(session_id: str, occurred_at: datetime, turn_index: int, user_message: str,
              assistant_message: str) -> PairKey:
    """The content hash a LongMemEval pair is stored under (ingestion's identity of a pair)."""
    return MemoryPair(session_id=session_id, user_message=user_message, assistant_message=assistant_message,
                      occurred_at=occurred_at, turn_index=turn_index).content_hash


def iter_questions(path: Path, limit: int | None = None,
                   only: frozenset[str] | None = None) -> Iterator[tuple[dict[str, Any], BenchmarkQuestion]]:
    """Stream (raw record, parsed question) pairs — the first ``limit``, of the ids in ``only`` when given;
    the file is never loaded whole (``_s`` is ~260 MB)."""
    count = 0
    for raw in iter_longmemeval_questions(Path(path)):
        if limit is not None and count >= limit:
            return
        if only is not None and str(raw["question_id"]) not in only:
            continue
        count += 1
        yield raw, parse_question(raw)


def benchmark_user(mode: str, user_prefix: str, question_id: str) -> str:
    """The memory a question is asked against: one user for the whole file, one per question, or one per
    conversation."""
    if mode == "one-user":
        return user_prefix
    if mode == "per-question":
        return f"{user_prefix}-{question_id}"
    if mode == "per-conversation":  # LoCoMo's ids: "<conversation>:<number>"
        return f"{user_prefix}-{question_id.split(':', 1)[0]}"
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
