"""The one place that knows how the dreaming assets are partitioned: one partition a user, or hash buckets.

The deployment's choice lives in the memory database (``dreaming dagster partitioning``, pipeline/buckets.py).
The code location reads it once as it loads (:func:`deployment_layout`) and builds its definitions for it
(:meth:`Layout.definitions`). Everything else asks the definitions it runs in (:meth:`Layout.of_partitions`):
a step for the users it covers (:func:`dreaming_step`), a sensor for the partitions it requests.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import dagster as dg

from dreaming_dagster.defs.run_queue import DREAMING_JOB
from dreaming_dagster.pipeline import buckets as bucketing
from dreaming_dagster.sql import load_sql

# One partition per user id; added by the sensors (or the demo) as users appear. The assets are declared
# with it; a bucket layout re-partitions them as the code location loads.
users_partitions = dg.DynamicPartitionsDefinition(name="users")

# A rebuild or backfill of buckets launches runs of up to this many buckets (one process each).
BUCKETS_PER_BACKFILL_RUN = 4


@dataclass(frozen=True)
class Step:
    """The users one step of a partitioned run covers."""

    users: list[str]
    user: str | None  # the partition's user, one partition a user; None for a bucket (its metadata names no user)

    @property
    def isolates_failures(self) -> bool:
        """A bucket step logs a user's failure and goes on with the others (the user's work stays pending)."""
        return self.user is None


@dataclass(frozen=True)
class Layout:
    buckets: int = 0  # 0: one partition a user

    @classmethod
    def of_partitions(cls, partitions_def: dg.PartitionsDefinition | None) -> "Layout":
        """The layout the definitions holding ``partitions_def`` were built for."""
        if isinstance(partitions_def, dg.StaticPartitionsDefinition):
            return cls(len(partitions_def.get_partition_keys()))
        return cls(0)

    @classmethod
    def of_sensor_or_skip(cls, context: dg.SensorEvaluationContext, database) -> "Layout | dg.SkipReason":
        """The layout of the code location a sensor is evaluated in, or the reason to ask for nothing this
        tick: the deployment's partitioning changed since that code location loaded (:meth:`stale`)."""
        if context.repository_def is None:
            raise ValueError("the sensor context has no definitions: build it with definitions=defs()")
        layout = cls.of_partitions(context.repository_def.get_job(DREAMING_JOB).partitions_def)
        stale = layout.stale(database)
        return dg.SkipReason(stale) if stale else layout

    @property
    def per_user(self) -> bool:
        return not self.buckets

    def describe(self) -> str:
        return bucketing.describe_layout(self.buckets)

    @property
    def partitions_def(self) -> dg.PartitionsDefinition:
        return dg.StaticPartitionsDefinition(bucketing.bucket_keys(self.buckets)) if self.buckets else users_partitions

    def definitions(self, loaded: dg.Definitions) -> dg.Definitions:
        """``loaded`` (declared one partition a user) with its per-user assets partitioned by this layout: a
        bucket layout gives them the bucket partitions and a backfill policy of a few buckets a run."""
        if self.per_user:
            return loaded
        policy = dg.BackfillPolicy.multi_run(BUCKETS_PER_BACKFILL_RUN)

        def partitioned(assets):
            if not isinstance(assets, dg.AssetsDefinition) or assets.partitions_def != users_partitions:
                return assets
            return assets.with_attributes(backfill_policy=policy).map_asset_specs(
                lambda spec: spec.replace_attributes(partitions_def=self.partitions_def))

        return dg.Definitions(
            assets=[partitioned(assets) for assets in loaded.assets or []], asset_checks=loaded.asset_checks,
            schedules=loaded.schedules, sensors=loaded.sensors, jobs=loaded.jobs, resources=loaded.resources,
            executor=loaded.executor, loggers=loaded.loggers, metadata=loaded.metadata,
            component_tree=loaded.component_tree)

    def partition_of(self, user_id: str) -> str:
        return bucketing.bucket_key_of(user_id, self.buckets) if self.buckets else user_id

    def partitions_of(self, user_ids: Iterable[str]) -> dict[str, list[str]]:
        """``user_ids`` by the partition holding them."""
        grouped: dict[str, list[str]] = defaultdict(list)
        for user_id in dict.fromkeys(user_ids):
            grouped[self.partition_of(user_id)].append(user_id)
        return dict(grouped)

    def partition_keys(self, instance: dg.DagsterInstance) -> list[str]:
        """Every partition, in order."""
        return bucketing.bucket_keys(self.buckets) if self.buckets else \
            instance.get_dynamic_partitions(users_partitions.name)

    def register_users(self, context, user_ids: Iterable[str], most: int) -> tuple[list, set[str]]:
        """The request that registers, as ``users`` partitions, those of ``user_ids`` the instance lacks, up
        to ``most`` partitions in all; and the users left unregistered (their runs cannot be requested). With
        buckets, nothing: a bucket holds whoever hashes into it."""
        if self.buckets:
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

    def stale(self, database) -> str | None:
        """Why a code location built for this layout must be reloaded before it asks for runs, or None: the
        deployment's partitioning changed since it loaded, and a run it requested now would name partitions
        the runs' own processes, loading the new layout, do not have."""
        recorded = bucketing.read_layout(database)
        if recorded == self.buckets:
            return None
        return (f"the partitioning changed to {bucketing.describe_layout(recorded)} since this code location "
                f"loaded ({self.describe()}): reload it (restart `dreaming ui`, or Reload in the UI's code "
                "locations) before it requests runs")


def deployment_layout() -> Layout:
    """The deployment's partitioning, read from the memory database. A deployment whose embedded database was
    never created has none yet: one partition a user."""
    from dreaming_dagster.process_defaults import default_database, default_settings

    settings = default_settings()
    never_created = settings.uses_embedded_database and not (settings.pgdata_dir / "PG_VERSION").exists()
    return Layout(0 if never_created else bucketing.read_layout(default_database()))


def _run_id(context: dg.AssetExecutionContext) -> str:
    return context.run.root_run_id or context.run_id


def dreaming_step(context: dg.AssetExecutionContext, database) -> Step:
    """The users this step covers. One partition a user: the partition's. Buckets: the users fixed for this
    run (and its re-executions) by its first step, :func:`start_dreaming_run`."""
    if Layout.of_partitions(context.assets_def.partitions_def).per_user:
        return Step([context.partition_key], context.partition_key)
    with database.connect(vectors=False) as conn:
        rows = conn.execute(load_sql("dagster/bucket_run_users"), {"run_id": _run_id(context)})
        return Step([row["user_id"] for row in rows], None)


def start_dreaming_run(context: dg.AssetExecutionContext, database, *, every_user: bool = False) -> Step:
    """The run's first step. Buckets: fix the users this run dreams — those of its buckets with pending work
    now (every user of the buckets for a rebuild) — in ``bucket_run_users`` for the later steps."""
    from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID, pending_work_params

    layout = Layout.of_partitions(context.assets_def.partitions_def)
    if layout.buckets:
        indices = [bucketing.bucket_index(key) for key in context.partition_keys]
        with database.connect(vectors=False) as conn:
            if every_user:
                rows = conn.execute(load_sql("dagster/users_in_buckets"),
                                    {"buckets": layout.buckets, "indices": indices, "training_kg": TRAINING_KG_ID})
                users = [row["user_id"] for row in rows]
            else:
                wanted = set(indices)
                rows = conn.execute(load_sql("memory_pairs/users_with_pending_work"), pending_work_params())
                users = [row["user_id"] for row in rows if bucketing.bucket_of(row["user_id"], layout.buckets) in wanted]
            conn.execute(load_sql("dagster/add_bucket_run_users"), {"run_id": _run_id(context), "user_ids": users})
    return dreaming_step(context, database)  # the stored list: a re-executed run keeps its first users too


def finish_dreaming_run(context: dg.AssetExecutionContext, database) -> None:
    """The run's last step. Buckets: the run's user list is no longer needed, nor the day-old lists of runs
    no longer queued or running (a run that died before its last step); a list of a run still going stays,
    however old."""
    from dreaming_dagster.defs.run_queue import IN_FLIGHT

    if Layout.of_partitions(context.assets_def.partitions_def).per_user:
        return
    live = {run.root_run_id or run.run_id for run in context.instance.get_runs(
        filters=dg.RunsFilter(statuses=IN_FLIGHT))}
    with database.connect(vectors=False) as conn:
        conn.execute(load_sql("dagster/finish_bucket_run"), {"run_id": _run_id(context), "live_run_ids": sorted(live)})
