"""The run launcher of a single-machine instance (`dreaming ui`, `make demo`): Dagster's default launcher, with
warm run workers, and the one thing it lacks for run monitoring: telling whether a run's worker still exists.

Warm workers (``warm_workers: true``, the default): a run's process is forked from a server that has the code
location and its libraries loaded (run_workers.py) instead of started as a new interpreter by the code server.
A run whose code is another interpreter's, ``warm_workers: false``, or a fork server that cannot start (its
preload failed: an engine event on the run says why) goes through the code server as Dagster's default
launcher does. Either way the UI's "Terminate" stops the run.

Without that, a run whose worker died with the UI (Ctrl-C, a kill, a reboot) stays "Started" forever: it
holds a run slot and its user's partition (one run a partition), and the sensors never ask for that user
again. With it, the daemon's run monitoring (dagster.yaml: run_monitoring) marks such a run failed within
one poll interval. The worker's pid is the one the worker itself reports when it starts ("Started process
for run"); a pid now held by a younger process, or a zombie, is a dead worker. It judges processes of this
machine only: configure it where the code servers run beside the daemon (deploy/ uses the K8s launcher).
"""

from __future__ import annotations

import os
import signal

import psutil
from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher, Field
from dagster._core.launcher.base import CheckRunHealthResult, LaunchRunContext, WorkerStatus

from dreaming_dagster.instance.run_workers import (
    PRELOAD,
    WORKER_PID_TAG,
    ForkServerUnavailable,
    RunWorkers,
    can_fork_for,
    tagged_worker,
)

WORKER_STARTED = "Started process for run"
# A worker's process starts a moment before it reports its pid; a process younger than the report by more
# than this holds a recycled pid.
PID_REUSE_MARGIN_S = 5.0
# Marks a run whose worker was forked here: it is stopped by a signal, not through the code server.
FORKED_WORKER_TAG = "dreaming/forked_worker"


class LocalRunLauncher(DefaultRunLauncher):
    """:class:`dagster.DefaultRunLauncher` that forks warm run workers, whose workers the run monitoring
    daemon can check."""

    def __init__(self, inst_data=None, warm_workers: bool = True, preload: str = PRELOAD):
        super().__init__(inst_data=inst_data)
        self.workers = RunWorkers(preload) if warm_workers else None

    @classmethod
    def config_type(cls):
        return {"warm_workers": Field(bool, default_value=True, is_required=False, description=(
            "Fork each run's process from a server with the code location loaded (false: a new process "
            "from the code server, Dagster's default)."))}

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if self.workers is None or not can_fork_for(run):
            return super().launch_run(context)
        location = context.workspace.get_code_location(
            run.remote_job_origin.repository_origin.code_location_origin.location_name) if context.workspace else None
        self._instance.add_run_tags(run.run_id, {FORKED_WORKER_TAG: "true"})
        try:
            self.workers.start(self._instance, run, getattr(location, "server_id", None))
        except ForkServerUnavailable as error:
            self._instance.add_run_tags(run.run_id, {FORKED_WORKER_TAG: "false"})
            self._instance.report_engine_event(f"no warm run worker ({error}); the code server starts the run",
                                               run, cls=self.__class__)
            return super().launch_run(context)
        self._run_ids.add(run.run_id)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        if run.tags.get(FORKED_WORKER_TAG) != "true":
            return super().terminate(run_id)
        self._instance.report_run_canceling(run)
        # Read after the canceling status is written: a worker whose pid is not recorded yet will find its run
        # canceled (run_workers.py), one whose pid is gets the signal.
        run = self._instance.get_run_by_id(run_id)
        pid = tagged_worker(run) if run is not None else None
        if pid is None:
            if run is not None and WORKER_PID_TAG not in run.tags:
                self._instance.report_engine_event("the run's worker is starting: it will not start the run", run,
                                                   cls=self.__class__)
                return True
            self._instance.report_engine_event("the run's worker is not running: nothing to stop", run,
                                               cls=self.__class__)
            return False
        # The worker turns SIGINT into Dagster's interrupt: the run stops between steps' writes, as canceled.
        os.kill(pid, signal.SIGINT)
        return True

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
