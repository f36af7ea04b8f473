from typing import Literal

import dagster as dg
from pydantic import Field

from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
)
from dreaming_dagster.defs.run_queue import USER_MEMORY_JOB


class UserRequestConfig(dg.Config):
    user_id: str = Field(description="the user to act on")
    action: Literal["dream", "rebuild", "forget"] = Field(
        default="dream", description="dream: every stage now; rebuild: clear the graph, then every stage; "
                                     "forget: erase every memory of the user")
    kg_id: str | None = Field(default=None, description="one graph of the user (unset: all of them)")


@dg.op(tags={"kind": "postgres"})
def user_request(context: dg.OpExecutionContext, config: UserRequestConfig, dreaming_db: DreamingDatabaseResource,
                 embedder: EmbedderResource, llm: LLMResource, dreaming_policy: DreamingPolicyResource) -> None:
    """Dream, rebuild or forget one user now, whatever the partitioning (a user's partition, or a bucket that
    holds a million users): the same functions as `dreaming sync` and `dreaming forget --everything`."""
    from dreaming_dagster.memory.forgetting import erase_user
    from dreaming_dagster.pipeline import linking
    from dreaming_dagster.pipeline.sync import sync_user
    from dreaming_dagster.storage import user_graphs

    database = dreaming_db.database()
    if config.action == "forget":
        forgotten = erase_user(config.user_id, config.kg_id, database=database)
        context.add_output_metadata({"action": "forget", "graphs": len(forgotten.kg_ids), "pairs": forgotten.pairs,
                                     "subjects_deleted": forgotten.subjects_deleted, "seconds": forgotten.seconds})
        return
    model = embedder.embedder()
    database.ensure_schema(model.spec)
    if config.action == "rebuild":
        for kg_id in [config.kg_id] if config.kg_id else user_graphs.user_kgs(database, config.user_id):
            with user_graphs.user_graph_lock(database, config.user_id, kg_id):
                linking.clear_user_graph(database, config.user_id, kg_id)
    policy = dreaming_policy.settings()
    result = sync_user(config.user_id, database=database, embedder=model, extractor=llm.extractor(),
                       refiner=llm.refiner(), kg_id=config.kg_id, threshold=policy.merge_threshold, report=True)
    for warning in result.warnings:
        context.log.warning(warning)
    counts = {f"{stage}_{key}": value for stage in ("embedding", "extraction", "merge", "links", "refinement")
              for key, value in getattr(result, stage).items()
              if isinstance(value, int | float) and not isinstance(value, bool) and key != "seconds"}
    context.add_output_metadata({"action": config.action, **counts, "seconds": result.seconds})


@dg.job(name=USER_MEMORY_JOB,
        description="Dream, rebuild or forget one user on demand (config: user_id, action, kg_id), in either "
                    "partitioning; runs at the default priority, ahead of the sensors' runs.",
        executor_def=dg.in_process_executor)
def user_memory_job():
    user_request()
