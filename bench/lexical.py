"""Lexical candidates on the LongMemEval oracle: Postgres full-text search against BM25, same tokens.

    .venv/bin/python bench/lexical.py [--limit-questions N] [--out PATH]

The hybrid-retrieval issue's first question: inside Postgres, does the built-in full-text ranking
(ts_rank / ts_rank_cd over an OR of the question's lexemes) rank as well as BM25? Every oracle session
goes into one user's memory (the one-user protocol, no embeddings needed), and each answerable question is
answered by every method from identical tokens — Postgres' english lexemes, which BM25 here reuses — so
only the scoring differs. Metrics as in the training issue (all relevant pairs count): Recall@10, MRR,
NDCG@10 and pool recall@50 (the share of relevant pairs among the top 50: what a candidate pool would
hold). Also what recall serves: the composite statement's lexical pool over the lexical index, with the
default pruning and with plain per-word caps (1,000 and 250 postings), to show what pruning costs in rank
quality at this size. Results: bench/results/lexical.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import (  # first: puts the project on the import path
    ORACLE,
    bench_parser,
    bench_sql,
    embedded_admin_url,
    machine,
    stopped_on_exit,
)
from tqdm import tqdm

from dreaming_dagster.embeddings import EmbeddingSpec
from dreaming_dagster.ingest.readers import longmemeval_session_records
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.retrieval.ranker import SignalWeights
from dreaming_dagster.retrieval.recaller import (
    DEFAULT_LEXICAL_PRUNING,
    LexicalPruning,
    composite_rows,
)
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES, bm25
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import Rejection, parse_pair
from dreaming_dagster.training.longmemeval import file_sha256, iter_questions
from dreaming_dagster.training.metrics import question_metrics

USER = "lexical"
K = 50
SERVED = "bm25 (lexical index, as recall serves it)"
# The pool is the exact BM25 top whatever the first round reads (migration 0017): the rules differ in speed.
SERVED_RULES = {SERVED: DEFAULT_LEXICAL_PRUNING,
                "bm25 (lexical index, every posting)": LexicalPruning(seed_postings=0),
                "bm25 (lexical index, first round 2,048 postings)": LexicalPruning(seed_postings=2048)}
LEX_ONLY = SignalWeights(tuple(float(name == "lex") for name in SIGNAL_NAMES), 1.0, "lex only")


class NoEmbedder:
    """Pairs are stored without vectors: lexical retrieval reads only their text."""

    spec = EmbeddingSpec(model="sentence-transformers/all-MiniLM-L6-v2", dimension=384)

    def embed(self, texts):
        raise AssertionError("this benchmark embeds nothing")


def bm25_ranker(conn, k1: float = 1.2, b: float = 0.75):
    docs: dict[tuple, Counter] = defaultdict(Counter)
    for row in conn.execute(bench_sql("pair_lexemes"), {"user_id": USER}):
        docs[row["content_hash"]][row["lexeme"]] += len(row["positions"] or [1])
    keys = list(docs)
    average = statistics.fmean(sum(doc.values()) for doc in docs.values())
    frequency = Counter(term for key in keys for term in docs[key])

    def rank(terms: list[str]) -> list[tuple]:
        scores = []
        for key in keys:
            # Only pairs sharing a word score above 0; skip the rest before the arithmetic.
            if docs[key].keys().isdisjoint(terms):
                continue
            score = bm25(terms, docs[key], document_frequency=frequency, pair_count=len(keys),
                         average_length=average, k1=k1, b=b)
            if score > 0:
                scores.append((score, key))
        scores.sort(key=lambda s: (-s[0], s[1]))
        return [key for _, key in scores[:K]]

    return rank


def main() -> None:
    parser = bench_parser(__doc__, "lexical")
    parser.add_argument("--limit-questions", type=int, default=None, help="only the first N oracle questions")
    args = parser.parse_args()
    dataset = ORACLE
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dd-lex-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        database = Database(embedded.fresh_database_url(embedded_admin_url(Path(tmp) / "pgdata"), "lex"))
        questions, batch = [], []
        for raw, question in iter_questions(dataset, args.limit_questions):
            questions.append(question)
            for item in longmemeval_session_records([raw]):
                if not isinstance(item, Rejection):
                    batch.append(parse_pair(item.raw, item.where))
        saved = save_validated_pairs(database, NoEmbedder(), USER, "default", batch, embed=False, index_words=True)
        load_s = time.perf_counter() - started
        answerable = [q for q in questions if q.answerable]
        with database.connect() as conn:
            conn.execute(bench_sql("build_fts_table"))
            rank_by_bm25 = bm25_ranker(conn)
            methods = {"fts ts_rank": ("ts_rank", 0), "fts ts_rank (length-normalized)": ("ts_rank", 1),
                       "fts ts_rank_cd": ("ts_rank_cd", 0), "fts ts_rank_cd (length-normalized)": ("ts_rank_cd", 1)}
            per_method: dict[str, list[dict]] = defaultdict(list)
            timings: dict[str, list[float]] = defaultdict(list)
            for q in tqdm(answerable, desc="questions"):
                rankings = {}
                for name, (ranker, normalization) in methods.items():
                    t = time.perf_counter()
                    rows = conn.execute(bench_sql("fts_top_k"), {"question": q.question, "user_id": USER,
                                                                        "ranker": ranker, "normalization": normalization,
                                                                        "k": K}).fetchall()
                    timings[name].append((time.perf_counter() - t) * 1000)
                    rankings[name] = [r["content_hash"] for r in rows]
                terms = [r["lexeme"] for r in conn.execute(bench_sql("question_lexemes"), {"question": q.question})]
                t = time.perf_counter()
                rankings["bm25 (same lexemes)"] = rank_by_bm25(terms)
                timings["bm25 (same lexemes)"].append((time.perf_counter() - t) * 1000)
                # What recall serves: the lexical pool of the composite statement (the pairs have no vectors
                # here, so the pool is the lexical side alone), ordered by the lex signal; with the default
                # first round and with others (the same exact pool, read faster or slower).
                for name, pruning in SERVED_RULES.items():
                    t = time.perf_counter()
                    rows = composite_rows(conn, user_id=USER, kg_id="default",
                                          query_embedding=np.zeros(384, np.float32), query_text=q.question,
                                          weights=LEX_ONLY, pool_size=1, lexical_pool_size=K, lexical_pruning=pruning)
                    timings[name].append((time.perf_counter() - t) * 1000)
                    rankings[name] = [r["content_hash"] for r in rows]
                for name, ranked in rankings.items():
                    per_method[name].append(question_metrics([key in q.relevant for key in ranked],
                                                             [key == q.needle for key in ranked], len(q.relevant)))
    summary = {name: {metric: round(statistics.fmean(m[metric] for m in rows), 4)
                      for metric in ("recall@10", "mrr", "ndcg@10", "pool_recall")} | {
                   "p50_ms": round(statistics.median(timings[name]), 2)}
               for name, rows in per_method.items()}
    results = {"command": "bench/lexical.py", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": machine(),
               "dataset": dataset.name, "sha256": file_sha256(dataset), "pairs": saved.inserted,
               "answerable_questions": len(answerable), "load_seconds": round(load_s, 1),
               "note": "pool_recall is the share of relevant pairs in the method's top 50; tsvectors precomputed with a "
                       "GIN index; BM25 scores in Python over the same lexemes (timings are for 5k pairs, not a "
                       "scale benchmark)",
               "methods": summary}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
