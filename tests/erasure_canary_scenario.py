"""Run by tests/test_forget_races.py in a fresh process (the code location reads its partitioning as it loads):
users erased while their fast-path syncs, consolidation passes, Dagster runs (of their bucket, or of their own
partition) and on-demand runs race, on a Dagster instance stored in Postgres (CANARY_DAGSTER_STORAGE_URL). The
sensors' ticks are recorded as the daemon records them. Prints what it saw as JSON, with how many erasures
overlapped another piece of the user's work."""

import json
import os
import random
import sys
import threading
import time

import dagster as dg

from dreaming_dagster.consolidation.consolidators import OfflineConsolidator
from dreaming_dagster.consolidation.passes import PassPolicy, run_pass
from dreaming_dagster.definitions import defs
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.memory.forgetting import erase_user
from dreaming_dagster.pipeline import buckets
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.process_defaults import default_database, default_embedder

VICTIMS = [f"canary-victim-{n}" for n in range(4)]
BYSTANDERS = ["bystander-a", "bystander-b"]


def records(user: str, start: int, count: int) -> list[dict]:
    return [{"session_id": f"{user}-s{n // 3}", "turn_index": n % 3, "occurred_at": f"2026-03-{1 + n % 27:02d}T10:00:00Z",
             "user_message": f"My cousin Zorb{user[-1]}lax moved to Lisbon and opened a bakery ({user}, {n}).",
             "assistant_message": "A bakery in Lisbon sounds wonderful."} for n in range(start, start + count)]


def record_tick(instance: dg.DagsterInstance, requests) -> None:
    """Apply a sensor's partition requests and record its tick, as the daemon does (the tick names the
    partitions it added and deleted)."""
    from dagster._core.definitions.run_request import InstigatorType
    from dagster._core.scheduler.instigation import DynamicPartitionsRequestResult, TickData, TickStatus

    results = []
    for request in requests:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            results.append(DynamicPartitionsRequestResult(request.partitions_def_name, request.partition_keys,
                                                          None, []))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
            results.append(DynamicPartitionsRequestResult(request.partitions_def_name, None,
                                                          request.partition_keys, []))
    instance.create_tick(TickData(instigator_origin_id="fast_path_sensor", instigator_name="fast_path_sensor",
                                  instigator_type=InstigatorType.SENSOR, status=TickStatus.SUCCESS,
                                  timestamp=time.time(), selector_id="fast_path_sensor", run_ids=[],
                                  dynamic_partitions_request_results=results))


def main() -> None:
    from dreaming_dagster.defs.pipeline.sensors import fast_path_sensor

    loaded = defs()
    database, embedder = default_database(), default_embedder()
    import dreaming_dagster as dd

    for user in VICTIMS + BYSTANDERS:
        dd.save_pairs(user, records(user, 0, 9), embed=False, database=database, embedder=embedder)
    errors: list[str] = []
    bucketed = buckets.read_layout(database)
    seen: dict = {"partitions": buckets.bucket_keys(bucketed) if bucketed else VICTIMS + BYSTANDERS}
    # (user, what, start, end) of each piece of work, and of each erasure: an erasure that overlaps none proves
    # nothing about races.
    spans: list[tuple[str, str, float, float]] = []

    def timed(user: str, what: str, work):
        started = time.monotonic()
        try:
            return work()
        finally:
            spans.append((user, what, started, time.monotonic()))

    storage = {"storage": {"postgres": {"postgres_url": os.environ["CANARY_DAGSTER_STORAGE_URL"]}}}
    with dg.instance_for_test(overrides=storage) as instance:
        if not bucketed:
            instance.add_dynamic_partitions("users", VICTIMS + BYSTANDERS)
        dreaming_job = loaded.resolve_job_def("dreaming_job")
        user_job = loaded.resolve_job_def("user_memory_job")
        # Dagster's in-process execution configures Python's logging as it starts a run, which two threads of
        # one process cannot do at once (a deployment runs each run in a process of its own): the runs take
        # turns, and race the fast path, the passes and the other erasures.
        one_run_at_a_time = threading.Lock()

        def execute(job, **kwargs):
            with one_run_at_a_time:
                return job.execute_in_process(instance=instance, raise_on_error=False, **kwargs)

        def guarded(work):
            def run():
                try:
                    work()
                except Exception as error:  # noqa: BLE001 - collected and printed
                    errors.append(f"{type(error).__name__}: {error}")
            return run

        def users_of(key: str) -> list[str]:
            return [u for u in VICTIMS + BYSTANDERS if buckets.bucket_key_of(u, bucketed) == key] if bucketed else [key]

        def partition_runs():
            for key in seen["partitions"]:
                timed(",".join(users_of(key)), "run", lambda key=key: execute(dreaming_job, partition_key=key))

        def fast_paths():
            for user in VICTIMS:
                timed(user, "fast path", lambda user=user: (
                    dd.save_pairs(user, records(user, 9, 3), database=database, embedder=embedder),
                    sync_user(user, database=database, embedder=embedder, extractor=OfflineExtractor(),
                              refiner=OfflineRefiner())))

        def passes():
            for user in VICTIMS:
                timed(user, "pass", lambda user=user: run_pass(
                    database, embedder, OfflineConsolidator(), user, mode="compact", force=True,
                    policy=PassPolicy(backfill_on_first_run=False)))

        def erasures():
            rng = random.Random(7)
            for n, user in enumerate(VICTIMS):
                time.sleep(rng.uniform(0.2, 1.0))
                if n % 2:
                    timed(user, "erasure", lambda user=user: erase_user(user, database=database))
                else:  # from the UI's on-demand job: its run config names the user
                    result = timed(user, "erasure", lambda user=user: execute(user_job, run_config={"ops": {
                        "user_request": {"config": {"user_id": user, "action": "forget"}}}}))
                    assert result.success, user

        threads = [threading.Thread(target=guarded(work)) for work in (partition_runs, fast_paths, passes, erasures)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        # Whatever raced the erasures, a second erasure finds nothing left to delete.
        seen["pairs_left_at_second_erasure"] = sum(erase_user(user, database=database).pairs for user in VICTIMS)
        erased = [span for span in spans if span[1] == "erasure"]
        seen["overlapping_erasures"] = sum(
            any(user in other_users.split(",") and start < other_end and other_start < end
                for other_users, what, other_start, other_end in spans if what != "erasure")
            for user, _, start, end in erased)
        # The sensor's next ticks, recorded as the daemon records them, clear Dagster of the erased users.
        cursor = None
        for _ in range(3):
            with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=loaded,
                                         resources=loaded.resources) as context:
                result = fast_path_sensor(context)
                if isinstance(result, dg.SensorResult):
                    for event in result.asset_events or []:
                        instance.report_runless_asset_event(event)
                    record_tick(instance, result.dynamic_partitions_requests or [])
                    cursor = result.cursor or cursor
        for key in [key for key in seen["partitions"] if bucketed or key in BYSTANDERS]:  # still dreamed
            execute(dreaming_job, partition_key=key)
    seen["errors"] = errors
    seen["bystander_pairs"] = {user: len(dd.list_pairs(user, database=database, limit=50).pairs) for user in BYSTANDERS}
    json.dump(seen, sys.stdout)


if __name__ == "__main__":
    main()
