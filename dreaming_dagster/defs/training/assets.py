"""The ranker's assets: benchmark memories → memory encoder → re-embedded memories → pools → models →
evaluation (group ``ranker``)."""

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
    MemoryEncoderConfig,
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


def benchmark_embedder(dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource):
    """What embeds the benchmark memories and their questions: the memory encoder (the workspace's delta over
    MiniLM) once ``encoded_memories`` moved the database to it, else the configured embedder."""
    import psycopg

    from dreaming_dagster.embeddings import local_embedder
    from dreaming_dagster.encoder_delta import encoder_id
    from dreaming_dagster.storage.database import recorded_spec

    delta = workspace(dreaming_db).encoder_delta
    if delta.is_file():
        with psycopg.connect(dreaming_db.database().url) as conn:
            recorded = recorded_spec(conn)
        if recorded is not None and recorded.model == encoder_id(delta):
            return local_embedder(embedder.settings(), delta)
    return embedder.embedder()


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
    model, extractor = benchmark_embedder(dreaming_db, embedder), llm.extractor()
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
    # After the memory encoder's re-embedding: built with that encoder when there is one, nothing to re-embed.
    after=[longmemeval_memory, "encoded_memories"],
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
    model = benchmark_embedder(dreaming_db, embedder)
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
    model = benchmark_embedder(dreaming_db, embedder)
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
    model = benchmark_embedder(dreaming_db, embedder)
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


@ranker_asset(after=[longmemeval_memory, locomo_memory, realmem_memory], kinds={"torch", "safetensors"})
def memory_encoder(context: dg.AssetExecutionContext, config: MemoryEncoderConfig,
                   dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource) -> dg.MaterializeResult:
    """all-MiniLM-L6-v2 fine-tuned for memory recall: LoRA over its attention and feed-forward layers
    (training/encoder.py), trained on the training questions of the oracle, LoCoMo and RealMem, each against
    the relevant pair MiniLM ranks highest and the batch's other pairs. Judged as recall's vector side ranks — cosine over
    each question's whole memory as of the question — on every distribution's dev questions, through the
    shipped path (the delta file merged into MiniLM, run in ONNX Runtime). Kept only if it beats MiniLM on
    every distribution's dev questions: then its low-rank delta (~0.7 MB) is written to
    <data_dir>/ranker/encoder_delta.safetensors for the later assets to embed with; else MiniLM stays."""
    import numpy as np
    import psycopg

    from dreaming_dagster.embeddings import LocalMiniLMEmbedder, local_embedder
    from dreaming_dagster.storage.database import recorded_spec
    from dreaming_dagster.training import encoder

    started = time.perf_counter()
    ws = workspace(dreaming_db)
    configured = embedder.embedder()
    if not config.enabled or not isinstance(configured, LocalMiniLMEmbedder) or configured.encoder_delta:
        reason = ("disabled in the run config" if not config.enabled else
                  f"the configured embedder is {configured.spec.model}; the memory encoder adapts MiniLM itself "
                  "(DREAMING_EMBEDDING_LOCAL_ENCODER=minilm)")
        ws.encoder_delta.unlink(missing_ok=True)
        context.log.info(f"memory encoder not trained: {reason}")
        return dg.MaterializeResult(metadata={"kept": False, "reason": reason})
    minilm = local_embedder(embedder.settings())
    database = dreaming_db.database()
    sets = encoder.benchmark_question_sets(database, ws, memories=("oracle", "locomo", "realmem"))
    with psycopg.connect(database.url) as conn:
        stored_by_minilm = recorded_spec(conn) == minilm.spec
    for questions in sets:
        questions.query_vectors = np.asarray(minilm.embed(questions.texts), np.float32)
        if not stored_by_minilm:  # an earlier run's encoder wrote them: MiniLM's own, for negatives and the bar
            _, questions.pairs.vectors, questions.pairs.reply_vectors = encoder.reembedded(
                minilm, questions, ("train", "dev"))
    context.log.info("training questions: " + ", ".join(f"{q.memory} {len(q.rows('train'))}" for q in sets))
    tuned = encoder.fine_tune_encoder(sets, seed=config.seed, epochs=config.epochs, rank=config.rank,
                                      positive=config.positive, hard_negatives=config.hard_negatives,
                                      negatives_outside_evidence=config.negatives_outside_evidence,
                                      limit_questions=config.limit_questions, log=context.log.info)
    trained = time.perf_counter() - started
    before = {q.memory: encoder.cosine_metrics(q, q.rows("dev"), q.query_vectors)["ndcg@10"] for q in sets}
    with encoder.delta_encoder(tuned) as candidate:
        after = {}
        for q in sets:
            queries, vectors, replies = encoder.reembedded(candidate, q, ("dev",))
            after[q.memory] = encoder.cosine_metrics(q, q.rows("dev"), queries, vectors, replies)["ndcg@10"]
    gain = min(after[m] - before[m] for m in before)
    kept = gain > 0 or config.keep_without_gain
    if kept:
        tuned.save(ws.encoder_delta, metadata={"seed": str(config.seed), "epochs": str(config.epochs),
                                               "positive": config.positive, "worst_dev_gain": f"{gain:.4f}"})
        context.log.info(f"memory encoder kept (worst dev gain {gain:+.4f}): {ws.encoder_delta}")
    else:
        ws.encoder_delta.unlink(missing_ok=True)
        context.log.warning(f"memory encoder not kept: worst dev gain {gain:+.4f}; MiniLM stays")
    table = "| distribution | dev questions | MiniLM | memory encoder |\n|---|---:|---:|---:|\n" + "\n".join(
        f"| {q.memory} | {len(q.rows('dev'))} | {before[q.memory]:.3f} | {after[q.memory]:.3f} |" for q in sets)
    return dg.MaterializeResult(metadata={
        "kept": kept, "worst_dev_gain": gain, "dev_ndcg@10": dg.MetadataValue.md(table),
        "delta": dg.MetadataValue.path(str(ws.encoder_delta)) if kept else "none: MiniLM stays",
        "training_seconds": round(trained, 1), "seconds": round(time.perf_counter() - started, 1),
        "final_loss": float(np.mean(tuned.losses[-10:])) if tuned.losses else float("nan")})


@ranker_asset(after=[memory_encoder], kinds={"postgres", "python"})
def encoded_memories(context: dg.AssetExecutionContext, dreaming_db: DreamingDatabaseResource,
                     embedder: EmbedderResource) -> dg.MaterializeResult:
    """The benchmark memories re-embedded (pairs, subjects, keys) by the memory encoder when ``memory_encoder``
    kept one, or by the configured embedder when it did not (`dreaming reembed`'s work, restartable). Only
    on a database of benchmark memory alone: one that also serves users keeps its embedder, and the ranker
    then trains on it."""
    import psycopg

    from dreaming_dagster.embeddings import local_embedder
    from dreaming_dagster.reembed import count_rows, reembed
    from dreaming_dagster.sql import load_sql

    started = time.perf_counter()
    ws = workspace(dreaming_db)
    database = dreaming_db.database()
    settings = embedder.settings()
    target = local_embedder(settings, ws.encoder_delta) if ws.encoder_delta.is_file() else embedder.embedder()
    with psycopg.connect(database.url) as conn:
        serves_users = conn.execute(load_sql("training/memory_outside_graph"), {"kg_id": TRAINING_KG_ID}).fetchone()[0]
    if serves_users:
        kept = benchmark_embedder(dreaming_db, embedder).spec.model
        context.log.warning(f"this database also holds users' memory: its vectors stay {kept}'s, and the ranker "
                            "trains on them (run the ranker job on a database of its own to use the memory encoder)")
        return dg.MaterializeResult(metadata={"embedding_model": kept, "re_embedded": False})

    total = count_rows(database)
    done = [0]

    def progress(rows: int) -> None:
        done[0] += rows
        if done[0] // 5000 != (done[0] - rows) // 5000:
            context.log.info(f"re-embedded {done[0]:,} of {total:,} rows")

    result = reembed(database, target, batch_size=settings.embedding_batch_size, on_rows=progress)
    return dg.MaterializeResult(metadata={
        "embedding_model": target.spec.model, "re_embedded": not result.skipped,
        "pairs": result.pairs, "subjects": result.subjects, "keys": result.keys,
        "seconds": round(time.perf_counter() - started, 1)})


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
    model = benchmark_embedder(dreaming_db, embedder)
    built = []
    for memory, manifest in manifests.items():
        total = sum(q.answerable for q in manifest.questions)

        def progress(n: int, memory=memory, total=total) -> None:
            if n % 100 == 0 or n == total:
                context.log.info(f"{memory}: pooled {n}/{total} questions")

        built.append(build_pools(
            dreaming_db.database(), model, manifest.questions, manifest.users, kg_id=manifest.kg_id,
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
    model_name = benchmark_embedder(dreaming_db, embedder).spec.model
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
