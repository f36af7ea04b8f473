"""Training the Composite ranker with ApproxNDCG on candidate pools.

Deterministic for a seed: the initial weights, the batch order and every reduction come from seeded
generators, on one thread. The best epoch is chosen by validation NDCG@10 (earliest on ties).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd
import torch

from dreaming_dagster.retrieval.features import UserProfile, build_features
from dreaming_dagster.retrieval.ranker import DEFAULT_HIDDEN, SIGNALS_BY_VERSION, CompositeRanker
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.training.approx_ndcg import DEFAULT_TEMPERATURE, approx_ndcg
from dreaming_dagster.training.metrics import question_metrics


@dataclass
class TrainingData:
    """Pools as tensors: Q questions × N candidate slots (padded and masked)."""

    question_ids: list[str]
    ranker_types: list[str]
    longmemeval_types: list[str]
    queries: list[str]
    query_times: list[datetime]
    profiles: list[UserProfile]
    embeddings: np.ndarray  # [Q, D]
    signals: np.ndarray  # [Q, N, 8] in SIGNAL_NAMES order
    similarity: np.ndarray  # [Q, N] raw cosine: the tie-break, as in SQL
    labels: np.ndarray  # [Q, N] 0/1
    needles: np.ndarray  # [Q, N] 0/1
    mask: np.ndarray  # [Q, N] bool
    total_relevant: np.ndarray  # [Q]
    vector_mask: np.ndarray | None = None  # [Q, N] bool: drawn by cosine (None: every candidate was)

    @classmethod
    def from_pools(cls, questions: pd.DataFrame, candidates: pd.DataFrame) -> TrainingData:
        questions = questions.sort_values("question_id").reset_index(drop=True)
        width = max(1, int(questions["candidates"].max()) if len(questions) else 1)
        index = {qid: i for i, qid in enumerate(questions["question_id"])}
        q, n = len(questions), width
        signals = np.zeros((q, n, len(SIGNAL_NAMES)), np.float32)
        similarity = np.full((q, n), -2.0, np.float32)
        labels, needles = np.zeros((q, n), np.float32), np.zeros((q, n), np.float32)
        mask = np.zeros((q, n), bool)
        vector_mask = np.zeros((q, n), bool)
        rows = candidates[candidates["question_id"].isin(index)]
        qi = rows["question_id"].map(index).to_numpy()
        ci = rows["rank"].to_numpy()
        signals[qi, ci] = rows[list(SIGNAL_NAMES)].to_numpy(np.float32)
        similarity[qi, ci] = rows["similarity"].to_numpy(np.float32)
        labels[qi, ci] = rows["relevant"].to_numpy(np.float32)
        needles[qi, ci] = rows["needle"].to_numpy(np.float32)
        mask[qi, ci] = True
        vector_mask[qi, ci] = rows["in_vector_pool"].to_numpy(bool) if "in_vector_pool" in rows else True
        profiles = [UserProfile(memory_count=int(r.profile_memory_count or 0),
                                first_memory_at=_timestamp(r.profile_first_memory_at),
                                last_query_at=_timestamp(r.profile_last_query_at),
                                subject_count=int(r.profile_subject_count or 0),
                                mean_subject_similarity=_number(r.profile_mean_subject_similarity),
                                session_pair_count=int(r.profile_session_pair_count or 0))
                    for r in questions.itertuples()]
        return cls(question_ids=list(questions["question_id"]), ranker_types=list(questions["ranker_type"]),
                   longmemeval_types=list(questions["longmemeval_type"]), queries=list(questions["question"]),
                   query_times=[_timestamp(t) for t in questions["question_date"]], profiles=profiles,
                   embeddings=np.stack([np.asarray(e, np.float32) for e in questions["embedding"]]) if q else
                   np.zeros((0, 1), np.float32),
                   signals=signals, similarity=similarity, labels=labels, needles=needles, mask=mask,
                   total_relevant=questions["total_relevant"].to_numpy(np.int64), vector_mask=vector_mask)

    def vector_pool(self) -> TrainingData:
        """The same questions with only the candidates cosine drew: the pool before lexical retrieval."""
        if self.vector_mask is None:
            return self
        return dataclasses.replace(self, mask=self.mask & self.vector_mask, vector_mask=None)

    def __len__(self) -> int:
        return len(self.question_ids)

    def features(self, question_types: Sequence[str | None]) -> np.ndarray:
        """The 17 features of every question, with the given question types (gold or predicted)."""
        return np.stack([build_features(question_type=t, query=query, query_time=when, profile=profile,
                                        session_id=None)
                         for t, query, when, profile in zip(question_types, self.queries, self.query_times,
                                                             self.profiles, strict=True)])


def _timestamp(value) -> datetime | None:
    if value is None or pd.isna(value):
        return None
    return pd.Timestamp(value).to_pydatetime()


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def signal_indices(version: str) -> list[int]:
    return [SIGNAL_NAMES.index(name) for name in SIGNALS_BY_VERSION[version]]


def model_scores(model: CompositeRanker, data: TrainingData, features: np.ndarray, version: str,
                 rows: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores [Q, N], the chosen weights [Q, S] and scales [Q] for ``rows`` (default: every question)."""
    rows = np.arange(len(data)) if rows is None else np.asarray(rows)
    model.eval()
    with torch.inference_mode():
        weights, scale = model(torch.as_tensor(data.embeddings[rows]), torch.as_tensor(features[rows], dtype=torch.float32))
        signals = torch.as_tensor(data.signals[rows][..., signal_indices(version)])
        scores = scale[:, None] * (signals * weights[:, None, :]).sum(-1)
    return scores.numpy(), weights.numpy(), scale.numpy()


def ranking_metrics(data: TrainingData, scores: np.ndarray, rows: Sequence[int]) -> list[dict[str, float]]:
    """Metrics of every question in ``rows`` ranked by ``scores`` (ties: higher cosine first, as in SQL)."""
    out = []
    for position, q in enumerate(rows):
        valid = np.flatnonzero(data.mask[q])
        order = valid[np.lexsort((-data.similarity[q, valid], -scores[position, valid]))]
        out.append(question_metrics(data.labels[q, order].astype(bool).tolist(),
                                    data.needles[q, order].astype(bool).tolist(), int(data.total_relevant[q])))
    return out


def mean_metric(metrics: Sequence[dict[str, float]], name: str) -> float:
    return float(np.mean([m[name] for m in metrics])) if metrics else float("nan")


@dataclass
class TrainingOutcome:
    version: str
    model: CompositeRanker
    best_epoch: int
    best_validation_ndcg10: float
    history: list[dict] = field(default_factory=list)


def train_ranker(data: TrainingData, features: np.ndarray, train_rows: Sequence[int], validation_rows: Sequence[int],
                 *, version: str = "v2", epochs: int = 50, learning_rate: float = 1e-3, seed: int = 0,
                 temperature: float = DEFAULT_TEMPERATURE, batch_size: int = 32,
                 hidden: Sequence[int] = DEFAULT_HIDDEN, weight_decay: float = 1e-4,
                 on_epoch: Callable[[dict], None] | None = None) -> TrainingOutcome:
    """Fit a ``version`` ranker by minimising −ApproxNDCG over the training questions' pools."""
    if epochs < 1:
        raise ValueError("epochs must be at least 1")
    if len(validation_rows) == 0 or len(train_rows) == 0:
        raise ValueError("both the training and the validation split need questions")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise-reproducible reductions
    try:
        torch.manual_seed(seed)
        model = CompositeRanker(data.embeddings.shape[1], len(SIGNALS_BY_VERSION[version]), features.shape[1], hidden)
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
        generator = torch.Generator().manual_seed(seed)
        # Questions whose pool holds no relevant pair give no gradient; they still count in evaluation.
        trainable = np.asarray([q for q in train_rows if data.labels[q].any()], dtype=np.int64)
        embeddings = torch.as_tensor(data.embeddings)
        feats = torch.as_tensor(features, dtype=torch.float32)
        signals = torch.as_tensor(data.signals[..., signal_indices(version)])
        labels, mask = torch.as_tensor(data.labels), torch.as_tensor(data.mask)
        best_state, best_epoch, best_score, history = None, 0, -1.0, []
        for epoch in range(1, epochs + 1):
            model.train()
            order = trainable[torch.randperm(len(trainable), generator=generator).numpy()]
            losses = []
            for start in range(0, len(order), batch_size):
                batch = torch.as_tensor(order[start:start + batch_size])
                weights, scale = model(embeddings[batch], feats[batch])
                scores = scale[:, None] * (signals[batch] * weights[:, None, :]).sum(-1)
                loss = -approx_ndcg(scores, labels[batch], mask[batch], temperature).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
            train_scores = model_scores(model, data, features, version, train_rows)[0]
            validation_scores = model_scores(model, data, features, version, validation_rows)[0]
            row = {"epoch": epoch, "loss": float(np.mean(losses)) if losses else float("nan"),
                   "train_ndcg@10": mean_metric(ranking_metrics(data, train_scores, train_rows), "ndcg@10"),
                   "validation_ndcg@10": mean_metric(ranking_metrics(data, validation_scores, validation_rows),
                                                     "ndcg@10")}
            history.append(row)
            if on_epoch:
                on_epoch(row)
            if row["validation_ndcg@10"] > best_score:
                best_score, best_epoch, best_state = row["validation_ndcg@10"], epoch, copy.deepcopy(model.state_dict())
        model.load_state_dict(best_state)
        model.eval()
        return TrainingOutcome(version=version, model=model, best_epoch=best_epoch,
                               best_validation_ndcg10=best_score, history=history)
    finally:
        torch.set_num_threads(threads)
