import hashlib
import time

import dagster as dg
import psycopg

from dreaming_dagster.defs.consolidation.jobs import consolidation_job
from dreaming_dagster.defs.layout import Layout
from dreaming_dagster.defs.resources import DreamingDatabaseResource, DreamingPolicyResource
from dreaming_dagster.defs.run_queue import SENSOR_RUN_TAGS, partitions_in_flight
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
    layout = Layout.of_sensor_or_skip(context, dreaming_db.database())
    if isinstance(layout, dg.SkipReason):
        return layout
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
    busy = partitions_in_flight(context.instance, consolidation_job.name, layout)
    registering, unregistered = layout.register_users(context, by_user,
                                                      dreaming_db.settings().dagster_max_user_partitions)
    now = time.time()
    # One pass a partition (a user, or a bucket over its users past the threshold), keyed by its users' last passes.
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, tags=SENSOR_RUN_TAGS,
                                    run_key=dream_run_key(key, last_passes(users, by_user), now))
                      for key, users in sorted(layout.partitions_of(by_user).items())
                      if key not in busy and key not in unregistered],
        dynamic_partitions_requests=registering,
    )


def last_passes(users: list[str], by_user: dict[str, str | None]) -> str | None:
    """What a partition's users' last passes were: a user's own pass id, or a fingerprint of a bucket's."""
    if len(users) == 1:
        return by_user[users[0]]
    return hashlib.md5("".join(f"{user}:{by_user[user]}" for user in sorted(users)).encode()).hexdigest()
