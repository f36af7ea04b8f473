"""Switching how the dreaming assets are partitioned (``dreaming dagster partitioning``): a partition a user, or
hash buckets of users. How each layout partitions is defs/layout.py's."""

import time
from dataclasses import dataclass

import dagster as dg

from dreaming_dagster.defs.layout import users_partitions
from dreaming_dagster.defs.run_queue import DREAMING_JOB, WILL_RETRY_TAG
from dreaming_dagster.pipeline import buckets as bucketing
from dreaming_dagster.sql import load_sql


@dataclass
class Switch:
    """What a change of partitioning did (``dreaming dagster partitioning``)."""

    canceled: int = 0  # runs of the old partitions, queued or running, canceled (--force)
    backfills_canceled: int = 0  # backfills of the old partitions still requesting runs (--force)
    not_seen_stopping: int = 0  # canceled runs still running after CANCEL_WAIT_SECONDS, marked canceled anyway
    registered: int = 0  # users registered as partitions (back to one partition a user)
    reconciled: int = 0  # users shown dreamed again whose last per-user run had failed or was canceled


# How long a switch with --force waits for the runs it stops to end before marking them canceled anyway.
CANCEL_WAIT_SECONDS = 60.0


class RunsInFlightError(RuntimeError):
    pass


def switch_partitioning(instance: dg.DagsterInstance, database, buckets: int, *, force: bool,
                        max_user_partitions: int) -> Switch:
    """Record ``buckets`` (0: one partition a user) as the deployment's partitioning.

    Runs of the partitioned jobs still queued, running or waiting to be retried, and backfills still requesting
    runs, name partitions the new layout does not have: without ``force`` the switch is refused
    (RunsInFlightError); with it they are canceled — a running one is waited for until it has stopped, up to
    CANCEL_WAIT_SECONDS — so none fails later on a partition that no longer exists. Back to one partition a user, every user with memory is registered (up to
    ``max_user_partitions``), and a user whose latest per-user run failed or was canceled while the buckets
    dreamed them — no work left now — gets the stage assets' materializations, so the UI shows what the memory
    holds instead of a failure."""
    from dagster._core.execution.backfill import BulkActionStatus

    from dreaming_dagster.defs.run_queue import PARTITIONED_JOBS, runs_in_flight
    from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID, pending_work_params
    from dreaming_dagster.pipeline.sync import STAGES

    switch = Switch()
    busy = [run for run in runs_in_flight(instance) if run.job_name in PARTITIONED_JOBS]
    # A backfill still asking for runs (`dreaming dagster rebuild`) would go on asking for the old partitions.
    backfills = instance.get_backfills(status=BulkActionStatus.REQUESTED)
    if (busy or backfills) and not force:
        raise RunsInFlightError(f"{len(busy)} dreaming run(s) queued or running and {len(backfills)} backfill(s) "
                                "requesting runs: let them finish (or cancel them), or pass --force to cancel them")
    for backfill in backfills:
        instance.update_backfill(backfill.with_status(BulkActionStatus.CANCELING))  # the daemon stops its runs
        switch.backfills_canceled += 1
    stopping = []
    for run in busy:
        if run.is_finished:  # failed, waiting for run_retries: the retry must not come
            instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: "false"})
        elif instance.run_coordinator.cancel_run(run.run_id):
            stopping.append(run)
        elif not instance.get_run_by_id(run.run_id).is_finished:  # its worker could not be reached: stop it here
            instance.report_run_canceled(run, "canceled by a change of partitioning")
        switch.canceled += 1
    # A run told to stop holds its partition until its step has stopped writing, up to a bound.
    deadline = time.monotonic() + CANCEL_WAIT_SECONDS
    while stopping and time.monotonic() < deadline:
        stopping = [run for run in stopping if not instance.get_run_by_id(run.run_id).is_finished]
        time.sleep(0.2 if stopping else 0)
    for run in stopping:
        instance.report_run_canceled(run, f"canceled by a change of partitioning; still running after "
                                          f"{CANCEL_WAIT_SECONDS:.0f} s")
        switch.not_seen_stopping += 1
    bucketing.write_layout(database, buckets)
    if buckets:
        return switch
    with database.connect(vectors=False) as conn:
        users = [row["user_id"] for row in conn.execute(load_sql("dagster/users_with_memory"),
                                                        {"training_kg": TRAINING_KG_ID})]
        pending = {row["user_id"] for row in conn.execute(load_sql("memory_pairs/users_with_pending_work"),
                                                           pending_work_params())}
    known = set(instance.get_dynamic_partitions(users_partitions.name))
    new = [user for user in users if user not in known][:max(0, max_user_partitions - len(known))]
    instance.add_dynamic_partitions(users_partitions.name, new)
    switch.registered = len(new)
    # Only users with a failed or canceled run are candidates; each is shown dreamed if that run is its latest.
    ended_badly = {run.tags.get("dagster/partition") for run in instance.get_runs(filters=dg.RunsFilter(
        job_name=DREAMING_JOB, statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]))}
    stale = sorted(user for user in (set(users) & (known | set(new)) & ended_badly) - pending
                   if instance.get_runs(filters=dg.RunsFilter(job_name=DREAMING_JOB, tags={"dagster/partition": user}),
                                        limit=1)[0].status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED))
    for user in stale:
        for stage in STAGES:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=stage.asset, partition=user, description="dreamed while the deployment was partitioned "
                "by hash buckets (`dreaming dagster partitioning`)", metadata={"path": "partitioning switch"}))
    switch.reconciled = len(stale)
    return switch


def current_partitioning() -> int:
    """The deployment's partitioning as recorded in the memory database (0: one partition a user)."""
    from dreaming_dagster.memory import ready_database

    return bucketing.read_layout(ready_database(None))


def change_partitioning(settings, buckets: int, *, force: bool) -> tuple[int, Switch]:
    """Switch the deployment to ``buckets`` (0: one partition a user) on the project's Dagster instance:
    :func:`switch_partitioning`, returning the partitioning it replaced too."""
    from dreaming_dagster.dagster_env import configure_dagster_environment
    from dreaming_dagster.memory import ready_database

    database = ready_database(None)
    previous = bucketing.read_layout(database)
    configure_dagster_environment(settings)
    with dg.DagsterInstance.get() as instance:
        switch = switch_partitioning(instance, database, buckets, force=force,
                                     max_user_partitions=settings.dagster_max_user_partitions)
    return previous, switch
