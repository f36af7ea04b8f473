"""The embedded server's lifecycle: shared while any process uses it, stopped when the last one exits,
even when processes die by signal."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dreaming_dagster.storage.embedded import HANDLE_LIST, _forget_dead_handles

BIN = Path(sys.executable).parent


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_dead_handles_are_forgotten(tmp_path):
    (tmp_path / HANDLE_LIST).write_text(json.dumps([dead_pid(), os.getpid()]))
    _forget_dead_handles(tmp_path)
    assert json.loads((tmp_path / HANDLE_LIST).read_text()) == [os.getpid()]


def wait_for(predicate, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_exec_killed_by_sigterm_leaves_no_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_") and k != "DAGSTER_HOME"}
    env["DREAMING_DATA_DIR"] = str(tmp_path / "d")
    postmaster = tmp_path / "d" / "pgdata" / "postmaster.pid"
    process = subprocess.Popen([str(BIN / "dreaming"), "exec", "--", "sleep", "60"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(postmaster.exists), "embedded server never started"
        assert wait_for(lambda: _child_sleep_running(process.pid)), "the command never started"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) != 0  # the child was terminated, and said so
        assert wait_for(lambda: not postmaster.exists(), 30), "server left running after SIGTERM"
    finally:
        if process.poll() is None:
            process.kill()


def test_exec_gives_its_command_default_interrupt_handling(tmp_path):
    """Started as a script's background job (SIGINT ignored), `dreaming exec` still starts its command with
    SIGINT and SIGTERM at their defaults: Dagster's processes map SIGTERM to SIGINT's handler, so a `dg
    dev` that inherited the ignore could not be stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_") and k != "DAGSTER_HOME"}
    env["DREAMING_DATA_DIR"] = str(tmp_path / "d")
    report = ("import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "
              "signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)")
    for _ in range(2):
        result = subprocess.run([str(BIN / "dreaming"), "exec", "--", sys.executable, "-c", report], env=env,
                                capture_output=True, text=True, timeout=120,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["False", "False"], result.stdout


def _child_sleep_running(parent_pid: int) -> bool:
    import psutil

    return any(child.name() == "sleep" for child in psutil.Process(parent_pid).children())
