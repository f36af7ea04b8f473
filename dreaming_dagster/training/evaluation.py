"""Evaluating rankers on identical pools: the reference's tables, as data, markdown and a PNG."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dreaming_dagster.retrieval.ranker import SIGNALS_BY_VERSION, CompositeRanker
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.training.metrics import METRIC_NAMES
from dreaming_dagster.training.train import TrainingData, mean_metric, model_scores, ranking_metrics

LONGMEMEVAL_TYPE_ORDER = ("knowledge-update", "single-session-assistant", "single-session-user", "multi-session",
                          "temporal-reasoning", "single-session-preference")


RRF_K = 60  # reciprocal-rank fusion's constant, as the hybrid issue measured it


@dataclass
class Evaluation:
    # split → method → metric → mean. Methods: the baselines (cosine over the cosine pool; BM25 and their
    # reciprocal-rank fusion over the hybrid pool), each model with the predicted question type, models
    # trained on the cosine pool alone, and the gold-type variants.
    overall: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # split → LongMemEval type → {"n": count, method: Recall@10}
    recall10_by_type: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # method → signal → mean weight over the validation split (predicted type); and the mean scale
    mean_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    questions: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"overall": self.overall, "recall@10_by_type": self.recall10_by_type,
                "mean_weights": self.mean_weights, "questions": self.questions}


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


def evaluate(data: TrainingData, models: Mapping[str, CompositeRanker], *, predicted_features: np.ndarray,
             gold_features: np.ndarray, splits: Mapping[str, Sequence[int]],
             cosine_pool_models: Mapping[str, CompositeRanker] | None = None,
             gold_type_versions: Sequence[str] | None = None) -> Evaluation:
    """Every method on each split's questions, all on identical pools.

    ``models`` (by version) rank the full pool of ``data`` (the hybrid pool when it has lexical
    candidates); ``cosine_pool_models`` rank only the candidates cosine drew (a model trained before
    lexical retrieval, for comparison). Gold-type rows are added for ``gold_type_versions`` (default:
    every model).
    """
    evaluation = Evaluation()
    cosine_pool = data.vector_pool()
    gold_type_versions = list(models) if gold_type_versions is None else list(gold_type_versions)
    cos, lex = SIGNAL_NAMES.index("cos"), SIGNAL_NAMES.index("lex")
    for split, rows in splits.items():
        rows = list(rows)
        evaluation.questions[split] = len(rows)
        signals = data.signals[rows]
        per_method: dict[str, list[dict[str, float]]] = {
            "cosine": ranking_metrics(cosine_pool, signals[..., cos], rows)}
        if cosine_pool is not data:
            per_method["bm25"] = ranking_metrics(data, signals[..., lex], rows)
            per_method["cosine+bm25 (RRF)"] = ranking_metrics(
                data, reciprocal_rank_fusion([signals[..., cos], signals[..., lex]], data.mask[rows]), rows)
        runs = [(f"{version} (cosine pool)", version, model, cosine_pool, predicted_features)
                for version, model in (cosine_pool_models or {}).items()]
        runs += [(version, version, model, data, predicted_features) for version, model in models.items()]
        runs += [(f"{version} (gold type)", version, models[version], data, gold_features)
                 for version in gold_type_versions]
        for label, version, model, pool, features in runs:
            scores, weights, scales = model_scores(model, pool, features, version, rows)
            per_method[label] = ranking_metrics(pool, scores, rows)
            if split == "validation" and "gold" not in label:
                names = SIGNALS_BY_VERSION[version]
                evaluation.mean_weights[label] = {
                    **{name: float(weights[:, i].mean()) for i, name in enumerate(names)},
                    "scale": float(scales.mean())}
        evaluation.overall[split] = {method: {name: mean_metric(metrics, name) for name in METRIC_NAMES}
                                     for method, metrics in per_method.items()}
        by_type: dict[str, dict[str, float]] = {}
        for question_type in LONGMEMEVAL_TYPE_ORDER:
            members = [i for i, q in enumerate(rows) if data.longmemeval_types[q] == question_type]
            if not members:
                continue
            by_type[question_type] = {"n": len(members), **{
                method: float(np.mean([metrics[i]["recall@10"] for i in members]))
                for method, metrics in per_method.items() if "gold" not in method}}
        evaluation.recall10_by_type[split] = by_type
    return evaluation


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def markdown_report(evaluation: Evaluation, *, title: str, context: Mapping[str, str],
                    pool_label: str = "50") -> str:
    lines = [f"# {title}", ""]
    lines += [f"- **{key}**: {value}" for key, value in context.items()]
    for split, heading in (("validation", "Validation split"), ("all", "All answerable questions")):
        if split not in evaluation.overall:
            continue
        methods = list(evaluation.overall[split])
        lines += ["", f"## {heading} ({evaluation.questions[split]} questions)", "",
                  "| metric | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
        for metric in ("ndcg@10", "ndcg@5", "recall@10", "recall@5", "mrr", "needle_hit", "pool_recall"):
            cells = []
            for method in methods:
                value = evaluation.overall[split][method][metric]
                cells.append(f"{100 * value:.1f}%" if metric == "needle_hit" else _fmt(value))
            name = {"needle_hit": "needle hit %",
                    "pool_recall": f"pool recall (ceiling; pool {pool_label})"}.get(metric, metric)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        by_type = evaluation.recall10_by_type.get(split, {})
        if by_type:
            type_methods = [m for m in methods if "gold" not in m]
            lines += ["", f"Recall@10 by question type ({heading.lower()}, predicted question type)", "",
                      "| question type | n | " + " | ".join(type_methods) + " |",
                      "|---|---:|" + "---:|" * len(type_methods)]
            for question_type, row in by_type.items():
                lines.append(f"| {question_type} | {row['n']} | "
                             + " | ".join(_fmt(row[m]) for m in type_methods) + " |")
    if evaluation.mean_weights:
        versions = list(evaluation.mean_weights)
        lines += ["", "## Mean learned weights (validation split, predicted question type)", "",
                  "| signal | " + " | ".join(versions) + " |", "|---|" + "---:|" * len(versions)]
        for name in (*SIGNAL_NAMES, "scale"):
            cells = [_fmt(evaluation.mean_weights[v][name]) if name in evaluation.mean_weights[v] else "–"
                     for v in versions]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def training_curves_png(histories: Mapping[str, Sequence[dict]], cosine_validation_ndcg10: float) -> bytes:
    """Loss and NDCG@10 per epoch for each trained version, with the cosine baseline, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, (loss_axis, ndcg_axis) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=100)
    for version, history in histories.items():
        epochs = [row["epoch"] for row in history]
        loss_axis.plot(epochs, [row["loss"] for row in history], label=f"{version} train loss")
        ndcg_axis.plot(epochs, [row["train_ndcg@10"] for row in history], linestyle="--", label=f"{version} train")
        ndcg_axis.plot(epochs, [row["validation_ndcg@10"] for row in history], label=f"{version} validation")
    ndcg_axis.axhline(cosine_validation_ndcg10, color="grey", linestyle=":", label="cosine, validation")
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
