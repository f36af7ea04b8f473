"""The ranker's assets: LongMemEval → memory → pools → models → evaluation (group ``ranker``)."""

import base64
import json
import time
from pathlib import Path

import dagster as dg

from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
    layered_settings,
)
from dreaming_dagster.defs.training.config import (
    LongMemEvalMemoryConfig,
    LongMemEvalPoolsConfig,
    RankerModelConfig,
)
from dreaming_dagster.hubs import HubRule
from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID
from dreaming_dagster.retrieval.recaller import GraphSide, TimeSide
from dreaming_dagster.training.workspace import RankerWorkspace


def workspace(dreaming_db: DreamingDatabaseResource) -> RankerWorkspace:
    return RankerWorkspace(dreaming_db.settings().data_dir.resolve() / "ranker").ensure()


def ranker_asset(*, after=None, **spec):
    """An asset of the ranker chain (group ``ranker``), after the asset it reads from."""
    return dg.asset(group_name="ranker", deps=[after] if after is not None else None, **spec)


def png_markdown(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


@ranker_asset(
    kinds={"postgres", "python"},
    pool="llm",
)
def longmemeval_memory(context: dg.AssetExecutionContext, config: LongMemEvalMemoryConfig,
                       dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                       llm: LLMResource) -> dg.MaterializeResult:
    """A LongMemEval-format file turned into benchmark users' memory (in its own graph, ranker-training, which the
    users' sensors and partitions leave alone) and dreamed with the configured providers:
    one user holding every session (one-user, the reference's protocol) or one user per question with its own
    haystack (per-question, LongMemEval's). Streams the file; re-runs only do what is missing."""
    from dreaming_dagster.ingest.readers import default_dataset_path
    from dreaming_dagster.training.memory import load_benchmark_memory

    dataset = Path(config.dataset_path) if config.dataset_path else default_dataset_path()
    model, extractor = embedder.embedder(), llm.extractor()
    manifest = load_benchmark_memory(dreaming_db.database(), model, extractor, llm.refiner(), dataset,
                                     mode=config.mode, user_prefix=config.user_prefix, kg_id=TRAINING_KG_ID,
                                     limit=config.limit_questions, log=context.log.info)
    ws = workspace(dreaming_db)
    ws.memory_manifest.write_text(manifest.to_json())
    answerable = [q for q in manifest.questions if q.answerable]
    by_type: dict[str, list[int]] = {}
    for q in manifest.questions:
        row = by_type.setdefault(q.longmemeval_type, [0, 0])
        row[0] += 1
        row[1] += q.answerable
    table = "| question type | questions | answerable |\n|---|---:|---:|\n" + "\n".join(
        f"| {t} | {n} | {a} |" for t, (n, a) in sorted(by_type.items()))
    return dg.MaterializeResult(metadata={
        "dataset": dg.MetadataValue.path(str(dataset)), "sha256": manifest.sha256, "mode": manifest.mode,
        "questions": len(manifest.questions), "answerable": len(answerable),
        "abstentions": sum(q.abstention for q in manifest.questions),
        "users": len(set(manifest.users.values())), **manifest.counts,
        "embedding_model": model.spec.model, "extraction_provider": extractor.provider,
        "seconds": manifest.seconds, "questions_by_type": dg.MetadataValue.md(table),
    })


@ranker_asset(
    after=longmemeval_memory,
    kinds={"postgres", "pandas", "parquet"},
)
def longmemeval_pools(context: dg.AssetExecutionContext, config: LongMemEvalPoolsConfig,
                      dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                      dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """For every answerable question, the hybrid candidate pool (top-K by cosine ∪ top-K by BM25 ∪ the pairs of
    the subjects nearest the question ∪, when it names a time, the best pairs inside that window) with all nine
    signals from the SQL that serves recall, which side drew
    each candidate, a relevance label (a turn of the pair has has_answer) and the needle flag, plus the user's
    profile as the question saw it; two parquet tables in <data_dir>/ranker/."""
    from dreaming_dagster.training.memory import MemoryManifest
    from dreaming_dagster.training.pools import build_pools

    started = time.perf_counter()
    ws = workspace(dreaming_db)
    manifest = MemoryManifest.from_json(ws.require(ws.memory_manifest, "longmemeval_memory").read_text())
    settings = dreaming_policy.settings()
    total = sum(q.answerable for q in manifest.questions)

    def progress(n: int) -> None:
        if n % 100 == 0 or n == total:
            context.log.info(f"pooled {n}/{total} questions")

    pools = build_pools(dreaming_db.database(), embedder.embedder(), manifest.questions, manifest.users,
                        kg_id=manifest.kg_id, pool_size=config.pool_size, lexical_pool_size=config.lexical_pool_size,
                        graph=GraphSide(pool_size=config.graph_pool_size, subjects=settings.recall_graph_subjects),
                        time_side=TimeSide(pool_size=config.time_pool_size,
                                           scan_limit=settings.recall_time_scan_limit),
                        hubs=HubRule.from_settings(settings), historical=manifest.mode == "per-question",
                        ef_search=settings.recall_ef_search,
                        prepared_statements=settings.recall_prepared_statements, on_question=progress)
    pools.save(ws.pool_questions, ws.pool_candidates)
    q = pools.questions
    q = q.assign(pool_recall=q["relevant_in_pool"] / q["total_relevant"],
                 cosine_pool_recall=q["relevant_in_vector_pool"] / q["total_relevant"])
    per_type = q.groupby("longmemeval_type").agg(
        n=("question_id", "count"), cosine_pool_recall=("cosine_pool_recall", "mean"),
        pool_recall=("pool_recall", "mean"), needle_in_pool=("needle_in_pool", "mean"))
    table = (f"| question type | n | cosine top-{config.pool_size} recall | hybrid pool recall | needle in pool |\n"
             "|---|---:|---:|---:|---:|\n" + "\n".join(
                 f"| {t} | {int(r.n)} | {r.cosine_pool_recall:.3f} | {r.pool_recall:.3f} | {100 * r.needle_in_pool:.1f}% |"
                 for t, r in per_type.iterrows()))
    return dg.MaterializeResult(metadata={
        "questions": len(q), "candidates": len(pools.candidates), "pool_size": config.pool_size,
        "lexical_pool_size": config.lexical_pool_size, "graph_pool_size": config.graph_pool_size,
        "graph_candidates_relevant": int(pools.candidates.loc[pools.candidates["in_graph_pool"], "relevant"].sum()),
        "mean_candidates": float(q["candidates"].mean()) if len(q) else 0.0,
        "cosine_pool_recall": float(q["cosine_pool_recall"].mean()) if len(q) else 0.0,
        "pool_recall": float(q["pool_recall"].mean()) if len(q) else 0.0,
        "needle_in_pool": float(q["needle_in_pool"].mean()) if len(q) else 0.0,
        "by_question_type": dg.MetadataValue.md(table),
        "questions_table": dg.MetadataValue.path(str(ws.pool_questions)),
        "candidates_table": dg.MetadataValue.path(str(ws.pool_candidates)),
        "seconds": round(time.perf_counter() - started, 1),
    })


@ranker_asset(
    after=longmemeval_pools,
    kinds={"torch"},
)
def ranker_model(context: dg.AssetExecutionContext, config: RankerModelConfig, dreaming_db: DreamingDatabaseResource,
                 embedder: EmbedderResource, dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """The Composite ranker trained with ApproxNDCG on the hybrid pools: v4 (9 weights + scale, with lex and
    time_fit) and, for comparison, v3 (8 weights), v2 (7), v1 (3) and a v2 trained on the cosine pool alone;
    80/20 split by question stratified by type, best epoch by validation NDCG@10, deterministic for a seed.
    v4 is published
    for recall() only if it beats, on validation NDCG@10, the best ranking without a model of the same pools:
    cosine, BM25 and their reciprocal-rank fusion."""
    from dreaming_dagster.retrieval.ranker import save_ranker
    from dreaming_dagster.training.evaluation import training_curves_png
    from dreaming_dagster.training.fit import PUBLISHED_VERSION, fit_rankers
    from dreaming_dagster.training.pools import Pools
    from dreaming_dagster.training.train import TrainingData

    started = time.perf_counter()
    ws = workspace(dreaming_db)
    pools = Pools.load(ws.require(ws.pool_questions, "longmemeval_pools"), ws.pool_candidates)
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    model_name = embedder.embedder().spec.model
    report = fit_rankers(data, embedding_model=model_name, validation_share=config.validation_share,
                         seed=config.seed, epochs=config.epochs, learning_rate=config.learning_rate,
                         temperature=config.temperature, batch_size=config.batch_size, log=context.log.info)
    for version, outcome in report.outcomes.items():
        save_ranker(outcome.model, ws.model(version), embedding_model=model_name, extra={
            "best_epoch": outcome.best_epoch, "validation_ndcg@10": outcome.best_validation_ndcg10,
            "cosine_validation_ndcg@10": report.cosine_validation_ndcg10, "config": config.model_dump()})
    newest = report.outcomes[PUBLISHED_VERSION]
    bar_name, bar = report.bar  # the best ranking without a model: cosine, BM25 or their fusion
    beats_bar = newest.best_validation_ndcg10 > bar
    published = None
    if config.promote and beats_bar:
        # recall()'s file: ranker_model_path (policy), else under data_dir (database resource).
        published = save_ranker(newest.model, layered_settings(dreaming_db, dreaming_policy).resolved_ranker_path,
                                embedding_model=model_name,
                                extra={"validation_ndcg@10": newest.best_validation_ndcg10,
                                       "cosine_validation_ndcg@10": report.cosine_validation_ndcg10,
                                       "bar": bar_name, "bar_validation_ndcg@10": bar})
        context.log.info(f"published {PUBLISHED_VERSION} for recall(): {published}")
    elif not beats_bar:
        context.log.warning(f"{PUBLISHED_VERSION} (validation NDCG@10 {newest.best_validation_ndcg10:.4f}) does "
                            f"not beat {bar_name} "
                            f"({bar:.4f}); recall() keeps its current ranking")
    ws.training.write_text(json.dumps({**report.as_json(), "config": config.model_dump(),
                                       "published": str(published) if published else None}, indent=1))
    curves = training_curves_png({v: o.history for v, o in report.outcomes.items()}, report.cosine_validation_ndcg10)
    ws.curves_png.write_bytes(curves)
    return dg.MaterializeResult(metadata={
        **{f"validation_ndcg@10_{key}": outcome.best_validation_ndcg10 for key, outcome in report.outcomes.items()},
        "validation_ndcg@10_cosine": report.cosine_validation_ndcg10,
        **{f"best_epoch_{key}": outcome.best_epoch for key, outcome in report.outcomes.items()},
        "published": published is not None, "publishing_bar": bar_name, "publishing_bar_ndcg@10": bar,
        "published_path": dg.MetadataValue.path(str(published)) if published else "not published",
        "question_type_accuracy_validation": report.classifier_validation_accuracy,
        "training_questions": len(report.train_ids), "validation_questions": len(report.validation_ids),
        "training_curves": dg.MetadataValue.md(png_markdown(curves, "training curves")),
        "seconds": round(time.perf_counter() - started, 1),
    })


@ranker_asset(
    after=ranker_model,
    kinds={"torch", "markdown"},
)
def ranker_evaluation(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource) -> dg.MaterializeResult:
    """Cosine (its own top-K), BM25, their reciprocal-rank fusion, v1–v4 on identical hybrid pools, and
    v2 trained on the cosine pool: NDCG@10/@5, Recall@10/@5, MRR, needle hit %, pool recall (the ceiling:
    cosine pool vs hybrid pool), Recall@10 per question type and the mean learned weights; on the validation
    split and on all answerable questions, with the predicted question type (and the gold one for v4)."""
    from dreaming_dagster.retrieval.ranker import load_ranker
    from dreaming_dagster.training.evaluation import evaluate, markdown_report
    from dreaming_dagster.training.fit import (
        COSINE_POOL_VERSIONS,
        PUBLISHED_VERSION,
        VERSIONS,
        cosine_pool_key,
    )
    from dreaming_dagster.training.memory import MemoryManifest
    from dreaming_dagster.training.pools import Pools, pool_description
    from dreaming_dagster.training.train import TrainingData

    ws = workspace(dreaming_db)
    training = json.loads(ws.require(ws.training, "ranker_model").read_text())
    manifest = MemoryManifest.from_json(ws.memory_manifest.read_text())
    pools = Pools.load(ws.pool_questions, ws.pool_candidates)
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    models = {version: load_ranker(ws.require(ws.model(version), "ranker_model")).model for version in VERSIONS}
    cosine_pool_models = {version: load_ranker(ws.model(cosine_pool_key(version))).model
                          for version in COSINE_POOL_VERSIONS if ws.model(cosine_pool_key(version)).is_file()}
    position = {qid: i for i, qid in enumerate(data.question_ids)}
    evaluation = evaluate(
        data, models, predicted_features=data.features([training["predicted_types"][q] for q in data.question_ids]),
        gold_features=data.features(data.ranker_types),
        splits={"validation": [position[q] for q in training["validation_ids"]], "all": list(range(len(data)))},
        cosine_pool_models=cosine_pool_models, gold_type_versions=[PUBLISHED_VERSION])
    pool_label = pool_description(pools.candidates)
    context_lines = {"dataset": f"{Path(manifest.dataset).name} (sha256 {manifest.sha256[:16]}…)",
                     "mode": manifest.mode, "pool": pool_label,
                     "question-type accuracy (validation, classifier fitted on the training split)":
                         f"{training['classifier_validation_accuracy']:.3f}",
                     "best epochs": ", ".join(f"{v} {m['best_epoch']}" for v, m in training["models"].items())}
    report = markdown_report(evaluation, title="Ranker evaluation", context=context_lines,
                             pool_label="cosine top-K for cosine and the cosine-pool model, hybrid for the rest")
    ws.evaluation_markdown.write_text(report)
    ws.evaluation_json.write_text(json.dumps({"context": context_lines, **evaluation.as_dict()}, indent=1))
    validation = evaluation.overall["validation"]
    curves = ws.curves_png.read_bytes() if ws.curves_png.is_file() else b""
    return dg.MaterializeResult(metadata={
        "report": dg.MetadataValue.md(report),
        **{f"validation_recall@10_{method}": validation[method]["recall@10"] for method in ("cosine", *VERSIONS)},
        **{f"validation_ndcg@10_{method}": validation[method]["ndcg@10"] for method in ("cosine", *VERSIONS)},
        "validation_cosine_pool_recall": validation["cosine"]["pool_recall"],
        "validation_hybrid_pool_recall": validation[PUBLISHED_VERSION]["pool_recall"],
        "training_curves": dg.MetadataValue.md(png_markdown(curves, "training curves")) if curves else "none",
        "report_path": dg.MetadataValue.path(str(ws.evaluation_markdown)),
    })
