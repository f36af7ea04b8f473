"""Training the Composite ranker with ApproxNDCG on candidate pools.

Deterministic for a seed: the initial weights, the batch order and every reduction come from seeded
generators, on one thread. The best epoch is chosen on the dev questions (earliest on ties): by NDCG@10, or,
given the dev questions by distribution, by the worst distribution's NDCG@10 gain over its best ordering
without a model. The validation and test questions play no part in training.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
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
    signals: np.ndarray  # [Q, N, S] in SIGNAL_NAMES order
    similarity: np.ndarray  # [Q, N] raw cosine: the tie-break, as in SQL
    labels: np.ndarray  # [Q, N] 0/1
    needles: np.ndarray  # [Q, N] 0/1
    mask: np.ndarray  # [Q, N] bool
    total_relevant: np.ndarray  # [Q]
    memories: list[str] = field(default_factory=list)  # [Q] the memory each pool was drawn from
    window_days: list[int | None] = field(default_factory=list)  # [Q] the question's time window's length
    sessions: np.ndarray | None = None  # [Q, N] object: each candidate's session id
    evidence_sessions: list[frozenset[str]] = field(default_factory=list)  # [Q] sessions holding a relevant pair
    side_masks: dict[str, np.ndarray] = field(default_factory=dict)  # side → [Q, N] bool: drawn by that side

    @classmethod
    def from_pools(cls, questions: pd.DataFrame, candidates: pd.DataFrame) -> TrainingData:
        questions, candidates = _with_memory(questions), _with_memory(candidates)
        questions = questions.sort_values(["memory", "question_id"]).reset_index(drop=True)
        width = max(1, int(questions["candidates"].max()) if len(questions) else 1)
        index = {key: i for i, key in enumerate(zip(questions["memory"], questions["question_id"], strict=True))}
        q, n = len(questions), width
        signals = np.zeros((q, n, len(SIGNAL_NAMES)), np.float32)
        similarity = np.full((q, n), -2.0, np.float32)
        labels, needles = np.zeros((q, n), np.float32), np.zeros((q, n), np.float32)
        mask = np.zeros((q, n), bool)
        sessions = np.full((q, n), None, object)
        keys = pd.Series(list(zip(candidates["memory"], candidates["question_id"], strict=True)), index=candidates.index)
        rows = candidates[keys.isin(index)]
        qi = keys[rows.index].map(index).to_numpy()
        ci = rows["rank"].to_numpy()
        signals[qi, ci] = rows[list(SIGNAL_NAMES)].to_numpy(np.float32)
        similarity[qi, ci] = rows["similarity"].to_numpy(np.float32)
        labels[qi, ci] = rows["relevant"].to_numpy(np.float32)
        needles[qi, ci] = rows["needle"].to_numpy(np.float32)
        mask[qi, ci] = True
        if "session_id" in rows:
            sessions[qi, ci] = rows["session_id"].to_numpy(object)
        side_masks = {}
        for side in POOL_SIDES:
            side_mask = np.zeros((q, n), bool)
            side_mask[qi, ci] = rows[f"in_{side}_pool"].to_numpy(bool) if f"in_{side}_pool" in rows else side == "vector"
            side_masks[side] = side_mask
        profiles = [UserProfile(memory_count=int(r.profile_memory_count or 0),
                                first_memory_at=_timestamp(r.profile_first_memory_at),
                                last_query_at=_timestamp(r.profile_last_query_at),
                                subject_count=int(r.profile_subject_count or 0),
                                mean_subject_similarity=_number(r.profile_mean_subject_similarity),
                                session_pair_count=int(r.profile_session_pair_count or 0))
                    for r in questions.itertuples()]
        window_days = ([None if pd.isna(d) else int(d) for d in questions["window_days"]]
                       if "window_days" in questions else [None] * q)
        evidence = ([frozenset(e) for e in questions["evidence_sessions"]] if "evidence_sessions" in questions
                    else [frozenset()] * q)
        return cls(question_ids=list(questions["question_id"]), ranker_types=list(questions["ranker_type"]),
                   longmemeval_types=list(questions["longmemeval_type"]), queries=list(questions["question"]),
                   query_times=[_timestamp(t) for t in questions["question_date"]], profiles=profiles,
                   embeddings=np.stack([np.asarray(e, np.float32) for e in questions["embedding"]]) if q else
                   np.zeros((0, 1), np.float32),
                   signals=signals, similarity=similarity, labels=labels, needles=needles, mask=mask,
                   total_relevant=questions["total_relevant"].to_numpy(np.int64),
                   memories=list(questions["memory"]), window_days=window_days, sessions=sessions,
                   evidence_sessions=evidence, side_masks=side_masks)

    @property
    def vector_mask(self) -> np.ndarray | None:
        """[Q, N] bool: drawn by cosine (None: every candidate was — the pool is cosine's already)."""
        return self.side_masks.get("vector")

    def vector_pool(self) -> TrainingData:
        """The same questions with only the candidates cosine drew: the pool before lexical retrieval."""
        if self.vector_mask is None:
            return self
        return dataclasses.replace(self, mask=self.mask & self.vector_mask, side_masks={})

    def without_side(self, side: str, signals: Sequence[str] = ()) -> TrainingData:
        """The same questions as if recall had no ``side`` (its candidates no other side drew leave the pool)
        and ``signals`` were 0 for every candidate: the data of an ablation."""
        drawn = self.side_masks.get(side)
        others = np.zeros_like(self.mask)
        for name, other in self.side_masks.items():
            if name != side:
                others |= other
        mask = self.mask if drawn is None else self.mask & (others | ~drawn)
        zeroed = self.signals.copy()
        for name in signals:
            zeroed[..., SIGNAL_NAMES.index(name)] = 0.0
        return dataclasses.replace(self, mask=mask, signals=zeroed, window_days=[None] * len(self)
                                   if side == "window" else self.window_days)

    def rows_of(self, memory: str, question_ids: Sequence[str]) -> list[int]:
        """The rows of ``question_ids`` in ``memory`` (ids the memory lacks are skipped)."""
        wanted = set(question_ids)
        return [i for i, (m, q) in enumerate(zip(self.memories, self.question_ids, strict=True))
                if m == memory and q in wanted]

    def __len__(self) -> int:
        return len(self.question_ids)

    def features(self, question_types: Sequence[str | None]) -> np.ndarray:
        """The features of every question, with the given question types (gold or predicted)."""
        window_days = self.window_days or [None] * len(self)
        return np.stack([build_features(question_type=t, query=query, query_time=when, profile=profile,
                                        session_id=None, window_days=days)
                         for t, query, when, profile, days in zip(question_types, self.queries, self.query_times,
                                                                   self.profiles, window_days, strict=True)])


POOL_SIDES = ("vector", "lexical", "graph", "key", "window")


def _with_memory(table: pd.DataFrame) -> pd.DataFrame:
    return table if "memory" in table else table.assign(memory="oracle")


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
        sessions = data.sessions[q, order].tolist() if data.sessions is not None else []
        evidence = data.evidence_sessions[q] if data.evidence_sessions else frozenset()
        out.append(question_metrics(data.labels[q, order].astype(bool).tolist(),
                                    data.needles[q, order].astype(bool).tolist(), int(data.total_relevant[q]),
                                    sessions, evidence))
    return out


def mean_metric(metrics: Sequence[dict[str, float]], name: str) -> float:
    """The mean over the questions that define the metric (NaN when none does)."""
    values = [m[name] for m in metrics if not np.isnan(m[name])]
    return float(np.mean(values)) if values else float("nan")


@dataclass
class TrainingOutcome:
    version: str
    model: CompositeRanker
    best_epoch: int
    best_dev_ndcg10: float
    history: list[dict] = field(default_factory=list)
    # the worst distribution's dev NDCG@10 gain over its best ordering without a model, at the best epoch
    best_dev_gain: float = float("nan")


def ndcg_by_group(metrics: Sequence[dict[str, float]], rows: Sequence[int],
                  groups: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """Each group's mean NDCG@10, from the metrics of ``rows`` (every group's rows among them)."""
    position = {row: i for i, row in enumerate(rows)}
    return {name: mean_metric([metrics[position[row]] for row in members], "ndcg@10")
            for name, members in groups.items()}


def worst_gain(metrics: Sequence[dict[str, float]], dev_rows: Sequence[int], groups: Mapping[str, Sequence[int]],
               bars: Mapping[str, float]) -> tuple[float, dict[str, float]]:
    """(the smallest NDCG@10 gain over a group's bar, each group's NDCG@10) from the metrics of ``dev_rows``."""
    ndcg = ndcg_by_group(metrics, dev_rows, groups)
    return min(ndcg[name] - bars[name] for name in groups), ndcg


def train_ranker(data: TrainingData, features: np.ndarray, train_rows: Sequence[int], dev_rows: Sequence[int],
                 *, version: str = "v2", epochs: int = 50, learning_rate: float = 1e-3, seed: int = 0,
                 temperature: float = DEFAULT_TEMPERATURE, batch_size: int = 32,
                 hidden: Sequence[int] = DEFAULT_HIDDEN, weight_decay: float = 1e-4,
                 dev_groups: Mapping[str, Sequence[int]] | None = None, dev_bars: Mapping[str, float] | None = None,
                 on_epoch: Callable[[dict], None] | None = None) -> TrainingOutcome:
    """Fit a ``version`` ranker by minimising −ApproxNDCG over the training questions' pools; with
    ``dev_groups`` (distribution → its dev rows, each in ``dev_rows``) and ``dev_bars`` (distribution → its
    best NDCG@10 without a model) the best epoch is the one whose worst distribution gains most."""
    if epochs < 1:
        raise ValueError("epochs must be at least 1")
    if len(dev_rows) == 0 or len(train_rows) == 0:
        raise ValueError("both the training and the dev split need questions")
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
        best_state, best_epoch, best_score, best_ndcg, history = None, 0, -np.inf, float("nan"), []
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
            dev_scores = model_scores(model, data, features, version, dev_rows)[0]
            dev_metrics = ranking_metrics(data, dev_scores, dev_rows)
            row = {"epoch": epoch, "loss": float(np.mean(losses)) if losses else float("nan"),
                   "train_ndcg@10": mean_metric(ranking_metrics(data, train_scores, train_rows), "ndcg@10"),
                   "dev_ndcg@10": mean_metric(dev_metrics, "ndcg@10")}
            score = row["dev_ndcg@10"]
            if dev_groups:
                score, by_group = worst_gain(dev_metrics, dev_rows, dev_groups, dev_bars or {})
                row |= {"dev_gain": score, **{f"dev_ndcg@10_{name}": value for name, value in by_group.items()}}
            history.append(row)
            if on_epoch:
                on_epoch(row)
            if score > best_score:
                best_score, best_ndcg, best_epoch = score, row["dev_ndcg@10"], epoch
                best_state = copy.deepcopy(model.state_dict())
        model.load_state_dict(best_state)
        model.eval()
        return TrainingOutcome(version=version, model=model, best_epoch=best_epoch, best_dev_ndcg10=best_ndcg,
                               history=history, best_dev_gain=best_score if dev_groups else float("nan"))
    finally:
        torch.set_num_threads(threads)
