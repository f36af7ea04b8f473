"""Warm run workers (instance/run_workers.py): the project's launcher forks each run's process from a server with
the code location loaded, through a real code server's workspace as the daemon launches queued runs."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import dagster as dg
import psutil
import pytest
from dagster._cli.job import _create_run
from dagster._core.errors import DagsterRunNotFoundError
from dagster._core.launcher import LaunchRunContext
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import ModuleTarget

from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.instance.run_launcher import FORKED_WORKER_TAG, LocalRunLauncher, worker_started
from dreaming_dagster.instance.run_workers import WORKER_PID_TAG, RunWorkers
from dreaming_dagster.pipeline import graph_reports
from dreaming_dagster.storage import embedded
from tests.conftest import PROJECT_ROOT, ScratchDatabase, clear_settings, pair, point_cli_at, stub_embedder

pytestmark = pytest.mark.slow  # a code server, a fork server and run workers

USERS = ("alice", "bob", "carol", "dave")


@contextmanager
def workspace(instance):
    """The project's code location served by a gRPC code server, as `dreaming ui` serves it."""
    target = ModuleTarget(module_name="dreaming_dagster.definitions", attribute=None,
                          working_directory=str(PROJECT_ROOT), location_name="dreaming_dagster")
    with WorkspaceProcessContext(instance, target) as context:
        yield context.create_request_context()


def new_run(instance, request_context, user: str) -> dg.DagsterRun:
    location = request_context.get_code_location("dreaming_dagster")
    repository = next(iter(location.get_repositories().values()))
    return _create_run(instance=instance, code_location=location, remote_repo=repository,
                       remote_job=repository.get_full_job("dreaming_job"), run_config={},
                       tags={"dagster/partition": user}, op_selection=None, run_id=None)


def finished(instance, run_id: str, timeout: float = 240) -> dg.DagsterRun:
    deadline = time.monotonic() + timeout
    while not (run := instance.get_run_by_id(run_id)).is_finished:
        assert time.monotonic() < deadline, f"run {run_id} still {run.status} after {timeout} s"
        time.sleep(0.1)
    return run


@pytest.fixture(scope="module")
def dreaming(pg_admin_url, migrated_templates, openai_stub_server):
    """Four users' pairs saved, not dreamed, in one database, instance and code server for the module (each
    test dreams users the ones before it left alone, or ones already dreamed); the workers read this database
    (the environment at fork-server start)."""
    from dreaming_dagster.process_defaults import reset_defaults

    url = embedded.fresh_database_url(pg_admin_url, "t")
    database = ScratchDatabase(url, migrated_templates)
    with pytest.MonkeyPatch.context() as env:
        clear_settings(env)
        point_cli_at(env, url, migrated_templates, openai_stub_server)
        env.setenv("DREAMING_LLM_PROVIDER", "offline")
        for user in USERS:  # carol's run is the one stopped: long enough to be stopped mid-way
            save_pairs(user, [pair(n, user_message=f"I restored an old bicycle with {user}, part {n}")
                              for n in range(80 if user == "carol" else 6)], database=database,
                       embedder=stub_embedder(openai_stub_server, 16), embed=False)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("users", list(USERS))
            with workspace(instance) as request_context:
                launcher = LocalRunLauncher(warm_workers=True)
                launcher.register_instance(instance)
                yield instance, request_context, launcher, database
    reset_defaults()


def test_runs_are_forked_from_one_warm_server_and_dream_only_their_user(dreaming):
    instance, request_context, launcher, database = dreaming
    pids = []
    for user in ("alice", "bob"):
        run = new_run(instance, request_context, user)
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=request_context))
        server = launcher.workers.server_pid
        assert finished(instance, run.run_id).status == dg.DagsterRunStatus.SUCCESS
        assert instance.get_run_by_id(run.run_id).tags[FORKED_WORKER_TAG] == "true"
        pids.append((worker_started(instance, run.run_id)[0], server))
        assert graph_reports.graph_stats(database, user)["stored_pairs"] == 6
    (first, first_server), (second, second_server) = pids
    assert first != second and first_server == second_server  # a process a run, one warm server for both
    assert graph_reports.graph_stats(database, "carol")["stored_pairs"] == 0  # nobody dreamed carol


def test_terminate_stops_a_forked_run_as_canceled_and_its_process_ends(dreaming):
    instance, request_context, launcher, _ = dreaming
    run = new_run(instance, request_context, "carol")
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=request_context))
    # Stopped once it runs its steps (stopped before, Dagster marks a run failed: its worker found it canceling).
    while (current := instance.get_run_by_id(run.run_id)).status != dg.DagsterRunStatus.STARTED:
        assert not current.is_finished
        time.sleep(0.01)
    pid = worker_started(instance, run.run_id)[0]
    assert psutil.Process(pid).ppid() == launcher.workers.server_pid
    assert launcher.terminate(run.run_id)
    ended = finished(instance, run.run_id)
    assert ended.status == dg.DagsterRunStatus.CANCELED, [
        record.message for record in instance.all_logs(run.run_id) if record.dagster_event is None
        or record.dagster_event.event_type_value in ("ENGINE_EVENT", "RUN_FAILURE", "STEP_FAILURE")]
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the canceled run's worker is still running"
        time.sleep(0.1)
    assert not launcher.terminate(run.run_id)  # a finished run: nothing to stop


@pytest.fixture(scope="module")
def workers() -> RunWorkers:
    """Workers apart from the launcher's, shared by the tests that start them directly (a fork server's
    start imports everything: seconds)."""
    return RunWorkers()


def test_a_reload_starts_a_new_fork_server_while_the_old_ones_runs_run_on(dreaming, workers, openai_stub_server):
    """A new code server id (the location reloaded after a code change) starts a new fork server, so a run never
    executes code older than its location; the same id keeps it. The old server stops, and a run it forked
    still running is still counted running. Another launcher's server is left alone."""
    instance, request_context, launcher, database = dreaming
    save_pairs("erin", [pair(n, user_message=f"I sanded and oiled the old oak table, part {n}") for n in range(1500)],
               database=database, embedder=stub_embedder(openai_stub_server, 16), embed=False)
    instance.add_dynamic_partitions("users", ["erin"])
    others = launcher.workers.server_pid
    quick = new_run(instance, request_context, "alice")
    workers.start(instance, quick, "v1")
    servers = [workers.server_pid]
    assert finished(instance, quick.run_id).status == dg.DagsterRunStatus.SUCCESS
    slow = new_run(instance, request_context, "erin")
    slow_worker = workers.start(instance, slow, "v1")
    servers.append(workers.server_pid)
    reloaded = new_run(instance, request_context, "bob")
    workers.start(instance, reloaded, "v2")
    servers.append(workers.server_pid)
    assert servers[0] == servers[1] != servers[2]
    assert not instance.get_run_by_id(slow.run_id).is_finished  # the old server's run, still going
    assert slow_worker in workers.running()
    assert not psutil.pid_exists(servers[0]) or psutil.Process(servers[0]).status() == psutil.STATUS_ZOMBIE
    assert finished(instance, reloaded.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert others is not None and psutil.pid_exists(others) and others not in servers
    assert finished(instance, slow.run_id, timeout=600).status == dg.DagsterRunStatus.SUCCESS
    deadline = time.monotonic() + 30
    while slow_worker in workers.running():
        assert time.monotonic() < deadline, "the ended run's worker is still counted running"
        time.sleep(0.1)


def test_a_stop_before_the_worker_starts_its_run_is_kept(dreaming, workers, monkeypatch):
    """Terminate arriving after the fork but before the worker's pid is recorded: the run is canceled and never
    executes (it used to run in full)."""
    instance, request_context, launcher, database = dreaming
    run = new_run(instance, request_context, "dave")
    instance.add_run_tags(run.run_id, {FORKED_WORKER_TAG: "true"})  # as the launcher marks the runs it forks
    record = instance.add_run_tags

    def stop_first(run_id: str, tags: dict) -> None:
        if WORKER_PID_TAG in tags:
            assert launcher.terminate(run_id)  # the run's worker exists, its pid not recorded yet
        record(run_id, tags)

    monkeypatch.setattr(instance, "add_run_tags", stop_first)
    pid = workers.start(instance, run, "v2")
    monkeypatch.undo()
    deadline = time.monotonic() + 60
    while pid in workers.running():  # its last words logged
        assert time.monotonic() < deadline, "the canceled run's worker is still running"
        time.sleep(0.1)
    assert finished(instance, run.run_id).status == dg.DagsterRunStatus.CANCELED
    assert graph_reports.graph_stats(database, "dave")["stored_pairs"] == 0  # no step ran
    messages = [record.dagster_event.message or "" for record in instance.all_logs(run.run_id) if record.dagster_event]
    assert any("canceled before execution could start" in m for m in messages), messages


def test_a_preload_that_fails_sends_runs_to_the_code_server(dreaming):
    """Any preload error (here a RuntimeError, not an ImportError) leaves no fork server; the launch goes to the
    code server, and the run says why."""
    instance, request_context, _, database = dreaming
    launcher = LocalRunLauncher(warm_workers=True, preload="tests.broken_preload")
    launcher.register_instance(instance)
    run = new_run(instance, request_context, "dave")
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=request_context))
    assert finished(instance, run.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert instance.get_run_by_id(run.run_id).tags[FORKED_WORKER_TAG] == "false"
    messages = [record.message or "" for record in instance.all_logs(run.run_id)]
    assert any("no warm run worker" in m and "a preload that breaks" in m for m in messages)
    assert graph_reports.graph_stats(database, "dave")["stored_pairs"] == 6
    assert launcher.workers.server_pid is None


def test_the_dagster_internals_the_workers_use_are_as_they_expect():
    """The workers run a run through Dagster's private run-in-subprocess path; an upgrade that changes it fails
    here, not in a user's run."""
    from dagster._grpc import impl
    from dagster._grpc.types import ExecuteExternalJobArgs

    assert list(inspect.signature(impl._run_in_subprocess).parameters) == [
        "serialized_execute_run_args", "recon_pipeline", "termination_event", "subprocess_status_handler",
        "run_event_handler"]
    assert {"job_origin", "run_id", "instance_ref"} <= set(inspect.signature(ExecuteExternalJobArgs).parameters)
    assert hasattr(impl, "StartRunInSubprocessSuccessful")


def test_the_preload_imports_cleanly_in_a_fresh_process(tmp_path):
    """The fork server imports the preload; every worker inherits what it leaves. It must load what it promises,
    and leave nothing a fork breaks: no Python thread, no socket (a database connection among them), no file
    open beyond the standard streams."""
    code = ("import os, sys, threading, dreaming_dagster.instance.preload\n"
            "fds = sorted(int(fd) for fd in os.listdir('/proc/self/fd'))\n"
            "def target(fd):\n"
            "    try:\n"
            "        return os.readlink(f'/proc/self/fd/{fd}')\n"
            "    except FileNotFoundError:\n"
            "        return None  # the listing's own descriptor, closed since\n"
            "print(repr([t for t in map(target, fds[3:]) if t is not None]))\n"
            "print(threading.active_count(), *sorted({'torch', 'spacy', 'onnxruntime', 'transformers',"
            " 'dreaming_dagster.defs.pipeline.assets', 'psycopg'} & set(sys.modules)))")
    env = {name: value for name, value in os.environ.items() if not name.startswith("DREAMING_")} | {
        "DREAMING_DATA_DIR": str(tmp_path)}  # no database yet: the code location of one partition a user
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    files, modules = out.stdout.splitlines()
    assert files == "[]"
    assert modules.split() == ["1", "dreaming_dagster.defs.pipeline.assets", "onnxruntime", "psycopg", "spacy",
                               "torch", "transformers"]


def test_a_run_its_worker_cannot_find_fails_its_launch(dreaming, workers):
    instance, request_context, launcher, _ = dreaming
    run = new_run(instance, request_context, "dave")
    instance.delete_run(run.run_id)
    with pytest.raises(DagsterRunNotFoundError, match=run.run_id):  # the launcher's own check
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=request_context))
    with pytest.raises(DagsterRunNotFoundError, match=run.run_id):  # found before the worker may look for it
        workers.start(instance, run, "v2")
    deadline = time.monotonic() + 30
    while len(workers.running()) > 0:  # the forked worker, told nothing, has ended
        assert time.monotonic() < deadline, workers.running()
        time.sleep(0.1)


def test_without_warm_workers_the_code_server_starts_the_run(dreaming):
    instance, request_context, _, database = dreaming
    launcher = LocalRunLauncher(warm_workers=False)
    launcher.register_instance(instance)
    run = new_run(instance, request_context, "dave")
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=request_context))
    assert finished(instance, run.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert FORKED_WORKER_TAG not in instance.get_run_by_id(run.run_id).tags
    assert graph_reports.graph_stats(database, "dave")["stored_pairs"] == 6
