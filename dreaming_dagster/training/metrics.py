"""Ranking metrics over one question's ranked candidates (binary relevance).

Every metric is measured against **all** of the question's relevant pairs, including those the candidate
pool missed, so no re-ranker can score above the pool's ceiling (``pool_recall``):
- ``ndcg@k``: DCG of the top k (gain 1 per relevant pair, discount 1/log2(rank + 1)) over the ideal DCG
  of min(k, relevant) relevant pairs at the top;
- ``recall@k``: relevant pairs in the top k / relevant pairs;
- ``mrr``: 1 / rank of the first relevant candidate (0 when none is in the pool);
- ``needle_hit``: 1 when the needle is in the top 10;
- ``pool_recall``: relevant pairs in the pool / relevant pairs (recall@50 for a pool of 50);
- ``session_any@k`` / ``session_all@k``: 1 when any / every session holding a relevant pair (the
  question's evidence sessions) has a pair in the top k — LongMemEval's session-level recall_any and
  recall_all (NaN when the evidence sessions are not known).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

METRIC_NAMES = ("ndcg@10", "ndcg@5", "recall@10", "recall@5", "mrr", "needle_hit", "pool_recall",
                "session_any@5", "session_all@5", "session_any@10", "session_all@10")


def dcg(relevant_in_rank_order: Sequence[bool], k: int) -> float:
    return sum(1.0 / math.log2(rank + 2) for rank, hit in enumerate(relevant_in_rank_order[:k]) if hit)


def ndcg_at_k(relevant_in_rank_order: Sequence[bool], total_relevant: int, k: int) -> float:
    if total_relevant <= 0:
        raise ValueError("NDCG is undefined for a question without relevant pairs")
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(k, total_relevant)))
    return dcg(relevant_in_rank_order, k) / ideal


def recall_at_k(relevant_in_rank_order: Sequence[bool], total_relevant: int, k: int) -> float:
    if total_relevant <= 0:
        raise ValueError("recall is undefined for a question without relevant pairs")
    return sum(1 for hit in relevant_in_rank_order[:k] if hit) / total_relevant


def reciprocal_rank(relevant_in_rank_order: Sequence[bool]) -> float:
    for rank, hit in enumerate(relevant_in_rank_order, 1):
        if hit:
            return 1.0 / rank
    return 0.0


def session_recall(sessions_in_rank_order: Sequence[str | None], evidence_sessions: Collection[str], k: int,
                   *, every: bool) -> float:
    if not evidence_sessions:
        return math.nan
    found = set(sessions_in_rank_order[:k]) & set(evidence_sessions)
    return float(found == set(evidence_sessions)) if every else float(bool(found))


def question_metrics(relevant_in_rank_order: Sequence[bool], needle_in_rank_order: Sequence[bool],
                     total_relevant: int, sessions_in_rank_order: Sequence[str | None] = (),
                     evidence_sessions: Collection[str] = ()) -> dict[str, float]:
    """Every metric of :data:`METRIC_NAMES` for one question's ranking of its pool."""
    return {
        **{f"session_{'all' if every else 'any'}@{k}": session_recall(sessions_in_rank_order, evidence_sessions, k,
                                                                     every=every)
           for k in (5, 10) for every in (False, True)},
        "ndcg@10": ndcg_at_k(relevant_in_rank_order, total_relevant, 10),
        "ndcg@5": ndcg_at_k(relevant_in_rank_order, total_relevant, 5),
        "recall@10": recall_at_k(relevant_in_rank_order, total_relevant, 10),
        "recall@5": recall_at_k(relevant_in_rank_order, total_relevant, 5),
        "mrr": reciprocal_rank(relevant_in_rank_order),
        "needle_hit": 1.0 if any(needle_in_rank_order[:10]) else 0.0,
        "pool_recall": sum(1 for hit in relevant_in_rank_order if hit) / total_relevant,
    }
