"""A small, fully known memory for retrieval tests: pairs, subjects and links with vectors chosen by the
test, so a plain-Python reference can recompute every signal."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from dreaming_dagster.embeddings import EmbeddingSpec, pair_embedding_texts
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.retrieval.signals import PoolPair, bm25, pair_similarity, reference_signals
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import MemoryPair
from tests.conftest import reference_sql

DIMENSION = 8
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Words the pairs are written with, so that queries share some with them (the lexical side).
VOCABULARY = ("hiking", "sister", "birthday", "car", "garden", "piano", "recipe", "talked", "mountains",
              "insurance", "tomatoes", "lessons", "party", "engine", "trail")


def text_lexemes(database: Database, text: str) -> dict[str, int]:
    """Postgres' english lexemes of ``text`` with their frequency (tokenizing is Postgres' job; the
    reference only scores)."""
    with database.connect() as conn:
        return {row["lexeme"]: row["term_frequency"]
                for row in conn.execute(load_sql("retrieval/text_lexemes"), {"text": text})}


def text_vector(text: str, dimension: int = DIMENSION) -> np.ndarray:
    """A deterministic unit vector per text (the 'embedding model' of these tests)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).normal(size=dimension).astype(np.float32)
    return vector / np.linalg.norm(vector)


class HashEmbedder:
    spec = EmbeddingSpec(model="test-hash-vectors", dimension=DIMENSION)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        dimension = self.spec.dimension  # a subclass may name a wider spec
        return (np.stack([text_vector(t, dimension) for t in texts]) if texts
                else np.zeros((0, dimension), np.float32))


@dataclass
class UserMemory:
    user_id: str
    pairs: list[PoolPair] = field(default_factory=list)
    subject_vectors: dict[str, np.ndarray | None] = field(default_factory=dict)
    live_subjects: set[str] = field(default_factory=set)
    links: dict[str, list[str]] = field(default_factory=dict)  # pair id -> subject ids
    lexemes: dict[str, dict[str, int]] = field(default_factory=dict)  # pair id -> lexeme -> frequency

    def bm25_scores(self, query_lexemes: Sequence[str], as_of: datetime | None = None) -> dict[str, float]:
        """BM25 of every pair holding a query lexeme (statistics over the whole memory, as in SQL)."""
        indexed = {pid: lex for pid, lex in self.lexemes.items() if lex}
        frequency: dict[str, int] = {}
        for lex in indexed.values():
            for lexeme in lex:
                frequency[lexeme] = frequency.get(lexeme, 0) + 1
        average = sum(sum(lex.values()) for lex in indexed.values()) / len(indexed)
        occurred = {p.pair_id: p.occurred_at for p in self.pairs}
        return {pid: score for pid, lex in indexed.items()
                if (as_of is None or occurred[pid] < as_of)
                and (score := bm25(query_lexemes, lex, document_frequency=frequency, pair_count=len(indexed),
                                   average_length=average)) > 0}

    def pool(self, query: np.ndarray, size: int, as_of: datetime | None = None, *,
             query_lexemes: Sequence[str] = (), lexical_size: int = 0) -> list[PoolPair]:
        """Top ``size`` by cosine, plus the top ``lexical_size`` by BM25 (ties by pair id, as in SQL)."""
        eligible = [p for p in self.pairs if as_of is None or p.occurred_at < as_of]
        by_cosine = sorted(eligible, key=lambda p: -pair_similarity(query, p))[:size]
        scores = self.bm25_scores(query_lexemes, as_of) if lexical_size else {}
        by_words = sorted(scores, key=lambda pid: (-scores[pid], pid))[:lexical_size]
        chosen = {p.pair_id for p in by_cosine}
        return by_cosine + [p for p in eligible if p.pair_id in set(by_words) - chosen]

    def reference(self, query: np.ndarray, size: int, *, as_of: datetime | None = None,
                  reference_time: datetime, session_id: str | None = None, query_lexemes: Sequence[str] = (),
                  lexical_size: int = 0, hubs: HubRule = DEFAULT_HUB_RULE) -> dict[str, dict[str, float]]:
        occurred = {p.pair_id: p.occurred_at for p in self.pairs}
        pair_subjects = {pid: [s for s in subjects if s in self.live_subjects] for pid, subjects in self.links.items()}
        link_counts: dict[str, int] = {}
        for pid, subjects in self.links.items():
            if as_of is not None and occurred[pid] >= as_of:
                continue
            for s in subjects:
                link_counts[s] = link_counts.get(s, 0) + 1
        pool = self.pool(query, size, as_of, query_lexemes=query_lexemes, lexical_size=lexical_size)
        return reference_signals(query, pool, pair_subjects=pair_subjects,
                                 subject_embeddings=self.subject_vectors, subject_link_counts=link_counts,
                                 reference_time=reference_time, session_id=session_id,
                                 lexical_scores=self.bm25_scores(query_lexemes, as_of),
                                 user_pairs=len(self.pairs), hubs=hubs)


def build_user(database: Database, user_id: str, *, pairs: int, subjects: int, seed: int,
               sessions: int = 4, days: int = 60, kg_id: str = "default") -> UserMemory:
    """Store ``pairs`` pairs over ``days`` days and ``subjects`` subjects (one without a vector, one
    archived), each pair linked to 0–3 subjects. Subject names repeat across users on purpose."""
    rng = np.random.default_rng(seed)
    embedder = HashEmbedder()
    records = []
    for i in range(pairs):
        occurred = EPOCH + timedelta(days=float(rng.uniform(0, days)))
        words = " ".join(rng.choice(VOCABULARY, size=int(rng.integers(1, 5))))
        records.append(MemoryPair(session_id=f"s{i % sessions}", user_message=f"{user_id} question {i} {words}",
                                  assistant_message=f"answer {i} {rng.integers(1_000_000)} "
                                                    f"{rng.choice(VOCABULARY)} " * int(rng.integers(1, 3)),
                                  occurred_at=occurred, turn_index=i))
    result = save_validated_pairs(database, embedder, user_id, kg_id, records)
    assert result.inserted == pairs
    memory = UserMemory(user_id)
    for pid, record in zip(result.pair_ids, records, strict=True):
        first, reply = pair_embedding_texts(record.user_message, record.assistant_message)
        memory.pairs.append(PoolPair(pid, record.session_id, record.occurred_at, text_vector(first),
                                     text_vector(reply) if reply is not None else None))
        memory.lexemes[pid] = text_lexemes(database, f"{record.user_message} {record.assistant_message}")
    with database.connect() as conn:
        for j in range(subjects):
            vector = None if j == 0 else text_vector(f"{user_id} subject {j}")
            row = conn.execute(reference_sql("insert_subject"), {
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
            conn.execute(load_sql("pipeline/insert_links"), {"pair_ids": [p.pair_id] * len(chosen), "subject_ids": chosen,
                                                          "user_id": user_id, "kg_id": kg_id})
        archived = subject_ids[1]
        conn.execute("UPDATE subjects SET archived_at = now() WHERE id = %s", (archived,))
    return memory
