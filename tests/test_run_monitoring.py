"""A run whose worker process died stays "Started" for ever under Dagster's default launcher: the project's
launcher (instance/run_launcher.py) tells the run monitoring daemon whether a run's worker still exists, so such a
run is marked failed within one poll interval, and a live worker's run is left alone."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.events import EngineEventData
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from dreaming_dagster.instance.run_launcher import LocalRunLauncher, worker_started

pytestmark = pytest.mark.slow  # starts Dagster's daemon and run workers

PROJECT_DAGSTER_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def project_monitoring_settings() -> dict:
    """The run launcher and run monitoring of the project's own dagster.yaml (what `dreaming ui` runs)."""
    config = yaml.safe_load(PROJECT_DAGSTER_YAML.read_text())
    return {key: config[key] for key in ("run_launcher", "run_monitoring")}


def started_run(instance: dg.DagsterInstance, pid: int | None) -> dg.DagsterRun:
    run = instance.add_run(dg.DagsterRun(job_name="dreaming_job", run_id=str(uuid.uuid4()),
                                         status=dg.DagsterRunStatus.STARTED))
    if pid is not None:
        instance.report_engine_event(f"Started process for run (pid: {pid}).", run,
                                     EngineEventData.in_process(pid))
    return run


def test_the_monitor_fails_a_run_whose_worker_is_gone_and_keeps_a_live_one():
    settings = project_monitoring_settings()
    assert settings["run_monitoring"]["enabled"] and settings["run_monitoring"]["poll_interval_seconds"] <= 30
    with dg.instance_for_test(overrides=settings) as instance:
        assert isinstance(instance.run_launcher, LocalRunLauncher) and instance.run_monitoring_enabled
        dead, alive, unknown = started_run(instance, dead_pid()), started_run(instance, os.getpid()), \
            started_run(instance, None)
        assert worker_started(instance, alive.run_id)[0] == os.getpid()
        for run in (dead, alive, unknown):
            monitor_started_run(instance, None, instance.get_run_record_by_id(run.run_id), logging.getLogger())
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        # A run no code server launched (`dagster job execute`) records no worker: not the monitor's to judge.
        assert instance.get_run_by_id(unknown.run_id).status == dg.DagsterRunStatus.STARTED


def test_a_recycled_pid_is_a_dead_worker():
    """The worker's pid reported long before the process that holds it now started: another process's."""
    from dagster._core.launcher.base import WorkerStatus

    from dreaming_dagster.instance.run_launcher import worker_status

    assert worker_status(os.getpid(), time.time())[0] == WorkerStatus.RUNNING
    assert worker_status(os.getpid(), time.time() - 10 * 24 * 3600)[0] == WorkerStatus.NOT_FOUND
    assert worker_status(dead_pid(), time.time())[0] == WorkerStatus.NOT_FOUND
