"""Recall at scale: the hybrid nine-signal query against the vector-only composite and a plain pgvector
top-50, side by side.

    .venv/bin/python bench/recall.py [--pairs 100000] [--queries 200]

One user ("heavy") holds --pairs fully dreamed pairs with subjects and links, beside --light-users users of
200 pairs each in the same tables and HNSW index. Vectors are synthetic (embedding 100,000 real pairs
with MiniLM would take ~100 minutes on this machine): 384-d, drawn around topic centres that share
structure as real sentence embeddings do (``topic_centres``), with a skewed topic distribution, so the
HNSW graph and the subject hubs look like a real user's; queries are drawn the same way. Each subject is linked to pairs of its own topic, with a few hub subjects, as dreaming makes them.
Texts are real: each pair's messages are a LongMemEval oracle pair drawn at random (the heavy user's
lexical index then has the oracle's vocabulary, ~18 times over), and each query's text is an oracle
question, so the lexical side scans realistic postings.

Measured in one run, per query in random order on one connection opened as recall opens it (hnsw.ef_search
200, statements prepared and planned with each call's parameters, synchronous_commit off), p50/p99 of wall time
including the round trip:
- plain: ``retrieval/plain_top_k`` (top-50 by cosine through the HNSW index, nothing else);
- composite: ``retrieval/composite_ranking`` with a cosine-only pool (lexical_pool_size 0), v3-shaped
  weights, top 10 (read-only);
- hybrid: the same statement with the BM25 top-50 added to the pool, as recall() runs it by default: the
  top-50 found in the process from the query words' postings it holds (``retrieval/lexical_postings``;
  one small statement reads the words' versions first, and blocks that changed are read again); the held
  postings start with every question's words (read once before the timed queries, as a serving process
  holds the words it has been asked about: a word's first read is the cold-cache series' figure);
- hybrid, statement pool: the same statement finding the BM25 top-50 itself (DREAMING_RECALL_LEXICAL_CACHE_MB
  0, and every recall ``as_of`` a time); the rows of the two are compared query by query;
- hybrid, cold cache: as hybrid, from an empty cache (a process's first recall with these words);
- hybrid + remember: as hybrid, also recording the last-query time;
- served: as hybrid with the graph side recall() adds by default (DREAMING_RECALL_GRAPH_POOL_SIZE 20 pairs
  through the DREAMING_RECALL_GRAPH_SUBJECTS 10 subjects nearest the query and those whose name holds a
  query word): the ranking statement every recall() runs for a question that names no time;
- served, before keys: the served statement of --baseline-rev (the last before index keys), on the same data,
  beside today's, which also draws through the keys (DREAMING_RECALL_KEY_POOL_SIZE 20 pairs) and computes
  key_match; the heavy user has synthetic keys (bench/synthetic.py: KEYS_PER_PAIR a pair);
- served, month window: the same for a question naming a month (the heavy user's last full month, ~2,700
  pairs): time_fit and the time-window side of the pool (DREAMING_RECALL_TIME_POOL_SIZE by vector and by
  BM25 among the DREAMING_RECALL_TIME_SCAN_LIMIT in-window pairs it reads) added; and the same reading
  WIDE_SCAN_LIMIT pairs, the whole month and its soft edges (what the scan limit saves);
- recall() end to end: Recaller.recall with a real MiniLM embedding of the question;
- the server's shared_buffers: the composite and hybrid statements again, in child processes that each start
  the server from the same data directory, with Postgres's default 128MB and with the embedded server's default
  (DREAMING_EMBEDDED_SHARED_BUFFERS auto), taking turns round by round (--shared-buffers-rounds), each round
  warmed by one pass over the queries before the pass it times.
Also: the query plans (HNSW used? exact fallback executed?), the HNSW pool's recall of the exact top-50,
a light user sharing the index (fallback path), a mid-sized user (--mid-pairs, 10,000) asked about the heavy
user's topics, so its filtered HNSW scans come back short and its served statement scans its pairs exactly
(with that scan's buffers a pair, which show whether the vectors are read in line), the profile statement, model file size / load / inference,
question-type prediction and a real MiniLM query embedding. Results: bench/results/recall.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import common  # first: puts the project on the import path
import numpy as np
import psycopg
import torch
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from synthetic import DIMENSION, START, load_user, queries_around
from tqdm import tqdm

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.dates.questions import NO_TIME, TimeQuery
from dreaming_dagster.dates.ranges import TimeRange
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.ingest.readers import longmemeval_session_records
from dreaming_dagster.retrieval.features import FEATURE_NAMES, UserProfile, build_features
from dreaming_dagster.retrieval.lexical_postings import WordPostingsCache
from dreaming_dagster.retrieval.profiles import read_profile, refresh_profile
from dreaming_dagster.retrieval.question_type import shipped_classifier
from dreaming_dagster.retrieval.ranker import (
    CompositeRanker,
    SignalWeights,
    load_ranker,
    predict_weights,
    save_ranker,
)
from dreaming_dagster.retrieval.recaller import (
    DEFAULT_GRAPH_SIDE,
    DEFAULT_LEXICAL_PRUNING,
    DEFAULT_TIME_SIDE,
    NO_GRAPH_SIDE,
    LexicalPruning,
    Recaller,
    TimeSide,
    composite_parameters,
    composite_rows,
    lexical_pool_pairs,
    open_recall_connection,
)
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import Rejection, parse_pair
from dreaming_dagster.training.longmemeval import iter_questions

# Lexical first rounds timed side by side (hybrid / composite) and scored against the exact BM25 top-K: the
# pool is exact whatever the first round reads (migration 0017), so the share is a check, the time the choice.
PRUNING_RULES = {
    "default (first round 512 postings)": DEFAULT_LEXICAL_PRUNING,
    "first round 128 postings": LexicalPruning(seed_postings=128),
    "first round 2,048 postings": LexicalPruning(seed_postings=2048),
    "every posting": LexicalPruning(seed_postings=0),
}


BASELINE_REV = "c93be83"  # the last revision before index keys
KEY_POOL_SIZE = DreamingSettings().recall_key_pool_size
WIDE_SCAN_LIMIT = 5000  # the month again with the time side reading this many in-window pairs

def oracle_texts(dataset: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """The oracle's distinct pairs (user, assistant) and its questions."""
    pairs: dict[str, tuple[str, str]] = {}
    questions = []
    for raw, question in iter_questions(dataset):
        questions.append(question.question)
        for item in longmemeval_session_records([raw]):
            if not isinstance(item, Rejection):
                pair = parse_pair(item.raw, item.where)
                pairs.setdefault(pair.content_hash, (pair.user_message, pair.assistant_message))
    return list(pairs.values()), questions



def summary(values: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(values), 3), "p99_ms": round(common.percentile(values, 0.99), 3),
            "mean_ms": round(statistics.fmean(values), 3), "n": len(values)}


def plan_facts(conn, sql: str, params: dict) -> dict:
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()["QUERY PLAN"][0]
    indexes, never_executed = set(), set()

    def walk(node):
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        if node.get("Actual Loops") == 0 and node.get("CTE Name"):
            never_executed.add(node["CTE Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    exact_ran = any(n.get("CTE Name") == "exact" and n.get("Actual Loops", 0) > 0 for n in _nodes(plan["Plan"]))
    # Time inside the CTEs that do the heavy lifting (inclusive of their children).
    cte_ms = {n["Subplan Name"].removeprefix("CTE "): round(n["Actual Total Time"], 3) for n in _nodes(plan["Plan"])
              if n.get("Subplan Name", "").startswith("CTE ") and "Actual Total Time" in n}
    cte_rows = {n["Subplan Name"].removeprefix("CTE "): n["Actual Rows"] * n.get("Actual Loops", 1)
                for n in _nodes(plan["Plan"]) if n.get("Subplan Name", "").startswith("CTE ") and "Actual Rows" in n}
    return {"indexes": sorted(indexes), "hnsw_index_used": "memory_pairs_embedding_hnsw_idx" in indexes,
            "exact_fallback_executed": exact_ran, "planning_ms": round(plan["Planning Time"], 3),
            "execution_ms": round(plan["Execution Time"], 3), "cte_ms": cte_ms, "cte_rows": cte_rows}


def _nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = common.bench_parser(__doc__, "recall")
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--subjects", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=400)
    parser.add_argument("--light-users", type=int, default=50)
    parser.add_argument("--mid-pairs", type=int, default=10_000,
                        help="a mid-sized user sharing the index (its scans come back short: the exact path)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool-size", type=int, default=50)
    parser.add_argument("--lexical-pool-size", type=int, default=50)
    parser.add_argument("--ef-search", type=int, default=DreamingSettings().recall_ef_search)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-rev", default=BASELINE_REV,
                        help="the revision whose ranking statement is timed beside today's (served_before_keys)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the embedded server's data here (to inspect plans afterwards)")
    parser.add_argument("--shared-buffers-rounds", type=int, default=2,
                        help="rounds of the shared_buffers comparison (each: one process per setting)")
    parser.add_argument("--shared-buffers-round", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shared_buffers_round:
        shared_buffers_round(args.shared_buffers_round)
        return
    rng = np.random.default_rng(args.seed)
    random.seed(args.seed)
    results: dict = {"command": "bench/recall.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"),
                     "machine": common.machine() | {"torch": torch.__version__},
                     "data": {"heavy_user_pairs": args.pairs, "heavy_user_subjects": args.subjects,
                              "topics": args.topics, "light_users": args.light_users,
                              "mid_user_pairs": args.mid_pairs,
                              "light_user_pairs": 200, "dimension": DIMENSION,
                              "vectors": "synthetic, clustered (see the docstring)",
                              "texts": "heavy user: LongMemEval oracle pairs drawn at random; queries: oracle "
                                       "questions"}}
    pair_texts, question_texts = oracle_texts(common.ORACLE)

    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp, common.stopped_on_exit(Path(tmp) / "pgdata"):
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = str(args.keep)
        admin_url = common.embedded_admin_url(Path(tmp) / "pgdata")
        database = Database(embedded.fresh_database_url(admin_url, "bench"))
        with psycopg.connect(admin_url) as admin:
            results["data"]["shared_buffers"] = admin.execute("SHOW shared_buffers").fetchone()[0]
        database.ensure_schema(LocalMiniLMEmbedder.spec)
        total_pairs = args.pairs + 200 * args.light_users + args.mid_pairs
        started = time.perf_counter()
        with psycopg.connect(database.url, autocommit=True, row_factory=dict_row) as conn:
            register_vector(conn)
            conn.execute(common.bench_sql("drop_vector_indexes"))
            with tqdm(total=total_pairs, desc="loading pairs", unit="pair") as progress:
                centres = load_user(conn, rng, "heavy", args.pairs, args.subjects, args.topics, 3 * 365, progress,
                                    texts=pair_texts)
                light_centres = {}
                for u in range(args.light_users):
                    light_centres[f"light{u}"] = load_user(conn, rng, f"light{u}", 200, 60, 10, 90, progress)
                load_user(conn, rng, "mid", args.mid_pairs, args.mid_pairs // 5, args.topics, 3 * 365, progress,
                          texts=pair_texts)
            load_s = time.perf_counter() - started
            started = time.perf_counter()
            conn.execute(common.bench_sql("build_settings"))
            print("building the HNSW indexes …", flush=True)
            conn.execute(common.bench_sql("create_vector_indexes"))
            index_s = time.perf_counter() - started
            conn.execute("VACUUM ANALYZE")
            sizes = conn.execute(common.bench_sql("recall_data_sizes")).fetchone()
        results["data"] |= {"heavy_user_links": sizes["links"], "hnsw_index_size": sizes["hnsw_size"],
                            "heavy_user_postings": int(sizes["postings"]),
                            "lexical_index_size": f"{sizes['lexical_bytes'] / 2**20:.0f} MB",
                            "lexical_index_bytes_per_pair": round(sizes["lexical_bytes"] / sizes["indexed_pairs"]),
                            "lexical_index_parts_bytes": sizes["lexical_parts"],
                            "load_seconds": round(load_s, 1), "hnsw_build_seconds": round(index_s, 1)}

        # A connection as recall opens it (prepared statements, each call planned with its parameters).
        conn = open_recall_connection(database, args.ef_search)
        torch.manual_seed(args.seed)
        model_path = save_ranker(CompositeRanker(DIMENSION, 8), Path(tmp) / "v3.safetensors",
                                 embedding_model=LocalMiniLMEmbedder.spec.model)
        ranker = load_ranker(model_path)
        weights = predict_weights(ranker, np.zeros(DIMENSION, np.float32), np.zeros(len(FEATURE_NAMES), np.float32))
        weights = SignalWeights(weights.weights, weights.scale, "v3 (random init)")

        queries = queries_around(rng, centres, args.queries + 10)
        query_texts = [question_texts[int(i)] for i in rng.integers(len(question_texts), size=len(queries))]
        plain_sql = load_sql("retrieval/plain_top_k")

        def plain(q):
            return conn.execute(plain_sql, {"user_id": "heavy", "kg_id": "default", "query": q,
                                            "pool_size": args.pool_size}).fetchall()

        # recall()'s lexical pool: found in the process from the postings it holds (lexical_postings.py),
        # as a recall process with the default DREAMING_RECALL_LEXICAL_CACHE_MB does.
        postings = WordPostingsCache(DreamingSettings().recall_lexical_cache_mb * 2**20)

        # A month of the heavy user's memory, as "last month" asked early in the month after it.
        last_day = (START + timedelta(days=3 * 365)).date().replace(day=1) - timedelta(days=1)
        month = TimeQuery(window=TimeRange(last_day.replace(day=1), last_day, "month"), relation="in",
                          expression="last month")

        def composite(q, text, lexical_pool_size=0, remember=False, cache=None, graph=NO_GRAPH_SIDE,
                      time=NO_TIME, key_pool_size=0, time_side=DEFAULT_TIME_SIDE):
            return composite_rows(conn, lexical_postings=cache, user_id="heavy", kg_id="default", query_embedding=q,
                                  query_text=text, weights=weights, pool_size=args.pool_size,
                                  lexical_pool_size=lexical_pool_size, row_limit=10, remember_query=remember,
                                  graph=graph, time=time, time_side=time_side, key_pool_size=key_pool_size)

        # The served statement as it was before index keys (--baseline-rev), on the same data and lexical pool.
        baseline_sql = subprocess.run(
            ["git", "-C", str(common.ROOT), "show", f"{args.baseline_rev}:dbt_like_sql/retrieval/composite_ranking.sql"],
            capture_output=True, text=True, check=True).stdout

        def served_before_keys(q, text):
            params = composite_parameters(user_id="heavy", kg_id="default", query_embedding=q, query_text=text,
                                          weights=weights, pool_size=args.pool_size,
                                          lexical_pool_size=args.lexical_pool_size, row_limit=10,
                                          graph=DEFAULT_GRAPH_SIDE, time_side=TimeSide())
            params["lexical_pool_pairs"] = lexical_pool_pairs(conn, params, postings)
            return conn.execute(baseline_sql, params).fetchall()

        series = {"plain": [], "composite": [], "hybrid": [], "hybrid_statement_pool": [], "hybrid_cold_cache": [],
                  "hybrid_remember": [], "served": [], "served_before_keys": [], "served_month_window": [],
                  "served_month_window_wide_scan": []}
        calls = {"plain": lambda q, text: plain(q), "composite": composite,
                 "hybrid": lambda q, text: composite(q, text, args.lexical_pool_size, cache=postings),
                 "hybrid_statement_pool": lambda q, text: composite(q, text, args.lexical_pool_size),
                 # A process's first recall with these words: every block of theirs read from the database.
                 "hybrid_cold_cache": lambda q, text: composite(
                     q, text, args.lexical_pool_size, cache=WordPostingsCache(postings.max_bytes)),
                 "hybrid_remember": lambda q, text: composite(q, text, args.lexical_pool_size, remember=True,
                                                              cache=postings),
                 "served": lambda q, text: composite(q, text, args.lexical_pool_size, cache=postings,
                                                     graph=DEFAULT_GRAPH_SIDE, key_pool_size=KEY_POOL_SIZE),
                 "served_before_keys": served_before_keys,
                 "served_month_window": lambda q, text: composite(q, text, args.lexical_pool_size, cache=postings,
                                                                  graph=DEFAULT_GRAPH_SIDE, time=month,
                                                                  key_pool_size=KEY_POOL_SIZE),
                 "served_month_window_wide_scan": lambda q, text: composite(
                     q, text, args.lexical_pool_size, cache=postings, graph=DEFAULT_GRAPH_SIDE, time=month,
                     key_pool_size=KEY_POOL_SIZE, time_side=TimeSide(scan_limit=WIDE_SCAN_LIMIT))}
        # The held postings start with every question's words, as a serving process holds the words it has
        # been asked about: a word's first read (its whole postings list, tens of milliseconds for a common
        # word) would otherwise land on whichever of the four series sharing this cache runs first, and decide
        # their p99s by lot. That first read is the cold-cache series' figure.
        for text in query_texts:
            postings.pool_pairs(conn, user_id="heavy", kg_id="default", query_text=text, k=args.lexical_pool_size)
        same_rows = 0
        for i, (q, text) in enumerate(tqdm(list(zip(queries, query_texts, strict=True)), desc="side-by-side queries")):
            order = list(calls)
            random.shuffle(order)
            got = {}
            for name in order:
                started = time.perf_counter()
                rows = got[name] = calls[name](q, text)
                elapsed = (time.perf_counter() - started) * 1000
                if i >= 10:  # the first ten warm the caches
                    series[name].append(elapsed)
                assert len(rows) == (args.pool_size if name == "plain" else 10), (name, len(rows))
            # Pairs, order and BM25 (scores move with the clock: rec_exp is computed at each call's now).
            same_rows += [(r["id"], r["in_lexical_pool"], r["bm25"]) for r in got["hybrid"]] == [
                (r["id"], r["in_lexical_pool"], r["bm25"]) for r in got["hybrid_statement_pool"]]
        latency = {name: summary(values) for name, values in series.items()}
        latency["hybrid_rows_equal_to_statement_pool"] = f"{same_rows}/{len(queries)}"
        latency["postings_held_mb"] = round(postings.held_bytes / 2**20, 1)
        for numerator, denominator in (("hybrid", "composite"), ("hybrid_statement_pool", "composite"),
                                       ("hybrid_cold_cache", "composite"), ("composite", "plain"),
                                       ("hybrid", "plain"), ("hybrid_remember", "composite"), ("served", "composite"),
                                       ("served", "served_before_keys"), ("served_month_window", "served"),
                                       ("served_month_window_wide_scan", "served")):
            for stat in ("p50", "p99"):
                latency[f"ratio_{numerator}_to_{denominator}_{stat}"] = round(
                    latency[numerator][f"{stat}_ms"] / latency[denominator][f"{stat}_ms"], 2)
        results["latency_heavy_user"] = latency

        composite_sql = load_sql("retrieval/composite_ranking")
        params = composite_parameters(user_id="heavy", kg_id="default", query_embedding=queries[0],
                                      query_text=query_texts[0], weights=weights, pool_size=args.pool_size,
                                      lexical_pool_size=args.lexical_pool_size, row_limit=10)
        results["plan_heavy_user"] = plan_facts(conn, composite_sql, params)
        results["plan_heavy_user_vector_only"] = plan_facts(conn, composite_sql, params | {"lexical_pool_size": 0})
        results["plan_heavy_user_served"] = plan_facts(conn, composite_sql, params | {
            "graph_pool_size": DEFAULT_GRAPH_SIDE.pool_size, "graph_subjects": DEFAULT_GRAPH_SIDE.subjects})
        results["plan_heavy_user_plain"] = plan_facts(conn, plain_sql, {k: params[k] for k in (
            "user_id", "kg_id", "query", "pool_size")})

        def vector_pool(q):
            """The composite statement's vector pool: two HNSW scans (user turn, reply) and the cut."""
            return composite_rows(conn, user_id="heavy", kg_id="default", query_embedding=q, query_text="",
                                  weights=weights, pool_size=args.pool_size, lexical_pool_size=0)

        # How much of the exact top-50 (by the better of a pair's two vectors) the HNSW pool holds.
        overlaps = []
        exact_sql = load_sql("retrieval/exact_top_k")
        for q in queries[10:60]:
            approx = {r["id"] for r in vector_pool(q)}
            exact = {r["id"] for r in conn.execute(exact_sql, {"user_id": "heavy", "kg_id": "default", "query": q,
                                                                "pool_size": args.pool_size})}
            overlaps.append(len(approx & exact) / len(exact))
        results["hnsw_pool_recall_at_50"] = {"mean": round(statistics.fmean(overlaps), 4),
                                             "min": round(min(overlaps), 4), "queries": len(overlaps),
                                             "ef_search": args.ef_search}

        # The lexical pool reads part of the index (LexicalPruning). For each rule: the hybrid statement's
        # latency beside the cosine-only composite (same queries, shuffled order), and how much of the exact
        # BM25 top-K its pool holds. Ties count: the heavy user's texts are the oracle's ~18 times over, so
        # the exact top-K has many equal scores, and a pair scoring at least the exact K-th score is as good
        # as any exact one.
        def lexical_pool(q, text, pruning):
            rows = composite_rows(conn, user_id="heavy", kg_id="default", query_embedding=q, query_text=text,
                                  weights=weights, pool_size=1, lexical_pool_size=args.lexical_pool_size,
                                  lexical_pruning=pruning)
            return [r["bm25"] for r in rows if r["in_lexical_pool"]]

        shares: dict[str, list[float]] = {name: [] for name in PRUNING_RULES}
        timings: dict[str, list[float]] = {name: [] for name in ["composite", *PRUNING_RULES]}
        for q, text in tqdm(list(zip(queries[10:60], query_texts[10:60], strict=True)), desc="lexical pruning"):
            exact = lexical_pool(q, text, LexicalPruning(seed_postings=0))
            for name, pruning in PRUNING_RULES.items():
                if exact:
                    kth = min(exact)
                    shares[name].append(sum(score >= kth * (1 - 1e-9) for score in lexical_pool(q, text, pruning))
                                        / len(exact))
            order = ["composite", *PRUNING_RULES]
            random.shuffle(order)
            for name in order:
                started = time.perf_counter()
                if name == "composite":
                    composite(q, text)
                else:
                    composite_rows(conn, user_id="heavy", kg_id="default", query_embedding=q, query_text=text,
                                   weights=weights, pool_size=args.pool_size,
                                   lexical_pool_size=args.lexical_pool_size, lexical_pruning=PRUNING_RULES[name],
                                   row_limit=10)
                timings[name].append((time.perf_counter() - started) * 1000)
        composite_p50 = statistics.median(timings["composite"])
        results["lexical_pool_pruning"] = {
            "queries": len(shares["every posting"]), "composite_p50_ms": round(composite_p50, 3),
            "rules": {name: {
                "seed_postings": pruning.seed_postings,
                "share_of_exact_bm25_top_k_mean": round(statistics.fmean(shares[name]), 4),
                "share_of_exact_bm25_top_k_min": round(min(shares[name]), 4),
                "hybrid_p50_ms": round(statistics.median(timings[name]), 3),
                "ratio_to_composite_p50": round(statistics.median(timings[name]) / composite_p50, 2),
            } for name, pruning in PRUNING_RULES.items()}}

        # A light user sharing the index: 200 pairs among the whole table.
        light_queries = queries_around(rng, light_centres["light0"], 60)
        light_times, light_ok = [], 0
        for q in light_queries:
            started = time.perf_counter()
            rows = composite_rows(conn, user_id="light0", kg_id="default", query_embedding=q,
                                  query_text="synthetic reply", weights=weights, pool_size=args.pool_size,
                                  lexical_pool_size=0, row_limit=args.pool_size)
            light_times.append((time.perf_counter() - started) * 1000)
            exact = {r["id"] for r in conn.execute(exact_sql, {"user_id": "light0", "kg_id": "default", "query": q,
                                                                "pool_size": args.pool_size})}
            light_ok += {r["id"] for r in rows} == exact
        params_light = params | {"user_id": "light0", "query": light_queries[0], "lexical_pool_size": 0}
        results["light_user"] = {"pairs": 200, "composite": summary(light_times[10:]),
                                 "pool_equals_exact_top_50": f"{light_ok}/{len(light_queries)}",
                                 "plan": plan_facts(conn, composite_sql, params_light)}

        # A mid-sized user sharing the index, asked about the heavy user's topics: the filtered HNSW scans
        # come back short (pgvector 0.6 filters after the scan) and the statement scans the user's own pairs
        # exactly, as it does for any user owning a small share of a big index. That scan reads every one of
        # the user's vectors, so it costs what reading a vector costs: in line since migration 0021, where
        # before each vector was a TOAST tuple found through the TOAST index (~3 buffers a vector).
        mid_times = []
        for i, (q, text) in enumerate(zip(queries, query_texts, strict=True)):
            started = time.perf_counter()
            rows = composite_rows(conn, lexical_postings=postings, user_id="mid", kg_id="default", query_embedding=q,
                                  query_text=text, weights=weights, pool_size=args.pool_size,
                                  lexical_pool_size=args.lexical_pool_size, row_limit=10, graph=DEFAULT_GRAPH_SIDE,
                                  key_pool_size=KEY_POOL_SIZE)
            if i >= 10:
                mid_times.append((time.perf_counter() - started) * 1000)
            assert len(rows) == 10, ("mid", len(rows))
        mid_params = params | {"user_id": "mid", "graph_pool_size": DEFAULT_GRAPH_SIDE.pool_size,
                               "graph_subjects": DEFAULT_GRAPH_SIDE.subjects, "key_pool_size": KEY_POOL_SIZE}
        exact_scan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + common.bench_sql("exact_vector_scan"),
                                  {"user_id": "mid", "kg_id": "default", "query": queries[0]}).fetchone()["QUERY PLAN"][0]
        scanned = exact_scan["Plan"]["Actual Rows"]
        results["mid_user"] = {
            "pairs": args.mid_pairs, "served": summary(mid_times),
            "ratio_served_to_heavy_served_p50": round(statistics.median(mid_times) / latency["served"]["p50_ms"], 2),
            "plan_served": plan_facts(conn, composite_sql, mid_params),
            "exact_scan": {"ms": round(exact_scan["Execution Time"], 3), "pairs": scanned,
                           "buffers_per_pair": round((exact_scan["Plan"]["Shared Hit Blocks"]
                                                      + exact_scan["Plan"]["Shared Read Blocks"]) / max(scanned, 1), 3)},
            "vector_storage": {row["name"]: row["attstorage"] for row in conn.execute(load_sql("schema/vector_storage"))}}

        # The ranker's per-user inputs: cached by dreaming (refresh) vs computed live (as_of queries).
        live_times = timed(lambda: read_profile(conn, user_id="heavy", kg_id="default", query_embedding=queries[1],
                                                as_of=datetime.now(UTC), session_id="heavy-s7"), 12)
        refresh_times = timed(lambda: refresh_profile(database, "heavy", "default"), 5)
        profile_times = timed(lambda: read_profile(conn, user_id="heavy", kg_id="default",
                                                   query_embedding=queries[1], as_of=None, session_id="heavy-s7"), 50)
        results["profile_statement"] = {"cached": summary(profile_times[5:]), "live_as_of": summary(live_times[2:]),
                                        "refresh_after_dreaming": summary(refresh_times)}

        # The HNSW search breadth: share of the exact top-50 the vector pool finds, and plain-query latency.
        sweep = {}
        for ef in (50, 100, 200, 400):
            conn.execute(load_sql("retrieval/connection_settings"), {"ef_search": str(ef)})
            shares, times = [], []
            for q in queries[10:60]:
                started = time.perf_counter()
                plain(q)
                times.append((time.perf_counter() - started) * 1000)
                approx = {r["id"] for r in vector_pool(q)}
                exact = {r["id"] for r in conn.execute(exact_sql, {"user_id": "heavy", "kg_id": "default",
                                                                    "query": q, "pool_size": args.pool_size})}
                shares.append(len(approx & exact) / len(exact))
            sweep[str(ef)] = {"pool_recall_mean": round(statistics.fmean(shares), 4),
                              "pool_recall_min": round(min(shares), 4), "plain_p50_ms": round(statistics.median(times), 3)}
        results["ef_search_sweep"] = sweep
        conn.execute(load_sql("retrieval/connection_settings"), {"ef_search": str(args.ef_search)})

        features = build_features(question_type="temporal", query="when did I last go hiking",
                                  query_time=datetime.now(UTC), profile=UserProfile(memory_count=100_000),
                                  session_id=None)
        inference = timed(lambda: predict_weights(ranker, queries[2], features), 2000)
        loads = [load_ranker(model_path).load_seconds * 1000 for _ in range(20)]
        classifier = shipped_classifier()
        classify = timed(lambda: classifier.predict(queries[3]), 2000) if classifier else []
        embedder = LocalMiniLMEmbedder()
        embedder.embed(["warm up"])
        texts = [f"what did I say about topic {i} last week?" for i in range(50)]
        embed_times = [timed(lambda t=t: embedder.embed([t]), 1)[0] for t in texts]
        results["model"] = {
            "v3_file_bytes": model_path.stat().st_size, "v3_parameters": sum(p.numel() for p in ranker.model.parameters()),
            "load_ms": summary(loads), "inference_ms": summary(inference[100:]),
            "question_type_prediction_ms": summary(classify[100:]) if classify else None,
            "minilm_query_embedding_ms": summary(embed_times[5:]),
        }

        # recall() end to end (MiniLM embedding of the question, profile, model, the served statement), from a
        # cache that starts empty.
        recaller = Recaller(database, embedder, ranker_path=model_path)
        end_to_end: list[float] = []
        asked = question_texts[:]
        random.Random(args.seed).shuffle(asked)
        for i, text in enumerate(tqdm(asked[:args.queries + 10], desc="recall() end to end")):
            started = time.perf_counter()
            recaller.recall("heavy", text, k=10, remember_query=False)
            if i >= 10:
                end_to_end.append((time.perf_counter() - started) * 1000)
        recaller.close()
        results["recall_end_to_end"] = {
            "recall": summary(end_to_end),
            "note": "Recaller.recall on the heavy user (k 10, a v3 file, the graph side), real MiniLM embedding"}
        conn.close()

        # The server's shared_buffers, side by side: every round starts the server anew in a child process
        # (a setting of the postmaster's), so this process lets go of it first.
        embedded.stop(Path(tmp) / "pgdata")
        round_input = Path(tmp) / "shared_buffers_round.json"
        round_input.write_text(json.dumps({
            "pgdata": str(Path(tmp) / "pgdata"), "database": psycopg.conninfo.conninfo_to_dict(database.url)["dbname"],
            "queries": [q.tolist() for q in queries], "texts": query_texts, "weights": list(weights.weights),
            "scale": weights.scale, "pool_size": args.pool_size, "lexical_pool_size": args.lexical_pool_size,
            "ef_search": args.ef_search, "seed": args.seed}))
        results["shared_buffers"] = compare_shared_buffers(round_input, args.shared_buffers_rounds)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    lat = results["latency_heavy_user"]
    print(json.dumps({k: results[k] for k in ("data", "plan_heavy_user", "hnsw_pool_recall_at_50", "light_user",
                                              "lexical_pool_pruning", "plan_heavy_user_vector_only",
                                              "profile_statement", "ef_search_sweep", "model")}, indent=2))
    print(f"heavy user ({args.pairs:,} pairs): plain p50 {lat['plain']['p50_ms']} ms · composite p50 "
          f"{lat['composite']['p50_ms']} ms · hybrid p50 {lat['hybrid']['p50_ms']} ms p99 {lat['hybrid']['p99_ms']} · "
          f"hybrid/composite p50 {lat['ratio_hybrid_to_composite_p50']} (statement pool: "
          f"{lat['ratio_hybrid_statement_pool_to_composite_p50']}; rows equal {lat['hybrid_rows_equal_to_statement_pool']}) · "
          f"served (with the graph side) p50 {lat['served']['p50_ms']} ms p99 {lat['served']['p99_ms']} · "
          f"recall() end to end p50 {results['recall_end_to_end']['recall']['p50_ms']} ms")
    print("shared_buffers:", json.dumps(results["shared_buffers"], indent=2))


SHARED_BUFFERS_COMPARED = {"postgres_default": "128MB", "embedded_default": "auto"}


def compare_shared_buffers(round_input: Path, rounds: int) -> dict:
    """The composite and hybrid statements under each of SHARED_BUFFERS_COMPARED, a child process a setting
    and round, the settings taking turns (the order flips every round)."""
    samples: dict[str, dict[str, list[float]]] = {name: {"composite": [], "hybrid": []}
                                                  for name in SHARED_BUFFERS_COMPARED}
    seen: dict[str, str] = {}
    names = list(SHARED_BUFFERS_COMPARED)
    for round_number in tqdm(range(rounds), desc="shared_buffers rounds"):
        for name in names if round_number % 2 == 0 else names[::-1]:
            env = os.environ | {"DREAMING_EMBEDDED_SHARED_BUFFERS": SHARED_BUFFERS_COMPARED[name]}
            done = subprocess.run([sys.executable, __file__, "--shared-buffers-round", str(round_input)], env=env,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"shared_buffers round ({name}) failed:\n{done.stderr[-4000:]}")
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            seen[name] = measured["shared_buffers"]
            for series in ("composite", "hybrid"):
                samples[name][series] += measured[series]
    out: dict = {"rounds": rounds, "note": "each round a child process per setting starts the server from the "
                 "bench's data directory, warms with one pass over the queries, then times a second pass, the "
                 "composite and hybrid statements taking turns query by query"}
    for name in names:
        out[name] = {"shared_buffers": seen[name], **{series: summary(values)
                                                      for series, values in samples[name].items()}}
    for series in ("composite", "hybrid"):
        for stat in ("p50", "p99"):
            out[f"ratio_embedded_to_postgres_default_{series}_{stat}"] = round(
                out["embedded_default"][series][f"{stat}_ms"] / out["postgres_default"][series][f"{stat}_ms"], 3)
    return out


def shared_buffers_round(round_input: Path) -> None:
    """One round of compare_shared_buffers, in its own process: start the server (with this process's
    DREAMING_EMBEDDED_SHARED_BUFFERS), time the statements, stop it, print the timings as JSON."""
    spec = json.loads(round_input.read_text())
    pgdata = Path(spec["pgdata"])
    url = embedded.embedded_url(pgdata, spec["database"], shared_buffers=DreamingSettings().embedded_shared_buffers)
    weights = SignalWeights(spec["weights"], spec["scale"], "v3 (random init)")
    queries = [np.asarray(q, np.float32) for q in spec["queries"]]
    random.seed(spec["seed"])
    try:
        with open_recall_connection(Database(url), spec["ef_search"]) as conn:
            postings = WordPostingsCache(DreamingSettings().recall_lexical_cache_mb * 2**20)
            timings: dict[str, list[float]] = {"composite": [], "hybrid": []}
            for timed_pass in (False, True):
                for q, text in zip(queries, spec["texts"], strict=True):
                    for name in random.sample(list(timings), 2):
                        started = time.perf_counter()
                        composite_rows(conn, lexical_postings=postings, user_id="heavy", kg_id="default",
                                       query_embedding=q, query_text=text, weights=weights,
                                       pool_size=spec["pool_size"],
                                       lexical_pool_size=spec["lexical_pool_size"] if name == "hybrid" else 0,
                                       row_limit=10)
                        if timed_pass:
                            timings[name].append((time.perf_counter() - started) * 1000)
            shown = conn.execute("SHOW shared_buffers").fetchone()["shared_buffers"]
    finally:
        embedded.stop(pgdata)  # the next round starts it with its own setting
    print(json.dumps({"shared_buffers": shown, **timings}))


if __name__ == "__main__":
    main()
