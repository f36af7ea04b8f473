"""Rebuilding users' graphs from their stored pairs (``dreaming dagster rebuild``): an asset backfill of their
partitions, which the daemon runs."""

import time

import dagster as dg

from dreaming_dagster.defs.layout import Layout, users_partitions
from dreaming_dagster.defs.run_queue import REBUILD_JOB


def request_rebuild(instance: dg.DagsterInstance, loaded: dg.Definitions, user_ids: list[str]) -> tuple[str, list[str]]:
    """Queue a rebuild of ``user_ids``' graphs as an asset backfill of the dreaming assets (the daemon runs it):
    its status follows its runs, where a job backfill from Dagster's command line reads complete as soon as
    its runs are submitted. Returns the backfill id and the partitions it covers (the users, or with hash
    buckets the buckets holding them: every user of those buckets is rebuilt)."""
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    job = loaded.resolve_job_def(REBUILD_JOB)
    layout = Layout.of_partitions(job.partitions_def)
    partitions = sorted(layout.partitions_of(user_ids))
    if layout.per_user:
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


def rebuild_users(settings, loaded: dg.Definitions, user_ids: list[str]) -> tuple[str, list[str]]:
    """:func:`request_rebuild` on the project's Dagster instance."""
    from dreaming_dagster.dagster_env import configure_dagster_environment

    configure_dagster_environment(settings)
    with dg.DagsterInstance.get() as instance:
        return request_rebuild(instance, loaded, user_ids)
