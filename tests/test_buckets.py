"""Hash buckets of users as Dagster partitions (pipeline/buckets.py, `dreaming dagster partitioning`): the
bucket function agrees with SQL's, the switch command, and the code location in bucket mode end to end in
a fresh process (tests/bucket_mode_scenario.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from dreaming_dagster.definitions import definitions_for
from dreaming_dagster.defs.layout import Layout, users_partitions
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import buckets
from tests.conftest import PROJECT_ROOT, pair

BIN = Path(sys.executable).parent


def test_one_process_builds_the_code_location_for_either_layout():
    """The layout is an argument of the code location, not a global: both build side by side, every asset a
    user's partition holds is re-partitioned by the buckets, and what runs reads the layout back from them."""
    per_user, bucketed = definitions_for(Layout()), definitions_for(Layout(4))
    partitioned = ["memory_pairs", "pair_dates", "pair_keys", "pair_subjects", "subjects", "subject_links",
                   "refined_subjects", "dream_consolidation"]
    for name in partitioned:
        assert per_user.resolve_assets_def(name).partitions_def == users_partitions
        assert per_user.resolve_assets_def(name).backfill_policy is None
        assert bucketed.resolve_assets_def(name).partitions_def.get_partition_keys() == buckets.bucket_keys(4)
        assert bucketed.resolve_assets_def(name).backfill_policy == dg.BackfillPolicy.multi_run(4)
    assert bucketed.resolve_assets_def("ranker_model").partitions_def is None  # not a user's: left as declared
    for loaded, layout in ((per_user, Layout()), (bucketed, Layout(4))):
        for job in ("dreaming_job", "rebuild_user_graph", "consolidation_job"):
            assert Layout.of_partitions(loaded.resolve_job_def(job).partitions_def) == layout
            assert loaded.resolve_job_def(job).executor_def.name == "in_process"
        assert {check.name for check in loaded.resolve_assets_def("subject_links").check_specs} == {
            "no_mega_node", "no_orphan_pairs"}
    expected: dict = {}
    for user in ("alice", "bob"):
        expected.setdefault(buckets.bucket_key_of(user, 4), []).append(user)
    assert Layout(4).partitions_of(["alice", "bob", "alice"]) == expected
    assert Layout().partitions_of(["alice", "bob", "alice"]) == {"alice": ["alice"], "bob": ["bob"]}


def test_a_users_bucket_is_the_same_in_python_and_sql(database, embedder16):
    database.ensure_schema(embedder16.spec)
    users = ["alice", "user-999999", "ü-ß", "", "x" * 200]
    with database.connect(vectors=False) as conn:
        for count in (1, 4, 16, 997):
            in_sql = [conn.execute("SELECT user_bucket(%s::text, %s::int) AS b", (user, count)).fetchone()["b"] for user in users]
            assert in_sql == [buckets.bucket_of(user, count) for user in users]
    assert buckets.bucket_keys(12)[:2] == ["bucket-00", "bucket-01"] and buckets.bucket_index("bucket-07") == 7
    with pytest.raises(ValueError, match="bucket"):
        buckets.bucket_index("alice")
    spread = buckets.group_by_bucket([f"user-{n}" for n in range(4000)], 16)
    assert len(spread) == 16 and max(len(v) for v in spread.values()) < 1.25 * 4000 / 16


def test_the_layout_is_recorded_in_the_database(database, embedder16):
    database.ensure_schema(embedder16.spec)
    assert buckets.read_layout(database) == 0
    buckets.write_layout(database, 16)
    assert buckets.read_layout(database) == 16
    buckets.write_layout(database, 0)
    assert buckets.read_layout(database) == 0
    with pytest.raises(ValueError, match="buckets"):
        buckets.write_layout(database, 10_001)


def dreaming(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "dreaming"), *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)


def test_bucket_mode_end_to_end(cli_env, database, embedder16):
    """Switch with the command, then in a fresh process: the assets are partitioned by 4 buckets; the
    sensor asks one run a bucket with work (none for a bucket whose run is in flight); the bucket runs dream
    every user; a rebuild; fast-path syncs reported as one event a bucket and asset; forget on demand."""
    shown = dreaming("dagster", "partitioning")
    assert shown.returncode == 0 and "one partition a user" in shown.stdout, shown.stderr
    # Per-user runs still queued when the deployment switches: refused, or canceled with --force (they would
    # fail on partitions the buckets do not have).
    instance, job = project_instance(cli_env), dreaming_job_def()
    queued = [instance.create_run_for_job(job, status=dg.DagsterRunStatus.NOT_STARTED,
                                          tags={"dagster/partition": f"storm-{n}"}) for n in range(3)]
    refused = dreaming("dagster", "partitioning", "--buckets", "4")
    assert refused.returncode == 2 and "3 dreaming run(s) queued or running" in refused.stderr
    switched = dreaming("dagster", "partitioning", "--buckets", "4", "--force")
    assert switched.returncode == 0 and "canceled 3 run(s)" in switched.stdout, switched.stderr
    assert {instance.get_run_by_id(run.run_id).status for run in queued} == {dg.DagsterRunStatus.CANCELED}
    assert "4 hash buckets" in dreaming("dagster", "partitioning").stdout
    refused = dreaming("dagster", "partitioning", "--buckets", "4", "--per-user")
    assert refused.returncode != 0 and "choose one" in refused.stderr

    users = [f"user-{n:02d}" for n in range(12)]
    for n, user in enumerate(users):
        save_pairs(user, [pair(i, user_message=f"I play the cello with my friend Dana, week {i} of {n}")
                          for i in range(2)], database=database, embedder=embedder16, embed=False)
    completed = subprocess.run([sys.executable, "-m", "tests.bucket_mode_scenario"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=600,
                               env={**os.environ, "DREAMING_DREAM_TOKEN_THRESHOLD": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    seen = json.loads(completed.stdout)
    expected = sorted(buckets.group_by_bucket(users, 4))
    assert seen["partition_keys"] == buckets.bucket_keys(4)
    assert seen["executor"] == "in_process"
    assert seen["requested"] == expected and seen["priorities"] == ["-1"]
    assert seen["requested_with_one_in_flight"] == expected[1:]
    keys = buckets.bucket_keys(4)
    rebuilt = set(keys[keys.index(expected[0]):keys.index(expected[1]) + 1])
    assert seen["requested_during_rebuild"] == [key for key in expected if key not in rebuilt]
    assert seen["after_runs"] == "SkipReason"  # every user dreamed: no work left
    assert set(seen["bucket_metadata_kinds"]) <= {"int", "float", "bool"}  # counts: no names, ids or error text
    assert seen["run_lists_left"] == 0 and seen["unlinked_pairs"] == 0
    assert seen["profiles"] == len(users) and seen["subjects"] > 0
    assert seen["subjects_after_rebuild"] > 0
    assert seen["pairs_extracted_by_rebuild"] == 2 * len(buckets.group_by_bucket(users, 4)[expected[0]])
    assert seen["old_lists_kept"] == [True]  # the live run's two-day-old list stays; the dead run's goes
    assert seen["fast_path_events"] <= 3 * 7 and seen["fast_path_syncs_by_asset"]["subjects"] == 3
    assert set(seen["fast_path_syncs_by_asset"].values()) == {3}
    assert set(seen["fast_path_partitions"]) <= set(buckets.bucket_keys(4))
    assert seen["fast_a_pairs"] == 0
    over_budget = sorted(buckets.group_by_bucket([*users, "fast-b", "fast-c"], 4))
    assert seen["token_sensor_requested"] == over_budget
    assert seen["consolidation_success"] and seen["consolidation_failed_users"] == 1
    assert set(seen["users_passed"]) == set(seen["users_in_bucket"]) - {seen["failing_user"]}
    assert not seen["log_names_the_failing_user"]
    assert seen["stale_layout_skip"]

    # A user dreamed by the buckets whose last per-user run had failed shows as dreamed after the switch back.
    instance.add_dynamic_partitions("users", ["user-00"])
    instance.create_run_for_job(job, status=dg.DagsterRunStatus.FAILURE,
                                tags={"dagster/partition": "user-00"})
    back = dreaming("dagster", "partitioning", "--per-user")
    assert back.returncode == 0 and "registered 13 user partition(s)" in back.stdout, back.stdout + back.stderr
    assert "1 user(s) shown dreamed again" in back.stdout
    assert "user-00" in instance.get_materialized_partitions(dg.AssetKey("refined_subjects"))
    # A rebuild through Dagster from the shell: an asset backfill whose status follows its runs (a job backfill
    # from Dagster's command line reads complete once its runs are submitted).
    rebuilt = dreaming("dagster", "rebuild", "--user", "user-00", "--user", "user-01")
    assert rebuilt.returncode == 0 and "2 partition(s)" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr
    backfill = instance.get_backfill(rebuilt.stdout.split()[1])
    assert backfill.status.value == "REQUESTED" and backfill.is_asset_backfill
    targets = backfill.asset_backfill_data.target_subset
    assert sorted(targets.get_partitions_subset(dg.AssetKey("memory_pairs")).get_partition_keys()) == \
        ["user-00", "user-01"]
    assert backfill.run_config["ops"]["pair_subjects"]["config"] == {"rebuild": True}
    unknown = dreaming("dagster", "rebuild", "--user", "nobody-here")
    assert unknown.returncode == 2 and "nobody-here" in unknown.stderr


def project_instance(env) -> dg.DagsterInstance:
    """The Dagster instance the CLI uses (the project's dagster.yaml, storage beside the test's database)."""
    from dreaming_dagster.config.settings import DreamingSettings
    from dreaming_dagster.dagster_env import STORAGE_URL_VARIABLE, dagster_storage_url, project_root

    env.setenv("DAGSTER_HOME", str(project_root()))
    env.setenv(STORAGE_URL_VARIABLE, dagster_storage_url(DreamingSettings()))
    return dg.DagsterInstance.get()


def dreaming_job_def():
    from dreaming_dagster.definitions import defs

    return defs().resolve_job_def("dreaming_job")
