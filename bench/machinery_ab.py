"""Side by side, taking turns in one run: each speed mechanism against the simple version it replaced.

    .venv/bin/python bench/machinery_ab.py [--pairs 2000] [--rounds 3] [--queries 200]

- stage read-ahead (pipeline/stages.BatchesReadAhead): a first dream of --pairs embedded oracle pairs
  (clear the graph, sync_user), with the next batch read and prepared on a thread vs batch after batch
  (the same class with its ``ahead`` refusing every batch); headline: the sync's seconds.
- the ranking statement without its statement_pool section (sql.load_sql_without) vs the whole statement,
  both prepared, the lexical pool supplied from held postings, on the dreamed user with the graph side;
  headline: recall statement p50.
- the lexical pool found on a thread while the question is embedded vs after it
  (Recaller.find_lexical_pool_while_embedding), Recaller.recall end to end; headline: p50.
Results: bench/results/machinery_ab.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from common import ORACLE, ROOT, embedded_admin_url, machine, stopped_on_exit  # first: the project's path

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.providers import OfflineExtractor
from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
)
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import stages
from dreaming_dagster.pipeline.refinement import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.retrieval import recaller as recaller_module
from dreaming_dagster.retrieval.lexical_postings import WordPostingsCache
from dreaming_dagster.retrieval.ranker import COSINE_ONLY
from dreaming_dagster.retrieval.recaller import (
    DEFAULT_GRAPH_SIDE,
    Recaller,
    composite_rows,
    open_recall_connection,
)
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 3)


class SequentialBatches(stages.BatchesReadAhead):
    """The simple version: every batch read when the batch before is written, prepared by the stage."""

    def __init__(self, *args, ahead, **kwargs):
        super().__init__(*args, ahead=lambda n: False, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "machinery_ab.json")
    args = parser.parse_args()
    records, questions = [], []
    for raw in iter_longmemeval_questions(ORACLE):
        questions.append(raw["question"])
        for item in longmemeval_session_records([raw]):
            if isinstance(item, LineRecord):
                records.append(item.raw)
    records = records[:args.pairs]
    random.seed(0)
    questions = random.sample(questions, args.queries)
    embedder = LocalMiniLMEmbedder(batch_size=64)
    extractor = OfflineExtractor(processes=DreamingSettings().llm_offline_processes)
    refiner = OfflineRefiner()
    results: dict = {"benchmark": "machinery_ab", "command": "bench/machinery_ab.py", "pairs": args.pairs,
                     "date": datetime.now(UTC).isoformat(timespec="seconds")}

    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        database = Database(embedded.scratch_database_url(embedded_admin_url(Path(tmp) / "pgdata"), "bench"))
        for start in range(0, len(records), 250):
            save_pairs("ab", records[start:start + 250], database=database, embedder=embedder)
        print(f"embedded {len(records)} pairs", flush=True)

        sync_s: dict[str, list[float]] = {"read ahead": [], "sequential": []}
        original = stages.BatchesReadAhead
        # A first dream not counted: the extractor's worker processes start and load spaCy here.
        sync_user("ab", database=database, embedder=embedder, extractor=extractor, refiner=refiner)
        for round_ in range(args.rounds):
            order = list(sync_s) if round_ % 2 == 0 else list(reversed(sync_s))
            for name in order:
                stages.BatchesReadAhead = original if name == "read ahead" else SequentialBatches
                stages.clear_user_graph(database, "ab", "default")
                started = time.perf_counter()
                result = sync_user("ab", database=database, embedder=embedder, extractor=extractor, refiner=refiner)
                sync_s[name].append(round(time.perf_counter() - started, 2))
                assert result.extraction["pairs"] == args.pairs, result.extraction
                print(f"round {round_ + 1} {name}: {sync_s[name][-1]} s", flush=True)
        stages.BatchesReadAhead = original
        results["stage_read_ahead"] = {
            "runs_s": sync_s, "median_s": {name: statistics.median(v) for name, v in sync_s.items()},
            "ratio_read_ahead_to_sequential": round(
                statistics.median(sync_s["read ahead"]) / statistics.median(sync_s["sequential"]), 3)}
        with database.connect() as conn:
            conn.execute("VACUUM ANALYZE")

        vectors = embedder.embed(questions)
        conn = open_recall_connection(database, DreamingSettings().recall_ef_search)
        postings = WordPostingsCache(DreamingSettings().recall_lexical_cache_mb * 2**20)
        whole = load_sql("retrieval/composite_ranking")
        cut = recaller_module.composite_statement

        def ranked(vector, text):
            return composite_rows(conn, lexical_postings=postings, user_id="ab", kg_id="default",
                                  query_embedding=vector, query_text=text, weights=COSINE_ONLY, row_limit=10,
                                  graph=DEFAULT_GRAPH_SIDE)

        statement_ms: dict[str, list[float]] = {"without section": [], "whole statement": []}
        same = 0
        for i, (vector, text) in enumerate(zip(vectors, questions, strict=True)):
            got = {}
            names = list(statement_ms) if i % 2 == 0 else list(reversed(statement_ms))
            for name in names:
                recaller_module.composite_statement = cut if name == "without section" else (lambda p: whole)
                started = time.perf_counter()
                got[name] = ranked(vector, text)
                if i >= 10:
                    statement_ms[name].append((time.perf_counter() - started) * 1000)
            same += [r["id"] for r in got["without section"]] == [r["id"] for r in got["whole statement"]]
        recaller_module.composite_statement = cut
        conn.close()
        results["statement_section"] = {
            "p50_ms": {name: p50(v) for name, v in statement_ms.items()}, "n": len(statement_ms["whole statement"]),
            "same_rankings": f"{same}/{len(questions)}",
            "ratio_without_to_whole_p50": round(p50(statement_ms["without section"])
                                                / p50(statement_ms["whole statement"]), 3)}

        recall_ms: dict[str, list[float]] = {"while embedding": [], "after embedding": []}
        served = Recaller(database, embedder)
        for i, text in enumerate(questions):
            names = list(recall_ms) if i % 2 == 0 else list(reversed(recall_ms))
            for name in names:
                served.find_lexical_pool_while_embedding = name == "while embedding"
                started = time.perf_counter()
                served.recall("ab", text, k=10, remember_query=False)
                if i >= 10:
                    recall_ms[name].append((time.perf_counter() - started) * 1000)
        served.close()
        results["lexical_pool_thread"] = {
            "p50_ms": {name: p50(v) for name, v in recall_ms.items()}, "n": len(recall_ms["after embedding"]),
            "ratio_while_to_after_p50": round(p50(recall_ms["while embedding"]) / p50(recall_ms["after embedding"]), 3)}
        database.close()
    extractor.close()
    results["machine"] = machine()
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=1))


if __name__ == "__main__":
    main()
