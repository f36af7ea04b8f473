import json
import time

import dagster as dg
import psycopg

from dreaming_dagster.defs.partitions import add_new_users, users_partitions
from dreaming_dagster.defs.pipeline.jobs import dreaming_job
from dreaming_dagster.defs.resources import DreamingDatabaseResource
from dreaming_dagster.defs.run_queue import SENSOR_RUN_TAGS, users_in_flight
from dreaming_dagster.pipeline.pending_work import (
    RETRY_AFTER_SECONDS,
    TRAINING_KG_ID,
    pending_work_params,
    pending_work_run_key,
)
from dreaming_dagster.sql import load_sql

# Fast-path syncs reported a tick at most (the rest at the next ticks).
FAST_PATH_BATCH = 500


@dg.sensor(
    job=dreaming_job,
    minimum_interval_seconds=30,  # the batch window: five messages in 30 s make one run, not five
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Finds users with pairs waiting for work (one SQL query over partial indexes), registers "
                "new users as partitions and requests one dreaming run per user and state of work, never for "
                "a user whose dreaming run is queued or running (the same work is requested again after "
                f"{RETRY_AFTER_SECONDS // 60} minutes if a run ended with it still pending); sensor runs queue "
                "behind runs a person launched.",
)
def pending_pairs_sensor(context: dg.SensorEvaluationContext, dreaming_db: DreamingDatabaseResource):
    try:
        with dreaming_db.database().connect(vectors=False) as conn:
            rows = conn.execute(load_sql("memory_pairs/users_with_pending_work"), pending_work_params()).fetchall()
    except psycopg.errors.UndefinedTable:
        return dg.SkipReason("the dreaming database has no tables yet (nothing was ever saved)")
    if not rows:
        return dg.SkipReason("no user has pending work")
    busy = users_in_flight(context.instance, dreaming_job.name)
    return dg.SensorResult(
        run_requests=[
            # Same pending work, same key: launched once (and retried after a window if it stays pending).
            dg.RunRequest(partition_key=row["user_id"], tags=SENSOR_RUN_TAGS,
                          run_key=pending_work_run_key(row["user_id"], row["pending"], row["newest_at"],
                                                       now=time.time()))
            for row in rows if row["user_id"] not in busy
        ],
        dynamic_partitions_requests=add_new_users(context.instance, (row["user_id"] for row in rows)),
    )


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps the users partitions true to the database however users were dreamed: each fast-path "
                "sync (sync_user, POST /v1/pairs with sync, POST /v1/sync) is reported as its user partition's "
                "asset materializations, with the stage's counts as metadata (the fast path runs no Dagster "
                "run); after a forget, the partitions of users left with no memory are deleted with their "
                "runs and asset events.",
)
def fast_path_sensor(context: dg.SensorEvaluationContext, dreaming_db: DreamingDatabaseResource):
    cursor = json.loads(context.cursor) if context.cursor else {"seq": 0, "forget": 0}
    try:
        with dreaming_db.database().connect(vectors=False) as conn:
            rows = conn.execute(load_sql("pipeline/fast_path_syncs_since"), {
                "after": cursor["seq"], "training_kg": TRAINING_KG_ID, "limit": FAST_PATH_BATCH}).fetchall()
            last_forget = conn.execute(load_sql("forget/last_forget")).fetchone()["id"]
            gone = []
            if last_forget != cursor["forget"]:
                partitions = context.instance.get_dynamic_partitions(users_partitions.name)
                gone = [row["user_id"] for row in conn.execute(load_sql("pipeline/users_without_memory"),
                                                               {"user_ids": partitions})]
    except psycopg.errors.UndefinedTable:
        return dg.SkipReason("the dreaming database has no fast-path record yet (migration 0027 not applied)")
    for user_id in gone:
        forget_partition(context.instance, user_id)
    events = [dg.AssetMaterialization(asset_key=asset, partition=row["user_id"], description="fast path sync", metadata={
        **{key: value for key, value in stats.items() if isinstance(value, int | float | str)},
        "path": "fast path", "kg_id": row["kg_id"], "synced_at": row["synced_at"].isoformat(),
        "user_pairs": row["user_pairs"], "graph_subjects": row["graph_subjects"]})
        for row in rows for asset, stats in row["stages"].items()]
    cursor = {"seq": rows[-1]["seq"] if rows else cursor["seq"], "forget": last_forget}
    requests = [*add_new_users(context.instance, (row["user_id"] for row in rows)),
                *([users_partitions.build_delete_request(gone)] if gone else [])]
    if not events and not requests:
        return dg.SkipReason("no fast-path sync or forget since the last look")
    return dg.SensorResult(asset_events=events, dynamic_partitions_requests=requests, cursor=json.dumps(cursor))


def forget_partition(instance: dg.DagsterInstance, user_id: str) -> None:
    """Delete the runs of a user's partition (their logs and events go with them: a log may quote memory).
    The partition's runless events stay in the event log (Dagster's open-source storages cannot wipe one
    partition's): they hold the user id and counts, no memory text."""
    for run_id in instance.get_run_ids(filters=dg.RunsFilter(tags={"dagster/partition": user_id})):
        instance.delete_run(run_id)
