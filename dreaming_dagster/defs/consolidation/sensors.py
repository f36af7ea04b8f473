import hashlib
import time

import dagster as dg
import psycopg

from dreaming_dagster.defs.consolidation.jobs import consolidation_job
from dreaming_dagster.defs.partitions import add_new_users, bucket_count, stale_layout
from dreaming_dagster.defs.resources import DreamingDatabaseResource, DreamingPolicyResource
from dreaming_dagster.defs.run_queue import SENSOR_RUN_TAGS, partitions_in_flight
from dreaming_dagster.pipeline import buckets
from dreaming_dagster.pipeline.pending_work import RETRY_AFTER_SECONDS, TRAINING_KG_ID
from dreaming_dagster.sql import load_sql


def dream_run_key(user_id: str, last_pass_id: str | None, now: float) -> str:
    """One key per user and last pass: a crossing is requested once. The retry window re-requests it once
    RETRY_AFTER_SECONDS have passed if the pass left the counter over the threshold (it failed, or found
    nothing new yet)."""
    return f"dream:{user_id}:{last_pass_id or 'first'}:{int(now // RETRY_AFTER_SECONDS)}"


@dg.sensor(
    job=consolidation_job,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests a consolidation pass for every user whose saved tokens since the last pass reached "
                "the token threshold (dreaming_policy.dream_token_threshold, DREAMING_DREAM_TOKEN_THRESHOLD), "
                "or one for each hash bucket holding such users; never while that partition's pass is queued "
                "or running.",
)
def token_budget_sensor(context: dg.SensorEvaluationContext, dreaming_db: DreamingDatabaseResource,
                        dreaming_policy: DreamingPolicyResource):
    stale = stale_layout(dreaming_db.database())
    if stale:
        return dg.SkipReason(stale)
    threshold = dreaming_policy.settings().dream_token_threshold
    try:
        with dreaming_db.database().connect(vectors=False) as conn:
            rows = conn.execute(load_sql("dreaming/users_over_budget"),
                                {"threshold": threshold, "training_kg": TRAINING_KG_ID}).fetchall()
    except psycopg.errors.UndefinedTable:
        return dg.SkipReason("the dreaming database has no tables yet")
    if not rows:
        return dg.SkipReason(f"no user has {threshold:,} new tokens")
    by_user: dict[str, str | None] = {}
    for row in rows:
        by_user.setdefault(row["user_id"], row["last_pass_id"])
    busy = partitions_in_flight(context.instance, consolidation_job.name)
    now = time.time()
    if bucket_count():  # one pass a bucket over its users past the threshold; the key: its users' last passes
        grouped = buckets.group_by_bucket(by_user, bucket_count())
        return dg.SensorResult(run_requests=[
            dg.RunRequest(partition_key=key, tags=SENSOR_RUN_TAGS, run_key=dream_run_key(
                key, hashlib.md5("".join(f"{u}:{by_user[u]}" for u in sorted(users)).encode()).hexdigest(), now))
            for key, users in sorted(grouped.items()) if key not in busy])
    registering, unregistered = add_new_users(context, by_user, dreaming_db.settings().dagster_max_user_partitions)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=user, run_key=dream_run_key(user, last_pass, now),
                                    tags=SENSOR_RUN_TAGS)
                      for user, last_pass in by_user.items() if user not in busy and user not in unregistered],
        dynamic_partitions_requests=registering,
    )
