"""What the sensors know of Dagster's run queue, so sensor work never piles up behind itself.

A sensor asks for a partition's run (a user's, or a bucket's) only when that partition has none of the job
queued or running: the queue then holds at most one sensor run a partition and job, however slowly it drains
(a run key alone re-requests the same work every retry window while the first request still waits). Sensor
runs carry a lower priority than the default, so a run a person asked for — a backfill, a rebuild, a
forget — goes ahead of them in the queued run coordinator.
"""

import dagster as dg

IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]
# The jobs over the users' partitions: a switch of partitioning waits for their runs.
PARTITIONED_JOBS = ("dreaming_job", "rebuild_user_graph", "consolidation_job")
# Dagster's run priority tag: higher launches first, the default is 0.
SENSOR_RUN_TAGS = {"dagster/priority": "-1"}


def partitions_in_flight(instance: dg.DagsterInstance, job_name: str) -> set[str]:
    """The partitions (users or buckets) with a run of ``job_name`` queued or running."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT))
    return {run.tags["dagster/partition"] for run in runs if "dagster/partition" in run.tags}
