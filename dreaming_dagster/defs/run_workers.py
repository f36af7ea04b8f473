"""Warm run workers: each run's process is forked from a fork server that has already imported the code
location and its libraries (dreaming_dagster/run_worker_preload.py), instead of a new interpreter importing them again
(Dagster's code server spawns one per run: seconds of start-up for a run of a few seconds' work).

A worker runs the run as the code server's would (Dagster's own run-in-subprocess path): it reports
"Started process for run" with its pid, executes the run, and turns SIGINT into Dagster's interrupt, which
is how the launcher stops it. The fork server belongs to the process that launches runs (the daemon) and is
started again when the code location is reloaded, so a run never executes code older than its location.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import sys
import threading
import time
from multiprocessing.process import BaseProcess

from dagster import DagsterRun
from dagster._core.errors import DagsterLaunchFailedError
from dagster._core.instance import DagsterInstance
from dagster._grpc.impl import StartRunInSubprocessSuccessful, _run_in_subprocess
from dagster._grpc.types import ExecuteExternalJobArgs
from dagster._serdes import serialize_value
from dagster._utils.hosted_user_process import recon_job_from_origin
from dagster._utils.interrupts import capture_interrupts

PRELOAD = "dreaming_dagster.run_worker_preload"
# How long a forked worker may take to open the instance and find its run before the launch fails.
START_TIMEOUT_S = 120.0


def can_fork_for(run: DagsterRun) -> bool:
    """Whether this process can fork ``run``'s worker: the run's code runs in this interpreter."""
    origin = run.job_code_origin
    return origin is not None and os.path.abspath(origin.executable_path) == os.path.abspath(sys.executable)


class RunWorkers:
    """The fork server of the launching process (one a process: multiprocessing's), and the workers it forked
    that are still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._context = multiprocessing.get_context("forkserver")
        self._code_version: str | None = None
        self._preloaded = False
        self._running: list[tuple[BaseProcess, object]] = []

    def start(self, instance: DagsterInstance, run: DagsterRun, code_version: str | None) -> int:
        """Fork ``run``'s worker and return its pid once it has found its run (raises DagsterLaunchFailedError
        if it could not). ``code_version``: the code location's server id; a new one restarts the fork server."""
        with self._lock:
            self._forget_finished()
            if not self._preloaded or code_version != self._code_version:
                self._restart(code_version)
            arguments = serialize_value(ExecuteExternalJobArgs(
                job_origin=run.remote_job_origin, run_id=run.run_id, instance_ref=instance.get_ref()))
            started, report = self._context.Pipe(duplex=False)
            # An event never set stands in for the code server's termination event (the launcher sends SIGINT).
            # Made and held here until the worker ends: its semaphore is removed when this process lets go of it.
            never_set = self._context.Event()
            worker = self._context.Process(target=run_worker, name=f"dagster-run-{run.run_id}", args=(
                arguments, recon_job_from_origin(run.job_code_origin), report, never_set))
            worker.start()
            report.close()
            self._running.append((worker, never_set))
        return wait_for_start(worker, started, run.run_id)

    def _restart(self, code_version: str | None) -> None:
        # The next process started starts the fork server again, importing the code as it is now.
        multiprocessing.forkserver._forkserver._stop()
        self._context.set_forkserver_preload([PRELOAD])
        self._code_version, self._preloaded = code_version, True

    def _forget_finished(self) -> None:
        still = []
        for worker, never_set in self._running:
            if worker.is_alive():
                still.append((worker, never_set))
            else:
                worker.close()
        self._running = still


def wait_for_start(worker: BaseProcess, started, run_id: str) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not started.poll(0.05):
            if not worker.is_alive():
                raise DagsterLaunchFailedError(f"the worker of run {run_id} exited with code {worker.exitcode} "
                                               "before it started the run")
            if time.monotonic() > deadline:
                raise DagsterLaunchFailedError(f"the worker of run {run_id} did not start it in {START_TIMEOUT_S:.0f} s")
        message = started.recv()
    except EOFError:
        raise DagsterLaunchFailedError(f"the worker of run {run_id} exited before it started the run") from None
    finally:
        started.close()
    if not isinstance(message, StartRunInSubprocessSuccessful):
        raise DagsterLaunchFailedError(message.message, serializable_error_info=message.serializable_error_info)
    return worker.pid


def run_worker(arguments: str, recon_job, report, never_set) -> None:
    """A forked worker's body: execute the run in this process; its first status goes to the launcher."""

    def first_status(message) -> None:
        if not report.closed:
            report.send(message)
            report.close()

    with capture_interrupts():
        _run_in_subprocess(arguments, recon_job, never_set, subprocess_status_handler=first_status,
                           run_event_handler=lambda event: None)
