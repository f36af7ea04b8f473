"""The pending-pairs sensor at scale: 10,000 users, 100,000 pairs, 10% of users with pending work.

    .venv/bin/python bench/sensor.py [--users 10000] [--pairs-per-user 10] [--pending-share 0.1]

Pairs are generated in SQL (synthetic text and a constant vector; the sensor reads neither). Users without
pending work have every checkpoint set, as after dreaming; a pending user has one new pair at every stage's
start. The HNSW index is dropped for this benchmark only: the sensor's query never uses it. Measured side by side in one run, medians:
- the pending-work query alone (EXPLAIN ANALYZE execution time and wall time);
- a whole sensor evaluation (query + run requests) on an instance that knows every user partition.
Results: bench/results/sensor.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
from common import (  # first: puts the project on the import path
    bench_parser,
    bench_sql,
    embedded_admin_url,
    machine,
    stopped_on_exit,
)

from dreaming_dagster.definitions import definitions_for
from dreaming_dagster.defs.layout import Layout
from dreaming_dagster.defs.pipeline.sensors import pending_pairs_sensor
from dreaming_dagster.defs.resources import DreamingDatabaseResource
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.pipeline.pending_work import pending_work_params
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database


def _indexes_in(node: dict) -> set[str]:
    found = {node["Index Name"]} if "Index Name" in node else set()
    for child in node.get("Plans", []):
        found |= _indexes_in(child)
    return found


def main() -> None:
    parser = bench_parser(__doc__, "sensor")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--pairs-per-user", type=int, default=10)
    parser.add_argument("--pending-share", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    pending_every = max(1, round(1 / args.pending_share))

    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded_admin_url(Path(tmp) / "pgdata")
        url = embedded.fresh_database_url(admin_url, "bench")
        database = Database(url)
        database.ensure_schema(LocalMiniLMEmbedder.spec)
        started = time.perf_counter()
        with database.connect() as conn:
            # The sensor's query never touches the HNSW index; dropping it here keeps generation fast
            # (90,000 identical synthetic vectors would only measure HNSW inserts).
            conn.execute("DROP INDEX memory_pairs_embedding_hnsw_idx")
            conn.execute("DROP INDEX memory_pairs_reply_embedding_hnsw_idx")
            conn.execute(bench_sql("generate_pairs"), {"first_user": 1, "users": args.users, "pairs_per_user": args.pairs_per_user,
                                          "pending_every": pending_every,
                                          "dimension": LocalMiniLMEmbedder.spec.dimension})
            conn.execute("ANALYZE memory_pairs")
        generate_s = time.perf_counter() - started
        with database.connect() as conn:
            total = conn.execute("SELECT count(*) AS n FROM memory_pairs").fetchone()["n"]

        query = load_sql("memory_pairs/users_with_pending_work")
        params = pending_work_params()
        wall, execution = [], []
        with database.connect(vectors=False) as conn:
            for _ in range(args.repeats):
                started = time.perf_counter()
                rows = conn.execute(query, params).fetchall()
                wall.append(time.perf_counter() - started)
                plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()
                execution.append(plan["QUERY PLAN"][0]["Execution Time"] / 1000)
        users_with_work = len(rows)
        # The bench's own assumption: only the users it made pending have work. When a migration adds a stage
        # that generate_pairs does not complete, every user counts as pending and the figures mean nothing.
        assert users_with_work == args.users // pending_every, (
            f"{users_with_work} users have pending work, expected {args.users // pending_every}")
        indexes_used = sorted(_indexes_in(plan["QUERY PLAN"][0]["Plan"]))

        resources = {"dreaming_db": DreamingDatabaseResource(database_url=url)}
        loaded = definitions_for(Layout())  # one partition a user
        sensor_s = []
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("users", [f"user-{u}" for u in range(1, args.users + 1)])
            for _ in range(3):
                with dg.build_sensor_context(instance=instance, definitions=loaded, resources=resources) as context:
                    started = time.perf_counter()
                    result = pending_pairs_sensor(context)
                    sensor_s.append(time.perf_counter() - started)
            requests = len(result.run_requests)

    results = {
        "benchmark": "sensor",
        "command": "make bench-sensor  (.venv/bin/python bench/sensor.py)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "users": args.users, "pairs": total, "users_with_pending_work": users_with_work,
        "generate_s": round(generate_s, 1),
        "query_wall_ms_median": round(statistics.median(wall) * 1000, 2),
        "query_execution_ms_median": round(statistics.median(execution) * 1000, 2),
        "query_runs_ms": [round(s * 1000, 2) for s in wall],
        "sensor_evaluation_ms_median": round(statistics.median(sensor_s) * 1000, 1),
        "sensor_runs_ms": [round(s * 1000, 1) for s in sensor_s],
        "run_requests": requests,
        "indexes_in_query_plan": indexes_used,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
