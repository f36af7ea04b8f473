"""Dagster at 10^4–10^6 users: what each partitioning costs the sensors, the event log and the run queue.

    .venv/bin/python bench/scale.py [--sizes 10000,100000,1000000] [--pending-share 0.1] [--syncs 5000]
                                    [--buckets 16] [--throughput-users 200] [--pairs-per-user 20]
                                    [--spawned-every 4] [--keep-sizes] [--no-ui]

Users are written straight into the tables (one pair each, bench/generate_pairs.sql; every tenth with that
pair pending at every stage), the memory grown size by size. At each size, on a Postgres-backed Dagster
instance:
- one partition a user: the time to register the new users as partitions, and to list them all;
- for each partitioning, in its own process (the code location builds its assets for one): each sensor's
  evaluation (median of 3), and the fast-path sensor draining ``--syncs`` syncs recorded at once (as
  100,000 active users make in about a minute) — ticks, time and Dagster events per sync;
- for each partitioning, the Dagster webserver (no daemon) on that memory and instance: Chromium's time until the asset catalog and
  the partition view of ``subjects`` render, and the GraphQL call listing the asset's partitions.
Then the run overhead (``--throughput-users`` users of ``--pairs-per-user`` real pairs, local model,
offline extractor), a user at a time, the ways taking turns: ``sync_user`` in this process (with the
Python API's connection pool) and a ``dreaming_job`` run from the warm run workers, created and launched as
the daemon launches queued runs (a code server serving the code location, the project's launcher and
dagster.yaml's storage; each run's launch to its end, against its steps' time); every ``--spawned-every``'th
user also a run in a new process as Dagster's default launcher starts it, and a warm run on dagster-postgres'
own storage (a connection a statement). Then a run a bucket.
``--keep-sizes`` measures only that and keeps the committed sizes. Results: bench/results/scale.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from common import (  # first: puts the project on the import path
    bench_parser,
    bench_sql,
    embedded_admin_url,
    machine,
    oracle_records,
    stopped_on_exit,
)

HERE = Path(__file__).resolve()
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _dagster_home(folder: Path, pgdata: Path, *, storage: str = "project") -> Path:
    """A Dagster home whose storage is the ``dagster`` database of the bench's server (as a deployment's is):
    ``storage`` "project" is the project's dagster.yaml's (connections kept per process), "dagster-postgres"
    dagster-postgres' own (a connection a statement)."""
    import yaml

    from dreaming_dagster.storage import embedded

    url = embedded.dagster_storage_url(pgdata)
    if storage == "project":
        block = yaml.safe_load((HERE.parents[1] / "dagster.yaml").read_text())["storage"]
        block["custom"]["config"]["postgres_url"] = url
    else:
        block = {"postgres": {"postgres_url": url}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dagster.yaml").write_text(yaml.safe_dump({"storage": block, "telemetry": {"enabled": False}}))
    return folder


def _timed(work, repeats: int = 3) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def child_sensors(buckets: int, url: str, syncs: int) -> dict:
    """One partitioning's sensors, in the code location built for it."""
    import dagster as dg

    from dreaming_dagster.definitions import definitions_for
    from dreaming_dagster.defs.consolidation.sensors import token_budget_sensor
    from dreaming_dagster.defs.layout import Layout
    from dreaming_dagster.defs.pipeline.sensors import fast_path_sensor, pending_pairs_sensor
    from dreaming_dagster.defs.resources import DreamingDatabaseResource, DreamingPolicyResource

    resources = {"dreaming_db": DreamingDatabaseResource(database_url=url, dagster_max_user_partitions=10**8),
                 "dreaming_policy": DreamingPolicyResource()}
    loaded = definitions_for(Layout(buckets))
    out: dict = {}
    with dg.DagsterInstance.get() as instance:
        def evaluate(sensor, cursor=None):
            with dg.build_sensor_context(instance=instance, definitions=loaded, resources=resources,
                                         cursor=cursor) as context:
                return sensor(context)

        seconds, result = _timed(lambda: evaluate(pending_pairs_sensor))
        out["pending_pairs_sensor_s"] = round(seconds, 3)
        out["pending_pairs_run_requests"] = len(getattr(result, "run_requests", []))
        out["pending_pairs_partition_requests"] = sum(
            len(r.partition_keys) for r in getattr(result, "dynamic_partitions_requests", []))
        seconds, _ = _timed(lambda: evaluate(token_budget_sensor))
        out["token_budget_sensor_s"] = round(seconds, 3)
        if not buckets:
            seconds, keys = _timed(lambda: instance.get_dynamic_partitions("users"))
            out["list_user_partitions_s"], out["user_partitions"] = round(seconds, 3), len(keys)
        # The fast path: drain `syncs` syncs tick by tick, as the daemon would.
        cursor, ticks, events, started = None, 0, 0, time.perf_counter()
        tick_s = []
        while True:
            tick_started = time.perf_counter()
            result = evaluate(fast_path_sensor, cursor)
            tick_s.append(time.perf_counter() - tick_started)
            if isinstance(result, dg.SkipReason):
                break
            ticks, events, cursor = ticks + 1, events + len(result.asset_events), result.cursor
        drained = time.perf_counter() - started
        out |= {"fast_path_syncs": syncs, "fast_path_ticks": ticks, "fast_path_events": events,
                "dagster_events_per_sync": round(events / syncs, 4) if syncs else None,
                "fast_path_drain_s": round(drained, 2), "fast_path_slowest_tick_s": round(max(tick_s), 3),
                # the sensor runs every 30 s: the syncs a minute it reports at most
                "fast_path_syncs_per_minute_capacity": round(2 * syncs / max(ticks, 1))}
    return out


GRAPHQL_PARTITIONS = """query { assetNodeOrError(assetKey: {path: ["subjects"]}) {
  ... on AssetNode { partitionKeysByDimension { partitionKeys } } } }"""


def ui_timings(env: dict, folder: Path) -> dict:
    """The Dagster webserver on this memory and instance; Chromium's time until the asset catalog and the partition view
    of `subjects` show, and the GraphQL call that lists the partitions. None when Chromium is missing."""
    import shutil
    import urllib.request

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return {"skipped": "no Chromium"}
    import socket

    from playwright.sync_api import sync_playwright

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    log = (folder / f"webserver-{port}.log").open("w")
    # The webserver alone: a daemon would run the sensors and launch runs against the bench's memory.
    server = subprocess.Popen([str(Path(sys.executable).parent / "dagster-webserver"), "-m",
                               "dreaming_dagster.definitions", "--port", str(port)],
                              cwd=HERE.parent.parent, env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    out: dict = {}
    try:
        deadline = time.time() + 300
        while True:
            try:
                with urllib.request.urlopen(base + "/server_info", timeout=5):
                    break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the webserver did not start") from None
                time.sleep(2)
        request = urllib.request.Request(base + "/graphql", data=json.dumps({"query": GRAPHQL_PARTITIONS}).encode(),
                                         headers={"Content-Type": "application/json"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=900) as response:
            keys = json.loads(response.read())["data"]["assetNodeOrError"]["partitionKeysByDimension"][0]["partitionKeys"]
        out["graphql_partition_keys_s"], out["graphql_partition_keys"] = round(time.perf_counter() - started, 2), len(keys)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                                 args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(300_000)
            page.goto(base + "/assets")  # a first visit: the newsletter dialog, the code location's load
            page.get_by_text("subjects", exact=True).first.wait_for()
            for name, path, shown in (("asset_catalog", "/assets", "subjects"),
                                      ("partition_view", "/assets/subjects?view=partitions", "Missing (")):
                started = time.perf_counter()
                try:
                    page.goto(base + path)
                    page.get_by_text(shown, exact=shown == "subjects").first.wait_for()
                    out[f"{name}_rendered_s"] = round(time.perf_counter() - started, 2)
                except Exception as error:  # the page never rendered: that is the measurement
                    out[f"{name}_rendered_s"] = None
                    out[f"{name}_error"] = f"{type(error).__name__} after {time.perf_counter() - started:.0f} s"
            browser.close()
    finally:
        from dreaming_dagster.process_groups import end_process_group

        end_process_group(server.pid)  # the webserver and every process it started (SIGKILL after a grace)
        server.wait(timeout=60)
        log.close()
    return out


def run_child(args: list[str], env: dict) -> dict:
    done = subprocess.run([sys.executable, str(HERE), *args], env=env,
                          capture_output=True, text=True, timeout=7200)
    if done.returncode:
        raise RuntimeError(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def scale(args, admin_url: str, home: Path) -> list[dict]:
    import dagster as dg

    from dreaming_dagster.config.settings import DreamingSettings
    from dreaming_dagster.embeddings import embedder_from_settings
    from dreaming_dagster.pipeline import buckets as bucketing
    from dreaming_dagster.storage import embedded
    from dreaming_dagster.storage.database import Database

    url = embedded.fresh_database_url(admin_url, "scale")
    database = Database(url)
    spec = embedder_from_settings(DreamingSettings()).spec  # the runs' embedder
    database.ensure_schema(spec)
    with database.connect() as conn:  # the sensors never read the HNSW indexes; inserts would only build them
        conn.execute("DROP INDEX memory_pairs_embedding_hnsw_idx")
        conn.execute("DROP INDEX memory_pairs_reply_embedding_hnsw_idx")
    env = {**os.environ, "DAGSTER_HOME": str(home), "DREAMING_DATABASE_URL": url}
    os.environ["DAGSTER_HOME"] = str(home)
    rows, made = [], 0
    pending_every = max(1, round(1 / args.pending_share))
    with dg.DagsterInstance.get() as instance:
        for size in args.sizes:
            started = time.perf_counter()
            for first in range(made + 1, size + 1, 100_000):  # 100,000 users a statement, with progress
                with database.connect() as conn:
                    conn.execute(bench_sql("generate_pairs"), {
                        "first_user": first, "users": min(size, first + 99_999), "pairs_per_user": 1,
                        "pending_every": pending_every, "dimension": spec.dimension})
                print(f"generated users up to {min(size, first + 99_999):,} "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
            with database.connect() as conn:
                conn.execute("ANALYZE")
            generate_s = time.perf_counter() - started
            new_keys = [f"user-{u}" for u in range(made + 1, size + 1)]
            started = time.perf_counter()
            for chunk in range(0, len(new_keys), 50_000):
                instance.add_dynamic_partitions("users", new_keys[chunk:chunk + 50_000])
            register_s = time.perf_counter() - started
            made = size
            row = {"users": size, "users_with_pending_work": size // pending_every,
                   "generate_s": round(generate_s, 1), "register_new_user_partitions_s": round(register_s, 1),
                   "registered_per_second": round(len(new_keys) / register_s) if register_s else None}
            for label, buckets in (("per_user", 0), ("buckets", args.buckets)):
                with database.connect() as conn:
                    conn.execute("DELETE FROM fast_path_syncs")
                    conn.execute(bench_sql("generate_fast_path_syncs"), {"syncs": args.syncs})
                row[label] = run_child(["--child-sensors", str(buckets), "--url", url, "--syncs", str(args.syncs)],
                                       env)
                if args.ui:
                    bucketing.write_layout(database, buckets)  # what the webserver's code location reads
                    row[label]["ui"] = ui_timings(env, home)
                    print(f"{size:,} users, {label}: {row[label]['ui']}", file=sys.stderr, flush=True)
                    bucketing.write_layout(database, 0)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def step_times(records) -> dict[str, float]:
    """Each step's start to its success in a run's event log."""
    import dagster as dg

    began, seconds = {}, {}
    for record in records:
        event = record.dagster_event
        if event is not None and event.event_type == dg.DagsterEventType.STEP_START:
            began[event.step_key] = record.timestamp
        elif event is not None and event.event_type == dg.DagsterEventType.STEP_SUCCESS:
            seconds[event.step_key] = record.timestamp - began[event.step_key]
    return seconds


@contextmanager
def code_location(instance):
    """The project's code location served by a gRPC code server, as `dreaming ui` serves it: yields a workspace."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    target = ModuleTarget(module_name="dreaming_dagster.definitions", attribute=None,
                          working_directory=str(HERE.parents[1]), location_name="dreaming_dagster")
    with WorkspaceProcessContext(instance, target) as context:
        yield context.create_request_context()


def launched_run(instance, workspace, launcher, partition_key: str) -> dict:
    """One dreaming_job run of a partition started by ``launcher``, as the daemon starts a queued run; its wall
    time from the launch to the run's end, against its steps' time."""
    from dagster._cli.job import _create_run
    from dagster._core.launcher import LaunchRunContext

    created = time.perf_counter()
    location = workspace.get_code_location("dreaming_dagster")
    repository = next(iter(location.get_repositories().values()))
    run = _create_run(instance=instance, code_location=location, remote_repo=repository,
                      remote_job=repository.get_full_job("dreaming_job"), run_config=QUIET,
                      tags={"dagster/partition": partition_key}, op_selection=None, run_id=None)
    started = time.perf_counter()
    launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=workspace))
    while not (run := instance.get_run_by_id(run.run_id)).is_finished:
        time.sleep(0.1)
    run_s = time.perf_counter() - started
    records = instance.all_logs(run.run_id)
    steps = step_times(records)
    return {"success": run.status.value == "SUCCESS", "create_s": round(started - created, 3), "run_s": round(run_s, 2),
            "steps_s": round(sum(steps.values()), 2), "steps": steps, "event_rows": len(records)}


def throughput(args, admin_url: str, home: Path) -> dict:
    """sync_user over N users in one process against dreaming_job runs over N other users with the same
    pairs: a run a user, taking turns with sync_user, then a run a bucket."""
    from dreaming_dagster.config.settings import DECLARED_DEFAULTS, DreamingSettings
    from dreaming_dagster.embeddings import embedder_from_settings
    from dreaming_dagster.extraction.extractors import OfflineExtractor
    from dreaming_dagster.ingest.save import save_pairs
    from dreaming_dagster.pipeline import buckets as bucketing
    from dreaming_dagster.pipeline.refiners import OfflineRefiner
    from dreaming_dagster.pipeline.sync import sync_user
    from dreaming_dagster.storage import embedded
    from dreaming_dagster.storage.database import Database

    url = embedded.fresh_database_url(admin_url, "throughput")
    # sync_user with the pool the Python API and the CLI keep (DREAMING_DATABASE_CONNECTIONS), as a run has.
    database = Database(url, pool_size=DECLARED_DEFAULTS.database_connections)
    embedder = embedder_from_settings(DreamingSettings())  # the runs' embedder
    database.ensure_schema(embedder.spec)
    count, size = args.throughput_users, args.pairs_per_user
    records = oracle_records(limit=count * size)
    spawned_users = range(0, count, args.spawned_every)
    users = {"sync": range(-1, count), "warm": range(-1, count), "spawned": spawned_users,
             "plain": [-1, *spawned_users], "bucketed": range(count)}
    for prefix, numbers in users.items():
        for n in numbers:
            save_pairs(f"{prefix}-{n}", records[n * size:(n + 1) * size], database=database, embedder=embedder,
                       embed=False)

    def synced(user_id: str) -> float:
        started = time.perf_counter()
        sync_user(user_id, database=database, embedder=embedder, extractor=OfflineExtractor(),
                  refiner=OfflineRefiner())
        return time.perf_counter() - started

    # The code server and the run workers read the deployment from the environment, as under `dreaming ui`.
    os.environ.update({"DAGSTER_HOME": str(home), "DREAMING_DATABASE_URL": url, "DREAMING_LLM_PROVIDER": "offline"})
    import dagster as dg

    from dreaming_dagster.instance.run_launcher import LocalRunLauncher

    warm, spawning, plain = (LocalRunLauncher(warm_workers=True), LocalRunLauncher(warm_workers=False),
                             LocalRunLauncher(warm_workers=True))
    runs = {"warm": [], "spawned": [], "plain": [], "bucketed": []}
    sync_s = 0.0
    plain_home = _dagster_home(home.parent / "dagster-home-plain", home.parent / "pgdata", storage="dagster-postgres")
    with dg.DagsterInstance.get() as instance, dg.DagsterInstance.from_config(str(plain_home)) as plain_instance:
        for launcher in (warm, spawning):
            launcher.register_instance(instance)
        plain.register_instance(plain_instance)
        instance.add_dynamic_partitions("users", [f"{prefix}-{n}" for prefix in ("warm", "spawned", "plain")
                                                  for n in users[prefix]])
        with code_location(instance) as workspace:
            # Each way's first user, not timed: the process's embedder and parser, the fork server's start.
            synced("sync--1")
            launched_run(instance, workspace, warm, "warm--1")
            launched_run(plain_instance, workspace, plain, "plain--1")
            started = time.perf_counter()
            # A user at a time, the ways taking turns: sync_user in this process, a run from the warm workers;
            # every --spawned-every'th user also a run in a new process through the code server (Dagster's
            # default launcher) and a warm run storing its events through dagster-postgres' own storage.
            for n in range(count):
                sync_s += synced(f"sync-{n}")
                runs["warm"].append(launched_run(instance, workspace, warm, f"warm-{n}"))
                if n in spawned_users:
                    runs["spawned"].append(launched_run(instance, workspace, spawning, f"spawned-{n}"))
                    runs["plain"].append(launched_run(plain_instance, workspace, plain, f"plain-{n}"))
                if (n + 1) % 20 == 0:
                    print(f"per-user runs: {n + 1}/{count} ({time.perf_counter() - started:.0f} s)",
                          file=sys.stderr, flush=True)
        bucketing.write_layout(database, args.buckets)
        keys = sorted(bucketing.group_by_bucket([f"bucketed-{n}" for n in range(count)], args.buckets))
        with code_location(instance) as workspace:  # the code location of the bucket layout
            started = time.perf_counter()
            runs["bucketed"] = [launched_run(instance, workspace, warm, key) for key in keys]
            bucket_s = time.perf_counter() - started
    bucketing.write_layout(database, 0)
    with database.connect(vectors=False) as conn:
        left = conn.execute("SELECT count(*) AS n FROM pair_stages WHERE kg_stored_at IS NULL").fetchone()["n"]
    return {
        "users": count, "pairs_per_user": size, "buckets": args.buckets, "unlinked_pairs_after": left,
        "sync_user_s": round(sync_s, 1), "sync_user_users_per_s": round(count / sync_s, 2),
        "one_user_sync_s": round(sync_s / count, 3),
        **per_user_figures(runs["warm"], sync_s / count, "per_user"),
        **per_user_figures(runs["spawned"], sync_s / count, "spawned_per_user"),
        **per_user_figures(runs["plain"], sync_s / count, "plain_storage_per_user"),
        # Same users, taking turns: a warm run on the project's storage against one on dagster-postgres' own.
        "kept_vs_plain_storage_run_s": round(
            statistics.median(run["run_s"] for run in runs["plain"])
            / statistics.median(runs["warm"][n]["run_s"] for n in spawned_users), 3),
        "warm_vs_spawned_run_s_median": round(statistics.median(run["run_s"] for run in runs["spawned"])
                                              / statistics.median(run["run_s"] for run in runs["warm"]), 2),
        "bucket_runs": len(runs["bucketed"]), "bucket_runs_s": round(bucket_s, 1),
        "bucket_users_per_s": round(count / bucket_s, 2), "bucket_vs_sync_user": round(sync_s / bucket_s, 3),
        "bucket_run_s": [run["run_s"] for run in runs["bucketed"]],
        "bucket_run_event_rows_per_user": round(sum(run["event_rows"] for run in runs["bucketed"]) / count, 2),
        "all_runs_succeeded": all(run["success"] for variant in runs.values() for run in variant),
    }


def per_user_figures(runs: list[dict], sync_s_per_user: float, name: str) -> dict:
    """A run a user: users/s counting each run's creation and its launch to its end, against sync_user's."""
    seconds = sum(run["create_s"] + run["run_s"] for run in runs)
    return {f"{name}_runs": len(runs), f"{name}_users_per_s": round(len(runs) / seconds, 3),
            f"{name}_vs_sync_user": round(sync_s_per_user * len(runs) / seconds, 3),
            f"{name}_run_s_median": round(statistics.median(run["run_s"] for run in runs), 2),
            f"{name}_create_s_median": round(statistics.median(run["create_s"] for run in runs), 3),
            f"{name}_steps_s_median": round(statistics.median(run["steps_s"] for run in runs), 2),
            f"{name}_run_vs_steps_median": round(statistics.median(run["run_s"] / run["steps_s"] for run in runs), 2),
            f"{name}_step_s_medians": {step: round(statistics.median(run["steps"][step] for run in runs), 3)
                                       for step in runs[0]["steps"]},
            f"{name}_event_rows_median": statistics.median(run["event_rows"] for run in runs)}


def main() -> None:
    parser = bench_parser(__doc__, "scale")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--pending-share", type=float, default=0.1)
    parser.add_argument("--syncs", type=int, default=5000)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--throughput-users", type=int, default=200)
    parser.add_argument("--pairs-per-user", type=int, default=20, help="each throughput user's pairs")
    parser.add_argument("--keep-sizes", action="store_true", help="measure the throughput only; keep the "
                        "committed file's sizes (the sensors' and the UI's figures)")
    parser.add_argument("--no-ui", dest="ui", action="store_false", help="skip the browser timings")
    parser.add_argument("--child-sensors", type=int, default=None)
    parser.add_argument("--spawned-every", type=int, default=4, help="every n-th user is also dreamed by a run "
                        "in a new process (Dagster's default launcher), taking turns with the warm workers")
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    if args.child_sensors is not None:
        print(json.dumps(child_sensors(args.child_sensors, args.url, args.syncs)))
        return
    args.sizes = [int(size) for size in args.sizes.split(",") if size]
    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded_admin_url(Path(tmp) / "pgdata")
        home = _dagster_home(Path(tmp) / "dagster-home", Path(tmp) / "pgdata")
        results = {
            "benchmark": "scale",
            "command": "make bench-scale  (.venv/bin/python bench/scale.py)",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "buckets": args.buckets, "fast_path_syncs": args.syncs,
            "sizes": scale(args, admin_url, home) if args.sizes and not args.keep_sizes else [],
        }
        if args.keep_sizes:
            kept = json.loads(args.out.read_text())
            results |= {key: kept[key] for key in ("buckets", "fast_path_syncs", "sizes")}
        results["throughput"] = throughput(args, admin_url, home) if args.throughput_users else None
    results["machine"] = machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
