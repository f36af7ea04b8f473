import json
import time
from collections import defaultdict

import dagster as dg
import psycopg

from dreaming_dagster.defs.layout import Layout, users_partitions
from dreaming_dagster.defs.partition_records import forget_partition_records, forget_runs_records
from dreaming_dagster.defs.pipeline.jobs import dreaming_job
from dreaming_dagster.defs.resources import DreamingDatabaseResource
from dreaming_dagster.defs.run_queue import (
    GRAPH_WRITING_JOBS,
    SENSOR_RUN_TAGS,
    USER_MEMORY_JOB,
    partitions_in_flight,
)
from dreaming_dagster.pipeline.pending_work import (
    RETRY_AFTER_SECONDS,
    TRAINING_KG_ID,
    pending_work_params,
    pending_work_run_key,
)
from dreaming_dagster.sql import load_sql

# Fast-path syncs read a tick at most: one partition a user reports each sync as its partition's events;
# buckets report one event per bucket and asset with the tick's counts, so a tick can take many more.
FAST_PATH_BATCH = 500
FAST_PATH_BATCH_BUCKETS = 50_000


@dg.sensor(
    job=dreaming_job,
    minimum_interval_seconds=30,  # the batch window: five messages in 30 s make one run, not five
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Finds users with pairs waiting for work (one SQL query over partial indexes) and requests one "
                "dreaming run per partition (a user, registered as a partition if new, or a hash bucket of "
                "users) and state of work, never for a partition whose dreaming run is queued or running (the "
                f"same work is requested again after {RETRY_AFTER_SECONDS // 60} minutes if a run ended with it "
                "still pending); sensor runs queue behind runs a person launched.",
)
def pending_pairs_sensor(context: dg.SensorEvaluationContext, dreaming_db: DreamingDatabaseResource):
    layout = Layout.of_sensor_or_skip(context, dreaming_db.database())
    if isinstance(layout, dg.SkipReason):
        return layout
    try:
        with dreaming_db.database().connect(vectors=False) as conn:
            rows = conn.execute(load_sql("memory_pairs/users_with_pending_work"), pending_work_params()).fetchall()
    except psycopg.errors.UndefinedTable:
        return dg.SkipReason("the dreaming database has no tables yet (nothing was ever saved)")
    if not rows:
        return dg.SkipReason("no user has pending work")
    busy = partitions_in_flight(context.instance, GRAPH_WRITING_JOBS, layout)  # a rebuild of the graph too
    registering, unregistered = layout.register_users(context, (row["user_id"] for row in rows),
                                                      dreaming_db.settings().dagster_max_user_partitions)
    work = defaultdict(lambda: [0, None])  # partition (a user, or a bucket) -> [pending pairs, newest save]
    for row in rows:
        partition = work[layout.partition_of(row["user_id"])]
        partition[0] += row["pending"]
        partition[1] = max(partition[1] or row["newest_at"], row["newest_at"])
    now = time.time()
    return dg.SensorResult(
        run_requests=[
            # Same pending work, same key: launched once (and retried after a window if it stays pending).
            dg.RunRequest(partition_key=key, tags=SENSOR_RUN_TAGS,
                          run_key=pending_work_run_key(key, pending, newest_at, now=now))
            for key, (pending, newest_at) in sorted(work.items()) if key not in busy and key not in unregistered
        ],
        dynamic_partitions_requests=registering,
    )


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Keeps the dreaming assets true to the database however users were dreamed: fast-path syncs "
                "(sync_user, POST /v1/pairs with sync, POST /v1/sync) run no Dagster run, so this reports them "
                "as asset materializations with the stages' counts — each sync as its user partition's, or, with "
                "hash buckets, one event per bucket and asset for all of a tick's syncs. After a forget, the "
                "partitions of users left with no memory are deleted with their runs and asset events.",
)
def fast_path_sensor(context: dg.SensorEvaluationContext, dreaming_db: DreamingDatabaseResource):
    layout = Layout.of_sensor_or_skip(context, dreaming_db.database())
    if isinstance(layout, dg.SkipReason):
        return layout
    cursor = json.loads(context.cursor) if context.cursor else {"seq": 0, "forget": 0}
    bucketed = layout.buckets
    try:
        with dreaming_db.database().connect(vectors=False) as conn:
            rows = conn.execute(load_sql("pipeline/fast_path_syncs_since"), {
                "after": cursor["seq"], "training_kg": TRAINING_KG_ID,
                "limit": FAST_PATH_BATCH_BUCKETS if bucketed else FAST_PATH_BATCH}).fetchall()
            last_forget = conn.execute(load_sql("forget/last_forget")).fetchone()["id"]
            forgetting = last_forget != cursor["forget"]
            partitions = [] if bucketed or not forgetting else \
                context.instance.get_dynamic_partitions(users_partitions.name)
            requested = user_request_runs(context.instance) if forgetting else {}
            without_memory = {row["user_id"] for row in conn.execute(
                load_sql("pipeline/users_without_memory"), {"user_ids": sorted({*partitions, *requested})})} \
                if forgetting else set()
    except psycopg.errors.UndefinedTable:
        return dg.SkipReason("the dreaming database has no fast-path record yet (migration 0027 not applied)")
    # Runs that name a user left with no memory go, with their logs; one still going keeps its records until
    # it ends (deleted under a live worker, its later events would be orphans naming the user), and the forget
    # stays unhandled for a later tick to finish.
    gone = [user_id for user_id in partitions if user_id in without_memory and forget_partition(context.instance, user_id)]
    forget_partition_records(context.instance, gone)  # once for the tick's users: it rewrites every asset's status
    finished = all([*(user_id in gone for user_id in partitions if user_id in without_memory),
                    *(forget_runs(context.instance, runs) for user_id, runs in requested.items()
                      if user_id in without_memory)])
    if not finished:
        last_forget = cursor["forget"]
    events = bucket_sync_events(rows, layout) if bucketed else [
        dg.AssetMaterialization(asset_key=asset, partition=row["user_id"], description="fast path sync", metadata={
            **{key: value for key, value in stats.items() if isinstance(value, int | float | str)},
            "path": "fast path", "kg_id": row["kg_id"], "synced_at": row["synced_at"].isoformat(),
            "user_pairs": row["user_pairs"], "graph_subjects": row["graph_subjects"]})
        for row in rows for asset, stats in row["stages"].items()]
    cursor = {"seq": rows[-1]["seq"] if rows else cursor["seq"], "forget": last_forget}
    registering = layout.register_users(context, (row["user_id"] for row in rows),
                                        dreaming_db.settings().dagster_max_user_partitions)[0]
    requests = registering
    if not events and not requests and not gone and last_forget == json.loads(context.cursor or '{"forget": 0}')["forget"]:
        return dg.SkipReason("no fast-path sync or forget since the last look")
    return dg.SensorResult(asset_events=events, dynamic_partitions_requests=requests, cursor=json.dumps(cursor))


def bucket_sync_events(rows, layout: Layout) -> list[dg.AssetMaterialization]:
    """One materialization per bucket and asset for a tick's fast-path syncs: how many syncs and users, and
    each count of the stage summed (the user ids stay in the memory database)."""
    sums: dict[tuple[str, str], dict] = {}
    users: dict[tuple[str, str], set] = defaultdict(set)
    for row in rows:
        bucket = layout.partition_of(row["user_id"])
        for asset, stats in row["stages"].items():
            total = sums.setdefault((bucket, asset), {"syncs": 0, "first_synced_at": row["synced_at"].isoformat()})
            total["syncs"] += 1
            total["last_synced_at"] = row["synced_at"].isoformat()
            users[bucket, asset].add(row["user_id"])
            for key, value in stats.items():
                if isinstance(value, int | float) and not isinstance(value, bool) and key != "seconds":
                    total[key] = total.get(key, 0) + value
    return [dg.AssetMaterialization(asset_key=asset, partition=bucket, description="fast path syncs",
                                    metadata={"path": "fast path", **total, "users": len(users[bucket, asset])})
            for (bucket, asset), total in sorted(sums.items())]


def forget_partition(instance: dg.DagsterInstance, user_id: str) -> bool:
    """Delete the runs of a user's partition (:func:`forget_runs`) and the partition; False, deleting nothing,
    while one of its runs is still queued or running. The partition's other records in Dagster's storage go
    after (defs/partition_records.py)."""
    if not forget_runs(instance, instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": user_id}))):
        return False
    # Deleted here rather than by the tick's request: the daemon records a tick's requests in the tick.
    instance.delete_dynamic_partition(users_partitions.name, user_id)
    return True


def forget_runs(instance: dg.DagsterInstance, runs: list[dg.DagsterRun]) -> bool:
    """Delete ``runs`` with their event logs, asset check results and captured compute logs (a log may quote
    memory); False, deleting nothing, while one of them is not finished."""
    if not all(run.is_finished for run in runs):
        return False
    for run in runs:
        instance.compute_log_manager.delete_logs(prefix=[run.run_id])
        instance.delete_run(run.run_id)
    forget_runs_records(instance, [run.run_id for run in runs])
    return True


# How many of the latest user_memory_job runs a forget looks through for the users it erased.
USER_REQUEST_RUNS_SCANNED = 1_000


def user_request_runs(instance: dg.DagsterInstance) -> dict[str, list[dg.DagsterRun]]:
    """The latest runs of user_memory_job by the user their config names (the config holds the user id in
    either partitioning, so an erased user's runs must go too)."""
    by_user: dict[str, list[dg.DagsterRun]] = defaultdict(list)
    for run in instance.get_runs(filters=dg.RunsFilter(job_name=USER_MEMORY_JOB), limit=USER_REQUEST_RUNS_SCANNED):
        user_id = (run.run_config or {}).get("ops", {}).get("user_request", {}).get("config", {}).get("user_id")
        if isinstance(user_id, str):
            by_user[user_id].append(run)
    return by_user
