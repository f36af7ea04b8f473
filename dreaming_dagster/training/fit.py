"""The ranker training step as one function: split, question-type classifier, the v4, v3, v2 and v1 models on
the hybrid pool, and a v2 on the cosine pool alone (what the ranker was before lexical candidates)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dreaming_dagster.retrieval.features import QUESTION_TYPES
from dreaming_dagster.retrieval.question_type import fit_classifier
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.training.evaluation import reciprocal_rank_fusion
from dreaming_dagster.training.split import stratified_split
from dreaming_dagster.training.train import (
    TrainingData,
    TrainingOutcome,
    mean_metric,
    ranking_metrics,
    train_ranker,
)

VERSIONS = ("v4", "v3", "v2", "v1")
PUBLISHED_VERSION = VERSIONS[0]  # the newest: what recall() loads when it beats the rankings without a model
COSINE_POOL_VERSIONS = ("v2",)


def cosine_pool_key(version: str) -> str:
    return f"{version}-cosine-pool"


@dataclass
class FitReport:
    outcomes: dict[str, TrainingOutcome]
    train_ids: list[str]
    validation_ids: list[str]
    predicted_types: dict[str, str]
    classifier_validation_accuracy: float
    cosine_validation_ndcg10: float
    # Validation NDCG@10 of the model-free rankings of the same pools (BM25, cosine+BM25 fusion): a learned
    # ranker serves only when it beats the best of them and cosine.
    model_free_validation_ndcg10: dict[str, float] = field(default_factory=dict)

    @property
    def bar(self) -> tuple[str, float]:
        """The best ranking without a model on validation: (name, NDCG@10)."""
        scores = {"cosine": self.cosine_validation_ndcg10, **self.model_free_validation_ndcg10}
        best = max(scores, key=lambda name: (scores[name], name))
        return best, scores[best]

    def rows(self, data: TrainingData, ids: list[str]) -> list[int]:
        position = {qid: i for i, qid in enumerate(data.question_ids)}
        return [position[qid] for qid in ids]

    def as_json(self) -> dict:
        return {"train_ids": self.train_ids, "validation_ids": self.validation_ids,
                "predicted_types": self.predicted_types,
                "classifier_validation_accuracy": self.classifier_validation_accuracy,
                "cosine_validation_ndcg@10": self.cosine_validation_ndcg10,
                "model_free_validation_ndcg@10": self.model_free_validation_ndcg10,
                "bar": {"ranking": self.bar[0], "validation_ndcg@10": self.bar[1]},
                "models": {v: {"best_epoch": o.best_epoch, "best_validation_ndcg@10": o.best_validation_ndcg10,
                               "history": o.history} for v, o in self.outcomes.items()}}


def fit_rankers(data: TrainingData, *, embedding_model: str, validation_share: float = 0.2, seed: int = 0,
                epochs: int = 50, learning_rate: float = 1e-3, temperature: float = 0.05, batch_size: int = 32,
                log: Callable[[str], None] = print) -> FitReport:
    """Split by question (stratified by LongMemEval type), train v4, v3, v2 and v1 on gold question types (and
    v2 again on the cosine-pool candidates only, under ``v2-cosine-pool``), and
    predict every question's type with a classifier fitted on the training split only (so validation
    predictions are honest)."""
    train_ids, validation_ids = stratified_split(data.question_ids, data.longmemeval_types,
                                                 validation_share=validation_share, seed=seed)
    position = {qid: i for i, qid in enumerate(data.question_ids)}
    train_rows = [position[q] for q in train_ids]
    validation_rows = [position[q] for q in validation_ids]
    classifier = fit_classifier(data.embeddings[train_rows], [data.ranker_types[i] for i in train_rows],
                                embedding_model=embedding_model, seed=seed)
    predicted = [QUESTION_TYPES[i] for i in classifier.probabilities(data.embeddings).argmax(axis=1)]
    accuracy = float(np.mean([predicted[i] == data.ranker_types[i] for i in validation_rows]))
    gold_features = data.features(data.ranker_types)
    cosine_pool = data.vector_pool()
    cosine = mean_metric(ranking_metrics(cosine_pool, data.signals[validation_rows][..., SIGNAL_NAMES.index("cos")],
                                         validation_rows), "ndcg@10")
    lexical = data.signals[validation_rows][..., SIGNAL_NAMES.index("lex")]
    model_free = {}
    if cosine_pool is not data:  # a hybrid pool: BM25 and the fusion are rankings of their own
        model_free["bm25"] = mean_metric(ranking_metrics(data, lexical, validation_rows), "ndcg@10")
        fused = reciprocal_rank_fusion([data.signals[validation_rows][..., SIGNAL_NAMES.index("cos")], lexical],
                                       data.mask[validation_rows])
        model_free["cosine+bm25 (RRF)"] = mean_metric(ranking_metrics(data, fused, validation_rows), "ndcg@10")
    log(f"{len(train_rows)} training / {len(validation_rows)} validation questions; cosine validation "
        f"NDCG@10 {cosine:.4f}; question-type accuracy on validation {accuracy:.3f}")
    outcomes = {}
    runs = [(version, version, data) for version in VERSIONS]
    if cosine_pool is not data:
        runs += [(cosine_pool_key(version), version, cosine_pool) for version in COSINE_POOL_VERSIONS]
    for key, version, pools in runs:
        def report(row, key=key):
            if row["epoch"] == 1 or row["epoch"] % 10 == 0 or row["epoch"] == epochs:
                log(f"{key} epoch {row['epoch']}/{epochs}: loss {row['loss']:.4f} · train NDCG@10 "
                    f"{row['train_ndcg@10']:.4f} · validation NDCG@10 {row['validation_ndcg@10']:.4f}")
        outcomes[key] = train_ranker(pools, gold_features, train_rows, validation_rows, version=version,
                                     epochs=epochs, learning_rate=learning_rate, seed=seed,
                                     temperature=temperature, batch_size=batch_size, on_epoch=report)
    return FitReport(outcomes=outcomes, train_ids=train_ids, validation_ids=validation_ids,
                     predicted_types=dict(zip(data.question_ids, predicted, strict=True)),
                     classifier_validation_accuracy=accuracy, cosine_validation_ndcg10=cosine,
                     model_free_validation_ndcg10=model_free)
