"""The warm run workers' fork server: a process that imports the preload (preload.py) once, then forks a run
worker for each socket the launching process sends it. Started by run_workers.ForkServer as
``python -m dreaming_dagster.instance.fork_server FD PRELOAD``, FD being its end of the control socket and
PRELOAD the module to import (dreaming_dagster.instance.preload).

The server only forks. Each worker talks to the launcher over its own socket (the one the launcher sent): it
reports its pid, reads its run, waits for the launcher's go-ahead, sends the run's first status and holds the
socket until it exits, so the launcher sees a worker end as the socket's end, whatever became of the server.
The server ends when the control socket closes (the launcher stopped it, or died); its workers run on.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import select
import signal
import socket
import sys
import traceback
from multiprocessing.connection import Connection

# What the server tells the launcher once the preload is imported, or why it could not be.
READY, FAILED = b"ready\n", b"failed\n"
# The control socket's wait between reaping the workers that ended.
REAP_EVERY_S = 1.0


def serve(control: socket.socket) -> None:
    while True:
        _reap()
        readable, _, _ = select.select([control], [], [], REAP_EVERY_S)
        if not readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 1, 1)
        except OSError:
            return
        if not message:  # the launcher closed the control socket
            return
        for fd in fds[1:]:
            os.close(fd)
        if not fds:
            continue
        pid = os.fork()
        if pid == 0:
            control.close()
            code = 1
            try:
                code = work(fds[0])
            except BaseException:
                traceback.print_exc()  # on the launcher's stderr: the server's is the launcher's
            finally:
                os._exit(code)
        os.close(fds[0])


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def work(fd: int) -> int:
    """A forked worker's body: run the run the launcher sends over ``fd``, then release what the process holds
    (a forked process ends with os._exit, which runs no exit hook)."""
    from dagster._grpc.impl import _run_in_subprocess
    from dagster._utils.interrupts import capture_interrupts

    from dreaming_dagster.storage import embedded

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    launcher = Connection(fd)
    try:
        # SIGINT is the launcher's stop from here on: Dagster's interrupt, raised where a step can stop.
        with capture_interrupts():
            launcher.send(os.getpid())
            arguments, recon_job = launcher.recv()
            launcher.recv()  # the go-ahead: the launcher has recorded this pid, and seen no stop before it

            def first_status(message) -> None:
                if first_status.pending:
                    first_status.pending = False
                    launcher.send(message)

            first_status.pending = True
            # An event never set stands in for the code server's termination event (the launcher sends SIGINT).
            _run_in_subprocess(arguments, recon_job, multiprocessing.Event(), subprocess_status_handler=first_status,
                               run_event_handler=lambda event: None)
        return 0
    except (EOFError, OSError):  # the launcher gave up on this worker before it started the run
        return 1
    finally:
        embedded.release_handles()


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    try:
        importlib.import_module(sys.argv[2])  # what every worker inherits
    except BaseException:  # any error, not only an ImportError: the launcher falls back to the code server
        control.sendall(FAILED + traceback.format_exc().encode(errors="replace"))
        control.close()
        sys.exit(1)
    control.sendall(READY)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C to `dreaming ui`'s group: the workers stop their runs
        serve(control)


if __name__ == "__main__":
    main()
