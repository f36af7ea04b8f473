"""What the sensors know of Dagster's run queue, so sensor work never piles up behind itself.

A sensor asks for a partition's run (a user's, or a bucket's) only when that partition has none of the job
queued or running: the queue then holds at most one sensor run a partition and job, however slowly it drains
(a run key alone re-requests the same work every retry window while the first request still waits). Sensor
runs carry a lower priority than the default, so a run a person asked for — a backfill, a rebuild, a
forget — goes ahead of them in the queued run coordinator.
"""

import dagster as dg

IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
# Set by Dagster on a failed run that run_retries will launch again (dagster._core.storage.tags.WILL_RETRY_TAG;
# tests/test_dagster.py pins it).
WILL_RETRY_TAG = "dagster/will_retry"

# Each job's name, once: the definitions, the sensors and the partitioning switch read them here.
DREAMING_JOB = "dreaming_job"
REBUILD_JOB = "rebuild_user_graph"
CONSOLIDATION_JOB = "consolidation_job"
USER_MEMORY_JOB = "user_memory_job"
# Dagster's implicit job: the runs of an asset backfill (`dreaming dagster rebuild`) or of assets materialized
# by hand.
ASSET_JOB = "__ASSET_JOB"
# The jobs over the users' partitions: a switch of partitioning waits for their runs.
PARTITIONED_JOBS = (DREAMING_JOB, REBUILD_JOB, CONSOLIDATION_JOB, ASSET_JOB)
# The jobs that write a user's graph stage by stage: a dreaming run and a rebuild of one user never overlap.
GRAPH_WRITING_JOBS = (DREAMING_JOB, REBUILD_JOB, ASSET_JOB)
# Dagster's run priority tag: higher launches first, the default is 0.
SENSOR_RUN_TAGS = {"dagster/priority": "-1"}
# A backfill run over several partitions (BackfillPolicy.multi_run) names its range by these tags instead.
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"


def runs_in_flight(instance: dg.DagsterInstance, job_name: str | None = None) -> list[dg.DagsterRun]:
    """The runs (of ``job_name``, or of any job) queued, running or stopping, and the failed ones run_retries
    will launch again: a relaunch after a restart is in flight before its new run exists."""
    return [*instance.get_runs(filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT)),
            *(run for run in instance.get_runs(filters=dg.RunsFilter(
                job_name=job_name, statuses=[dg.DagsterRunStatus.FAILURE], tags={WILL_RETRY_TAG: "true"}))
              if run.is_complete_and_waiting_to_retry)]


def partitions_in_flight(instance: dg.DagsterInstance, job_names: str | tuple[str, ...], layout) -> set[str]:
    """The partitions (users or buckets, as ``layout`` has them) with a run of any of ``job_names`` in flight
    (:func:`runs_in_flight`), a backfill run's range of partitions included."""
    busy: set[str] = set()
    ordered: list[str] | None = None
    for job_name in (job_names,) if isinstance(job_names, str) else job_names:
        for run in runs_in_flight(instance, job_name):
            if "dagster/partition" in run.tags:
                busy.add(run.tags["dagster/partition"])
            elif RANGE_START in run.tags and RANGE_END in run.tags:
                if ordered is None:
                    ordered = layout.partition_keys(instance)
                start, end = run.tags[RANGE_START], run.tags[RANGE_END]
                if start in ordered and end in ordered:
                    busy.update(ordered[ordered.index(start):ordered.index(end) + 1])
    return busy
