"""A command run in its own process group, so that stopping it stops everything it started.

`dreaming exec` and `dreaming ui` run Dagster's tools this way: a terminal's Ctrl-C reaches this process only,
which forwards it to the command's whole group once, and after a stop ends whatever the group left behind.
A closed terminal or `tmux kill-session` (SIGHUP) and SIGQUIT stop it the same way, as SIGTERM: Dagster's
processes stop cleanly on that, while a SIGHUP sent on would kill them where they stand.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

# How long what a stopped command left behind has to end on SIGTERM before it is killed.
STOP_GRACE_SECONDS = 10.0
# The signals that stop the command, and what its group is sent for each.
STOP_SIGNALS = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM,
                signal.SIGHUP: signal.SIGTERM, signal.SIGQUIT: signal.SIGTERM}


def run_in_process_group(argv: list[str]) -> int:
    """Run ``argv`` in a new session and process group and return its exit code; SIGINT and SIGTERM sent to
    this process go to the whole group (SIGHUP and SIGQUIT as SIGTERM), and after one the group is ended (:func:`end_process_group`).
    Raises FileNotFoundError when ``argv[0]`` does not exist."""
    # The handlers go in before the child starts: a handled signal is reset to its default in a new
    # program, an ignored one stays ignored. A script's background job (`cmd &`) starts with SIGINT
    # ignored, and Dagster's processes map SIGTERM to SIGINT's handler, so a `dg dev` that inherited the
    # ignore could not be stopped at all. A signal that arrives while the child starts is sent on after.
    started: list[subprocess.Popen] = []
    pending: list[int] = []
    asked_to_stop: list[int] = []

    def forward(signum, frame):
        signum = STOP_SIGNALS[signum]
        asked_to_stop.append(signum)
        if started:
            signal_group(started[0].pid, signum)
        else:
            pending.append(signum)

    # Forward the stop signals and wait for the child, so this process exits normally afterwards and
    # releases the embedded server (atexit does not run when a signal kills Python).
    for signum in STOP_SIGNALS:
        signal.signal(signum, forward)
    # Its own session: a terminal's Ctrl-C reaches only this process, which forwards it once.
    child = subprocess.Popen(argv, start_new_session=True)
    started.append(child)
    for signum in pending:
        signal_group(child.pid, signum)
    code = child.wait()
    if asked_to_stop:
        end_process_group(child.pid)
    return code


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to the command's whole process group, as a terminal's Ctrl-C reaches every process of
    its foreground group: Dagster's run workers and step processes stop their work at once instead of
    starting more steps while the UI shuts down."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def end_process_group(pgid: int, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
    """End what a stopped command left in its process group: `dg dev` stopped while its daemon launched runs
    used to leave its code server and run workers behind, re-parented to init. SIGTERM first, SIGKILL for
    whatever is still there ``grace_seconds`` later. Only after a stop was asked: a command that ends by
    itself may leave a launched run working on purpose."""
    for signum, wait_seconds in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
