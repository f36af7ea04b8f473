"""The Dagster code location: definitions, a partition materialized on a real instance, the sensor,
and the `dg`/`dagster` validation commands run against the project's dagster.yaml."""

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from dreaming_dagster.definitions import definitions_for
from dreaming_dagster.definitions import defs as load_defs
from dreaming_dagster.defs.ingest.assets import memory_pairs
from dreaming_dagster.defs.layout import Layout, users_partitions
from dreaming_dagster.defs.pipeline.sensors import pending_pairs_sensor
from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
)
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.embedding import embed_pending_pairs
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import dating, graph_reports, linking
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from tests.conftest import PROJECT_ROOT, pair

BIN = Path(sys.executable).parent


@pytest.fixture
def resources(database_url, openai_stub):
    return {
        "dreaming_db": DreamingDatabaseResource(database_url=database_url),
        "embedder": EmbedderResource(provider="openai", model="stub-embed-16", base_url=openai_stub.base_url,
                                     api_key="test", dimensions=16),
        "llm": LLMResource(provider="offline"),
        "dreaming_policy": DreamingPolicyResource(),
    }


@pytest.fixture
def loaded(clean_env, database_url):
    """The code location as Dagster loads it, reading the partitioning from the test's database (one
    partition a user: no layout recorded)."""
    clean_env.setenv("DREAMING_DATABASE_URL", database_url)
    return load_defs()


def test_definitions_shape(loaded):
    definitions = loaded
    asset = definitions.resolve_assets_def("memory_pairs")
    key = dg.AssetKey("memory_pairs")
    assert asset.group_names_by_key[key] == "dreaming"
    assert isinstance(asset.partitions_def, dg.DynamicPartitionsDefinition)
    assert asset.partitions_def.name == "users"
    spec = next(iter(asset.specs))
    assert {"postgres", "pgvector"} <= set(spec.kinds)
    assert spec.description and "memory pairs" in spec.description
    assert dg.AssetCheckKey(key, "all_pairs_embedded") in asset.check_keys
    job = definitions.resolve_job_def("dreaming_job")
    assert job.partitions_def.name == "users"
    sensor = definitions.resolve_sensor_def("pending_pairs_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert {"dreaming_db", "embedder", "llm", "dreaming_policy"} <= set(definitions.resources)
    graph = definitions.resolve_asset_graph()
    stage_keys = ["memory_pairs", "pair_dates", "pair_keys", "pair_subjects", "subjects", "subject_links",
                  "refined_subjects"]
    for upstream, downstream in zip(stage_keys, stage_keys[1:], strict=False):
        node = graph.get(dg.AssetKey(downstream))
        assert node.parent_keys == {dg.AssetKey(upstream)}, downstream
        assert node.group_name == "dreaming" and node.partitions_def.name == "users" and node.description
    assert {c.name for c in graph.asset_check_keys} >= {"all_pairs_embedded", "no_duplicate_subjects",
                                                        "no_mega_node", "no_orphan_pairs"}
    assert definitions.resolve_job_def("rebuild_user_graph").partitions_def.name == "users"


def test_materialize_a_user_partition(database_url, resources, database, embedder16):
    save_pairs("alice", [pair(i) for i in range(7)], database=database, embedder=embedder16, embed=False)
    save_pairs("bob", [pair(i) for i in range(3)], database=database, embedder=embedder16, embed=False)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("users", ["alice", "bob"])
        result = dg.materialize([memory_pairs], partition_key="alice", instance=instance, resources=resources)
        assert result.success
        (materialization,) = result.asset_materializations_for_node("memory_pairs")
        metadata = {k: v.value for k, v in materialization.metadata.items()}
        assert metadata["pairs"] == 7 and metadata["embedded_now"] == 7
        assert metadata["pending_embedding"] == 0 and metadata["tokens"] > 0
        assert "| default | 7 |" in metadata["memory"]
        (check,) = result.get_asset_check_evaluations()
        assert check.passed
        # Another user's pending pairs are untouched by alice's partition.
        with database.connect() as conn:
            assert conn.execute("SELECT count(*) AS n FROM memory_pairs WHERE user_id = 'bob' "
                                "AND embedding IS NULL").fetchone()["n"] == 3
        again = dg.materialize([memory_pairs], partition_key="alice", instance=instance, resources=resources)
        (second,) = again.asset_materializations_for_node("memory_pairs")
        assert second.metadata["embedded_now"].value == 0  # nothing left to do: idempotent


def evaluate_sensor(instance, resources):
    with dg.build_sensor_context(instance=instance, definitions=definitions_for(Layout()),
                                 resources=resources) as context:
        return pending_pairs_sensor(context)


def test_pending_pairs_sensor(database, resources, embedder16):
    with dg.instance_for_test() as instance:
        # A database nobody has written to yet has no tables: nothing to do, no error.
        assert isinstance(evaluate_sensor(instance, resources), dg.SkipReason)

        save_pairs("alice", [pair(i) for i in range(2)], database=database, embedder=embedder16, embed=False)
        save_pairs("bob", [pair(i) for i in range(3)], database=database, embedder=embedder16, embed=False)
        result = evaluate_sensor(instance, resources)
        assert sorted(r.partition_key for r in result.run_requests) == ["alice", "bob"]
        (add_request,) = result.dynamic_partitions_requests
        assert sorted(add_request.partition_keys) == ["alice", "bob"]

        instance.add_dynamic_partitions(users_partitions.name, ["alice", "bob"])
        repeat = evaluate_sensor(instance, resources)
        assert {r.run_key for r in repeat.run_requests} == {r.run_key for r in result.run_requests}
        assert repeat.dynamic_partitions_requests == []  # known users are not added twice

        embed_pending_pairs(database, embedder16, "alice")
        still = evaluate_sensor(instance, resources)  # embedded, but not dreamed yet: still pending
        assert sorted(r.partition_key for r in still.run_requests) == ["alice", "bob"]
        sync_user("alice", database=database, embedder=embedder16, extractor=OfflineExtractor(),
                  refiner=OfflineRefiner())
        later = evaluate_sensor(instance, resources)
        assert [r.partition_key for r in later.run_requests] == ["bob"]


def test_a_backlog_never_queues_more_sensor_runs_than_users_with_work(database, resources, embedder16, monkeypatch,
                                                                       loaded):
    """The run storm: a queue that drains slower than the retry window used to get a second run for every
    user whose first was still queued. Now a user with a dreaming run queued or running gets none, sensor
    runs queue behind runs a person launched, and a user whose run ended with work left is asked for again
    in the next window."""
    from types import SimpleNamespace

    from dreaming_dagster.defs.pipeline import sensors
    from dreaming_dagster.pipeline.pending_work import RETRY_AFTER_SECONDS

    users = [f"user-{n:02d}" for n in range(12)]
    for user in users:
        save_pairs(user, [pair(0)], database=database, embedder=embedder16, embed=False)
    clock = [1_000_000.0]
    monkeypatch.setattr(sensors, "time", SimpleNamespace(time=lambda: clock[0]))
    job = dg.Definitions(assets=loaded.assets, asset_checks=loaded.asset_checks, jobs=loaded.jobs,
                         resources=resources).resolve_job_def("dreaming_job")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(users_partitions.name, users)
        # Runs waiting to start (a queued run needs a code location's origin; not started is as much in
        # flight for the sensor: the same rule covers queued, starting and started runs).
        waiting = dg.DagsterRunStatus.NOT_STARTED
        by_hand = instance.create_run_for_job(job, status=waiting,
                                              tags={"dagster/partition": users[0]})  # a person's backfill

        def queued():
            return instance.get_runs(filters=dg.RunsFilter(job_name="dreaming_job", statuses=[waiting]))

        for _ in range(6):  # six retry windows while nothing drains
            result = evaluate_sensor(instance, resources)
            for request in getattr(result, "run_requests", []):
                assert request.tags["dagster/priority"] == "-1"  # behind the default 0 of a person's run
                instance.create_run_for_job(job, status=waiting,
                                            tags={**request.tags, "dagster/partition": request.partition_key})
            assert len(queued()) == len(users)  # one each: the hand-made run stands for users[0]
            clock[0] += RETRY_AFTER_SECONDS
        # Runs that ended with the work still pending free their users: asked for again, once.
        ended = [run for run in queued() if run.run_id != by_hand.run_id][:5]
        for run in ended:
            instance.report_run_failed(run)
        # A failed run that run_retries will launch again (after a restart) is in flight: its user gets no new
        # run beside the retry. Once the retry exists, the retry is what counts.
        from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG

        from dreaming_dagster.defs import run_queue

        assert run_queue.WILL_RETRY_TAG == WILL_RETRY_TAG  # Dagster's tag, named here by its value
        instance.add_run_tags(ended[0].run_id, {WILL_RETRY_TAG: "true"})
        again = evaluate_sensor(instance, resources)
        assert sorted(r.partition_key for r in again.run_requests) == sorted(run.tags["dagster/partition"]
                                                                              for run in ended[1:])
        instance.add_run_tags(ended[0].run_id, {AUTO_RETRY_RUN_ID_TAG: "the-retry"})  # the retry ended too
        again = evaluate_sensor(instance, resources)
        assert sorted(r.partition_key for r in again.run_requests) == sorted(run.tags["dagster/partition"]
                                                                              for run in ended)


def _run_under_dagster_env(command: list[str], database_url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_") and k != "DAGSTER_HOME"}
    env["DREAMING_DATABASE_URL"] = database_url
    # Without the venv on PATH, as the README runs it (`.venv/bin/dreaming exec -- dg check defs`).
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if str(BIN) not in p)
    return subprocess.run([str(BIN / "dreaming"), "exec", "--", *command], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("command", [["dg", "check", "defs"],
                                     ["dagster", "definitions", "validate", "-w", "workspace.yaml"]])
def test_dagster_validation_commands_pass(command, database_url, tmp_path):
    completed = _run_under_dagster_env(command, database_url, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.slow  # a fresh process
def test_loading_the_code_location_imports_no_model_library():
    """A code server, `dg check defs` and every CLI command that builds the definitions load them; torch,
    spaCy and ONNX Runtime are for the steps (and the warm run workers' preload), seconds a process."""
    code = ("import sys; from dreaming_dagster.definitions import defs; defs(); "
            "print(sorted({'torch', 'spacy', 'onnxruntime', 'transformers'} & set(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=120)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


def test_dreaming_job_and_rebuild_over_a_partition(database, resources, embedder16, loaded):
    save_pairs("alice", [pair(i, user_message=f"I visited Lisbon with my sister Dana last Saturday, trip {i}")
                         for i in range(6)], database=database, embedder=embedder16, embed=False)
    # the project's assets and jobs (``loaded``), bound to the test's resources
    definitions = dg.Definitions(assets=loaded.assets, asset_checks=loaded.asset_checks, jobs=loaded.jobs,
                                 resources=resources)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("users", ["alice"])
        result = definitions.resolve_job_def("dreaming_job").execute_in_process(
            partition_key="alice", instance=instance)
        assert result.success
        by_asset = {name: {k: v.value for k, v in result.asset_materializations_for_node(name)[0].metadata.items()}
                    for name in ("pair_dates", "pair_keys", "pair_subjects", "subjects", "subject_links",
                                 "refined_subjects")}
        assert by_asset["pair_dates"]["pairs"] == 6 and by_asset["pair_dates"]["pairs_with_dated_events"] == 6
        # "I visited Lisbon with my sister Dana last Saturday": a statement and a dated event for each pair.
        assert by_asset["pair_keys"]["pairs"] == 6 and by_asset["pair_keys"]["statements"] == 6
        assert by_asset["pair_keys"]["events"] == 6
        assert by_asset["pair_subjects"]["pairs"] == 6 and by_asset["pair_subjects"]["provider"] == "offline"
        assert by_asset["subjects"]["created"] >= 1 and "merge_ratio" in by_asset["subjects"]
        assert by_asset["subject_links"]["links"] >= 6 and "Top subjects" in by_asset["subject_links"]["top_subjects"]
        assert all(check.passed for check in result.get_asset_check_evaluations())
        before = graph_reports.graph_stats(database, "alice")

        rebuild = definitions.resolve_job_def("rebuild_user_graph").execute_in_process(
            partition_key="alice", instance=instance)
        assert rebuild.success
        (rebuilt,) = rebuild.asset_materializations_for_node("pair_subjects")
        assert rebuilt.metadata["rebuilt"].value is True
        assert rebuilt.metadata["pairs"].value == 6  # every pair extracted again
        assert graph_reports.graph_stats(database, "alice") == before
        assert dating.dated_pair_counts(database, "alice") == {"pairs": 6, "with_times": 6, "pending": 0}


def test_a_launchpad_merge_threshold_reaches_the_merge_stage_and_the_janitor(database, resources, monkeypatch):
    """The threshold set on the dreaming_policy resource (launchpad run config here) is the one the
    subjects asset merges with, whatever the environment says."""
    from dreaming_dagster.defs.pipeline.assets import subjects

    monkeypatch.setenv("DREAMING_MERGE_THRESHOLD", "0.5")  # would merge both; the launchpad must win
    embedder = EmbedderResource(provider="local").embedder()  # the shipped encoder, as the asset embeds
    database.ensure_schema(embedder.spec)
    save_pairs("alice", [pair(1), pair(2)], database=database, embedder=embedder, embed=False)
    names = {1: "Lisbon Trip", 2: "Trip To Lisbon"}  # cosine ≈ 0.9: merged at 0.75, apart at 0.99

    def extracted() -> None:
        linking.clear_user_graph(database, "alice", "default")
        with database.connect() as conn:
            for turn, name in names.items():
                conn.execute("UPDATE pair_stages s SET extracted_at = now(), summary = '', extracted_subjects = "
                             "%s::jsonb FROM memory_pairs p WHERE p.id = s.pair_id AND p.turn_index = %s",
                             (f'[{{"name": "{name}", "description": "d", "type": "topic"}}]', turn))

    local = {**resources, "embedder": EmbedderResource(provider="local"),
             "dreaming_policy": DreamingPolicyResource.configure_at_launch()}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("users", ["alice"])
        outcomes = {}
        for threshold in (0.99, 0.75):
            extracted()
            run_config = {"resources": {"dreaming_policy": {"config": {"merge_threshold": threshold}}}}
            result = dg.materialize([subjects], partition_key="alice", instance=instance, resources=local,
                                    run_config=run_config)
            metadata = {k: v.value for k, v in result.asset_materializations_for_node("subjects")[0].metadata.items()}
            outcomes[threshold] = (metadata["threshold"], metadata["created"], metadata["merged"])
    assert outcomes == {0.99: (0.99, 2, 0), 0.75: (0.75, 1, 1)}


def definitions_summary(definitions: dg.Definitions) -> dict:
    """What a reviewer should see change in a diff: every asset's spec, check, job, sensor and resource."""
    graph = definitions.resolve_asset_graph()
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "group": node.group_name, "kinds": sorted(node.kinds),
            "partitions": node.partitions_def.name if node.partitions_def else None,
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "checks": sorted(c.name for c in graph.asset_check_keys if c.asset_key == key),
            "pools": sorted(node.pools or []), "description": node.description}
    sensors = {s.name: {"jobs": sorted(j.name for j in s.jobs) if s.has_jobs else [], "interval_s": s.minimum_interval_seconds,
                        "default": s.default_status.value} for s in definitions.sensors}
    jobs = {j.name: j.description for j in definitions.jobs}
    resources = {name: sorted(type(r).model_fields) for name, r in definitions.resources.items()}
    return {"assets": assets, "jobs": dict(sorted(jobs.items())), "sensors": dict(sorted(sensors.items())),
            "resources": dict(sorted(resources.items()))}


def test_the_definitions_match_their_reviewed_snapshot(snapshot, loaded):
    """tests/__snapshots__/test_dagster.ambr is the definitions as last reviewed; after an intended change,
    `pytest -n 0 tests/test_dagster.py --snapshot-update` rewrites it and the diff shows what changed."""
    assert definitions_summary(loaded) == snapshot


def test_a_switch_of_partitioning_stops_rebuild_backfills_and_waits_for_its_runs_to_stop(database, embedder16,
                                                                                       loaded, monkeypatch):
    """A rebuild (`dreaming dagster rebuild`: an asset backfill, its runs __ASSET_JOB's) queued before a switch
    would keep asking for partitions the new layout lacks: refused, or canceled with --force. A run told to stop
    is reported canceled only once it has stopped."""
    import threading

    from dreaming_dagster.defs.graph_rebuilds import request_rebuild
    from dreaming_dagster.defs.partitioning_switch import RunsInFlightError, switch_partitioning

    database.ensure_schema(embedder16.spec)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(users_partitions.name, ["alice", "bob"])
        backfill_id, _ = request_rebuild(instance, loaded, ["alice"])
        asset_run = instance.create_run_for_job(loaded.resolve_implicit_global_asset_job_def(),
                                                status=dg.DagsterRunStatus.NOT_STARTED,
                                                tags={"dagster/partition": "alice", "dagster/backfill": backfill_id})
        with pytest.raises(RunsInFlightError, match="1 dreaming run.* and 1 backfill"):
            switch_partitioning(instance, database, 4, force=False, max_user_partitions=100)
        running = instance.create_run_for_job(loaded.resolve_job_def("dreaming_job"),
                                              status=dg.DagsterRunStatus.STARTED, tags={"dagster/partition": "bob"})
        stopped_at: list[float] = []

        def cancel(run_id: str) -> bool:  # as the launcher does: SIGINT sent; the worker stops a moment later
            if run_id != running.run_id:
                return False

            def stop() -> None:
                time.sleep(1.0)
                stopped_at.append(time.monotonic())
                instance.report_run_canceled(instance.get_run_by_id(run_id), "stopped by its worker")

            threading.Thread(target=stop).start()
            return True

        monkeypatch.setattr(instance.run_coordinator, "cancel_run", cancel)
        switch = switch_partitioning(instance, database, 4, force=True, max_user_partitions=100)
        returned_at = time.monotonic()
        assert (switch.canceled, switch.backfills_canceled, switch.not_seen_stopping) == (2, 1, 0)
        assert stopped_at and stopped_at[0] <= returned_at  # the switch waited for the stop
        assert {instance.get_run_by_id(run.run_id).status for run in (asset_run, running)} == {
            dg.DagsterRunStatus.CANCELED}
        assert instance.get_backfill(backfill_id).status.value == "CANCELING"  # the daemon stops its runs
