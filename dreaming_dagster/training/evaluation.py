"""Evaluating rankers on identical pools: the reference's tables, as data, markdown and a PNG."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dreaming_dagster.retrieval.coverage import DEFAULT_PER_SESSION, gathers, spread_over_sessions
from dreaming_dagster.retrieval.ranker import SIGNALS_BY_VERSION, CompositeRanker
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.training.baselines import model_free_scores
from dreaming_dagster.training.metrics import METRIC_NAMES
from dreaming_dagster.training.train import TrainingData, mean_metric, model_scores, ranking_metrics
from dreaming_dagster.training.variants import PUBLISHED_VERSION, ablation_data, version_of

LONGMEMEVAL_TYPE_ORDER = ("knowledge-update", "single-session-assistant", "single-session-user", "multi-session",
                          "temporal-reasoning", "single-session-preference", "locomo-single-hop", "locomo-multi-hop",
                          "locomo-temporal", "locomo-open-domain", "realmem-incremental", "realmem-updating",
                          "realmem-preference", "realmem-temporal")
BY_TYPE_METRICS = ("recall@10", "ndcg@10", "session_all@10")
SPREAD_CHOICES = (1, 2, 3)  # pairs a session may hold of a gathering question's top 10, compared
SPREAD = f"{PUBLISHED_VERSION} + sessions spread"


@dataclass
class Evaluation:
    # split → method → metric → mean. Methods: the orderings without a model (cosine over the cosine pool;
    # BM25 and their reciprocal-rank fusion over the hybrid pool), each model over its own pools with the
    # predicted question type, v6 with the top 10 spread over sessions for gathering questions, and v6 with
    # the gold question type.
    overall: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # split → LongMemEval type → {"n": count, method: {metric: mean}} for BY_TYPE_METRICS
    by_type: dict[str, dict[str, dict]] = field(default_factory=dict)
    # method → signal → mean weight over the first split (predicted type); and the mean scale
    mean_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    questions: dict[str, int] = field(default_factory=dict)
    # split → the newest model on the questions that gather, by the most pairs a session may hold of the
    # top 10 ("off": the ranker's order) → metric → mean; "questions": how many gather
    spread: dict[str, dict] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"overall": self.overall, "by_type": self.by_type, "mean_weights": self.mean_weights,
                "questions": self.questions, "spread_on_gathering_questions": self.spread}


def spread_scores(data: TrainingData, scores: np.ndarray, rows: Sequence[int], gathering: Sequence[bool],
                  per_session: int = DEFAULT_PER_SESSION, k: int = 10) -> np.ndarray:
    """``scores`` re-written so the ranking of each gathering question is spread over sessions
    (retrieval/coverage.py); the other questions' scores are unchanged."""
    out = np.array(scores, dtype=np.float64, copy=True)
    for position, q in enumerate(rows):
        if not gathering[position] or data.sessions is None:
            continue
        valid = np.flatnonzero(data.mask[q])
        order = valid[np.lexsort((-data.similarity[q, valid], -scores[position, valid]))]
        spread = [order[i] for i in spread_over_sessions(data.sessions[q, order].tolist(), k, per_session)]
        out[position, spread] = np.arange(len(spread), 0, -1, dtype=np.float64)
    return out


def evaluate(data: TrainingData, models: Mapping[str, CompositeRanker], *, predicted_types: Sequence[str],
             splits: Mapping[str, Sequence[int]], gold_type_keys: Sequence[str] = (PUBLISHED_VERSION,),
             per_session: int = DEFAULT_PER_SESSION) -> Evaluation:
    """Every method on each split's questions, all on identical pools (an ablation on its own: the same
    pools without what it leaves out).

    ``models`` maps a model key (a version, or an ablation's key: training/variants.py) to its network.
    """
    evaluation = Evaluation()
    cosine_pool = data.vector_pool()
    gathering_all = [gathers(query, kind) for query, kind in zip(data.queries, predicted_types, strict=True)]
    for split, rows in splits.items():
        rows = list(rows)
        evaluation.questions[split] = len(rows)
        if not rows:
            continue
        per_method: dict[str, list[dict[str, float]]] = {}
        for name, scores in model_free_scores(data.signals[rows], data.mask[rows]).items():
            if name != "cosine" and cosine_pool is data:
                continue  # a cosine-only pool: BM25 and the fusion are not rankings of their own
            per_method[name] = ranking_metrics(cosine_pool if name == "cosine" else data, scores, rows)
        runs = [(key, key, predicted_types) for key in models]
        runs += [(f"{key} (gold type)", key, data.ranker_types) for key in gold_type_keys if key in models]
        for label, key, types in runs:
            pools = ablation_data(data, key)
            version = version_of(key)
            scores, weights, scales = model_scores(models[key], pools, pools.features(types), version, rows)
            per_method[label] = ranking_metrics(pools, scores, rows)
            if key == PUBLISHED_VERSION and label == key:
                gathering = [gathering_all[q] for q in rows]
                per_method[SPREAD] = ranking_metrics(
                    pools, spread_scores(pools, scores, rows, gathering, per_session), rows)
                members = [rows[i] for i, g in enumerate(gathering) if g]
                if members:
                    subset = [i for i, g in enumerate(gathering) if g]
                    variants = {"off": scores[subset], **{str(n): spread_scores(pools, scores[subset], members,
                                                                                [True] * len(members), n)
                                                          for n in SPREAD_CHOICES}}
                    evaluation.spread[split] = {"questions": len(members), **{
                        name: {metric: mean_metric(ranking_metrics(pools, ranked, members), metric)
                               for metric in ("recall@10", "ndcg@10", "session_any@10", "session_all@10")}
                        for name, ranked in variants.items()}}
            if split == next(iter(splits)) and "gold" not in label:
                evaluation.mean_weights[label] = {
                    **{name: float(weights[:, i].mean()) for i, name in enumerate(SIGNALS_BY_VERSION[version])},
                    "scale": float(scales.mean())}
        evaluation.overall[split] = {method: {name: mean_metric(metrics, name) for name in METRIC_NAMES}
                                     for method, metrics in per_method.items()}
        by_type: dict[str, dict] = {}
        for question_type in LONGMEMEVAL_TYPE_ORDER:
            members = [i for i, q in enumerate(rows) if data.longmemeval_types[q] == question_type]
            if members:
                by_type[question_type] = {"n": len(members), **{
                    method: {name: mean_metric([metrics[i] for i in members], name) for name in BY_TYPE_METRICS}
                    for method, metrics in per_method.items() if "gold" not in method}}
        evaluation.by_type[split] = by_type
    return evaluation


def _fmt(value: float) -> str:
    return f"{value:.3f}"


REPORTED_METRICS = ("ndcg@10", "ndcg@5", "recall@10", "recall@5", "mrr", "needle_hit", "session_any@5",
                    "session_all@5", "session_any@10", "session_all@10", "pool_recall")


def markdown_report(evaluation: Evaluation, *, title: str, context: Mapping[str, str],
                    pool_label: str = "50") -> str:
    lines = [f"# {title}", ""]
    lines += [f"- **{key}**: {value}" for key, value in context.items()]
    for split, results in evaluation.overall.items():
        methods = list(results)
        lines += ["", f"## {split} ({evaluation.questions[split]} questions)", "",
                  "| metric | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
        for metric in REPORTED_METRICS:
            cells = []
            for method in methods:
                value = results[method][metric]
                cells.append(f"{100 * value:.1f}%" if metric == "needle_hit" else _fmt(value))
            name = {"needle_hit": "needle hit %", "session_any@5": "session recall_any@5",
                    "session_all@5": "session recall_all@5", "session_any@10": "session recall_any@10",
                    "session_all@10": "session recall_all@10",
                    "pool_recall": f"pool recall (ceiling; pool {pool_label})"}.get(metric, metric)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        by_type = evaluation.by_type.get(split, {})
        if by_type:
            type_methods = [m for m in methods if "gold" not in m]
            lines += ["", f"Recall@10 / NDCG@10 by question type ({split}, predicted question type)", "",
                      "| question type | n | " + " | ".join(type_methods) + " |",
                      "|---|---:|" + "---:|" * len(type_methods)]
            for question_type, row in by_type.items():
                lines.append(f"| {question_type} | {row['n']} | " + " | ".join(
                    f"{_fmt(row[m]['recall@10'])} / {_fmt(row[m]['ndcg@10'])}" for m in type_methods) + " |")
    for split, variants in evaluation.spread.items():
        names = [name for name in variants if name != "questions"]
        lines += ["", f"Questions that gather ({split}, {variants['questions']}): {PUBLISHED_VERSION}'s top 10 with at "
                  "most n pairs of one session (off: the ranker's order)", "",
                  "| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for metric in ("recall@10", "ndcg@10", "session_any@10", "session_all@10"):
            lines.append(f"| {metric} | " + " | ".join(_fmt(variants[n][metric]) for n in names) + " |")
    if evaluation.mean_weights:
        keys = list(evaluation.mean_weights)
        lines += ["", f"## Mean learned weights ({next(iter(evaluation.overall))}, predicted question type)", "",
                  "| signal | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
        for name in (*SIGNAL_NAMES, "scale"):
            cells = [_fmt(evaluation.mean_weights[k][name]) if name in evaluation.mean_weights[k] else "–"
                     for k in keys]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def training_curves_png(histories: Mapping[str, Sequence[dict]], bar: tuple[str, float]) -> bytes:
    """Loss and NDCG@10 per epoch for each trained model, with the best ordering without a model on the dev
    questions (``bar``: name, NDCG@10), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, (loss_axis, ndcg_axis) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=100)
    for version, history in histories.items():
        epochs = [row["epoch"] for row in history]
        loss_axis.plot(epochs, [row["loss"] for row in history], label=f"{version} train loss")
        ndcg_axis.plot(epochs, [row["train_ndcg@10"] for row in history], linestyle="--", label=f"{version} train")
        ndcg_axis.plot(epochs, [row["dev_ndcg@10"] for row in history], label=f"{version} dev")
    ndcg_axis.axhline(bar[1], color="grey", linestyle=":", label=f"{bar[0]}, dev")
    loss_axis.set(title="−ApproxNDCG (training)", xlabel="epoch")
    ndcg_axis.set(title="NDCG@10", xlabel="epoch")
    for axis in (loss_axis, ndcg_axis):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
