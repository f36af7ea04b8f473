"""A small, fully known memory for retrieval tests: pairs, subjects and links with vectors chosen by the
test, so a plain-Python reference can recompute every signal."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from dreaming_dagster.embeddings import EmbeddingSpec, pair_embedding_text
from dreaming_dagster.ingest.records import MemoryPair
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.retrieval.signals import PoolPair, reference_signals
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

DIMENSION = 8
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def text_vector(text: str, dimension: int = DIMENSION) -> np.ndarray:
    """A deterministic unit vector per text (the 'embedding model' of these tests)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).normal(size=dimension).astype(np.float32)
    return vector / np.linalg.norm(vector)


class HashEmbedder:
    spec = EmbeddingSpec(model="test-hash-vectors", dimension=DIMENSION)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([text_vector(t) for t in texts]) if texts else np.zeros((0, DIMENSION), np.float32)


@dataclass
class UserMemory:
    user_id: str
    pairs: list[PoolPair] = field(default_factory=list)
    subject_vectors: dict[str, np.ndarray | None] = field(default_factory=dict)
    live_subjects: set[str] = field(default_factory=set)
    links: dict[str, list[str]] = field(default_factory=dict)  # pair id -> subject ids

    def pool(self, query: np.ndarray, size: int, as_of: datetime | None = None) -> list[PoolPair]:
        eligible = [p for p in self.pairs if as_of is None or p.occurred_at < as_of]
        return sorted(eligible, key=lambda p: -float(np.dot(query, p.embedding)))[:size]

    def reference(self, query: np.ndarray, size: int, *, as_of: datetime | None = None,
                  reference_time: datetime, session_id: str | None = None) -> dict[str, dict[str, float]]:
        occurred = {p.pair_id: p.occurred_at for p in self.pairs}
        pair_subjects = {pid: [s for s in subjects if s in self.live_subjects] for pid, subjects in self.links.items()}
        link_counts: dict[str, int] = {}
        for pid, subjects in self.links.items():
            if as_of is not None and occurred[pid] >= as_of:
                continue
            for s in subjects:
                link_counts[s] = link_counts.get(s, 0) + 1
        return reference_signals(query, self.pool(query, size, as_of), pair_subjects=pair_subjects,
                                 subject_embeddings=self.subject_vectors, subject_link_counts=link_counts,
                                 reference_time=reference_time, session_id=session_id)


def build_user(database: Database, user_id: str, *, pairs: int, subjects: int, seed: int,
               sessions: int = 4, days: int = 60, kg_id: str = "default") -> UserMemory:
    """Store ``pairs`` pairs over ``days`` days and ``subjects`` subjects (one without a vector, one
    archived), each pair linked to 0–3 subjects. Subject names repeat across users on purpose."""
    rng = np.random.default_rng(seed)
    embedder = HashEmbedder()
    records = []
    for i in range(pairs):
        occurred = EPOCH + timedelta(days=float(rng.uniform(0, days)))
        records.append(MemoryPair(session_id=f"s{i % sessions}", user_message=f"{user_id} question {i}",
                                  assistant_message=f"answer {i} {rng.integers(1_000_000)}",
                                  occurred_at=occurred, turn_index=i))
    result = save_validated_pairs(database, embedder, user_id, kg_id, records)
    assert result.inserted == pairs
    memory = UserMemory(user_id)
    for pid, record in zip(result.pair_ids, records, strict=True):
        memory.pairs.append(PoolPair(pid, record.session_id, record.occurred_at, text_vector(
            pair_embedding_text(record.user_message, record.assistant_message))))
    with database.connect() as conn:
        for j in range(subjects):
            vector = None if j == 0 else text_vector(f"{user_id} subject {j}")
            row = conn.execute(load_sql("graph/insert_subject"), {
                "user_id": user_id, "kg_id": kg_id, "subject_text": f"Topic {j}", "description_text": "",
                "subject_type": "other", "embedding": vector, "seen_at": EPOCH}).fetchone()
            sid = str(row["id"])
            memory.subject_vectors[sid] = vector
            if j != 1:
                memory.live_subjects.add(sid)
        subject_ids = list(memory.subject_vectors)
        for p in memory.pairs:
            chosen = [subject_ids[k] for k in rng.choice(len(subject_ids), size=int(rng.integers(0, 4)),
                                                           replace=False)]
            memory.links[p.pair_id] = chosen
            conn.execute(load_sql("graph/insert_links"), {"pair_id": p.pair_id, "subject_ids": chosen,
                                                          "user_id": user_id, "kg_id": kg_id})
        archived = subject_ids[1]
        conn.execute("UPDATE subjects SET archived_at = now() WHERE id = %s", (archived,))
    return memory
