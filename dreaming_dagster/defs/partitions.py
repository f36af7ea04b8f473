"""How the dreaming assets are partitioned: one partition a user, or hash buckets of users.

The deployment's choice lives in the memory database (``dreaming dagster partitioning``, pipeline/buckets.py);
the code location reads it once as it loads (:func:`use_deployment_layout`), before the assets are built.
"""

from dataclasses import dataclass

import dagster as dg

from dreaming_dagster.pipeline import buckets as bucketing
from dreaming_dagster.sql import load_sql

# One partition per user id; added by the sensors (or the demo) as users appear.
users_partitions = dg.DynamicPartitionsDefinition(name="users")

_layout = {"buckets": 0, "built": False}


def use_layout(buckets: int) -> None:
    """Partition the assets built from now on into ``buckets`` hash buckets (0: one partition a user)."""
    if _layout["built"] and buckets != _layout["buckets"]:
        raise RuntimeError("the dreaming assets were built before the deployment's partitioning was read; "
                           "load them through dreaming_dagster.definitions")
    _layout["buckets"] = buckets


def use_deployment_layout() -> int:
    """Read the deployment's partitioning from the memory database. A deployment whose embedded database
    was never created has none yet: one partition a user."""
    from dreaming_dagster.config.runtime import default_database, default_settings

    settings = default_settings()
    never_created = settings.uses_embedded_database and not (settings.pgdata_dir / "PG_VERSION").exists()
    use_layout(0 if never_created else bucketing.read_layout(default_database()))
    return _layout["buckets"]


def stale_layout(database) -> str | None:
    """Why this code location must be reloaded before it asks for runs, or None: the deployment's partitioning
    changed since it loaded (`dreaming dagster partitioning`), and a run it requested now would name
    partitions the runs' own processes, loading the new layout, do not have."""
    if not _layout["built"]:
        return None
    recorded = bucketing.read_layout(database)
    if recorded == _layout["buckets"]:
        return None
    return (f"the partitioning changed to {bucketing.describe_layout(recorded)} since this code location loaded "
            f"({bucketing.describe_layout(_layout['buckets'])}): reload it (restart `dreaming ui`, or Reload in "
            "the UI's code locations) before it requests runs")


def bucket_count() -> int:
    """The active bucket count; 0 when each user is a partition."""
    return _layout["buckets"]


def dreaming_partitions() -> dg.PartitionsDefinition:
    """The partitions of every per-user asset: ``users`` (dynamic), or the buckets (static)."""
    _layout["built"] = True
    count = _layout["buckets"]
    return dg.StaticPartitionsDefinition(bucketing.bucket_keys(count)) if count else users_partitions


def add_new_users(context: dg.SensorEvaluationContext, user_ids, most: int) -> tuple[list, set[str]]:
    """The request that registers, as ``users`` partitions, those of ``user_ids`` the instance lacks, up to
    ``most`` partitions in all; and the users left unregistered (their runs cannot be requested). With
    buckets, nothing: a bucket holds whoever hashes into it."""
    if bucket_count():
        return [], set()
    known = set(context.instance.get_dynamic_partitions(users_partitions.name))
    new_users = [user for user in dict.fromkeys(user_ids) if user not in known]
    room = max(0, most - len(known))
    refused = set(new_users[room:])
    if refused:
        context.log.warning(f"{len(known):,} user partitions: {len(refused):,} new user(s) left unregistered "
                            f"(DREAMING_DAGSTER_MAX_USER_PARTITIONS is {most:,}); switch to hash buckets with "
                            "`dreaming dagster partitioning --buckets 16` (docs/deploy.md)")
    new_users = new_users[:room]
    return ([users_partitions.build_add_request(new_users)] if new_users else []), refused


def partition_users(context: dg.AssetExecutionContext, database) -> list[str]:
    """The users a step covers. One partition a user: the partition's. Buckets: the users fixed for this run
    (and its re-executions) by its first step, :func:`start_bucket_run`."""
    if not bucket_count():
        return [context.partition_key]
    run_id = context.run.root_run_id or context.run_id
    with database.connect(vectors=False) as conn:
        return [row["user_id"] for row in conn.execute(load_sql("dagster/bucket_run_users"), {"run_id": run_id})]


def start_bucket_run(context: dg.AssetExecutionContext, database, *, every_user: bool = False) -> list[str]:
    """Fix the users this bucket run dreams: those of its buckets with pending work now (every user of the
    buckets for a rebuild), kept in ``bucket_run_users`` for the later steps. One partition a user: the
    partition's."""
    from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID, pending_work_params

    if not bucket_count():
        return [context.partition_key]
    count = bucket_count()
    indices = [bucketing.bucket_index(key) for key in context.partition_keys]
    with database.connect(vectors=False) as conn:
        if every_user:
            rows = conn.execute(load_sql("dagster/users_in_buckets"),
                                {"buckets": count, "indices": indices, "training_kg": TRAINING_KG_ID})
            users = [row["user_id"] for row in rows]
        else:
            wanted = set(indices)
            rows = conn.execute(load_sql("memory_pairs/users_with_pending_work"), pending_work_params())
            users = [row["user_id"] for row in rows if bucketing.bucket_of(row["user_id"], count) in wanted]
        conn.execute(load_sql("dagster/add_bucket_run_users"),
                     {"run_id": context.run.root_run_id or context.run_id, "user_ids": users})
    return partition_users(context, database)


def finish_bucket_run(context: dg.AssetExecutionContext, database) -> None:
    """The run's last step: its user list is no longer needed, nor the day-old lists of runs no longer queued
    or running (a run that died before its last step); a list of a run still going stays, however old."""
    from dreaming_dagster.defs.run_queue import IN_FLIGHT

    if bucket_count():
        live = {run.root_run_id or run.run_id for run in context.instance.get_runs(
            filters=dg.RunsFilter(statuses=IN_FLIGHT))}
        with database.connect(vectors=False) as conn:
            conn.execute(load_sql("dagster/finish_bucket_run"), {
                "run_id": context.run.root_run_id or context.run_id, "live_run_ids": sorted(live)})


@dataclass
class Switch:
    """What a change of partitioning did (``dreaming dagster partitioning``)."""

    canceled: int = 0  # runs of the old partitions, queued or running, canceled (--force)
    registered: int = 0  # users registered as partitions (back to one partition a user)
    reconciled: int = 0  # users shown dreamed again whose last per-user run had failed or was canceled


class RunsInFlightError(RuntimeError):
    pass


def switch_partitioning(instance: dg.DagsterInstance, database, buckets: int, *, force: bool,
                        max_user_partitions: int) -> Switch:
    """Record ``buckets`` (0: one partition a user) as the deployment's partitioning.

    Runs of the partitioned jobs still queued or running name partitions the new layout does not have: without
    ``force`` the switch is refused (RunsInFlightError); with it they are canceled, so none fails later on a
    partition that no longer exists. Back to one partition a user, every user with memory is registered (up to
    ``max_user_partitions``), and a user whose latest per-user run failed or was canceled while the buckets
    dreamed them — no work left now — gets the stage assets' materializations, so the UI shows what the memory
    holds instead of a failure."""
    from dreaming_dagster.defs.run_queue import IN_FLIGHT, PARTITIONED_JOBS
    from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID, pending_work_params
    from dreaming_dagster.pipeline.sync import STAGES

    switch = Switch()
    busy = [run for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT))
            if run.job_name in PARTITIONED_JOBS]
    if busy and not force:
        raise RunsInFlightError(f"{len(busy)} dreaming run(s) queued or running: let them finish (or cancel "
                                "them), or pass --force to cancel them")
    for run in busy:
        instance.run_coordinator.cancel_run(run.run_id)
        if not instance.get_run_by_id(run.run_id).is_finished:  # its worker could not be reached: stop it here
            instance.report_run_canceled(run, "canceled by a change of partitioning")
        switch.canceled += 1
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
        job_name="dreaming_job", statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]))}
    stale = sorted(user for user in (set(users) & (known | set(new)) & ended_badly) - pending
                   if instance.get_runs(filters=dg.RunsFilter(job_name="dreaming_job", tags={"dagster/partition": user}),
                                        limit=1)[0].status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED))
    for user in stale:
        for stage in STAGES:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=stage.asset, partition=user, description="dreamed while the deployment was partitioned "
                "by hash buckets (`dreaming dagster partitioning`)", metadata={"path": "partitioning switch"}))
    switch.reconciled = len(stale)
    return switch


def request_rebuild(instance: dg.DagsterInstance, loaded: dg.Definitions, user_ids: list[str]) -> tuple[str, list[str]]:
    """Queue a rebuild of ``user_ids``' graphs as an asset backfill of the dreaming assets (the daemon runs it):
    its status follows its runs, where a job backfill from Dagster's command line reads complete as soon as
    its runs are submitted. Returns the backfill id and the partitions it covers (the users, or with hash
    buckets the buckets holding them: every user of those buckets is rebuilt)."""
    import time

    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    job = loaded.resolve_job_def("rebuild_user_graph")
    count = bucket_count()
    partitions = sorted(bucketing.group_by_bucket(user_ids, count)) if count else sorted(set(user_ids))
    if not count:
        known = set(instance.get_dynamic_partitions(users_partitions.name))
        missing = [user for user in partitions if user not in known]
        if missing:
            raise ValueError(f"not a users partition (no memory dreamed yet?): {', '.join(missing[:5])}")
    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(), asset_graph=loaded.resolve_asset_graph(), partition_names=partitions,
        asset_selection=sorted(job.asset_layer.executable_asset_keys, key=str), backfill_timestamp=time.time(),
        tags={}, dynamic_partitions_store=instance, all_partitions=False,
        title=f"rebuild {len(user_ids)} user graph(s)", description=None,
        run_config={"ops": {"pair_subjects": {"config": {"rebuild": True}},
                            "memory_pairs": {"config": {"every_user": True}}}})
    instance.add_backfill(backfill)
    return backfill.backfill_id, partitions


def current_partitioning() -> int:
    """The deployment's partitioning as recorded in the memory database (0: one partition a user)."""
    from dreaming_dagster.memory import ready_database

    return bucketing.read_layout(ready_database(None))


def change_partitioning(settings, buckets: int, *, force: bool) -> tuple[int, Switch]:
    """Switch the deployment to ``buckets`` (0: one partition a user) on the project's Dagster instance:
    :func:`switch_partitioning`, returning the partitioning it replaced too."""
    from dreaming_dagster.config.dagster_env import configure_dagster_environment
    from dreaming_dagster.memory import ready_database

    database = ready_database(None)
    previous = bucketing.read_layout(database)
    configure_dagster_environment(settings)
    with dg.DagsterInstance.get() as instance:
        switch = switch_partitioning(instance, database, buckets, force=force,
                                     max_user_partitions=settings.dagster_max_user_partitions)
    return previous, switch


def rebuild_users(settings, loaded: dg.Definitions, user_ids: list[str]) -> tuple[str, list[str]]:
    """:func:`request_rebuild` on the project's Dagster instance."""
    from dreaming_dagster.config.dagster_env import configure_dagster_environment

    configure_dagster_environment(settings)
    with dg.DagsterInstance.get() as instance:
        return request_rebuild(instance, loaded, user_ids)
