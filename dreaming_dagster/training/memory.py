"""Turning a LongMemEval-format file into benchmark users' memory, dreamed like any user's.

``one-user``: every session of the file is one user's memory and each question's pool is drawn from all of
it (the reference's protocol). ``per-question``: each question is its own user with its own haystack
(LongMemEval's standard protocol). ``per-conversation``: each conversation is one user (LoCoMo, converted by
``training/locomo.py``; its questions share their conversation's sessions, saved once). All stream the file
question by question — the ``_s`` split is ~260 MB — save pairs in chunks (the same save path as any client: duplicates are skipped before
embedding, so a re-run only does what is missing) and dream with the configured providers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.extraction.extractors import Extractor
from dreaming_dagster.ingest.readers import longmemeval_session_records
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.pipeline.refiners import Refiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import InvalidInputError, Rejection, parse_pair
from dreaming_dagster.training.longmemeval import (
    BenchmarkQuestion,
    benchmark_user,
    file_sha256,
    iter_questions,
)

CHUNK = 256


def _unsaved_sessions(raw: dict, saved: set[str]) -> dict:
    """The haystack fields of ``raw`` without the sessions already saved (and mark this record's saved)."""
    keep = [i for i, session_id in enumerate(raw.get("haystack_session_ids") or []) if session_id not in saved]
    saved.update(raw.get("haystack_session_ids") or [])
    return {field: [raw[field][i] for i in keep] for field in ("haystack_session_ids", "haystack_dates",
                                                               "haystack_sessions")}


@dataclass
class MemoryManifest:
    dataset: str
    sha256: str
    mode: str
    user_prefix: str
    kg_id: str
    questions: list[BenchmarkQuestion]
    users: dict[str, str]
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps({
            "dataset": self.dataset, "sha256": self.sha256, "mode": self.mode, "user_prefix": self.user_prefix,
            "kg_id": self.kg_id, "users": self.users, "counts": self.counts, "seconds": self.seconds,
            "questions": [{"question_id": q.question_id, "longmemeval_type": q.longmemeval_type,
                           "question": q.question, "question_date": q.question_date.isoformat(),
                           "relevant": sorted(q.relevant), "needle": q.needle, "session_ids": q.session_ids,
                           "evidence_sessions": q.evidence_sessions}
                          for q in self.questions]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> MemoryManifest:
        raw = json.loads(text)
        questions = [BenchmarkQuestion(
            question_id=q["question_id"], longmemeval_type=q["longmemeval_type"], question=q["question"],
            question_date=datetime.fromisoformat(q["question_date"]),
            relevant=frozenset(q["relevant"]), needle=q["needle"], session_ids=tuple(q["session_ids"]),
            evidence_sessions=tuple(q.get("evidence_sessions", ())))
            for q in raw["questions"]]
        return cls(dataset=raw["dataset"], sha256=raw["sha256"], mode=raw["mode"], user_prefix=raw["user_prefix"],
                   kg_id=raw["kg_id"], questions=questions, users=raw["users"], counts=raw["counts"],
                   seconds=raw["seconds"])


def load_benchmark_memory(database: Database, embedder: Embedder, extractor: Extractor, refiner: Refiner,
                          dataset: Path, *, mode: str, user_prefix: str = "longmemeval", kg_id: str = "default",
                          limit: int | None = None, only: frozenset[str] | None = None, log: Callable[[str], None] = print) -> MemoryManifest:
    started = time.perf_counter()
    counts = {"pairs_inserted": 0, "pairs_duplicate": 0, "pairs_rejected": 0, "subjects_created": 0,
              "subjects_merged": 0, "links": 0, "pairs_keyed": 0, "keys": 0}
    questions: list[BenchmarkQuestion] = []
    users: dict[str, str] = {}
    pending: dict[str, list] = {}

    def flush(user_id: str) -> None:
        batch = pending.pop(user_id, [])
        if batch:
            result = save_validated_pairs(database, embedder, user_id, kg_id, batch)
            counts["pairs_inserted"] += result.inserted
            counts["pairs_duplicate"] += result.duplicates

    def dream(user_id: str) -> None:
        flush(user_id)
        result = sync_user(user_id, database=database, embedder=embedder, extractor=extractor, refiner=refiner,
                           kg_id=kg_id)
        counts["subjects_created"] += result.merge.get("created", 0)
        counts["subjects_merged"] += result.merge.get("merged", 0)
        counts["links"] += result.links.get("links", 0)
        counts["pairs_keyed"] += result.keys.get("pairs", 0)
        counts["keys"] += result.keys.get("statements", 0) + result.keys.get("events", 0)

    saved_sessions: set[str] = set()  # per-conversation: every question repeats the whole conversation
    previous_user = None
    for n, (raw, question) in enumerate(iter_questions(dataset, limit, only), 1):
        user_id = benchmark_user(mode, user_prefix, question.question_id)
        if previous_user is not None and user_id != previous_user:
            dream(previous_user)
        previous_user = user_id
        questions.append(question)
        users[question.question_id] = user_id
        if mode == "per-conversation":
            raw = {**raw, **_unsaved_sessions(raw, saved_sessions)}
        for item in longmemeval_session_records([raw]):
            if isinstance(item, Rejection):
                counts["pairs_rejected"] += 1
                log(f"skipped {item}")
                continue
            try:
                pending.setdefault(user_id, []).append(parse_pair(item.raw, item.where))
            except InvalidInputError as error:
                counts["pairs_rejected"] += 1
                log(f"skipped {item.where}: {error}")
            if len(pending.get(user_id, [])) >= CHUNK:
                flush(user_id)
        if n % 25 == 0:
            log(f"{n} questions read · {counts['pairs_inserted']:,} pairs stored")
    if previous_user is not None:
        log(f"dreaming {previous_user}: {counts['pairs_inserted']:,} new pairs in all")
        dream(previous_user)
    return MemoryManifest(dataset=str(dataset), sha256=file_sha256(dataset), mode=mode, user_prefix=user_prefix,
                          kg_id=kg_id, questions=questions, users=users, counts=counts,
                          seconds=round(time.perf_counter() - started, 1))
