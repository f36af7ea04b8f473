from typing import Literal

import dagster as dg
from pydantic import Field

from dreaming_dagster.defs.layout import Layout, users_partitions
from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
    layered_settings,
)


class DreamConsolidationConfig(dg.Config):
    mode: Literal["auto", "incremental", "compact"] = Field(
        default="auto", description="auto: compact on a user's first pass (backfill_on_first_run), then incremental")
    force: bool = Field(default=False, description="run even when the input is unchanged since the last pass")


@dg.asset(
    partitions_def=users_partitions,  # hash buckets re-partition it as the code location loads (defs/layout.py)
    group_name="consolidation",
    kinds={"postgres", "openai"},
    pool="llm",
)
def dream_consolidation(context: dg.AssetExecutionContext, config: DreamConsolidationConfig,
                        dreaming_db: DreamingDatabaseResource, embedder: EmbedderResource,
                        llm: LLMResource, dreaming_policy: DreamingPolicyResource) -> dg.MaterializeResult:
    """A token-budget consolidation pass over the user's graph: the delta since the last pass and its nearest
    neighbours (or, compacting, the whole graph in budget-sized clusters and a pass across them) goes to the
    configured provider; its merges, renames, rewrites, archives, supersessions and creations are checked and
    applied in one transaction with importance decay, an audit row and a memory of the pass. A bucket
    partition passes over each of its users whose new tokens reached the threshold."""
    from dreaming_dagster.consolidation.consolidators import consolidator_from_settings
    from dreaming_dagster.consolidation.passes import PassPolicy, run_pass
    from dreaming_dagster.storage.user_graphs import user_kgs

    database, model = dreaming_db.database(), embedder.embedder()
    settings = layered_settings(llm, dreaming_policy)  # the provider, and the directive the policy names
    consolidator = consolidator_from_settings(settings)
    policy = PassPolicy.from_settings(settings)
    layout = Layout.of_partitions(context.assets_def.partitions_def)
    users = users_over_budget(database, layout, context.partition_keys, settings.dream_token_threshold)
    one_user = layout.per_user  # a user's pass fails its run and shows its diff; a bucket's names no user
    reports, failed_users = [], 0
    for number, user_id in enumerate(users, 1):
        try:
            reports += [run_pass(database, model, consolidator, user_id, kg_id, mode=config.mode, force=config.force,
                                 policy=policy) for kg_id in user_kgs(database, user_id)]
        except Exception as error:
            if one_user:
                raise
            # One user's failing pass (rolled back, audited as failed) never holds up the bucket's others; the
            # log names no user (an erased user's id must not stay in Dagster's event log).
            failed_users += 1
            context.log.warning(f"the pass of user {number} of {len(users)} failed: {type(error).__name__}")
    for report in reports:
        context.log.info(f"{report.kg_id}: {report.status}, applied {report.count('applied')}, skipped {report.skipped}")
    diff = "\n\n".join(f"## {r.kg_id}\n\n{r.diff_markdown()}" for r in reports) or "the user has no memory"
    return dg.MaterializeResult(metadata={
        **({"diff": dg.MetadataValue.md(diff)} if one_user else {"users": len(users), "failed_users": failed_users}),
        "graphs": len(reports),
        "status": ", ".join(sorted({r.status for r in reports})) or "none",
        "applied": sum(r.count("applied") for r in reports),
        "skipped": sum(r.skipped for r in reports),
        "decayed": sum(r.decayed for r in reports),
        "input_tokens": sum(r.input_tokens for r in reports),
        "tokens_consumed": sum(r.tokens_consumed for r in reports),
        "provider": consolidator.provider,
        "seconds": round(sum(r.seconds for r in reports), 3),
    })


def users_over_budget(database, layout: Layout, partition_keys: list[str], threshold: int) -> list[str]:
    """The users a pass covers. A user's partition: the user (a pass by hand runs whatever the budget). Buckets:
    their users whose saved tokens since their last pass reached ``threshold``."""
    from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID
    from dreaming_dagster.sql import load_sql

    if layout.per_user:
        return list(partition_keys)
    wanted = set(partition_keys)
    with database.connect(vectors=False) as conn:
        rows = conn.execute(load_sql("dreaming/users_over_budget"),
                            {"threshold": threshold, "training_kg": TRAINING_KG_ID}).fetchall()
    return list(dict.fromkeys(row["user_id"] for row in rows if layout.partition_of(row["user_id"]) in wanted))
