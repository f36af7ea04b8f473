"""The ranker training step as one function: the split, the question-type classifier, the v6 … v1 models on
the hybrid pools of every memory, and the ablations: v6 trained on the pooled oracle alone (the ranker
before it met realistic haystacks), v6 without the time parts (no time-window candidates, no ``time_fit``
or ``time_text``, no window feature), v6 without the keys (no key candidates, no ``key_match``), v6 without
the key side's candidates (``key_match`` kept) and v2 on the cosine pool
alone (the ranker before lexical candidates)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dreaming_dagster.retrieval.features import QUESTION_TYPES
from dreaming_dagster.retrieval.question_type import fit_classifier
from dreaming_dagster.retrieval.ranker import DEFAULT_HIDDEN
from dreaming_dagster.training.baselines import model_free_scores
from dreaming_dagster.training.split import RankerSplit, ranker_split
from dreaming_dagster.training.train import (
    TrainingData,
    TrainingOutcome,
    mean_metric,
    ranking_metrics,
    train_ranker,
)
from dreaming_dagster.training.variants import (
    COSINE_POOL_VERSIONS,
    ORACLE_MEMORY,
    ORACLE_ONLY,
    PUBLISHED_VERSION,
    VERSIONS,
    WITHOUT_KEY_CANDIDATES,
    WITHOUT_KEYS,
    WITHOUT_TIME,
    ablation_data,
    cosine_pool_key,
)


def split_of(data: TrainingData) -> RankerSplit:
    """The ranker's split over the pooled oracle's questions (every memory's questions fall in it by id; a
    question only another memory holds trains)."""
    oracle = [i for i, memory in enumerate(data.memories) if memory == ORACLE_MEMORY] or list(range(len(data)))
    return ranker_split([data.question_ids[i] for i in oracle], [data.longmemeval_types[i] for i in oracle])


def part_rows(data: TrainingData, split: RankerSplit) -> dict[str, list[int]]:
    """train / dev / validation → rows of ``data`` (every memory)."""
    parts: dict[str, list[int]] = {"train": [], "dev": [], "validation": []}
    for row, question_id in enumerate(data.question_ids):
        parts[split.part_of(question_id) or "train"].append(row)
    return parts


@dataclass
class FitReport:
    outcomes: dict[str, TrainingOutcome]
    split: RankerSplit
    predicted_types: dict[str, str]  # by question id (the same text in every memory)
    classifier_dev_accuracy: float
    # Dev NDCG@10 of the rankings without a model (cosine over its own pool; BM25 and the cosine+BM25
    # fusion over the hybrid pool): a learned ranker serves only when it beats the best of them.
    model_free_dev_ndcg10: dict[str, float] = field(default_factory=dict)
    hidden: tuple[int, ...] = DEFAULT_HIDDEN  # the network chosen on dev
    hidden_dev_ndcg10: dict[str, float] = field(default_factory=dict)  # each network tried → its v6's dev NDCG@10

    @property
    def bar(self) -> tuple[str, float]:
        """The best ranking without a model on the dev questions: (name, NDCG@10)."""
        scores = self.model_free_dev_ndcg10
        best = max(scores, key=lambda name: (scores[name], name))
        return best, scores[best]

    @property
    def train_ids(self) -> list[str]:
        return list(self.split.train)

    @property
    def validation_ids(self) -> list[str]:
        return list(self.split.validation)

    def as_json(self) -> dict:
        return {"train_ids": list(self.split.train), "dev_ids": list(self.split.dev),
                "validation_ids": list(self.split.validation), "predicted_types": self.predicted_types,
                "classifier_dev_accuracy": self.classifier_dev_accuracy,
                "model_free_dev_ndcg@10": self.model_free_dev_ndcg10,
                "bar": {"ranking": self.bar[0], "dev_ndcg@10": self.bar[1]}, "hidden": list(self.hidden),
                "hidden_dev_ndcg@10": self.hidden_dev_ndcg10,
                "models": {v: {"best_epoch": o.best_epoch, "best_dev_ndcg@10": o.best_dev_ndcg10,
                               "history": o.history} for v, o in self.outcomes.items()}}


def fit_rankers(data: TrainingData, *, embedding_model: str, seed: int = 0, epochs: int = 50,
                learning_rate: float = 1e-3, temperature: float = 0.05, batch_size: int = 32,
                hidden_choices: Sequence[Sequence[int]] = (DEFAULT_HIDDEN,), ablations: bool = True,
                log: Callable[[str], None] = print) -> FitReport:
    """Train v6 … v1 on gold question types over the training questions of every memory, each at its
    best epoch by dev NDCG@10, with the network of ``hidden_choices`` whose v6 scores best on dev, and the
    ablations when ``ablations``; predict every question's type with a classifier fitted on the training
    questions only (so dev and validation predictions are honest)."""
    split = split_of(data)
    parts = part_rows(data, split)
    train_rows, dev_rows = parts["train"], parts["dev"]
    classifier = fit_classifier(data.embeddings[train_rows], [data.ranker_types[i] for i in train_rows],
                                embedding_model=embedding_model, seed=seed)
    predicted = [QUESTION_TYPES[i] for i in classifier.probabilities(data.embeddings).argmax(axis=1)]
    accuracy = float(np.mean([predicted[i] == data.ranker_types[i] for i in dev_rows])) if dev_rows else float("nan")
    cosine_pool = data.vector_pool()
    model_free = {}
    for name, scores in model_free_scores(data.signals[dev_rows], data.mask[dev_rows]).items():
        pool = cosine_pool if name == "cosine" else data
        model_free[name] = mean_metric(ranking_metrics(pool, scores, dev_rows), "ndcg@10")
    log(f"{len(train_rows)} training / {len(dev_rows)} dev questions over "
        f"{', '.join(sorted(set(data.memories)))}; dev NDCG@10 without a model: "
        + ", ".join(f"{k} {v:.4f}" for k, v in model_free.items()) + f"; question-type accuracy on dev {accuracy:.3f}")
    tried: dict[tuple[int, ...], TrainingOutcome] = {}
    for choice in map(tuple, hidden_choices):
        tried[choice] = train_ranker(data, data.features(data.ranker_types), train_rows, dev_rows,
                                     version=PUBLISHED_VERSION, epochs=epochs, learning_rate=learning_rate,
                                     seed=seed, temperature=temperature, batch_size=batch_size, hidden=choice)
        log(f"{PUBLISHED_VERSION} with hidden layers {list(choice)}: dev NDCG@10 {tried[choice].best_dev_ndcg10:.4f}")
    hidden = max(tried, key=lambda choice: tried[choice].best_dev_ndcg10)  # the first on a tie
    runs = [(version, version, train_rows) for version in VERSIONS]
    if ablations:
        oracle_train = [row for row in train_rows if data.memories[row] == ORACLE_MEMORY]
        if len(set(data.memories)) > 1 and oracle_train:
            runs.append((ORACLE_ONLY, PUBLISHED_VERSION, oracle_train))
        if data.side_masks.get("window") is not None and data.side_masks["window"].any():
            runs.append((WITHOUT_TIME, PUBLISHED_VERSION, train_rows))
        runs.append((WITHOUT_KEYS, PUBLISHED_VERSION, train_rows))
        runs.append((WITHOUT_KEY_CANDIDATES, PUBLISHED_VERSION, train_rows))
        if cosine_pool is not data:
            runs += [(cosine_pool_key(version), version, train_rows) for version in COSINE_POOL_VERSIONS]
    outcomes = {PUBLISHED_VERSION: tried[hidden]}
    for key, version, rows in runs:
        if key in outcomes:
            continue
        pools = ablation_data(data, key)

        def report(row, key=key):
            if row["epoch"] == 1 or row["epoch"] % 10 == 0 or row["epoch"] == epochs:
                log(f"{key} epoch {row['epoch']}/{epochs}: loss {row['loss']:.4f} · train NDCG@10 "
                    f"{row['train_ndcg@10']:.4f} · dev NDCG@10 {row['dev_ndcg@10']:.4f}")
        features = pools.features(pools.ranker_types)
        outcomes[key] = train_ranker(pools, features, rows, dev_rows, version=version, epochs=epochs,
                                     learning_rate=learning_rate, seed=seed, temperature=temperature,
                                     batch_size=batch_size, hidden=hidden, on_epoch=report)
    outcomes = {key: outcomes[key] for key, _, _ in runs}  # in the order of the runs
    return FitReport(outcomes=outcomes, split=split,
                     predicted_types=dict(zip(data.question_ids, predicted, strict=True)),
                     classifier_dev_accuracy=accuracy, model_free_dev_ndcg10=model_free, hidden=hidden,
                     hidden_dev_ndcg10={str(list(choice)): outcome.best_dev_ndcg10 for choice, outcome in tried.items()})
