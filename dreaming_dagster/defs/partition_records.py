"""What Dagster's storage still holds of an erased user once their runs are deleted. With one partition a user
the partition key is the user id, and it stays in: the partition's runless events (the fast-path syncs that
fast_path_sensor reports), asset check results (Dagster's run deletion leaves them), sensor ticks that
registered or deleted the partition, and the assets' cached partition status. Deleted here through Dagster's own
table definitions, so it works on any SQL storage (Postgres, or the SQLite of a test instance); Dagster's
open-source storages offer no API for it (``wipe_asset_partitions`` is not implemented for them).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    AssetEventTagsTable,
    SqlEventLogStorageTable,
)
from dagster._core.storage.schedules.schema import JobTickTable


def forget_runs_records(instance: dg.DagsterInstance, run_ids: Sequence[str]) -> None:
    """The asset check results of deleted runs (``instance.delete_run`` leaves them; one of a failed dreaming
    run names the user in its "retry_now" command)."""
    if run_ids:
        with instance.event_log_storage.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.run_id.in_(run_ids)))


def forget_partition_records(instance: dg.DagsterInstance, partition_keys: Sequence[str]) -> None:
    """Every record of ``partition_keys`` left in Dagster's storage after their runs were deleted (see the
    module's docstring). Call it only for keys that are user ids."""
    if not partition_keys:
        return
    events = SqlEventLogStorageTable
    with instance.event_log_storage.index_connection() as conn:
        ids = [row[0] for row in conn.execute(
            events.select().with_only_columns(events.c.id).where(events.c.partition.in_(partition_keys)))]
        for start in range(0, len(ids), 1000):
            conn.execute(AssetEventTagsTable.delete().where(AssetEventTagsTable.c.event_id.in_(ids[start:start + 1000])))
        conn.execute(events.delete().where(events.c.partition.in_(partition_keys)))
        conn.execute(AssetCheckExecutionsTable.delete().where(
            AssetCheckExecutionsTable.c.partition.in_(partition_keys)))
    # A tick body is JSON naming the key in the partitions it added and in its run requests and run keys
    # ("alice:3:…"): a tick holding it anywhere goes (a tick of a user whose id holds this one's too).
    with instance.schedule_storage.connect() as conn:
        for key in partition_keys:
            holding = "%" + key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            conn.execute(JobTickTable.delete().where(JobTickTable.c.tick_body.like(holding, escape="\\")))
    # The cached status lists each asset's materialized partitions; it is rebuilt from the events on next read.
    instance.wipe_asset_cached_status(list(instance.get_asset_keys()))
