import time

import dagster as dg
import psycopg

from dreaming_dagster.defs.partitions import add_new_users
from dreaming_dagster.defs.pipeline.jobs import dreaming_job
from dreaming_dagster.defs.resources import DreamingDatabaseResource
from dreaming_dagster.pipeline.pending_work import (
    RETRY_AFTER_SECONDS,
    extraction_retry_params,
    pending_work_run_key,
)
from dreaming_dagster.sql import load_sql


@dg.sensor(
    job=dreaming_job,
    minimum_interval_seconds=30,  # the batch window: five messages in 30 s make one run, not five
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Finds users with pairs waiting for work (one SQL query over partial indexes), registers "
                "new users as partitions and requests one dreaming run per user and state of work (the same "
                f"work is requested again after {RETRY_AFTER_SECONDS // 60} minutes if it is still pending).",
)
def pending_pairs_sensor(context: dg.SensorEvaluationContext, dreaming_db: DreamingDatabaseResource):
    try:
        with dreaming_db.database().connect(vectors=False) as conn:
            rows = conn.execute(load_sql("memory_pairs/users_with_pending_work"),
                                extraction_retry_params()).fetchall()
    except psycopg.errors.UndefinedTable:
        return dg.SkipReason("the dreaming database has no tables yet (nothing was ever saved)")
    if not rows:
        return dg.SkipReason("no user has pending work")
    return dg.SensorResult(
        run_requests=[
            # Same pending work, same key: launched once (and retried after a window if it stays pending).
            dg.RunRequest(partition_key=row["user_id"],
                          run_key=pending_work_run_key(row["user_id"], row["pending"], row["newest_at"],
                                                       now=time.time()))
            for row in rows
        ],
        dynamic_partitions_requests=add_new_users(context.instance, (row["user_id"] for row in rows)),
    )
