"""Warm run workers: each run's process is forked from a server that has already imported the code location and
its libraries (fork_server.py, preload.py), instead of a new interpreter importing them again (Dagster's code
server spawns one per run: seconds of start-up for a run of a few seconds' work).

A worker runs the run as the code server's would (Dagster's own run-in-subprocess path): it reports "Started
process for run" with its pid, executes the run, and turns SIGINT into Dagster's interrupt, which is how the
launcher stops it. Each :class:`RunWorkers` (one a launcher) has its own fork server, started again with the
code location's next version, so a run never executes code older than its location; the server it replaces
stops at once and the workers it forked run on, each watched through its own socket. A server that cannot
start (its preload fails, whatever the error) raises :class:`ForkServerUnavailable`, and the launcher starts
the run through the code server instead.

A stop never falls between two chairs: the launcher records a worker's pid (a run tag) before the worker may
look at its run, and only then reads whether a stop was asked; a stop records the run as canceling before it
reads the pid. Whichever comes second sees the other's write.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

import psutil
from dagster import DagsterRun, DagsterRunStatus
from dagster._core.errors import DagsterLaunchFailedError
from dagster._core.instance import DagsterInstance
from dagster._grpc.impl import StartRunInSubprocessSuccessful
from dagster._grpc.types import ExecuteExternalJobArgs
from dagster._serdes import serialize_value
from dagster._utils.hosted_user_process import recon_job_from_origin

from dreaming_dagster.instance.fork_server import FAILED, READY

# How long a fork server may take to import the preload, and a forked worker to find its run, before a launch
# gives up on it.
SERVER_START_TIMEOUT_S = 300.0
START_TIMEOUT_S = 120.0
PRELOAD = "dreaming_dagster.instance.preload"
# The run tag holding the pid of the run's forked worker, written before the worker may start the run.
WORKER_PID_TAG = "dreaming/worker_pid"


class ForkServerUnavailable(RuntimeError):
    """The fork server could not start (the preload failed, or the server died); runs go to the code server."""


def can_fork_for(run: DagsterRun) -> bool:
    """Whether this process can fork ``run``'s worker: the run's code runs in this interpreter."""
    origin = run.job_code_origin
    return origin is not None and os.path.abspath(origin.executable_path) == os.path.abspath(sys.executable)


class ForkServer:
    """One fork server process and the control socket to it."""

    def __init__(self, code_version: str | None, preload: str = PRELOAD):
        self.code_version = code_version
        ours, theirs = socket.socketpair()
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "dreaming_dagster.instance.fork_server",
                                             str(theirs.fileno()), preload], pass_fds=[theirs.fileno()])
        finally:
            theirs.close()
        self.control = ours
        ours.settimeout(SERVER_START_TIMEOUT_S)
        try:
            answer = _read_answer(ours)
        except (OSError, TimeoutError) as error:
            self.close()
            raise ForkServerUnavailable(f"the fork server did not start: {error}") from None
        finally:
            ours.settimeout(None)
        if not answer.startswith(READY):
            self.close()
            raise ForkServerUnavailable("the fork server's preload failed:\n"
                                        + answer.removeprefix(FAILED).decode(errors="replace")[-4000:])

    @property
    def pid(self) -> int:
        return self.process.pid

    def fork(self) -> Connection:
        """A new worker, as the launcher's end of its socket (the worker's pid is its first message)."""
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self.control, [b"w"], [theirs.fileno()])
        except OSError as error:
            ours.close()
            raise ForkServerUnavailable(f"the fork server is gone: {error}") from None
        finally:
            theirs.close()
        return Connection(ours.detach())

    def close(self) -> None:
        """Stop the server (it ends when its control socket closes); the workers it forked run on."""
        self.control.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _read_answer(control: socket.socket) -> bytes:
    """The server's first line, READY; or FAILED and the traceback, up to its end."""
    answer = b""
    while b"\n" not in answer and (chunk := control.recv(65536)):
        answer += chunk
    if answer.startswith(FAILED):
        while chunk := control.recv(65536):
            answer += chunk
    if not answer:
        raise OSError("it exited before it answered")
    return answer


class Worker:
    """A forked worker as the launcher sees it: its pid and its socket, whose end is the worker's end."""

    def __init__(self, connection: Connection, pid: int):
        self.connection, self.pid = connection, pid

    def is_alive(self) -> bool:
        try:
            if self.connection.poll(0):
                self.connection.recv()  # a late status message: the worker is still there
            return True
        except (EOFError, OSError):
            return False

    def close(self) -> None:
        self.connection.close()


class RunWorkers:
    """A launcher's fork server and the workers it forked that are still running."""

    def __init__(self, preload: str = PRELOAD) -> None:
        self.preload = preload  # the module the fork server imports before it forks
        self._lock = threading.Lock()
        self._server: ForkServer | None = None
        self._running: list[Worker] = []

    @property
    def server_pid(self) -> int | None:
        return self._server.pid if self._server else None

    def start(self, instance: DagsterInstance, run: DagsterRun, code_version: str | None) -> int:
        """Fork ``run``'s worker and return its pid once it has found its run (raises DagsterLaunchFailedError
        if it could not, ForkServerUnavailable if no fork server can start). ``code_version``: the code
        location's server id; a new one starts a new fork server."""
        with self._lock:
            self._forget_finished()
            connection = self._fork(code_version)
        try:
            worker = Worker(connection, _receive(connection, run.run_id))
            with self._lock:
                self._running.append(worker)
            connection.send((serialize_value(ExecuteExternalJobArgs(
                job_origin=run.remote_job_origin, run_id=run.run_id, instance_ref=instance.get_ref())),
                recon_job_from_origin(run.job_code_origin)))
            instance.add_run_tags(run.run_id, {WORKER_PID_TAG: worker_pid_tag(worker.pid)})
            current = instance.get_run_by_id(run.run_id)
            if current is not None and current.status == DagsterRunStatus.CANCELING:
                # A stop came before the pid was recorded: the worker finds its run canceled and never starts it.
                instance.report_run_canceled(current, "canceled before its worker started it")
            connection.send("go")
            message = _receive(connection, run.run_id)
        except (EOFError, OSError):
            connection.close()
            raise DagsterLaunchFailedError(f"the worker of run {run.run_id} exited before it started the run") \
                from None
        except BaseException:
            connection.close()  # the worker, waiting for its go-ahead, ends
            raise
        if not isinstance(message, StartRunInSubprocessSuccessful):
            raise DagsterLaunchFailedError(message.message, serializable_error_info=message.serializable_error_info)
        return worker.pid

    def _fork(self, code_version: str | None) -> Connection:
        if self._server is not None and self._server.code_version != code_version:
            self._server.close()  # new code: a new server; the old one's workers run on
            self._server = None
        for attempt in range(2):
            if self._server is None:
                self._server = ForkServer(code_version, self.preload)
            try:
                return self._server.fork()
            except ForkServerUnavailable:
                self._server.close()
                self._server = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _forget_finished(self) -> None:
        still = []
        for worker in self._running:
            if worker.is_alive():
                still.append(worker)
            else:
                worker.close()
        self._running = still

    def running(self) -> list[int]:
        """The pids of the workers still running."""
        with self._lock:
            self._forget_finished()
            return [worker.pid for worker in self._running]

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None


def worker_pid_tag(pid: int) -> str:
    """The pid and its process's start time: a pid recycled by another process never matches."""
    return f"{pid}@{psutil.Process(pid).create_time():.3f}"


def tagged_worker(run: DagsterRun) -> int | None:
    """The pid of ``run``'s forked worker while that process runs (None: not forked yet, or ended)."""
    value = run.tags.get(WORKER_PID_TAG)
    if not value:
        return None
    pid, created = value.split("@")
    try:
        process = psutil.Process(int(pid))
        if abs(process.create_time() - float(created)) > 0.01 or process.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:
        return None
    return int(pid)


def _receive(connection: Connection, run_id: str):
    deadline = time.monotonic() + START_TIMEOUT_S
    while not connection.poll(0.05):
        if time.monotonic() > deadline:
            raise DagsterLaunchFailedError(f"the worker of run {run_id} did not start it in {START_TIMEOUT_S:.0f} s")
    return connection.recv()
