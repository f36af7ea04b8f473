"""Ranker training's pure parts: ApproxNDCG, the metrics, the split, LongMemEval labels, and training
itself on synthetic pools (no database)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
import torch

from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.storage.records import MemoryPair, parse_timestamp
from dreaming_dagster.training.approx_ndcg import approx_ndcg, true_ndcg
from dreaming_dagster.training.evaluation import evaluate, markdown_report
from dreaming_dagster.training.longmemeval import benchmark_user, iter_questions, parse_question
from dreaming_dagster.training.metrics import ndcg_at_k, question_metrics, recall_at_k, reciprocal_rank
from dreaming_dagster.training.split import stratified_split
from dreaming_dagster.training.train import TrainingData, mean_metric, ranking_metrics, train_ranker
from tests.conftest import ORACLE


# ------------------------------------------------------------------------------------------ ApproxNDCG
def random_pools(seed=0, batch=16, n=30):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch, n, generator=generator, dtype=torch.float64)
    labels = (torch.rand(batch, n, generator=generator) < 0.15).double()
    labels[:, 0] = 1.0  # every question has something relevant
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[:, -5:] = False  # padded slots never count
    return scores, labels, mask


def test_approx_ndcg_approaches_true_ndcg_as_the_temperature_falls():
    scores, labels, mask = random_pools()
    exact = true_ndcg(scores, labels, mask)
    gaps = [float((approx_ndcg(scores, labels, mask, t) - exact).abs().mean()) for t in (1.0, 0.1, 0.01, 0.0001)]
    assert gaps == sorted(gaps, reverse=True) and gaps[0] > 0.05
    assert gaps[-1] < 1e-3


def test_a_perfect_ranking_scores_highest():
    """Among every assignment of the same score values to the candidates, putting the relevant ones on top
    gives the highest ApproxNDCG (and true NDCG 1), at a sharp and at a smooth temperature."""
    _, labels, mask = random_pools(seed=1)
    n = labels.shape[1]
    values = torch.arange(n, 0, -1, dtype=torch.float64)  # distinct, one apart
    perfect = torch.empty_like(labels)
    for q in range(len(labels)):
        order = torch.argsort(labels[q] * 2 + mask[q].double(), descending=True, stable=True)
        perfect[q, order] = values  # relevant first, then the other real candidates, padding last
    assert torch.allclose(true_ndcg(perfect, labels, mask), torch.ones(len(labels), dtype=torch.float64))
    for temperature in (0.05, 0.5):
        best = approx_ndcg(perfect, labels, mask, temperature)
        for seed in range(10):
            shuffled = values[torch.randperm(n, generator=torch.Generator().manual_seed(seed))]
            other = shuffled.expand_as(perfect)
            assert bool((approx_ndcg(other, labels, mask, temperature) <= best + 1e-9).all())
    assert float(approx_ndcg(perfect, labels, mask, 0.05).min()) > 0.999


def test_approx_ndcg_passes_gradient_and_ignores_padding():
    scores, labels, mask = random_pools(seed=2)
    scores.requires_grad_()
    approx_ndcg(scores, labels, mask, 0.05).mean().backward()
    assert scores.grad[:, :-5].abs().sum() > 0
    padded = scores.detach().clone()
    padded[:, -5:] = 99.0  # padded slots may hold anything
    assert torch.allclose(approx_ndcg(padded, labels, mask), approx_ndcg(scores.detach(), labels, mask))


# ----------------------------------------------------------------------------------------------- metrics
def test_metrics_against_hand_computed_values():
    ranked = [False, True, False, True] + [False] * 8  # relevant at ranks 2 and 4; one more outside the pool
    dcg10 = 1 / math.log2(3) + 1 / math.log2(5)
    ideal3 = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(ranked, 3, 10) == pytest.approx(dcg10 / ideal3)
    assert ndcg_at_k(ranked, 2, 10) == pytest.approx(dcg10 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(ranked, 3, 2) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert recall_at_k(ranked, 3, 5) == pytest.approx(2 / 3) and recall_at_k(ranked, 3, 3) == pytest.approx(1 / 3)
    assert reciprocal_rank(ranked) == 0.5 and reciprocal_rank([False] * 5) == 0.0
    needle = [False] * 10 + [True, False]
    metrics = question_metrics(ranked, needle, 3)
    assert metrics["needle_hit"] == 0.0 and metrics["pool_recall"] == pytest.approx(2 / 3)
    assert question_metrics(ranked, [False, False, False, True] + [False] * 8, 3)["needle_hit"] == 1.0
    with pytest.raises(ValueError):
        ndcg_at_k(ranked, 0, 10)


# ------------------------------------------------------------------------------------------------- split
def test_the_split_is_stratified_seeded_and_stable():
    ids = [f"q{i:03d}" for i in range(100)]
    types = ["a"] * 50 + ["b"] * 30 + ["c"] * 20
    train, validation = stratified_split(ids, types, validation_share=0.2, seed=7)
    kind = dict(zip(ids, types, strict=True))
    assert sorted(train + validation) == ids and not set(train) & set(validation)
    assert [sum(kind[q] == t for q in validation) for t in "abc"] == [10, 6, 4]
    order = np.random.default_rng(0).permutation(100)
    assert stratified_split([ids[i] for i in order], [types[i] for i in order], validation_share=0.2,
                            seed=7) == (train, validation)
    grown = stratified_split(ids + ["q999"], types + ["c"], validation_share=0.2, seed=7)[1]
    assert {q for q in grown if kind.get(q) in ("a", "b")} == {q for q in validation if kind[q] in ("a", "b")}
    assert stratified_split(ids, types, validation_share=0.2, seed=8)[1] != validation


# ------------------------------------------------------------------------------------------ LongMemEval
def test_relevance_needle_and_answerability_from_the_oracle():
    by_id = {q.question_id: (raw, q) for raw, q in iter_questions(ORACLE)}
    assert len(by_id) == 500
    answerable = [q for _, q in by_id.values() if q.answerable]
    assert sum(q.abstention for _, q in by_id.values()) == 30 and len(answerable) == 470
    def alternating(raw: dict) -> bool:  # user, assistant, user, … in every session: pairs are turns 2i, 2i+1
        return all(t["role"] == ("user" if k % 2 == 0 else "assistant") for turns in raw["haystack_sessions"]
                   for k, t in enumerate(turns))

    raw, question = next(v for v in by_id.values()
                         if len(v[1].relevant) >= 2 and len(v[1].session_ids) >= 2 and alternating(v[0]))
    # Recompute by hand: pair i of a session is user turn 2i and assistant turn 2i+1, named by the content
    # hash ingestion stores it under.
    by_session: dict[str, list[str]] = {}
    dates = dict(zip(raw["haystack_session_ids"], raw["haystack_dates"], strict=True))
    for session_id, turns in zip(raw["haystack_session_ids"], raw["haystack_sessions"], strict=True):
        for i in range(0, len(turns) - 1, 2):
            if turns[i].get("has_answer") or turns[i + 1].get("has_answer"):
                by_session.setdefault(session_id, []).append(MemoryPair(session_id=session_id, user_message=turns[i]["content"],
                                        assistant_message=turns[i + 1]["content"], turn_index=i // 2,
                                        occurred_at=parse_timestamp(dates[session_id])).content_hash)
    expected = {h for hashes in by_session.values() for h in hashes}
    assert question.relevant == expected
    assert set(question.evidence_sessions) == set(by_session)
    # The needle is the last relevant pair of the latest evidence session.
    latest = max(by_session, key=lambda s: (parse_timestamp(dates[s]), s))
    assert question.evidence_sessions[-1] == latest and question.needle == by_session[latest][-1]
    assert question.needle in question.relevant
    assert parse_question(raw) == question
    assert benchmark_user("one-user", "lme", "x") == "lme" and benchmark_user("per-question", "lme", "x") == "lme-x"
    with pytest.raises(ValueError):
        benchmark_user("two-users", "lme", "x")


# ---------------------------------------------------------------------------------- training, synthetic
def synthetic_pools(questions=120, pool=20, seed=0, lexical_only=5):
    """Hybrid pools where the relevant candidate is marked by lex, not by cosine: a ranker that learns to
    weight lex must beat cosine. The last ``lexical_only`` candidates were drawn by BM25 alone."""
    rng = np.random.default_rng(seed)
    question_rows, candidate_rows = [], []
    for q in range(questions):
        relevant = rng.integers(0, pool)
        for rank in range(pool):
            signals = {name: float(rng.uniform(0, 0.5)) for name in SIGNAL_NAMES}
            signals["cos"] = float(0.9 - 0.02 * rank)
            if rank == relevant:
                signals["lex"] = float(rng.uniform(0.8, 1.0))
            candidate_rows.append({"question_id": f"q{q:03d}", "rank": rank, "similarity": signals["cos"], **signals,
                                   "in_vector_pool": rank < pool - lexical_only,
                                   "relevant": rank == relevant, "needle": rank == relevant})
        question_rows.append({
            "question_id": f"q{q:03d}", "longmemeval_type": ["multi-session", "temporal-reasoning"][q % 2],
            "ranker_type": ["multi-session", "temporal"][q % 2], "question": f"question {q}",
            "question_date": datetime(2024, 1, 1 + q % 28, tzinfo=UTC), "user_id": "u", "total_relevant": 1,
            "relevant_in_pool": 1, "needle_in_pool": True, "candidates": pool,
            "embedding": rng.normal(size=8).tolist(), "profile_memory_count": 500,
            "profile_first_memory_at": datetime(2023, 1, 1, tzinfo=UTC), "profile_last_query_at": None,
            "profile_subject_count": 50, "profile_mean_subject_similarity": 0.3, "profile_session_pair_count": 0})
    return TrainingData.from_pools(pd.DataFrame(question_rows), pd.DataFrame(candidate_rows))


def test_training_learns_the_signal_that_matters_and_is_deterministic():
    data = synthetic_pools()
    features = data.features(data.ranker_types)
    train_rows, validation_rows = list(range(96)), list(range(96, 120))
    first = train_ranker(data, features, train_rows, validation_rows, version="v3", epochs=8, seed=5,
                         learning_rate=5e-3)
    second = train_ranker(data, features, train_rows, validation_rows, version="v3", epochs=8, seed=5,
                          learning_rate=5e-3)
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, second.model.state_dict()[name]), name
    assert first.history == second.history and 1 <= first.best_epoch <= 8
    cosine = mean_metric(ranking_metrics(data, data.signals[validation_rows][..., 0], validation_rows), "ndcg@10")
    assert first.best_validation_ndcg10 > cosine + 0.2
    evaluation = evaluate(data, {"v3": first.model}, predicted_features=features, gold_features=features,
                          splits={"validation": validation_rows, "all": list(range(120))})
    weights = evaluation.mean_weights["v3"]
    assert max(weights.keys() & set(SIGNAL_NAMES), key=weights.get) == "lex"
    # The cosine baseline ranks only what cosine drew (a quarter of the relevant pairs are lexical-only);
    # bm25 alone is perfect here by construction; every method sees identical questions.
    validation = evaluation.overall["validation"]
    assert validation["v3"]["pool_recall"] == 1.0 and validation["bm25"]["recall@10"] == 1.0
    assert validation["cosine"]["pool_recall"] == pytest.approx(np.mean(
        [data.labels[q][data.vector_mask[q]].sum() for q in validation_rows]))
    assert validation["cosine"]["pool_recall"] < 1.0
    assert set(validation) == {"cosine", "bm25", "cosine+bm25 (RRF)", "v3", "v3 (gold type)"}
    report = markdown_report(evaluation, title="t", context={"dataset": "synthetic"})
    assert "| ndcg@10 |" in report and "| lex |" in report and "temporal-reasoning" in report
