"""Dreaming pipeline throughput and fast-path latency, offline providers, on this machine.

    .venv/bin/python bench/dreaming.py [--runs 3] [--latency-samples 15] [--extractors entities,keyphrases]

- throughput: a user with 2,000 LongMemEval pairs (already embedded) is dreamed from scratch — extraction,
  merge (subject embeddings included), links, refinement — 3 times per extractor (clear the graph, sync),
  the extractors taking turns run by run so both see the same machine; pairs/s (median), and the
  statements and transactions sent to Postgres per pair. The offline default (entities: spaCy) beside the
  keyphrase extractor it replaced (YAKE): the same database work under a cheaper extractor.
- fast path: a user whose 5,000 pairs are already dreamed saves one new pair and calls sync_user at once;
  the time from save to a linked graph, per pair. Each run takes --latency-samples pairs and reports
  p50/p95; the medians of the runs are the headline. The database is the Python API's
  (DREAMING_DATABASE_CONNECTIONS pooled connections); after the initial dream the tables are vacuumed and
  analysed, as autovacuum does on a server that stays up (these benchmarks start their server each run).
The 5,000 pairs are embedded once with all-MiniLM-L6-v2 (the slow part: ~5 minutes); the 2,000-pair user
is a copy of the first 2,000 rows with their embeddings. Results: bench/results/dreaming.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (  # first: puts the project on the import path
    ORACLE,
    ROOT,
    counted_statements,
    machine,
    percentile,
    stopped_on_exit,
)
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.providers import KeyphraseExtractor, OfflineExtractor
from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
)
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import stages
from dreaming_dagster.pipeline.refinement import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database

# The offline default as the settings make it (entities: spaCy in DREAMING_LLM_OFFLINE_PROCESSES worker
# processes for a backlog, both cores here), and the keyphrase extractor it replaced.
EXTRACTORS = {"entities": lambda: OfflineExtractor(processes=DreamingSettings().llm_offline_processes),
              "keyphrases": KeyphraseExtractor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--throughput-pairs", type=int, default=2000)
    parser.add_argument("--background-pairs", type=int, default=5000)
    parser.add_argument("--latency-samples", type=int, default=15)
    parser.add_argument("--extractors", default="entities,keyphrases", help="first: the default, the headline")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dreaming.json")
    args = parser.parse_args()
    console = Console()
    names = args.extractors.split(",")

    records = []
    for item in longmemeval_session_records(iter_longmemeval_questions(ORACLE)):
        if isinstance(item, LineRecord):
            records.append(item.raw)
    background, fresh = records[:args.background_pairs], records[args.background_pairs:]
    assert len(background) == args.background_pairs >= args.throughput_pairs, "not enough oracle pairs"
    assert len(fresh) >= args.runs * args.latency_samples, "not enough pairs left for latency samples"
    embedder = LocalMiniLMEmbedder(batch_size=64)
    embedder.embed(["warm-up"])
    extractors, refiner = {name: EXTRACTORS[name]() for name in names}, OfflineRefiner()

    def dream(db: Database, user: str, extractor):
        return sync_user(user, database=db, embedder=embedder, extractor=extractor, refiner=refiner)

    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded.embedded_url(Path(tmp) / "pgdata", "postgres")
        database = Database(embedded.scratch_database_url(admin_url, "bench"),
                            pool_size=DreamingSettings().database_connections)

        with Progress(console=console) as progress:
            task = progress.add_task(f"embedding {len(background)} background pairs (once)", total=len(background))
            for start in range(0, len(background), 250):
                save_pairs("bench-5k", background[start:start + 250], database=database, embedder=embedder)
                progress.advance(task, len(background[start:start + 250]))
        with database.connect() as conn:
            conn.execute(load_sql("bench/copy_user_pairs"), {"target": "bench-2k", "source": "bench-5k", "limit": args.throughput_pairs})

        throughput: dict[str, dict] = {name: {"runs_s": [], "statements": [], "transactions": []} for name in names}
        for run in range(args.runs):
            for name in names:
                stages.clear_user_graph(database, "bench-2k", "default")
                with counted_statements() as sent:
                    started = time.perf_counter()
                    result = dream(database, "bench-2k", extractors[name])
                    seconds = time.perf_counter() - started
                assert result.extraction["pairs"] == args.throughput_pairs, result.extraction
                cell = throughput[name]
                cell["runs_s"].append(seconds)
                cell["statements"].append(sent["statements"])
                cell["transactions"].append(sent["transactions"])
                cell["stages_last_run"] = {"extraction": result.extraction, "merge": result.merge,
                                           "links": result.links, "refinement": result.refinement}
                cell["graph"] = stages.graph_stats(database, "bench-2k")
                console.print(f"throughput run {run + 1}, {name}: {args.throughput_pairs / seconds:.1f} pairs/s, "
                              f"{sent['statements'] / args.throughput_pairs:.2f} statements a pair")
        for cell in throughput.values():
            median_s = statistics.median(cell["runs_s"])
            cell.update({"pairs": args.throughput_pairs, "median_s": round(median_s, 2),
                         "pairs_per_s": round(args.throughput_pairs / median_s, 1),
                         "runs_s": [round(s, 2) for s in cell["runs_s"]],
                         "statements_per_pair": round(statistics.median(cell.pop("statements")) / args.throughput_pairs, 3),
                         "transactions_per_pair": round(statistics.median(cell.pop("transactions")) / args.throughput_pairs, 3)})

        started = time.perf_counter()
        dream(database, "bench-5k", extractors[names[0]])
        setup_dream_s = time.perf_counter() - started
        graph_5k = stages.graph_stats(database, "bench-5k")
        with database.connect() as conn:
            conn.execute("VACUUM ANALYZE")  # what autovacuum has done by now on a server that stays up

        latency_runs, fast_statements = [], []
        now = datetime.now(UTC)
        for run in range(args.runs):
            samples = []
            for index in range(args.latency_samples):
                record = dict(fresh[run * args.latency_samples + index])
                record["occurred_at"] = now + timedelta(minutes=run * 100 + index)  # a new exchange, now
                with counted_statements() as sent:
                    started = time.perf_counter()
                    saved = save_pairs("bench-5k", [record], database=database, embedder=embedder)
                    dream(database, "bench-5k", extractors[names[0]])
                    samples.append(time.perf_counter() - started)
                fast_statements.append(sent["statements"])
                assert saved.inserted == 1
            latency_runs.append({"p50_s": percentile(samples, 0.5), "p95_s": percentile(samples, 0.95),
                                 "samples_s": [round(s, 4) for s in samples]})
            console.print(f"fast-path run {run + 1}: p50 {latency_runs[-1]['p50_s']:.3f} s, "
                          f"p95 {latency_runs[-1]['p95_s']:.3f} s")
        database.close()

    headline = throughput[names[0]]
    results = {
        "benchmark": "dreaming",
        "command": "make bench-dreaming  (.venv/bin/python bench/dreaming.py)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "providers": {"extraction": extractors[names[0]].provider, "refinement": refiner.provider,
                      "embedding": str(embedder.spec)},
        "throughput": {**headline, "extractor": names[0],
                       "note": "pairs already embedded; extraction, merge (with subject embeddings), "
                               "links and refinement; statements: queries sent, transactions apart"},
        "throughput_by_extractor": throughput,
        "fast_path": {"background_pairs": len(background), "samples_per_run": args.latency_samples,
                      "runs": latency_runs,
                      "p50_s_median": round(statistics.median(r["p50_s"] for r in latency_runs), 4),
                      "p95_s_median": round(statistics.median(r["p95_s"] for r in latency_runs), 4),
                      "statements_per_sample_median": statistics.median(fast_statements),
                      "pooled_connections": DreamingSettings().database_connections,
                      "graph_before": graph_5k, "initial_dream_s": round(setup_dream_s, 1),
                      "note": "save_pairs (with embedding) + sync_user of one new pair, end to end"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")

    table = Table(title="dreaming (offline providers), medians of runs")
    for column in ("measure", "result", "runs"):
        table.add_column(column)
    for name, cell in throughput.items():
        table.add_row(f"throughput, {args.throughput_pairs} pairs, {name}",
                      f"{cell['pairs_per_s']} pairs/s, {cell['statements_per_pair']} statements a pair",
                      ", ".join(f"{s:.1f} s" for s in cell["runs_s"]))
    table.add_row(f"fast path p50, user with {len(background)} pairs", f"{results['fast_path']['p50_s_median']} s",
                  ", ".join(f"{r['p50_s']:.3f}" for r in latency_runs))
    table.add_row("fast path p95", f"{results['fast_path']['p95_s_median']} s",
                  ", ".join(f"{r['p95_s']:.3f}" for r in latency_runs))
    console.print(table)
    console.print(f"written {args.out}")


if __name__ == "__main__":
    main()
