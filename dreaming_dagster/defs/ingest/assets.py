import dagster as dg

from dreaming_dagster.defs.layout import start_dreaming_run
from dreaming_dagster.defs.pipeline.assets import run_for_users, stage_asset
from dreaming_dagster.defs.resources import DreamingDatabaseResource, EmbedderResource
from dreaming_dagster.ingest.embedding import user_stats
from dreaming_dagster.pipeline.sync import StageInputs
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
    step = start_dreaming_run(context, database, every_user=config.every_user)
    totals, seconds = run_for_users(context, step, lambda user_id: StageInputs(
        database, user_id, embedder=model, embedding_batch_size=batch_size))
    failed = totals.pop("failed_pairs", [])
    failed = failed if isinstance(failed, int) else len(failed)
    if failed:
        context.log.warning(f"{failed} pair(s) could not be embedded and stay pending: {totals.get('last_error')}")
    held = memory_held(database, step.user)
    pending = held.get("pending_embedding", failed)
    embedded = totals.pop("embedded", 0)
    return dg.MaterializeResult(
        metadata={**totals, **held, "embedded_now": embedded, "embedding_model": str(model.spec),
                  "seconds": round(seconds, 3),
                  "pairs_per_second": round(embedded / seconds, 1) if embedded and seconds else 0.0},
        check_results=[dg.AssetCheckResult(
            check_name="all_pairs_embedded", passed=pending == 0, severity=dg.AssetCheckSeverity.WARN,
            metadata={"users": len(step.users), "pending_embedding": pending})])


def memory_held(database, user_id: str | None) -> dict:
    """What a user's memory holds now: pairs, tokens, sessions, the work still pending, and the table of it
    (a bucket's step shows no one user's)."""
    if user_id is None:
        return {}
    stats = user_stats(database, user_id)
    return {**{key: sum(row[key] for row in stats)
               for key in ("pairs", "tokens", "sessions", "pending_embedding", "pending_extraction")},
            "memory": dg.MetadataValue.md(user_stats_markdown(user_id, stats))}
