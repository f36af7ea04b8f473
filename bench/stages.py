"""Where dreaming time goes: the offline extractors alone, a profile of one sync, and a checkpoint UPDATE.

    .venv/bin/python bench/stages.py [--pairs 400] [--runs 3]

- the offline extractor alone (entities: spaCy, one process) over --pairs LongMemEval pairs, pairs/s,
  median of --runs;
- profile: cProfile of sync_user over --pairs freshly saved pairs (offline providers, the default
  extractor), split into time waiting on Postgres, in the extractor, and in the embedding model, with the
  statements sent (queries; transactions apart) per pair;
- checkpoint UPDATE: EXPLAIN ANALYZE of setting kg_stored_at on one pair's pair_stages row (rolled back), median over 20
  pairs, with the buffers it touched (pair_stages' small B-trees get new entries: the pending-work indexes
  name the checkpoint columns, so the update is not HOT; memory_pairs and its HNSW indexes are untouched).
Results: bench/results/stages.json.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import (  # first: puts the project on the import path
    bench_parser,
    counted_statements,
    embedded_admin_url,
    machine,
    oracle_records,
    stopped_on_exit,
)

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database


def cumulative_seconds(stats: pstats.Stats, path_part: str, function: str) -> float:
    """Cumulative time of the functions named ``function`` in files containing ``path_part``."""
    return sum(row[3] for (file, _, name), row in stats.stats.items() if path_part in file and name == function)


def timed(function, seconds: dict[str, float], key: str):
    """``function``, adding its wall time to ``seconds[key]`` (the extractor's analysis includes waiting on
    its worker processes, which cProfile does not see)."""
    def timed_call(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            seconds[key] += time.perf_counter() - started
    return timed_call


def call_count(stats: pstats.Stats, path_part: str, function: str) -> int:
    return sum(row[1] for (file, _, name), row in stats.stats.items() if path_part in file and name == function)


def main() -> None:
    parser = bench_parser(__doc__, "stages")
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    records = oracle_records(args.pairs)

    texts = [(r["user_message"], r["assistant_message"]) for r in records]
    extractors = {"entities": OfflineExtractor(processes=1)}  # one core
    extract_runs: dict[str, list[float]] = {name: [] for name in extractors}
    for extractor in extractors.values():
        extractor.extract_many(texts[:5])  # load the model, warm the caches
    for _ in range(args.runs):
        for name, extractor in extractors.items():
            started = time.perf_counter()
            extractor.extract_many(texts)
            extract_runs[name].append(time.perf_counter() - started)
    extractor = OfflineExtractor(processes=DreamingSettings().llm_offline_processes)  # as the settings make it

    embedder = LocalMiniLMEmbedder(batch_size=64)
    embedder.embed(["warm-up"])
    ran = {"analyse": 0.0, "embed": 0.0}  # the extractor's analysis and the model's calls, timed
    for name, owner in (("analyse", extractor), ("embed", embedder)):
        setattr(owner, name, timed(getattr(owner, name), ran, name))
    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded_admin_url(Path(tmp) / "pgdata")
        database = Database(embedded.fresh_database_url(admin_url, "bench"))
        save_pairs("bench", records, database=database, embedder=embedder)
        profiler = cProfile.Profile()
        ran.update(analyse=0.0, embed=0.0)  # the sync's alone, not the save's embeddings
        with counted_statements() as sent:
            profiler.enable()
            result = sync_user("bench", database=database, embedder=embedder, extractor=extractor,
                               refiner=OfflineRefiner())
            profiler.disable()
        stats = pstats.Stats(profiler)
        total = result.seconds

        update_ms, update_buffers = [], []
        with database.connect() as conn:
            ids = [row["id"] for row in conn.execute("SELECT id FROM memory_pairs LIMIT 20")]
            for pair_id in ids:
                with conn.transaction(force_rollback=True):
                    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) UPDATE pair_stages "
                                        "SET kg_stored_at = now() WHERE pair_id = %s", (pair_id,)).fetchone()
                node = plan["QUERY PLAN"][0]
                update_ms.append(node["Execution Time"])
                update_buffers.append(node["Plan"]["Shared Hit Blocks"] + node["Plan"]["Shared Read Blocks"])

    database_wait = cumulative_seconds(stats, "psycopg", "wait")
    # the extractor's analysis (its parse, in worker processes for a batch), and its choice against the memory
    extraction = ran["analyse"] + cumulative_seconds(stats, "dreaming_dagster/extraction/extractors.py", "_choose")
    model = ran["embed"]
    results = {
        "benchmark": "stages",
        "command": "make bench-stages  (.venv/bin/python bench/stages.py)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "pairs": len(records),
        "offline_extractors": {name: {"runs_s": [round(s, 2) for s in runs],
                                      "pairs_per_s": round(len(records) / statistics.median(runs), 1)}
                               for name, runs in extract_runs.items()},
        "sync_profile": {"seconds": round(total, 2), "extractor": extractor.provider,
                         "postgres_statements": sent["statements"], "postgres_transactions": sent["transactions"],
                         "statements_per_pair": round(sent["statements"] / len(records), 3),
                         "postgres_wait_s": round(database_wait, 2), "postgres_share": round(database_wait / total, 2),
                         "extraction_s": round(extraction, 2), "extraction_share": round(extraction / total, 2),
                         "embedding_model_s": round(model, 2), "embedding_share": round(model / total, 2),
                         "merge": result.merge, "refined": result.refinement.get("refined", 0)},
        "checkpoint_update": {"median_ms": round(statistics.median(update_ms), 2),
                              "median_buffers": statistics.median(update_buffers), "samples": len(update_ms)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
