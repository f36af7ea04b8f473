"""The run launcher of a single-machine instance (`dreaming ui`, `make demo`): Dagster's default launcher, plus
the one thing it lacks for run monitoring: telling whether a started run's worker process still exists.

Without that, a run whose worker died with the UI (Ctrl-C, a kill, a reboot) stays "Started" forever: it
holds a run slot and its user's partition (one run a partition), and the sensors never ask for that user
again. With it, the daemon's run monitoring (dagster.yaml: run_monitoring) marks such a run failed within
one poll interval. The worker's pid is the one the worker itself reports when it starts ("Started process
for run"); a pid now held by a younger process, or a zombie, is a dead worker. It judges processes of this
machine only: configure it where the code servers run beside the daemon (deploy/ uses the K8s launcher).
"""

from __future__ import annotations

import psutil
from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus

WORKER_STARTED = "Started process for run"
# A worker's process starts a moment before it reports its pid; a process younger than the report by more
# than this holds a recycled pid.
PID_REUSE_MARGIN_S = 5.0


class LocalRunLauncher(DefaultRunLauncher):
    """:class:`dagster.DefaultRunLauncher` whose runs' workers the run monitoring daemon can check."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        started = worker_started(self._instance, run.run_id)
        if started is None:  # not launched by a code server (`dagster job execute`): not ours to judge
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no worker process recorded for this run")
        pid, reported_at = started
        return CheckRunHealthResult(*worker_status(pid, reported_at))


def worker_started(instance, run_id: str) -> tuple[int, float] | None:
    """(pid, when it was reported) of the run's latest worker, from its "Started process for run" event."""
    for record in reversed(instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)):
        event = record.dagster_event
        if event is None or not (event.message or "").startswith(WORKER_STARTED):
            continue
        metadata = event.engine_event_data.metadata if event.engine_event_data else {}
        pid = metadata.get("pid")
        if pid is not None:
            return int(pid.value), record.timestamp
    return None


def worker_status(pid: int, reported_at: float) -> tuple[WorkerStatus, str]:
    """Whether the worker ``pid`` that reported itself at ``reported_at`` (epoch seconds) still runs."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return WorkerStatus.NOT_FOUND, f"the run worker (pid {pid}) has exited"
        if process.create_time() > reported_at + PID_REUSE_MARGIN_S:
            return WorkerStatus.NOT_FOUND, f"the run worker (pid {pid}) has exited; the pid is another process's now"
    except psutil.NoSuchProcess:
        return WorkerStatus.NOT_FOUND, f"the run worker (pid {pid}) has exited"
    return WorkerStatus.RUNNING, f"the run worker (pid {pid}) is running"
