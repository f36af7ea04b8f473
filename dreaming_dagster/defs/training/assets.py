"""The ranker's assets: LongMemEval → memory → pools → models → evaluation (group ``ranker``)."""

import base64
import json
import time
from collections import Counter
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
    LocomoMemoryConfig,
    LongMemEvalHaystacksConfig,
    LongMemEvalMemoryConfig,
    LongMemEvalPoolsConfig,
    RankerModelConfig,
    RealmemMemoryConfig,
)
from dreaming_dagster.hubs import HubRule
from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID
from dreaming_dagster.training.workspace import RankerWorkspace


def workspace(dreaming_db: DreamingDatabaseResource) -> RankerWorkspace:
    return RankerWorkspace(dreaming_db.settings().data_dir.resolve() / "ranker").ensure()


def ranker_asset(*, after=(), **spec):
    """An asset of the ranker chain (group ``ranker``), after the assets it reads from."""
    return dg.asset(group_name="ranker", deps=list(after) or None, **spec)


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
    after=[longmemeval_memory],
    kinds={"postgres", "python"},
    pool="llm",
)
def longmemeval_haystacks(context: dg.AssetExecutionContext, config: LongMemEvalHaystacksConfig,
                          dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                          llm: LLMResource) -> dg.MaterializeResult:
    """LongMemEval `_S` haystacks as users: each chosen training-split question's own ~50 sessions (its evidence
    among distractors, over days to weeks) become one user's memory, dreamed like any user's — the memory
    a ranker meets in use. Every dev question's haystack and a stratified sample of training questions;
    built once (embedding ~250 pairs a question is the slow part) and reused, since re-runs only do what is
    missing."""
    from dreaming_dagster.ingest.readers import default_haystacks_path
    from dreaming_dagster.training.memory import MemoryManifest, load_benchmark_memory
    from dreaming_dagster.training.split import haystack_question_ids, ranker_split

    ws = workspace(dreaming_db)
    oracle = MemoryManifest.from_json(ws.require(ws.memory_manifest, "longmemeval_memory").read_text())
    answerable = [q for q in oracle.questions if q.answerable]
    split = ranker_split([q.question_id for q in answerable], [q.longmemeval_type for q in answerable])
    chosen = haystack_question_ids(split, {q.question_id: q.longmemeval_type for q in answerable},
                                   config.training_questions, config.held_out_questions)
    dataset = Path(config.dataset_path) if config.dataset_path else default_haystacks_path()
    if not dataset.is_file():
        raise FileNotFoundError(f"longmemeval_haystacks: dataset_path {dataset} is not a file")
    model = embedder.embedder()
    manifest = load_benchmark_memory(dreaming_db.database(), model, llm.extractor(), llm.refiner(), dataset,
                                     mode="per-question", user_prefix=config.user_prefix, kg_id=TRAINING_KG_ID,
                                     only=chosen, limit=config.limit_questions, log=context.log.info)
    ws.haystacks_manifest.write_text(manifest.to_json())
    parts = {"dev": 0, "test": 0, "train": 0}
    for q in manifest.questions:
        parts[split.part_of(q.question_id) or "train"] += 1
    return dg.MaterializeResult(metadata={
        "dataset": dg.MetadataValue.path(str(dataset)), "sha256": manifest.sha256,
        "questions": len(manifest.questions), "dev_questions": parts["dev"], "test_questions": parts["test"],
        "training_questions": parts["train"],
        "users": len(set(manifest.users.values())), **manifest.counts,
        "embedding_model": model.spec.model, "seconds": manifest.seconds,
    })


@ranker_asset(after=[longmemeval_memory], kinds={"postgres", "python"}, pool="llm")
def locomo_memory(context: dg.AssetExecutionContext, config: LocomoMemoryConfig,
                  dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                  llm: LLMResource) -> dg.MaterializeResult:
    """LoCoMo's conversations between two people as users, one a conversation — pairs of consecutive turns,
    each turn prefixed with its speaker, dated by its session — dreamed like any user's: the ranker's third
    distribution, split by conversation (train conv-26/41/42, dev conv-30, test conv-43)."""
    from dreaming_dagster.ingest.readers import default_locomo_path
    from dreaming_dagster.training import locomo
    from dreaming_dagster.training.longmemeval import file_sha256
    from dreaming_dagster.training.memory import load_benchmark_memory

    source = Path(config.dataset_path) if config.dataset_path else default_locomo_path()
    if not source.is_file():
        raise FileNotFoundError(f"locomo_memory: dataset_path {source} is not a file")
    ws = workspace(dreaming_db)
    locomo.write_longmemeval_format(source, ws.locomo_questions)
    model = embedder.embedder()
    manifest = load_benchmark_memory(dreaming_db.database(), model, llm.extractor(), llm.refiner(), ws.locomo_questions,
                                     mode="per-conversation", user_prefix=config.user_prefix, kg_id=TRAINING_KG_ID,
                                     log=context.log.info)
    manifest.dataset, manifest.sha256 = str(source), file_sha256(source)
    ws.locomo_manifest.write_text(manifest.to_json())
    parts = Counter(locomo.part_of(q.question_id) for q in manifest.questions)
    return dg.MaterializeResult(metadata={
        "dataset": dg.MetadataValue.path(str(source)), "sha256": manifest.sha256,
        "questions": len(manifest.questions), **{f"{part}_questions": n for part, n in sorted(parts.items())},
        "users": len(set(manifest.users.values())), **manifest.counts,
        "embedding_model": model.spec.model, "seconds": manifest.seconds,
    })


@ranker_asset(after=[longmemeval_memory], kinds={"postgres", "python"}, pool="llm")
def realmem_memory(context: dg.AssetExecutionContext, config: RealmemMemoryConfig,
                   dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                   llm: LLMResource) -> dg.MaterializeResult:
    """RealMem's personas as users, one a persona — a user and an assistant over ~200 sessions, about half of
    them distractors — dreamed like any user's: the ranker's fourth distribution, where each query is the
    user's turn mid-conversation, asked as of the start of its session. Split by persona (train four, dev
    Liam_O_Connor, test Lin_Wanyu)."""
    from dreaming_dagster.ingest.readers import default_realmem_path
    from dreaming_dagster.training import realmem
    from dreaming_dagster.training.longmemeval import file_sha256
    from dreaming_dagster.training.memory import load_benchmark_memory

    source = Path(config.dataset_path) if config.dataset_path else default_realmem_path()
    if not source.is_dir():
        raise FileNotFoundError(f"realmem_memory: dataset_path {source} is not a directory")
    ws = workspace(dreaming_db)
    realmem.write_longmemeval_format(source, ws.realmem_questions)
    model = embedder.embedder()
    manifest = load_benchmark_memory(dreaming_db.database(), model, llm.extractor(), llm.refiner(),
                                     ws.realmem_questions, mode="per-conversation", user_prefix=config.user_prefix,
                                     kg_id=TRAINING_KG_ID, log=context.log.info)
    manifest.dataset, manifest.sha256 = str(source), file_sha256(ws.realmem_questions)
    ws.realmem_manifest.write_text(manifest.to_json())
    parts = Counter(realmem.part_of(q.question_id) for q in manifest.questions)
    types = Counter(q.longmemeval_type for q in manifest.questions)
    return dg.MaterializeResult(metadata={
        "dataset": dg.MetadataValue.path(str(source)), "sha256": manifest.sha256,
        "questions": len(manifest.questions), **{f"{part}_questions": n for part, n in sorted(parts.items())},
        **{f"{kind}_questions": n for kind, n in sorted(types.items())},
        "users": len(set(manifest.users.values())), **manifest.counts,
        "embedding_model": model.spec.model, "seconds": manifest.seconds,
    })


@ranker_asset(
    after=[longmemeval_haystacks, locomo_memory, realmem_memory],
    kinds={"postgres", "pandas", "parquet"},
)
def longmemeval_pools(context: dg.AssetExecutionContext, config: LongMemEvalPoolsConfig,
                      dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                      dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """For every answerable question of each memory — the pooled oracle (memory ``oracle``), each `_S`
    haystack (memory ``s``), each LoCoMo conversation (memory ``locomo``) and each RealMem persona (memory
    ``realmem``), every memory but the pooled oracle drawn from the pairs before the question's date — the
    hybrid candidate pool
    (top-K by cosine ∪ top-K by BM25 ∪ the pairs of the subjects nearest the question ∪ the pairs of the keys
    nearest it ∪, when it names a time, the best pairs inside that window) with all twelve signals from the SQL
    that serves recall, which side drew each candidate, its session, a relevance label (a turn of the pair has has_answer) and the needle flag, plus
    the user's profile as the question saw it; two parquet tables in <data_dir>/ranker/."""
    import pandas as pd

    from dreaming_dagster.retrieval.recaller import GraphSide, TimeSide
    from dreaming_dagster.training.memory import MemoryManifest
    from dreaming_dagster.training.pools import Pools, build_pools
    from dreaming_dagster.training.variants import LOCOMO_MEMORY, ORACLE_MEMORY, REALMEM_MEMORY, S_MEMORY

    started = time.perf_counter()
    ws = workspace(dreaming_db)
    manifests = {ORACLE_MEMORY: MemoryManifest.from_json(ws.require(ws.memory_manifest, "longmemeval_memory").read_text()),
                 S_MEMORY: MemoryManifest.from_json(ws.require(ws.haystacks_manifest, "longmemeval_haystacks").read_text()),
                 LOCOMO_MEMORY: MemoryManifest.from_json(ws.require(ws.locomo_manifest, "locomo_memory").read_text()),
                 REALMEM_MEMORY: MemoryManifest.from_json(ws.require(ws.realmem_manifest, "realmem_memory").read_text())}
    settings = dreaming_policy.settings()
    built = []
    for memory, manifest in manifests.items():
        total = sum(q.answerable for q in manifest.questions)

        def progress(n: int, memory=memory, total=total) -> None:
            if n % 100 == 0 or n == total:
                context.log.info(f"{memory}: pooled {n}/{total} questions")

        built.append(build_pools(
            dreaming_db.database(), embedder.embedder(), manifest.questions, manifest.users, kg_id=manifest.kg_id,
            pool_size=config.pool_size, lexical_pool_size=config.lexical_pool_size,
            graph=GraphSide(pool_size=config.graph_pool_size, subjects=settings.recall_graph_subjects),
            time_side=TimeSide(pool_size=config.time_pool_size, scan_limit=settings.recall_time_scan_limit),
            key_pool_size=config.key_pool_size, hubs=HubRule.from_settings(settings), historical=manifest.mode != "one-user",
            ef_search=settings.recall_ef_search, prepared_statements=settings.recall_prepared_statements,
            memory=memory, on_question=progress))
    pools = Pools(pd.concat([p.questions for p in built], ignore_index=True),
                  pd.concat([p.candidates for p in built], ignore_index=True))
    pools.save(ws.pool_questions, ws.pool_candidates)
    q = pools.questions
    q = q.assign(pool_recall=q["relevant_in_pool"] / q["total_relevant"],
                 cosine_pool_recall=q["relevant_in_vector_pool"] / q["total_relevant"])
    per_type = q.groupby(["memory", "longmemeval_type"]).agg(
        n=("question_id", "count"), cosine_pool_recall=("cosine_pool_recall", "mean"),
        pool_recall=("pool_recall", "mean"), needle_in_pool=("needle_in_pool", "mean"),
        candidates=("candidates", "mean"))
    table = (f"| memory | question type | n | cosine top-{config.pool_size} recall | hybrid pool recall | needle in pool "
             "| candidates |\n|---|---|---:|---:|---:|---:|---:|\n" + "\n".join(
                 f"| {m} | {t} | {int(r.n)} | {r.cosine_pool_recall:.3f} | {r.pool_recall:.3f} | "
                 f"{100 * r.needle_in_pool:.1f}% | {r.candidates:.1f} |" for (m, t), r in per_type.iterrows()))
    by_memory = {memory: group for memory, group in q.groupby("memory")}
    return dg.MaterializeResult(metadata={
        "questions": len(q), "candidates": len(pools.candidates), "pool_size": config.pool_size,
        "lexical_pool_size": config.lexical_pool_size, "graph_pool_size": config.graph_pool_size,
        "graph_candidates_relevant": int(pools.candidates.loc[pools.candidates["in_graph_pool"], "relevant"].sum()),
        **{f"{memory}_questions": len(group) for memory, group in by_memory.items()},
        **{f"{memory}_mean_candidates": float(group["candidates"].mean()) for memory, group in by_memory.items()},
        **{f"{memory}_cosine_pool_recall": float(group["cosine_pool_recall"].mean()) for memory, group in by_memory.items()},
        **{f"{memory}_pool_recall": float(group["pool_recall"].mean()) for memory, group in by_memory.items()},
        **{f"{memory}_needle_in_pool": float(group["needle_in_pool"].mean()) for memory, group in by_memory.items()},
        "by_question_type": dg.MetadataValue.md(table),
        "questions_table": dg.MetadataValue.path(str(ws.pool_questions)),
        "candidates_table": dg.MetadataValue.path(str(ws.pool_candidates)),
        "seconds": round(time.perf_counter() - started, 1),
    })


@ranker_asset(
    after=[longmemeval_pools],
    kinds={"torch"},
)
def ranker_model(context: dg.AssetExecutionContext, config: RankerModelConfig, dreaming_db: DreamingDatabaseResource,
                 embedder: EmbedderResource, dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """The Composite ranker trained with ApproxNDCG on the pools of both memories (the pooled oracle and the
    `_S` haystacks): v6 (12 weights + scale) and, for comparison, v5 (10), v4 (9), v3 (8), v2 (7), v1 (3),
    and the ablations — v6 trained on the oracle alone, without the time parts, without the keys, without
    the key side's candidates, and v2 on the cosine pool alone. The network's hidden layers are chosen among ``hidden_choices`` by dev NDCG@10. The
    split is the ranker's (training/split.py): train, dev (model family, best epoch, publishing) and
    validation (reported only). v6 is published for recall() only if it beats, on dev NDCG@10, the best ranking without a model of the
    same pools: cosine, BM25 and their reciprocal-rank fusion."""
    from dreaming_dagster.retrieval.ranker import save_ranker
    from dreaming_dagster.training.evaluation import training_curves_png
    from dreaming_dagster.training.fit import fit_rankers
    from dreaming_dagster.training.pools import Pools
    from dreaming_dagster.training.train import TrainingData
    from dreaming_dagster.training.variants import PUBLISHED_VERSION

    started = time.perf_counter()
    ws = workspace(dreaming_db)
    pools = Pools.load(ws.require(ws.pool_questions, "longmemeval_pools"), ws.pool_candidates)
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    model_name = embedder.embedder().spec.model
    report = fit_rankers(data, embedding_model=model_name, seed=config.seed, epochs=config.epochs,
                         learning_rate=config.learning_rate, temperature=config.temperature,
                         batch_size=config.batch_size, hidden_choices=[tuple(h) for h in config.hidden_choices],
                         seeds=config.seeds, log=context.log.info)
    bar_name, bar = report.bar  # the best ranking without a model: cosine, BM25 or their fusion
    for key, outcome in report.outcomes.items():
        save_ranker(outcome.model, ws.model(key), embedding_model=model_name, extra={
            "best_epoch": outcome.best_epoch, "dev_ndcg@10": outcome.best_dev_ndcg10,
            "worst_dev_gain": outcome.best_dev_gain, "bar": bar_name, "bar_dev_ndcg@10": bar, "config": config.model_dump()})
    newest = report.outcomes[PUBLISHED_VERSION]
    beats_bar = newest.best_dev_gain > 0  # on every distribution's dev questions
    published = None
    if config.promote and beats_bar:
        # recall()'s file: ranker_model_path (policy), else under data_dir (database resource).
        published = save_ranker(newest.model, layered_settings(dreaming_db, dreaming_policy).resolved_ranker_path,
                                embedding_model=model_name,
                                extra={"dev_ndcg@10": newest.best_dev_ndcg10,
                                       "worst_dev_gain": newest.best_dev_gain,
        **{f"part_{key}": verdict for key, verdict in report.part_verdicts.items()}, "bar": bar_name,
                                       "bar_dev_ndcg@10": bar})
        context.log.info(f"published {PUBLISHED_VERSION} for recall(): {published}")
    elif not beats_bar:
        context.log.warning(f"{PUBLISHED_VERSION} does not beat the best ranking without a model on every "
                            f"distribution's dev questions (worst gain {newest.best_dev_gain:+.4f}); recall() keeps "
                            "its current ranking")
    ws.training.write_text(json.dumps({**report.as_json(), "config": config.model_dump(),
                                       "published": str(published) if published else None}, indent=1))
    curves = training_curves_png({v: o.history for v, o in report.outcomes.items()}, report.bar)
    ws.curves_png.write_bytes(curves)
    return dg.MaterializeResult(metadata={
        **{f"dev_ndcg@10_{key}": outcome.best_dev_ndcg10 for key, outcome in report.outcomes.items()},
        **{f"dev_ndcg@10_{name}": value for name, value in report.model_free_dev_ndcg10.items()},
        **{f"best_epoch_{key}": outcome.best_epoch for key, outcome in report.outcomes.items()},
        "published": published is not None,
        **{f"bar_{memory}": f"{name} {value:.4f}" for memory, (name, value) in report.bars.items()},
        "published_path": dg.MetadataValue.path(str(published)) if published else "not published",
        "question_type_accuracy_dev": report.classifier_dev_accuracy, "hidden_layers": str(list(report.hidden)),
        **{f"dev_gain_hidden_{name}": sum(values) / len(values) for name, values in report.hidden_dev_gain.items()},
        "worst_dev_gain": newest.best_dev_gain,
        **{f"part_{key}": verdict for key, verdict in report.part_verdicts.items()},
        "training_questions": len(report.split.train), "dev_questions": len(report.split.dev),
        "validation_questions": len(report.split.validation),
        "training_curves": dg.MetadataValue.md(png_markdown(curves, "training curves")),
        "seconds": round(time.perf_counter() - started, 1),
    })


@ranker_asset(
    after=[ranker_model],
    kinds={"torch", "markdown"},
)
def ranker_evaluation(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource) -> dg.MaterializeResult:
    """Cosine (its own top-K), BM25, their reciprocal-rank fusion, v1–v6, v6 with the top 10 spread over
    sessions for gathering questions, and the ablations, on identical pools: NDCG@10/@5, Recall@10/@5, MRR,
    needle hit %, session recall_any/all@5/10 and pool recall, per question type too, with the predicted
    question type (and the gold one for v6); on the oracle's validation questions (never used to choose
    anything), the oracle's dev questions and the `_S` dev questions."""
    from dreaming_dagster.retrieval.ranker import load_ranker
    from dreaming_dagster.training.evaluation import evaluate, markdown_report
    from dreaming_dagster.training.memory import MemoryManifest
    from dreaming_dagster.training.pools import Pools, pool_description
    from dreaming_dagster.training.train import TrainingData
    from dreaming_dagster.training.variants import MEMORY_NAMES, PUBLISHED_VERSION, report_splits

    ws = workspace(dreaming_db)
    training = json.loads(ws.require(ws.training, "ranker_model").read_text())
    manifest = MemoryManifest.from_json(ws.memory_manifest.read_text())
    pools = Pools.load(ws.pool_questions, ws.pool_candidates)
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    models = {key: load_ranker(ws.require(ws.model(key), "ranker_model")).model for key in training["models"]}
    splits = report_splits(data, training)
    evaluation = evaluate(data, models, predicted_types=[training["predicted_types"][q] for q in data.question_ids],
                          splits=splits)
    by_memory = {memory: pool_description(pools.candidates[pools.candidates["memory"] == memory])
                 for memory in MEMORY_NAMES if (pools.candidates["memory"] == memory).any()}
    context_lines = {"dataset": f"{Path(manifest.dataset).name} (sha256 {manifest.sha256[:16]}…), pooled as one "
                     "user; `_S` haystacks, one user a question; LoCoMo, one user a conversation; RealMem, one user a persona, "
                     "each query as of its session's start",
                     **{f"pool ({MEMORY_NAMES[memory]})": text for memory, text in by_memory.items()},
                     "question-type accuracy (dev, classifier fitted on the training questions)":
                         f"{training['classifier_dev_accuracy']:.3f}",
                     "best epochs (by dev NDCG@10)": ", ".join(f"{v} {m['best_epoch']}"
                                                              for v, m in training["models"].items())}
    report = markdown_report(evaluation, title="Ranker evaluation", context=context_lines,
                             pool_label="cosine top-K for cosine and the cosine-pool model, hybrid for the rest")
    ws.evaluation_markdown.write_text(report)
    ws.evaluation_json.write_text(json.dumps({"context": context_lines, **evaluation.as_dict()}, indent=1))
    curves = ws.curves_png.read_bytes() if ws.curves_png.is_file() else b""
    headline = {f"{split.replace('`', '').replace(' ', '_')}_{metric}_{method}": results[method][metric]
                for split, results in evaluation.overall.items() for method in ("bm25", "cosine+bm25 (RRF)", PUBLISHED_VERSION)
                if method in results for metric in ("recall@10", "ndcg@10")}
    return dg.MaterializeResult(metadata={
        "report": dg.MetadataValue.md(report), **headline,
        **{f"{split.replace('`', '').replace(' ', '_')}_questions": n for split, n in evaluation.questions.items()},
        "training_curves": dg.MetadataValue.md(png_markdown(curves, "training curves")) if curves else "none",
        "report_path": dg.MetadataValue.path(str(ws.evaluation_markdown)),
    })
