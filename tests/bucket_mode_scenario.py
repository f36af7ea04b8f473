"""Run by tests/test_buckets.py in a fresh process (the code location reads its partitioning as it loads):
the dreaming code location in hash-bucket mode against the database of DREAMING_DATABASE_URL, on a real
Dagster instance. Prints what it saw as JSON."""

import json
import sys

import dagster as dg

from dreaming_dagster.definitions import defs
from dreaming_dagster.pipeline import buckets
from dreaming_dagster.pipeline.sync import save_and_sync
from dreaming_dagster.process_defaults import default_database

USERS = [f"user-{n:02d}" for n in range(12)]  # tests/test_buckets.py saves their pairs


def evaluate(sensor, instance, loaded, cursor=None):  # noqa: D103
    with dg.build_sensor_context(instance=instance, definitions=loaded, resources=loaded.resources,
                                 cursor=cursor) as context:
        result = sensor(context)
        return result, context


def counts(sql: str) -> int:
    with default_database().connect(vectors=False) as conn:
        return conn.execute(sql).fetchone()["n"]


def main() -> None:
    loaded = defs()  # first: the assets and sensors are built for the partitioning it reads
    from dreaming_dagster.defs.consolidation.sensors import token_budget_sensor
    from dreaming_dagster.defs.pipeline.sensors import fast_path_sensor, pending_pairs_sensor

    seen: dict = {"partition_keys": loaded.resolve_assets_def("subjects").partitions_def.get_partition_keys()}
    job = loaded.resolve_job_def("dreaming_job")
    seen["executor"] = job.executor_def.name
    with dg.instance_for_test() as instance:
        first, _ = evaluate(pending_pairs_sensor, instance, loaded)
        seen["requested"] = sorted(r.partition_key for r in first.run_requests)
        seen["priorities"] = sorted({r.tags["dagster/priority"] for r in first.run_requests})
        waiting = instance.create_run_for_job(job, status=dg.DagsterRunStatus.NOT_STARTED,
                                              tags={"dagster/partition": seen["requested"][0]})
        again, _ = evaluate(pending_pairs_sensor, instance, loaded)
        seen["requested_with_one_in_flight"] = sorted(r.partition_key for r in again.run_requests)
        instance.delete_run(waiting.run_id)
        # A rebuild backfill's run over a range of buckets (BackfillPolicy.multi_run tags the range, not a
        # partition): no dreaming run for those buckets while it is in flight.
        rebuilding = instance.create_run_for_job(
            loaded.resolve_job_def("rebuild_user_graph"), status=dg.DagsterRunStatus.NOT_STARTED,
            tags={"dagster/asset_partition_range_start": seen["requested"][0],
                  "dagster/asset_partition_range_end": seen["requested"][1]})
        during, _ = evaluate(pending_pairs_sensor, instance, loaded)
        seen["requested_during_rebuild"] = sorted(r.partition_key for r in during.run_requests)
        instance.delete_run(rebuilding.run_id)
        kinds = set()
        for key in seen["requested"]:
            result = job.execute_in_process(partition_key=key, instance=instance)
            assert result.success, key
            for step in ("pair_subjects", "subjects", "subject_links", "refined_subjects"):
                (event,) = result.asset_materializations_for_node(step)
                kinds |= {type(value.value).__name__ for name, value in event.metadata.items() if name != "provider"}
        seen["bucket_metadata_kinds"] = sorted(kinds)
        after, _ = evaluate(pending_pairs_sensor, instance, loaded)
        seen["after_runs"] = type(after).__name__
        seen["run_lists_left"] = counts("SELECT count(*) AS n FROM bucket_run_users")
        seen["subjects"] = counts("SELECT count(*) AS n FROM subjects WHERE archived_at IS NULL")
        seen["unlinked_pairs"] = counts("SELECT count(*) AS n FROM pair_stages WHERE kg_stored_at IS NULL")
        seen["profiles"] = counts("SELECT count(DISTINCT user_id) AS n FROM recall_profiles")

        # A bucket rebuild dreams every user of the bucket again (not only those with work): each of their
        # pairs is extracted again.
        rebuild = loaded.resolve_job_def("rebuild_user_graph")
        rebuild_started = counts("SELECT extract(epoch FROM clock_timestamp()) * 1e6 AS n")
        assert rebuild.execute_in_process(partition_key=seen["requested"][0], instance=instance).success
        seen["subjects_after_rebuild"] = counts("SELECT count(*) AS n FROM subjects WHERE archived_at IS NULL")
        seen["pairs_extracted_by_rebuild"] = counts(
            "SELECT count(*) AS n FROM pair_stages "
            f"WHERE extract(epoch FROM extracted_at) * 1e6 >= {rebuild_started}")

        # A bucket run's user list outlives a day while its run is queued or running; a dead run's goes.
        live = instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED,
                                           tags={"dagster/partition": seen["requested"][1]})
        with default_database().connect(vectors=False) as conn:
            for run_id in (live.run_id, "a-dead-run"):
                conn.execute("INSERT INTO bucket_run_users (run_id, user_id, added_at) "
                             "VALUES (%s, 'someone', now() - interval '2 days')", (run_id,))
        assert job.execute_in_process(partition_key=seen["requested"][2], instance=instance).success
        with default_database().connect(vectors=False) as conn:
            seen["old_lists_kept"] = sorted(row["run_id"] == live.run_id for row in conn.execute(
                "SELECT run_id FROM bucket_run_users"))
            conn.execute("DELETE FROM bucket_run_users")
        instance.delete_run(live.run_id)

        # Fast-path syncs: one event a bucket and asset for the whole tick, with the counts summed.
        before, _ = evaluate(fast_path_sensor, instance, loaded)  # the syncs before (none): consumed
        cursor = getattr(before, "cursor", None)
        for user in ("fast-a", "fast-b", "fast-c"):
            save_and_sync(user, [{"user_message": f"I adopted a cat named Miso, says {user}",
                                  "assistant_message": "Lovely!", "session_id": "s1",
                                  "occurred_at": "2026-05-01T10:00:00Z"}], strict=True)
        synced, _ = evaluate(fast_path_sensor, instance, loaded, cursor)
        events = synced.asset_events
        seen["fast_path_events"] = len(events)
        seen["fast_path_syncs_by_asset"] = {}
        for event in events:
            name = event.asset_key.to_user_string()
            seen["fast_path_syncs_by_asset"][name] = seen["fast_path_syncs_by_asset"].get(name, 0) + \
                event.metadata["syncs"].value
        seen["fast_path_partitions"] = sorted({event.partition for event in events})

        # One user on demand, whatever the partitioning: forget fast-a.
        user_job = loaded.resolve_job_def("user_memory_job")
        assert user_job.execute_in_process(instance=instance, run_config={"ops": {"user_request": {"config": {
            "user_id": "fast-a", "action": "forget"}}}}).success
        seen["fast_a_pairs"] = counts("SELECT count(*) AS n FROM memory_pairs WHERE user_id = 'fast-a'")
        # Consolidation: one run a bucket over its users past the threshold (set low by the test); one user
        # whose pass raises holds up none of the others, and the run's log names no user.
        budget, _ = evaluate(token_budget_sensor, instance, loaded)
        seen["token_sensor_requested"] = sorted(r.partition_key for r in budget.run_requests)
        from dreaming_dagster.consolidation import passes

        bucket = seen["token_sensor_requested"][0]
        in_bucket = sorted(u for u in [*USERS, "fast-b", "fast-c"] if buckets.bucket_key_of(u, 4) == bucket)
        failing = in_bucket[0]
        real_pass = passes.run_pass

        def run_pass(database, embedder, consolidator, user_id, *args, **kwargs):
            if user_id == failing:
                raise RuntimeError(f"the provider choked on {user_id}'s memory")
            return real_pass(database, embedder, consolidator, user_id, *args, **kwargs)

        passes.run_pass = run_pass
        consolidation = loaded.resolve_job_def("consolidation_job").execute_in_process(
            partition_key=bucket, instance=instance, raise_on_error=False)
        passes.run_pass = real_pass
        seen["consolidation_success"] = consolidation.success
        (event,) = consolidation.asset_materializations_for_node("dream_consolidation")
        seen["consolidation_failed_users"] = event.metadata["failed_users"].value
        with default_database().connect(vectors=False) as conn:
            seen["users_passed"] = sorted(row["user_id"] for row in conn.execute(
                "SELECT DISTINCT user_id FROM dreaming_passes WHERE status = 'applied'"))
        seen["users_in_bucket"], seen["failing_user"] = in_bucket, failing
        seen["log_names_the_failing_user"] = any(
            failing in (record.user_message or "") for record in instance.all_logs(consolidation.run_id))
        # The partitioning switched under this code location: its sensors ask for nothing until it reloads.
        buckets.write_layout(default_database(), 0)
        stale, _ = evaluate(pending_pairs_sensor, instance, loaded)
        seen["stale_layout_skip"] = type(stale).__name__ == "SkipReason" and "reload" in (stale.skip_message or "")
        buckets.write_layout(default_database(), 4)
    json.dump(seen, sys.stdout)


if __name__ == "__main__":
    main()
