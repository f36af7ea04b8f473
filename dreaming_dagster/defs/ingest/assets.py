import time

import dagster as dg

from dreaming_dagster.defs.partitions import bucket_count, start_bucket_run
from dreaming_dagster.defs.pipeline.assets import run_for_users, stage_asset
from dreaming_dagster.defs.resources import DreamingDatabaseResource, EmbedderResource
from dreaming_dagster.ingest.embedding import user_stats
from dreaming_dagster.pipeline.sync import STAGE_BY_ASSET, StageInputs
from dreaming_dagster.reporting import user_stats_markdown


class MemoryPairsConfig(dg.Config):
    every_user: bool = False  # buckets: every user of the bucket, not only those with work (rebuild_user_graph)


@stage_asset(
    "memory_pairs",
    kinds={"postgres", "pgvector"},
    pool="embedding_model",
    check_specs=[dg.AssetCheckSpec("all_pairs_embedded", asset="memory_pairs",
                                   description="Every stored pair of the user has an embedding.")],
)
def memory_pairs(
    context: dg.AssetExecutionContext, config: MemoryPairsConfig, dreaming_db: DreamingDatabaseResource,
    embedder: EmbedderResource,
) -> dg.MaterializeResult:
    """Stage 1 of dreaming: a user's memory pairs (user message + assistant reply) in Postgres with their
    pgvector embeddings. Materializing a partition embeds the user's pairs that were saved without one
    (embedding deferred or failed at save time) and reports what the memory holds. A bucket partition's run
    starts here: the bucket's users with pending work (every user, rebuilding) are fixed for its later steps."""
    database, model = dreaming_db.database(), embedder.embedder()
    batch_size = embedder.settings().embedding_batch_size
    users = start_bucket_run(context, database, every_user=config.every_user)
    if bucket_count():
        totals, seconds = run_for_users(context, users, lambda user_id: StageInputs(
            database, user_id, embedder=model, embedding_batch_size=batch_size))
        failed = totals.get("failed_pairs", 0)
        return dg.MaterializeResult(
            metadata={**totals,
                      "embedding_model": str(model.spec), "seconds": round(seconds, 3)},
            check_results=[dg.AssetCheckResult(check_name="all_pairs_embedded", passed=failed == 0,
                                               severity=dg.AssetCheckSeverity.WARN,
                                               metadata={"users": len(users), "pending_embedding": failed})])
    user_id = context.partition_key
    started = time.perf_counter()
    run = STAGE_BY_ASSET["memory_pairs"].run(StageInputs(
        database, user_id, embedder=model, embedding_batch_size=batch_size), "")
    elapsed = time.perf_counter() - started
    if run.failed_pairs:
        context.log.warning(f"{len(run.failed_pairs)} pair(s) could not be embedded and stay pending: "
                            f"{run.last_error}")
    stats = user_stats(database, user_id)
    pending = sum(row["pending_embedding"] for row in stats)
    return dg.MaterializeResult(
        metadata={
            "pairs": sum(row["pairs"] for row in stats),
            "tokens": sum(row["tokens"] for row in stats),
            "sessions": sum(row["sessions"] for row in stats),
            "embedded_now": run.embedded,
            "pending_embedding": pending,
            "pending_extraction": sum(row["pending_extraction"] for row in stats),
            "embedding_model": str(model.spec),
            "seconds": round(elapsed, 3),
            "pairs_per_second": round(run.embedded / elapsed, 1) if run.embedded and elapsed else 0.0,
            "memory": dg.MetadataValue.md(user_stats_markdown(user_id, stats)),
        },
        check_results=[dg.AssetCheckResult(
            check_name="all_pairs_embedded",
            passed=pending == 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"pending_embedding": pending, "last_error": run.last_error or ""},
        )],
    )
