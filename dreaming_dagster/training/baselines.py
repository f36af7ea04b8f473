"""The orderings of a pool without a model: cosine, BM25, their reciprocal-rank fusion and their weighted sum
(what recall serves with no usable model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dreaming_dagster.retrieval.signals import LEX_WEIGHT, SIGNAL_NAMES

RRF_K = 60  # reciprocal-rank fusion's constant, as the hybrid issue measured it


def reciprocal_rank_fusion(score_sets: Sequence[np.ndarray], mask: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Σ 1/(k + rank) over each score's order of the valid candidates (rank 1 = best), per question."""
    fused = np.zeros(mask.shape, np.float64)
    positions = np.broadcast_to(np.arange(mask.shape[1]), mask.shape)
    for scores in score_sets:
        order = np.argsort(-np.where(mask, scores, -np.inf), axis=1, kind="stable")
        ranks = np.empty_like(order)
        np.put_along_axis(ranks, order, positions, axis=1)
        fused += np.where(mask, 1.0 / (k + ranks + 1), 0.0)
    return fused


WEIGHTED_FUSION = "cosine+bm25 (weighted)"


def weighted_fusion(signals: np.ndarray, lex_weight: float = LEX_WEIGHT) -> np.ndarray:
    """cos + lex_weight × lex (lex is BM25 over the pool's best): recall's order with no usable model."""
    return signals[..., SIGNAL_NAMES.index("cos")] + lex_weight * signals[..., SIGNAL_NAMES.index("lex")]


def model_free_scores(signals: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Scores [Q, N] of each ordering without a model, from pools' signals [Q, N, S] and mask [Q, N]."""
    cos, lex = signals[..., SIGNAL_NAMES.index("cos")], signals[..., SIGNAL_NAMES.index("lex")]
    return {"cosine": cos, "bm25": lex, "cosine+bm25 (RRF)": reciprocal_rank_fusion([cos, lex], mask),
            WEIGHTED_FUSION: weighted_fusion(signals)}
