"""Dreaming pipeline throughput and fast-path latency, offline providers, on this machine.

    .venv/bin/python bench/dreaming.py [--runs 3] [--latency-samples 15]

- throughput: a user with 2,000 LongMemEval pairs (already embedded) is dreamed from scratch — dating,
  keying (key vectors included), extraction, merge (subject embeddings included), links, refinement — 3
  times (clear the graph, sync) with the offline default (entities: spaCy in worker processes); pairs/s
  (median), and the statements and transactions sent to Postgres per pair. Beside it, taking turns run by
  run, the same without the keying stage (what the keys cost) and without keying and dating (what reading
  time costs).
- fast path: a user whose 5,000 pairs are already dreamed saves one new pair and dreams it at once
  (save_and_sync); the time from save to a linked graph, per pair. Each run takes --latency-samples pairs
  and reports p50/p95; the medians of the runs are the headline. Beside it, taking turns sample by sample,
  each on pairs of its own so both see the same machine and the same growing user: the local model's
  other runtime (--runtimes: ONNX Runtime, the default and the headline, and PyTorch). The
  database is the Python API's (DREAMING_DATABASE_CONNECTIONS pooled connections); after the initial dream the tables are vacuumed and
  analysed, as autovacuum does on a server that stays up (these benchmarks start their server each run).
The 5,000 pairs are embedded once with all-MiniLM-L6-v2 (the slow part: ~5 minutes); the 2,000-pair user
is a copy of the first 2,000 rows with their embeddings. Results: bench/results/dreaming.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import (  # first: puts the project on the import path
    bench_parser,
    bench_sql,
    counted_statements,
    embedded_admin_url,
    machine,
    oracle_records,
    percentile,
    stopped_on_exit,
)
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import graph_reports, linking, sync
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import save_and_sync, sync_user
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database


def main() -> None:
    parser = bench_parser(__doc__, "dreaming")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--throughput-pairs", type=int, default=2000)
    parser.add_argument("--background-pairs", type=int, default=5000)
    parser.add_argument("--latency-samples", type=int, default=15)
    parser.add_argument("--runtimes", default="onnx,torch", help="the local model's runtimes in the fast path; "
                        "first: the headline, and the one everything else runs on")
    args = parser.parse_args()
    console = Console()

    records = oracle_records()
    background, fresh = records[:args.background_pairs], records[args.background_pairs:]
    assert len(background) == args.background_pairs >= args.throughput_pairs, "not enough oracle pairs"
    runtimes = args.runtimes.split(",")
    series = runtimes  # the fast path's series: one per runtime, taking turns
    assert len(fresh) >= args.runs * args.latency_samples * len(series), "not enough pairs left for latency samples"
    embedders = {runtime: LocalMiniLMEmbedder(batch_size=64, runtime=runtime) for runtime in runtimes}
    for runtime, one in embedders.items():
        one.embed(["warm-up"])
        assert one.runtime_used == runtime, f"the {runtime} runtime fell back to {one.runtime_used}"
    embedder = embedders[runtimes[0]]
    # The offline default as the settings make it (spaCy in DREAMING_LLM_OFFLINE_PROCESSES worker processes).
    extractor, refiner = OfflineExtractor(processes=DreamingSettings().llm_offline_processes), OfflineRefiner()

    def dream(db: Database, user: str, model=embedder):
        return sync_user(user, database=db, embedder=model, extractor=extractor, refiner=refiner)

    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded_admin_url(Path(tmp) / "pgdata")
        database = Database(embedded.fresh_database_url(admin_url, "bench"),
                            pool_size=DreamingSettings().database_connections)

        with Progress(console=console) as progress:
            task = progress.add_task(f"embedding {len(background)} background pairs (once)", total=len(background))
            started = time.perf_counter()
            for start in range(0, len(background), 250):
                save_pairs("bench-5k", background[start:start + 250], database=database, embedder=embedder)
                progress.advance(task, len(background[start:start + 250]))
            background_embedding_s = time.perf_counter() - started
        with database.connect() as conn:
            conn.execute(bench_sql("copy_user_pairs"), {"target": "bench-2k", "source": "bench-5k", "limit": args.throughput_pairs})

        throughput: dict = {"runs_s": [], "statements": [], "transactions": []}
        # Taking turns, run by run: every stage (the product, the headline); without the keying stage (what
        # the keys cost); without keying and dating (what reading time costs, beside the previous one).
        variants = {"every stage": (), "without keys": ("pair_keys",), "without keys and dating": ("pair_keys", "pair_dates")}
        variant_s: dict[str, list[float]] = {name: [] for name in variants}
        every_stage = sync.STAGES
        for run in range(args.runs * len(variants)):
            names = list(variants)
            name = names[(run + run // len(names)) % len(names)]  # each round starts with the next variant
            linking.clear_user_graph(database, "bench-2k", "default")
            with database.connect() as conn:
                conn.execute(bench_sql("reset_dating_and_keys"), {"user_id": "bench-2k", "kg_id": "default"})
            sync.STAGES = tuple(s for s in every_stage if s.asset not in variants[name])
            try:
                with counted_statements() as sent:
                    started = time.perf_counter()
                    result = dream(database, "bench-2k")
                    seconds = time.perf_counter() - started
            finally:
                sync.STAGES = every_stage
            assert result.extraction["pairs"] == args.throughput_pairs, result.extraction
            variant_s[name].append(seconds)
            console.print(f"throughput run {run + 1} ({name}): {args.throughput_pairs / seconds:.1f} pairs/s")
            if name != "every stage":
                continue
            assert result.dating["pairs"] == result.keys["pairs"] == args.throughput_pairs, (result.dating, result.keys)
            throughput["runs_s"].append(seconds)
            throughput["statements"].append(sent["statements"])
            throughput["transactions"].append(sent["transactions"])
            throughput["stages_last_run"] = {"dating": result.dating, "keys": result.keys,
                                             "extraction": result.extraction, "merge": result.merge,
                                             "links": result.links, "refinement": result.refinement}
            throughput["graph"] = graph_reports.graph_stats(database, "bench-2k")
        median_s = statistics.median(throughput["runs_s"])
        without_keys_s = statistics.median(variant_s["without keys"])
        without_dating_s = statistics.median(variant_s["without keys and dating"])
        throughput.update({
            "pairs": args.throughput_pairs, "median_s": round(median_s, 2),
            "pairs_per_s": round(args.throughput_pairs / median_s, 1),
            "runs_s": [round(s, 2) for s in throughput["runs_s"]],
            "statements_per_pair": round(statistics.median(throughput.pop("statements")) / args.throughput_pairs, 3),
            "transactions_per_pair": round(statistics.median(throughput.pop("transactions")) / args.throughput_pairs, 3),
            "without_keys": {"runs_s": [round(s, 2) for s in variant_s["without keys"]],
                             "pairs_per_s": round(args.throughput_pairs / without_keys_s, 1)},
            "with_to_without_keys": round(without_keys_s / median_s, 3),
            "without_keys_and_dating": {"runs_s": [round(s, 2) for s in variant_s["without keys and dating"]],
                                        "pairs_per_s": round(args.throughput_pairs / without_dating_s, 1)},
            "with_to_without_dating": round(without_dating_s / without_keys_s, 3)})

        started = time.perf_counter()
        dream(database, "bench-5k")
        setup_dream_s = time.perf_counter() - started
        graph_5k = graph_reports.graph_stats(database, "bench-5k")
        with database.connect() as conn:
            conn.execute("VACUUM ANALYZE")  # what autovacuum has done by now on a server that stays up

        runs_by_series: dict[str, list[dict]] = {name: [] for name in series}
        fast_statements = []
        now, next_pair = datetime.now(UTC), iter(fresh)
        for run in range(args.runs):
            samples: dict[str, list[float]] = {name: [] for name in series}
            for index in range(args.latency_samples):
                order = series[index % len(series):] + series[:index % len(series)]  # taking turns
                for turn, name in enumerate(order):
                    record = dict(next(next_pair))
                    # a new exchange, now
                    record["occurred_at"] = now + timedelta(minutes=run * 1000 + index * 10 + turn)
                    with counted_statements() as sent:
                        started = time.perf_counter()
                        both = save_and_sync("bench-5k", [record], database=database, embedder=embedders[name],
                                             extractor=extractor, refiner=refiner)
                        samples[name].append(time.perf_counter() - started)
                    saved, synced = both.saved, both.synced
                    fast_statements.append(sent["statements"])
                    assert saved.inserted == 1 and synced.extraction["pairs"] == 1, (saved, synced.extraction)
            for name, values in samples.items():
                runs_by_series[name].append({"p50_s": percentile(values, 0.5), "p95_s": percentile(values, 0.95),
                                             "samples_s": [round(s, 4) for s in values]})
            console.print(f"fast-path run {run + 1}: " + ", ".join(
                f"{name} p50 {runs_by_series[name][-1]['p50_s']:.3f} s, p95 {runs_by_series[name][-1]['p95_s']:.3f} s"
                for name in series))
        database.close()

    def medians(runs: list[dict]) -> dict:
        return {"runs": runs, "p50_s_median": round(statistics.median(r["p50_s"] for r in runs), 4),
                "p95_s_median": round(statistics.median(r["p95_s"] for r in runs), 4)}

    fast_by_runtime = {runtime: medians(runs_by_series[runtime]) for runtime in runtimes}
    latency_runs = runs_by_series[runtimes[0]]

    results = {
        "benchmark": "dreaming",
        "command": "make bench-dreaming  (.venv/bin/python bench/dreaming.py)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "providers": {"extraction": extractor.provider, "refinement": refiner.provider,
                      "embedding": f"{embedder.spec}, {runtimes[0]} runtime",
                      "background_embedding_pairs_per_s": round(len(background) / background_embedding_s, 1)},
        "throughput": {**throughput, "extractor": "entities",
                       "note": "pairs already embedded; dating, keying (key vectors included), extraction, merge "
                               "(with subject embeddings), links and refinement; statements: queries sent, "
                               "transactions apart; with_to_without_keys: throughput with the keying stage over "
                               "the same without it; with_to_without_dating: without keying, throughput with "
                               "the dating stage over the same without it"},
        "fast_path": {"background_pairs": len(background), "samples_per_run": args.latency_samples,
                      "runtime": runtimes[0], **fast_by_runtime[runtimes[0]],
                      "by_runtime": fast_by_runtime,
                      "p50_ratio_to_first_runtime": {
                          runtime: round(cell["p50_s_median"] / fast_by_runtime[runtimes[0]]["p50_s_median"], 2)
                          for runtime, cell in fast_by_runtime.items()},
                      "statements_per_sample_median": statistics.median(fast_statements),
                      "pooled_connections": DreamingSettings().database_connections,
                      "graph_before": graph_5k, "initial_dream_s": round(setup_dream_s, 1),
                      "note": "save_and_sync of one new pair (embedding, insert, every stage), end to end"},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")

    table = Table(title="dreaming (offline providers), medians of runs")
    for column in ("measure", "result", "runs"):
        table.add_column(column)
    table.add_row(f"throughput, {args.throughput_pairs} pairs",
                  f"{throughput['pairs_per_s']} pairs/s, {throughput['statements_per_pair']} statements a pair",
                  ", ".join(f"{s:.1f} s" for s in throughput["runs_s"]))
    table.add_row("without the keying stage, taking turns", f"{throughput['without_keys']['pairs_per_s']} pairs/s "
                  f"(with it: ×{throughput['with_to_without_keys']})",
                  ", ".join(f"{s:.1f} s" for s in throughput["without_keys"]["runs_s"]))
    table.add_row("without keying and dating, taking turns",
                  f"{throughput['without_keys_and_dating']['pairs_per_s']} pairs/s "
                  f"(dating: ×{throughput['with_to_without_dating']})",
                  ", ".join(f"{s:.1f} s" for s in throughput["without_keys_and_dating"]["runs_s"]))
    table.add_row(f"fast path p50, user with {len(background)} pairs", f"{results['fast_path']['p50_s_median']} s",
                  ", ".join(f"{r['p50_s']:.3f}" for r in latency_runs))
    table.add_row("fast path p95", f"{results['fast_path']['p95_s_median']} s",
                  ", ".join(f"{r['p95_s']:.3f}" for r in latency_runs))
    for runtime in runtimes[1:]:
        cell = fast_by_runtime[runtime]
        table.add_row(f"fast path, {runtime} runtime beside it", f"p50 {cell['p50_s_median']} s, p95 {cell['p95_s_median']} s",
                      ", ".join(f"{r['p50_s']:.3f}" for r in cell["runs"]))
    console.print(table)
    console.print(f"written {args.out}")


if __name__ == "__main__":
    main()
