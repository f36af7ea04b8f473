"""The embedded server's lifecycle: shared while any process uses it, stopped when the last one exits,
even when processes die by signal; started with the settings of the process that starts it."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import yaml

from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.embedded import HANDLE_LIST, _forget_dead_handles

pytestmark = pytest.mark.slow  # starts the embedded server, `dreaming exec` and the Dagster UI

BIN = Path(sys.executable).parent


def clean_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """This environment without any DREAMING_ setting or Dagster home: ``data_dir`` and ``settings`` only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_") and k != "DAGSTER_HOME"}
    env["DREAMING_DATA_DIR"] = str(data_dir)
    env |= {f"DREAMING_{name.upper()}": value for name, value in settings.items()}
    return env


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_dead_handles_are_forgotten(tmp_path):
    (tmp_path / HANDLE_LIST).write_text(json.dumps([dead_pid(), os.getpid()]))
    _forget_dead_handles(tmp_path)
    assert json.loads((tmp_path / HANDLE_LIST).read_text()) == [os.getpid()]


def test_a_forked_worker_ending_without_exit_hooks_lets_go_of_the_server(tmp_path):
    """A run worker forked by the fork server ends with os._exit, which runs no exit hook: it releases the
    embedded server itself, so the last process holding it stops it instead of leaving it up with a dead
    handle."""
    pgdata = tmp_path / "pgdata"
    code = ("import os, sys\nfrom pathlib import Path\nfrom dreaming_dagster.storage import embedded\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    embedded.embedded_url(Path(sys.argv[1]))  # the worker is the only process holding the server\n"
            "    if sys.argv[2] == 'release':\n"
            "        embedded.release_handles()\n"
            "    os._exit(0)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "sys.exit(os.waitstatus_to_exitcode(status))\n")
    try:
        for way in ("keep", "release"):  # without the release, the server outlives its last process
            subprocess.run([sys.executable, "-c", code, str(pgdata), way], check=True, timeout=300,
                           env=clean_env(tmp_path / "unused"))
            assert (pgdata / "postmaster.pid").exists() == (way == "keep")
            if way == "keep":
                assert json.loads((pgdata / HANDLE_LIST).read_text())  # a dead handle
        assert json.loads((pgdata / HANDLE_LIST).read_text()) == []
    finally:
        if (pgdata / "postmaster.pid").exists():
            embedded.stop(pgdata)


def start_without_handle(pgdata: Path) -> None:
    """Start the embedded server as pg_ctl would, listed in no process's handle, so this process holds none."""
    from pgserver import pg_ctl

    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
    pg_ctl(["-w", "-o", '-h ""', "-o", f"-k {pgdata}", "-l", str(pgdata / "log"), "start"], pgdata=pgdata, user=user)


def wait_for(predicate, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_exec_killed_by_sigterm_leaves_no_server(tmp_path):
    env = clean_env(tmp_path / "d")
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
    env = clean_env(tmp_path / "d")
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

    def name(child: psutil.Process) -> str:
        try:
            return child.name()
        except psutil.NoSuchProcess:  # a short-lived child (the server's pg_ctl) gone meanwhile
            return ""

    return any(name(child) == "sleep" for child in psutil.Process(parent_pid).children())


SHOW_SHARED_BUFFERS = """
import psycopg
from dreaming_dagster.process_defaults import default_database
with psycopg.connect(default_database().url) as conn:
    print(conn.execute("SHOW shared_buffers").fetchone()[0])
"""


def shared_buffers_seen_by_a_new_process(data_dir: Path, shared_buffers: str) -> str:
    done = subprocess.run([sys.executable, "-c", SHOW_SHARED_BUFFERS], env=clean_env(data_dir, embedded_shared_buffers=shared_buffers),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_process_starting_the_server_sets_its_shared_buffers(tmp_path):
    # Nobody holds the server between these processes, so each starts it: the first after initdb, the second
    # from the data directory the first left.
    assert shared_buffers_seen_by_a_new_process(tmp_path, "160MB") == "160MB"
    assert shared_buffers_seen_by_a_new_process(tmp_path, "192MB") == "192MB"
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists(), "the last process left the server running"
    conf = (tmp_path / "pgdata" / "postgresql.conf").read_text()
    assert conf.count(f"include_if_exists = '{embedded.SERVER_SETTINGS_FILE}'") == 1


def test_a_running_server_keeps_the_settings_it_started_with(tmp_path):
    pgdata = tmp_path / "pgdata"
    embedded.embedded_url(pgdata, "postgres", shared_buffers="176MB")  # this process holds the server
    try:
        assert shared_buffers_seen_by_a_new_process(tmp_path, "208MB") == "176MB"
        assert "shared_buffers = '176MB'" in (pgdata / embedded.SERVER_SETTINGS_FILE).read_text()
    finally:
        embedded.stop(pgdata)


def test_auto_shared_buffers_is_a_quarter_of_memory_within_bounds(monkeypatch):
    assert embedded.machine_memory_bytes() > 2**27
    for memory, expected in [(24 * 2**30, "6144MB"), (256 * 2**20, "128MB"), (2**40, "8192MB")]:
        monkeypatch.setattr(embedded, "machine_memory_bytes", lambda memory=memory: memory)
        assert embedded.resolved_shared_buffers("auto") == expected
    assert embedded.resolved_shared_buffers("2GB") == "2GB"


def test_a_bad_shared_buffers_is_refused_naming_the_variable(tmp_path):
    for bad in ["lots", "0", "2 GB", "-1MB"]:
        done = subprocess.run([str(BIN / "dreaming"), "stats", "--user", "u1"], capture_output=True, text=True,
                              env=clean_env(tmp_path / "d", embedded_shared_buffers=bad), timeout=120)
        assert done.returncode == 2, (bad, done.stdout, done.stderr)
        assert f"DREAMING_EMBEDDED_SHARED_BUFFERS={bad!r}" in done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "d").exists(), "a refused setting still started a server"


STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
LEAVES_CHILDREN = f"""
import subprocess, sys, time
marker = sys.argv[1]
subprocess.Popen([sys.executable, "-c", {STUBBORN!r}, marker])  # ignores SIGTERM, like a stuck code server
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", marker])
print("started", flush=True)
time.sleep(300)  # Ctrl-C ends this one at once, leaving both children behind (re-parented to init)
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name)
def test_a_stopped_exec_ends_everything_its_command_started(tmp_path, stop):
    """`dreaming ui` stopped while Dagster's daemon launched runs left the code server and run workers
    orphaned. A command stopped through `dreaming exec` — by Ctrl-C, a closed terminal (SIGHUP) or SIGQUIT —
    takes what it started with it: the process group gets SIGTERM, then SIGKILL for whatever ignores it."""
    import psutil

    marker = f"leftover-{os.getpid()}-{time.monotonic_ns()}"

    def leftovers() -> list:  # the command and its children (not `dreaming` itself, whose arguments hold it too)
        return [found for found in psutil.process_iter(["cmdline", "status"])
                if marker in (found.info["cmdline"] or []) and found.info["status"] != psutil.STATUS_ZOMBIE
                and found.pid != process.pid]

    process = subprocess.Popen([str(BIN / "dreaming"), "exec", "--", sys.executable, "-c", LEAVES_CHILDREN, marker],
                               env=clean_env(tmp_path / "d"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout.readline().strip() == "started"
        assert wait_for(lambda: len(leftovers()) == 3), "the command and its children never started"
        process.send_signal(stop)
        assert process.wait(timeout=60) >= 0  # exited, not killed by the signal: its exit hooks ran
        assert wait_for(lambda: not leftovers(), 30), [p.info["cmdline"] for p in leftovers()]
    finally:
        if process.poll() is None:
            process.kill()
        for left in leftovers():
            left.kill()


def test_dreaming_ui_stopped_while_the_daemon_launches_a_run_leaves_no_process(tmp_path):
    """The reported cases themselves: `dreaming ui` (dg dev: webserver, daemon, code server) with a user's work
    pending, so the sensor's run is queued and launched as the daemon starts.
    1. Everything killed with SIGKILL once a run worker exists: the run stays "Started" with no process; the
       next `dreaming ui` marks it failed within run monitoring's poll interval (dagster.yaml).
    2. That UI stopped with Ctrl-C (SIGINT to the terminal's process group) once its run worker exists:
       nothing started for it may outlive it, the embedded Postgres included."""
    import psutil

    from tests.conftest import PROJECT_ROOT, free_port

    data_dir = tmp_path / "d"
    env = clean_env(data_dir)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"user_message": f"I restored an old bicycle, part {n}",
                                         "assistant_message": "Nice!", "session_id": "s1",
                                         "occurred_at": "2026-05-01T10:00:00Z"}) + "\n" for n in range(3)))
    subprocess.run([str(BIN / "dreaming"), "ingest", str(pairs), "--user", "rider", "--defer-embedding"], env=env,
                   cwd=PROJECT_ROOT, check=True, capture_output=True, timeout=300)
    postmaster = data_dir / "pgdata" / "postmaster.pid"

    def ours() -> list:  # every process started for this UI (they inherit its data dir), the database aside
        found = []
        for candidate in psutil.process_iter(["name", "status"]):
            try:
                if candidate.info["status"] == psutil.STATUS_ZOMBIE or candidate.info["name"].startswith("postgres"):
                    continue
                if candidate.environ().get("DREAMING_DATA_DIR") == str(data_dir):
                    found.append(candidate)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def command_line(found: psutil.Process) -> str:
        try:
            return " ".join(found.cmdline())
        except psutil.NoSuchProcess:  # ended, or a zombie now, since ours() listed it
            return ""

    def run_worker_started() -> bool:
        # The launcher forks a run's worker from its fork server (instance/run_workers.py): a worker is a process
        # of the server's command line whose parent is one too.
        forked = {process.pid: process for process in ours()
                  if "dreaming_dagster.instance.fork_server" in command_line(process)}
        return any(parent(process) in forked for process in forked.values())

    def parent(found: psutil.Process) -> int | None:
        try:
            return found.ppid()
        except psutil.NoSuchProcess:
            return None

    def runs(status: str) -> set[str]:  # read straight from the socket: this process must hold no server handle
        url = f"postgresql://postgres:@/dagster?host={data_dir / 'pgdata'}"
        with psycopg.connect(url) as conn:
            return {row[0] for row in conn.execute("SELECT run_id FROM runs WHERE status = %s", (status,))}

    def start_ui() -> subprocess.Popen:
        return subprocess.Popen([str(BIN / "dreaming"), "exec", "--", "dg", "dev", "--port", str(free_port())],
                                env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    ui = start_ui()
    try:
        assert wait_for(lambda: run_worker_started() and runs("STARTED"), 300), "the sensor's run never started"
        def kill_everything() -> bool:
            # A process forked between listing and killing (a step's subprocess) outlives one sweep: sweep again.
            for process in ours():
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            return not ours()

        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(ui.pid).kill()
        assert wait_for(kill_everything, 30)
        ui.wait(timeout=60)
        if not postmaster.exists():
            # A step that finished between the kills outlived the rest and, as the last handle, stopped the
            # server (as it should). Start it without a handle: the next UI registers and stops it.
            start_without_handle(data_dir / "pgdata")
        orphaned = runs("STARTED")
        assert orphaned, "the killed run worker's run should be left 'Started'"

        ui = start_ui()
        poll = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text())["run_monitoring"]["poll_interval_seconds"]
        assert wait_for(lambda: orphaned <= runs("FAILURE"), 180 + poll), "the orphaned run was never failed"
        # The daemon launches the failed run again (dagster.yaml: run_retries, for runs whose worker died).
        assert wait_for(run_worker_started, 300), "the daemon never launched the user's run again"
        os.killpg(ui.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        ui.wait(timeout=120)
        assert wait_for(lambda: not ours(), 30), [" ".join(p.cmdline())[:200] for p in ours()]
        assert wait_for(lambda: not postmaster.exists(), 30), "the embedded Postgres outlived the UI"
    finally:
        for left in [*ours(), *([psutil.Process(ui.pid)] if ui.poll() is None else [])]:
            left.kill()
        if postmaster.exists():
            embedded.stop(data_dir / "pgdata")
