"""Recall at scale: the hybrid eight-signal query against the vector-only composite and a plain pgvector
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

Measured in one run, per query in random order on one connection (recall's settings: hnsw.ef_search 200,
no generic plans, synchronous_commit off), p50/p99 of wall time including the round trip:
- plain: ``retrieval/plain_top_k`` (top-50 by cosine through the HNSW index, nothing else);
- composite: ``retrieval/composite_ranking`` with a cosine-only pool (lexical_pool_size 0), v3-shaped
  weights, top 10 (read-only);
- hybrid: the same statement with the BM25 top-50 added to the pool, as recall() runs it by default;
- hybrid + remember: the same, also recording the last-query time.
Also: the query plans (HNSW used? exact fallback executed?), the HNSW pool's recall of the exact top-50,
a light user sharing the index (fallback path), the profile statement, model file size / load / inference,
question-type prediction and a real MiniLM query embedding. Results: bench/results/recall.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
import torch
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dreaming_dagster.demo import default_dataset_path  # noqa: E402
from dreaming_dagster.embeddings import LocalMiniLMEmbedder  # noqa: E402
from dreaming_dagster.ingest.readers import longmemeval_session_records  # noqa: E402
from dreaming_dagster.ingest.records import Rejection, parse_pair  # noqa: E402
from dreaming_dagster.retrieval.features import UserProfile, build_features  # noqa: E402
from dreaming_dagster.retrieval.profiles import read_profile, refresh_profile  # noqa: E402
from dreaming_dagster.retrieval.question_type import shipped_classifier  # noqa: E402
from dreaming_dagster.retrieval.ranker import (  # noqa: E402
    CompositeRanker,
    SignalWeights,
    load_ranker,
    predict_weights,
    save_ranker,
)
from dreaming_dagster.retrieval.recaller import (  # noqa: E402
    DEFAULT_LEXICAL_PRUNING,
    EXHAUSTIVE_LEXICAL_PRUNING,
    LexicalPruning,
    composite_parameters,
    composite_rows,
)
from dreaming_dagster.settings import DreamingSettings  # noqa: E402
from dreaming_dagster.sql import load_sql  # noqa: E402
from dreaming_dagster.storage import embedded  # noqa: E402
from dreaming_dagster.storage.database import Database  # noqa: E402
from dreaming_dagster.training.longmemeval import iter_questions  # noqa: E402

DIMENSION = 384
START = datetime(2023, 1, 1, tzinfo=UTC)
PAIR_TYPES = ["uuid", "text", "text", "text", "int4", "text", "text", "timestamptz", "int4", "text", "vector",
              "vector", "timestamptz", "timestamptz", "timestamptz"]


# Lexical pruning rules timed side by side (hybrid / composite) and scored against the exact BM25 top-K.
PRUNING_RULES = {
    "default (budget 3,000 rarest first, floor 300, rescore 2x)": DEFAULT_LEXICAL_PRUNING,
    "500 per word": LexicalPruning(budget=0, per_word=500, rescore=1),
    "1,000 per word (the previous default)": LexicalPruning(budget=0, per_word=1000, rescore=1),
    "every posting": EXHAUSTIVE_LEXICAL_PRUNING,
}


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def topic_weights(clusters: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, clusters + 1) ** 0.8  # a few topics dominate, as in real chat history
    return weights / weights.sum()


def topic_centres(rng, clusters: int) -> np.ndarray:
    """Topic centres with the geometry of real sentence embeddings rather than of random vectors: a
    component every text shares, one of 20 broad themes, and the topic's own direction (cosine between
    unrelated topics ~0.25, between topics of one theme ~0.55). Purely random centres would be mutually
    orthogonal, a worst case for HNSW that real embeddings never present. The shared component and the
    themes are fixed, so every user lives in the same space."""
    space = np.random.default_rng(1234)
    shared = unit(space.normal(size=(1, DIMENSION)))
    themes = unit(space.normal(size=(20, DIMENSION)))
    own = unit(rng.normal(size=(clusters, DIMENSION)))
    theme_of = rng.integers(0, len(themes), size=clusters)
    return unit(np.sqrt(0.25) * shared + np.sqrt(0.30) * themes[theme_of] + np.sqrt(0.45) * own)


def around(rng, centres: np.ndarray, spread: float) -> np.ndarray:
    """Unit vectors near ``centres`` (one per row). The variation lies mostly in a fixed 48-d subspace,
    plus a little isotropic noise: real sentence embeddings have a low intrinsic dimension, and isotropic
    384-d noise (the other choice) is a worst case no embedding model produces. ``spread`` 1.0 gives a
    cosine of ~0.65 to the centre."""
    basis = unit(np.random.default_rng(4321).normal(size=(48, DIMENSION)))
    low_rank = rng.normal(size=(len(centres), 48)) @ basis * (1.1 / np.sqrt(48))
    isotropic = rng.normal(size=(len(centres), DIMENSION)) * (0.4 / np.sqrt(DIMENSION))
    return unit(centres + spread * (low_rank + isotropic))


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


def load_user(conn, rng, user_id: str, pairs: int, subjects: int, clusters: int, days: int, progress,
              texts: list[tuple[str, str]] | None = None) -> np.ndarray:
    """Bulk-load one user's pairs, subjects and links; return the topic centres (for queries). With
    ``texts``, each pair's messages are one of them drawn at random."""
    centres = topic_centres(rng, clusters)
    weights = topic_weights(clusters)
    pair_topic = rng.choice(clusters, size=pairs, p=weights)
    occurred_seconds = np.sort(rng.uniform(0, days * 86400, size=pairs))
    pair_ids = [uuid.UUID(bytes=rng.bytes(16), version=4) for _ in range(pairs)]
    now = datetime.now(UTC)
    with conn.cursor() as cursor, cursor.copy(load_sql("bench/copy_pairs")) as copy:
        copy.set_types(PAIR_TYPES)
        for start in range(0, pairs, 5000):
            stop = min(start + 5000, pairs)
            vectors = around(rng, centres[pair_topic[start:stop]], 1.0)
            # The reply's vector: same topic, its own draw (two turns of one exchange).
            replies = around(rng, centres[pair_topic[start:stop]], 1.0)
            for offset, (vector, reply_vector) in enumerate(zip(vectors, replies, strict=True)):
                i = start + offset
                user_message, reply = (texts[int(rng.integers(len(texts)))] if texts
                                       else (f"synthetic user message {i}", "synthetic reply"))
                copy.write_row([pair_ids[i], user_id, "default", f"{user_id}-s{i // 20}", i % 20,
                                user_message, reply,
                                START + timedelta(seconds=float(occurred_seconds[i])), 12,
                                hashlib.md5(f"{user_id}:{i}".encode()).hexdigest(), vector, reply_vector, now, now, now])
            progress.update(stop - start)
    subject_topic = rng.choice(clusters, size=subjects, p=weights)
    subject_ids = [uuid.UUID(bytes=rng.bytes(16), version=4) for _ in range(subjects)]
    subject_vectors = around(rng, centres[subject_topic], 0.8)
    with conn.cursor() as cursor, cursor.copy(load_sql("bench/copy_subjects")) as copy:
        copy.set_types(["uuid", "text", "text", "text", "text", "text", "vector", "timestamptz", "timestamptz"])
        for j in range(subjects):
            copy.write_row([subject_ids[j], user_id, "default", f"{user_id} subject {j}", "", "other",
                            subject_vectors[j], START, now])
    by_topic: dict[int, list[int]] = {}
    for j, topic in enumerate(subject_topic):
        by_topic.setdefault(int(topic), []).append(j)
    links = 0
    with conn.cursor() as cursor, cursor.copy(load_sql("bench/copy_links")) as copy:
        copy.set_types(["uuid", "uuid", "text", "text"])
        for i in range(pairs):
            members = by_topic.get(int(pair_topic[i]))
            if not members:
                continue
            # Zipf inside a topic: its first subjects become hubs linked to many pairs.
            hub_weights = 1.0 / np.arange(1, len(members) + 1) ** 1.1
            count = min(len(members), int(rng.integers(1, 4)))
            for j in rng.choice(members, size=count, replace=False, p=hub_weights / hub_weights.sum()):
                copy.write_row([subject_ids[j], pair_ids[i], user_id, "default"])
                links += 1
    return centres


def queries_around(rng, centres: np.ndarray, n: int) -> np.ndarray:
    topics = rng.choice(len(centres), size=n, p=topic_weights(len(centres)))
    return around(rng, centres[topics], 1.1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict:
    return {"p50_ms": round(statistics.median(values), 3), "p99_ms": round(percentile(values, 99), 3),
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
    return {"indexes": sorted(indexes), "hnsw_index_used": "memory_pairs_embedding_hnsw_idx" in indexes,
            "exact_fallback_executed": exact_ran, "planning_ms": round(plan["Planning Time"], 3),
            "execution_ms": round(plan["Execution Time"], 3), "cte_ms": cte_ms}


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--subjects", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=400)
    parser.add_argument("--light-users", type=int, default=50)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool-size", type=int, default=50)
    parser.add_argument("--lexical-pool-size", type=int, default=50)
    parser.add_argument("--ef-search", type=int, default=DreamingSettings().recall_ef_search)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "recall.json")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the embedded server's data here (to inspect plans afterwards)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    random.seed(args.seed)
    results: dict = {"command": "bench/recall.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"),
                     "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                 "python": platform.python_version(), "torch": torch.__version__},
                     "data": {"heavy_user_pairs": args.pairs, "heavy_user_subjects": args.subjects,
                              "topics": args.topics, "light_users": args.light_users,
                              "light_user_pairs": 200, "dimension": DIMENSION,
                              "vectors": "synthetic, clustered (see the docstring)",
                              "texts": "heavy user: LongMemEval oracle pairs drawn at random; queries: oracle "
                                       "questions"}}
    pair_texts, question_texts = oracle_texts(default_dataset_path())

    with tempfile.TemporaryDirectory(prefix="dd-bench-") as tmp:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = str(args.keep)
        admin_url = embedded.embedded_url(Path(tmp) / "pgdata", "postgres")
        database = Database(embedded.scratch_database_url(admin_url, "bench"))
        database.ensure_schema(LocalMiniLMEmbedder.spec)
        total_pairs = args.pairs + 200 * args.light_users
        started = time.perf_counter()
        with psycopg.connect(database.url, autocommit=True, row_factory=dict_row) as conn:
            register_vector(conn)
            conn.execute(load_sql("bench/drop_vector_indexes"))
            with tqdm(total=total_pairs, desc="loading pairs", unit="pair") as progress:
                centres = load_user(conn, rng, "heavy", args.pairs, args.subjects, args.topics, 3 * 365, progress,
                                    texts=pair_texts)
                light_centres = {}
                for u in range(args.light_users):
                    light_centres[f"light{u}"] = load_user(conn, rng, f"light{u}", 200, 60, 10, 90, progress)
            load_s = time.perf_counter() - started
            started = time.perf_counter()
            conn.execute(load_sql("bench/build_settings"))
            print("building the HNSW indexes …", flush=True)
            conn.execute(load_sql("bench/create_vector_indexes"))
            index_s = time.perf_counter() - started
            conn.execute("VACUUM ANALYZE")
            sizes = conn.execute(load_sql("bench/recall_data_sizes")).fetchone()
        results["data"] |= {"heavy_user_links": sizes["links"], "hnsw_index_size": sizes["hnsw_size"],
                            "heavy_user_postings": sizes["postings"], "lexical_index_size": sizes["lexical_size"],
                            "load_seconds": round(load_s, 1), "hnsw_build_seconds": round(index_s, 1)}

        conn = psycopg.connect(database.url, autocommit=True, row_factory=dict_row, prepare_threshold=None)
        register_vector(conn)
        conn.execute(load_sql("retrieval/connection_settings"), {"ef_search": str(args.ef_search)})
        torch.manual_seed(args.seed)
        model_path = save_ranker(CompositeRanker(DIMENSION, 8), Path(tmp) / "v3.safetensors",
                                 embedding_model=LocalMiniLMEmbedder.spec.model)
        ranker = load_ranker(model_path)
        weights = predict_weights(ranker, np.zeros(DIMENSION, np.float32), np.zeros(17, np.float32))
        weights = SignalWeights(weights.weights, weights.scale, "v3 (random init)")

        queries = queries_around(rng, centres, args.queries + 10)
        query_texts = [question_texts[int(i)] for i in rng.integers(len(question_texts), size=len(queries))]
        plain_sql = load_sql("retrieval/plain_top_k")

        def plain(q):
            return conn.execute(plain_sql, {"user_id": "heavy", "kg_id": "default", "query": q,
                                            "pool_size": args.pool_size}).fetchall()

        def composite(q, text, lexical_pool_size=0, remember=False):
            return composite_rows(conn, user_id="heavy", kg_id="default", query_embedding=q, query_text=text,
                                  weights=weights, pool_size=args.pool_size, lexical_pool_size=lexical_pool_size,
                                  row_limit=10, remember_query=remember)

        series = {"plain": [], "composite": [], "hybrid": [], "hybrid_remember": []}
        calls = {"plain": lambda q, text: plain(q), "composite": composite,
                 "hybrid": lambda q, text: composite(q, text, args.lexical_pool_size),
                 "hybrid_remember": lambda q, text: composite(q, text, args.lexical_pool_size, remember=True)}
        for i, (q, text) in enumerate(tqdm(list(zip(queries, query_texts, strict=True)), desc="side-by-side queries")):
            order = list(calls)
            random.shuffle(order)
            for name in order:
                started = time.perf_counter()
                rows = calls[name](q, text)
                elapsed = (time.perf_counter() - started) * 1000
                if i >= 10:  # the first ten warm the caches
                    series[name].append(elapsed)
                assert len(rows) == (args.pool_size if name == "plain" else 10), (name, len(rows))
        latency = {name: summary(values) for name, values in series.items()}
        for numerator, denominator in (("hybrid", "composite"), ("composite", "plain"), ("hybrid", "plain"),
                                       ("hybrid_remember", "composite")):
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
            exact = lexical_pool(q, text, EXHAUSTIVE_LEXICAL_PRUNING)
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
                "budget": pruning.budget, "per_word": pruning.per_word, "rescore": pruning.rescore,
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
        conn.close()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    lat = results["latency_heavy_user"]
    print(json.dumps({k: results[k] for k in ("data", "plan_heavy_user", "hnsw_pool_recall_at_50", "light_user",
                                              "lexical_pool_pruning", "plan_heavy_user_vector_only",
                                              "profile_statement", "ef_search_sweep", "model")}, indent=2))
    print(f"heavy user ({args.pairs:,} pairs): plain p50 {lat['plain']['p50_ms']} ms · composite p50 "
          f"{lat['composite']['p50_ms']} ms · hybrid p50 {lat['hybrid']['p50_ms']} ms p99 {lat['hybrid']['p99_ms']} · "
          f"hybrid/composite p50 {lat['ratio_hybrid_to_composite_p50']}")


if __name__ == "__main__":
    main()
