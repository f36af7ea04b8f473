"""Whether the offline extractor's spawned worker processes pay for themselves, side by side.

    .venv/bin/python bench/extraction_workers.py [--pairs 1000] [--runs 3]

A user with --pairs LongMemEval pairs (embedded once) is dreamed from scratch (the graph cleared, then
sync_user: extraction, merge, links, refinement) by three extractors taking turns run by run:
- in process: OfflineExtractor(processes=1), every parse on the sync's own thread;
- workers started per sync: a new OfflineExtractor(processes=2) for each sync, closed after it, as a Dagster
  run (a new process per run) gets them: two interpreters spawned, each loading spaCy, every time;
- workers kept: one OfflineExtractor(processes=2) for every sync, as a long-lived service can keep them.
Medians of the runs; the ratio is each one's time over in-process's. Results:
bench/results/extraction_workers.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import (  # first: puts the project on the import path
    bench_parser,
    embedded_admin_url,
    machine,
    oracle_records,
    stopped_on_exit,
)
from rich.console import Console
from rich.table import Table

from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import linking
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database

IN_PROCESS, PER_SYNC, KEPT = "in process", "2 workers started per sync", "2 workers kept"


def main() -> None:
    parser = bench_parser(__doc__, "extraction_workers")
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    console = Console()
    records = oracle_records(args.pairs)
    assert len(records) == args.pairs, "not enough oracle pairs"
    embedder, refiner, kept = LocalMiniLMEmbedder(batch_size=64), OfflineRefiner(), OfflineExtractor(processes=2)

    def sync(database: Database, extractor: OfflineExtractor) -> float:
        linking.clear_user_graph(database, "bench", "default")
        started = time.perf_counter()
        result = sync_user("bench", database=database, embedder=embedder, extractor=extractor, refiner=refiner)
        seconds = time.perf_counter() - started
        assert result.extraction["pairs"] == args.pairs, result.extraction
        return seconds

    def per_sync(database: Database) -> float:
        extractor = OfflineExtractor(processes=2)
        try:
            return sync(database, extractor)
        finally:
            extractor.close()

    variants = {IN_PROCESS: lambda db: sync(db, OfflineExtractor(processes=1)), PER_SYNC: per_sync,
                KEPT: lambda db: sync(db, kept)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        database = Database(embedded.fresh_database_url(embedded_admin_url(Path(tmp) / "pgdata"), "bench"))
        console.print(f"embedding {args.pairs} pairs (once)")
        save_pairs("bench", records, database=database, embedder=embedder)
        sync(database, kept)  # warm: the kept workers started, the database's caches filled
        for run in range(args.runs):
            names = list(variants)
            for name in names[run % len(names):] + names[:run % len(names)]:  # taking turns
                times[name].append(variants[name](database))
                console.print(f"run {run + 1}, {name}: {times[name][-1]:.2f} s")
        kept.close()
    base = statistics.median(times[IN_PROCESS])
    results = {"command": "make bench-extraction-workers  (.venv/bin/python bench/extraction_workers.py)",
               "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "pairs": args.pairs, "runs": args.runs, "machine": machine(), "variants": {
        name: {"runs_s": [round(s, 2) for s in runs], "median_s": round(statistics.median(runs), 2),
               "pairs_per_s": round(args.pairs / statistics.median(runs), 1),
               "time_vs_in_process": round(statistics.median(runs) / base, 3)} for name, runs in times.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    table = Table(title=f"dreaming {args.pairs} pairs from scratch (sync_user), medians of {args.runs} runs")
    for column in ("extractor", "seconds", "pairs/s", "time vs in process"):
        table.add_column(column)
    for name, cell in results["variants"].items():
        table.add_row(name, f"{cell['median_s']:.2f}", f"{cell['pairs_per_s']:.1f}", f"{cell['time_vs_in_process']:.2f}x")
    console.print(table)


if __name__ == "__main__":
    main()
