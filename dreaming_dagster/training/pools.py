"""Candidate pools for LongMemEval questions, built with the very statement that serves recall.

For each answerable question: its embedding, the hybrid pool of its benchmark user — the top
``pool_size`` pairs by cosine, the top ``lexical_pool_size`` by BM25, the graph's, the keys' and, when the
question names a time, the time window's (read against the question's date) — with all twelve signals
(``retrieval/composite_ranking`` with cosine weights, so the rows come in cosine order), which side drew
each candidate, a relevance label and a needle flag per candidate (by content hash), and the user's
profile (the ranker's per-user inputs) as the question saw it. Two tables: one row per question, one row
per (question, candidate). The cosine-only pool is the candidates with ``in_vector_pool``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from dreaming_dagster.dates.questions import NO_TIME, read_question
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.retrieval.profiles import read_profile
from dreaming_dagster.retrieval.ranker import COSINE_ONLY
from dreaming_dagster.retrieval.recaller import (
    NO_GRAPH_SIDE,
    NO_TIME_SIDE,
    GraphSide,
    TimeSide,
    composite_rows,
    open_recall_connection,
)
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training.longmemeval import BenchmarkQuestion


@dataclass
class Pools:
    questions: pd.DataFrame
    candidates: pd.DataFrame

    def save(self, questions_path, candidates_path) -> None:
        self.questions.to_parquet(questions_path, index=False)
        self.candidates.to_parquet(candidates_path, index=False)

    @classmethod
    def load(cls, questions_path, candidates_path) -> Pools:
        return cls(pd.read_parquet(questions_path), pd.read_parquet(candidates_path))


def build_pools(database: Database, embedder: Embedder, questions: Sequence[BenchmarkQuestion],
                users: dict[str, str], *, kg_id: str = "default", pool_size: int = 50,
                lexical_pool_size: int = 50, graph: GraphSide = NO_GRAPH_SIDE,
                time_side: TimeSide = NO_TIME_SIDE, key_pool_size: int = 0, time_aware: bool = True,
                historical: bool = False,
                ef_search: int = 200, hubs: HubRule = DEFAULT_HUB_RULE, prepared_statements: bool = True,
                memory: str = "oracle", on_question: Callable[[int], None] | None = None) -> Pools:
    """Pools for every answerable question of ``questions`` (``users`` maps question id → benchmark user).

    ``historical`` (every mode but one-user) draws each pool only from pairs before the question's date; the
    one-user mode draws from the whole memory, as the reference did. Recency is always measured from the
    question's date, and so is the question's time window (``time_aware``; off: no window, time_fit 0 and no
    time-window candidates, the pools recall built before it read time). ``memory`` names the memory the
    pools come from (a column of both tables), so pools of one question in two memories can be kept together.
    """
    answerable = [q for q in questions if q.answerable]
    if not answerable:
        return Pools(pd.DataFrame(), pd.DataFrame())
    embeddings = np.asarray(embedder.embed([q.question for q in answerable]), dtype=np.float32)
    asked_by_question = {q.question_id: read_question(q.question, q.question_date) if time_aware else NO_TIME
                         for q in answerable}
    sides = sorted({side for asked in asked_by_question.values() for side in asked.sides})
    side_vectors = dict(zip(sides, embedder.embed(sides), strict=True)) if sides and time_side.pool_size else {}
    question_rows, candidate_rows = [], []
    database.ensure_schema(embedder.spec)
    with open_recall_connection(database, max(ef_search, pool_size), prepared_statements=prepared_statements) as conn:
        for n, (question, embedding) in enumerate(zip(answerable, embeddings, strict=True), 1):
            user_id = users[question.question_id]
            as_of = question.question_date if historical else None
            asked = asked_by_question[question.question_id]
            rows = composite_rows(conn, user_id=user_id, kg_id=kg_id, query_embedding=embedding,
                                  query_text=question.question, weights=COSINE_ONLY, pool_size=pool_size,
                                  lexical_pool_size=lexical_pool_size, graph=graph, hubs=hubs,
                                  time=asked, time_side=time_side,
                                  side_embeddings=[side_vectors[side] for side in asked.sides if side in side_vectors],
                                  key_pool_size=key_pool_size,
                                  row_limit=pool_size + lexical_pool_size + graph.pool_size + key_pool_size
                                  + 2 * time_side.pool_size,
                                  as_of=as_of, reference_time=question.question_date, session_id=None)
            profile = read_profile(conn, user_id=user_id, kg_id=kg_id, query_embedding=embedding, as_of=as_of,
                                   session_id=None)
            relevant_in_pool = relevant_in_vector_pool = 0
            needle_in_pool = False
            for rank, row in enumerate(rows):
                relevant = row["content_hash"] in question.relevant
                relevant_in_pool += relevant
                relevant_in_vector_pool += relevant and row["in_vector_pool"]
                needle_in_pool |= row["content_hash"] == question.needle
                candidate_rows.append({
                    "memory": memory, "question_id": question.question_id, "rank": rank, "pair_id": str(row["id"]),
                    "session_id": row["session_id"], "turn_index": row["turn_index"],
                    "in_vector_pool": bool(row["in_vector_pool"]), "in_lexical_pool": bool(row["in_lexical_pool"]),
                    "in_graph_pool": bool(row["in_graph_pool"]), "in_key_pool": bool(row["in_key_pool"]),
                    "in_window_pool": bool(row["in_window_pool"]),
                    "similarity": float(row["similarity"]), "bm25": float(row["bm25"]),
                    **{name: float(row[name]) for name in SIGNAL_NAMES},
                    "relevant": relevant, "needle": row["content_hash"] == question.needle})
            question_rows.append({
                "memory": memory, "question_id": question.question_id, "longmemeval_type": question.longmemeval_type,
                "ranker_type": question.ranker_type, "question": question.question,
                "question_date": question.question_date, "user_id": user_id,
                "total_relevant": len(question.relevant), "relevant_in_pool": relevant_in_pool,
                "relevant_in_vector_pool": relevant_in_vector_pool,
                "needle_in_pool": needle_in_pool, "evidence_sessions": list(question.evidence_sessions),
                "time_window": asked.window.label() if asked.window else None,
                "window_days": asked.window.days if asked.window else None, "sides": list(asked.sides),
                "candidates": len(rows), "embedding": embedding.tolist(),
                **{f"profile_{k}": v for k, v in asdict(profile).items()}})
            if on_question:
                on_question(n)
    return Pools(pd.DataFrame(question_rows), pd.DataFrame(candidate_rows))


def pool_description(candidates: pd.DataFrame) -> str:
    """What the pools are, for reports: "cosine top-50 ∪ BM25 top-50 (87.3 candidates a question)"."""
    if candidates.empty:
        return "empty"
    per_question = candidates.groupby(["memory", "question_id"] if "memory" in candidates else "question_id")
    vector = int(per_question["in_vector_pool"].sum().max()) if "in_vector_pool" in candidates else 0
    lexical = int(per_question["in_lexical_pool"].sum().max()) if "in_lexical_pool" in candidates else 0
    graph = int(per_question["in_graph_pool"].sum().max()) if "in_graph_pool" in candidates else 0
    keys = int(per_question["in_key_pool"].sum().max()) if "in_key_pool" in candidates else 0
    window = int(per_question["in_window_pool"].sum().max()) if "in_window_pool" in candidates else 0
    sides = ([f"cosine top-{vector}"] + ([f"BM25 top-{lexical}"] if lexical else [])
             + ([f"graph ≤ {graph}"] if graph else []) + ([f"keys ≤ {keys}"] if keys else [])
             + ([f"time window ≤ {window}"] if window else []))
    return f"{' ∪ '.join(sides)} ({per_question.size().mean():.1f} candidates a question)"
