"""Ingest + embed throughput on this machine: 2,000 LongMemEval pairs, median of 3 runs.

    .venv/bin/python bench/ingest.py [--pairs 2000] [--runs 3]

Each run uses a fresh database on a throwaway embedded server and measures, side by side:
- ``ingest_embed``: save_pairs with inline embedding (validate, hash, count tokens, embed, insert);
- ``ingest_only``: the same pairs with embedding deferred (what the hot path costs without the model);
- ``embed_pending``: the deferred pairs embedded by the memory_pairs asset's function.
The model is loaded and warmed before timing; its load time is reported on its own.
Results: bench/results/ingest.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import (  # first: puts the project on the import path
    ORACLE,
    bench_parser,
    embedded_admin_url,
    machine,
    oracle_records,
    stopped_on_exit,
)
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.ingest.embedding import embed_pending_pairs
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.ingest.tokens import count_tokens
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database

CHUNK = 256


def fresh_database(admin_url: str) -> Database:
    return Database(embedded.fresh_database_url(admin_url, "bench"))


def timed_save(database: Database, embedder, pairs: list[dict], embed: bool) -> float:
    started = time.perf_counter()
    for start in range(0, len(pairs), CHUNK):
        result = save_pairs("bench-user", pairs[start:start + CHUNK], database=database, embedder=embedder,
                            embed=embed)
        assert not result.rejected, result.rejected[:3]
    return time.perf_counter() - started


def main() -> None:
    parser = bench_parser(__doc__, "ingest")
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dataset", type=Path, default=ORACLE)
    args = parser.parse_args()
    console = Console()

    pairs = oracle_records(args.pairs, args.dataset)
    tokens = [count_tokens(p["user_message"], p["assistant_message"]) for p in pairs]
    embedder = LocalMiniLMEmbedder(batch_size=64)
    started = time.perf_counter()
    embedder.embed(["warm-up sentence"])
    model_load_s = time.perf_counter() - started

    runs = []
    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        admin_url = embedded_admin_url(Path(tmp) / "pgdata")
        with Progress(console=console) as progress:
            task = progress.add_task(f"{args.runs} runs × {len(pairs)} pairs", total=args.runs * 3)
            for _ in range(args.runs):
                database = fresh_database(admin_url)
                database.ensure_schema(embedder.spec)
                ingest_embed = timed_save(database, embedder, pairs, embed=True)
                progress.advance(task)
                deferred = fresh_database(admin_url)
                deferred.ensure_schema(embedder.spec)
                ingest_only = timed_save(deferred, embedder, pairs, embed=False)
                progress.advance(task)
                started = time.perf_counter()
                run = embed_pending_pairs(deferred, embedder, "bench-user", batch_size=64)
                embed_pending = time.perf_counter() - started
                assert run.embedded == len(pairs)
                progress.advance(task)
                runs.append({"ingest_embed_s": ingest_embed, "ingest_only_s": ingest_only,
                             "embed_pending_s": embed_pending})

    def summary(key: str) -> dict:
        seconds = [r[key] for r in runs]
        median = statistics.median(seconds)
        return {"median_s": round(median, 3), "pairs_per_s": round(len(pairs) / median, 1),
                "runs_s": [round(s, 3) for s in seconds]}

    results = {
        "benchmark": "ingest",
        "command": "make bench-ingest  (.venv/bin/python bench/ingest.py)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "dataset": str(args.dataset.name),
        "pairs": len(pairs),
        "tokens_per_pair_mean": round(statistics.mean(tokens), 1),
        "tokens_per_pair_median": statistics.median(tokens),
        "embedding_model": str(embedder.spec),
        "embedding_batch_size": 64,
        "save_chunk_size": CHUNK,
        "model_load_s": round(model_load_s, 2),
        "runs": args.runs,
        "ingest_embed": summary("ingest_embed_s"),
        "ingest_only": summary("ingest_only_s"),
        "embed_pending": summary("embed_pending_s"),
    }
    results["embedding_share_of_ingest"] = round(
        1 - results["ingest_only"]["median_s"] / results["ingest_embed"]["median_s"], 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")

    table = Table(title=f"ingest: {len(pairs)} LongMemEval pairs, median of {args.runs} runs")
    for column in ("path", "median s", "pairs/s", "runs (s)"):
        table.add_column(column)
    for key, label in (("ingest_embed", "save_pairs + inline embedding"),
                       ("ingest_only", "save_pairs, embedding deferred"),
                       ("embed_pending", "deferred embedding (memory_pairs asset)")):
        row = results[key]
        table.add_row(label, f"{row['median_s']:.2f}", f"{row['pairs_per_s']:.1f}",
                      ", ".join(f"{s:.2f}" for s in row["runs_s"]))
    console.print(table)
    console.print(f"model load {results['model_load_s']} s · tokens/pair mean {results['tokens_per_pair_mean']} · "
                  f"embedding is {results['embedding_share_of_ingest']:.0%} of ingest time · written {args.out}")


if __name__ == "__main__":
    main()
