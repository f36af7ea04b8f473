"""How much of a memory pair the embedder reads, and what the unread part costs cosine retrieval.

    .venv/bin/python bench/encoder_coverage.py [--limit-questions N] [--out PATH]

all-MiniLM-L6-v2 reads at most 256 word pieces (254 of text between [CLS] and [SEP]); before migration 0009
a pair was embedded whole, from "user: … assistant: …", and LongMemEval's assistant turns are long. Part 1
counts word pieces (no model run): per pair, the share of its pieces inside the window, over every
distinct pair of the oracle and over the answer-bearing ones. Part 2 embeds every pair three ways — the
whole pair, the user turn alone and the assistant turn alone — and ranks the whole one-user memory by
cosine for each answerable question with each scheme, the best-of schemes taking a pair's highest cosine
over its vectors. "turns apart" is what migration 0009 stores (``pair_embedding_texts``: the user turn, or
the assistant turn when the user's is empty, and the assistant turn when both have text).
Metrics as in the training issue (all relevant pairs count). Vectors are cached under
.dreaming/cache/ (keyed by the texts' hash), so a re-run only re-ranks. Results:
bench/results/encoder_coverage.json.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import ORACLE, ROOT, bench_parser, machine  # first: puts the project on the import path
from tqdm import tqdm

from dreaming_dagster.embeddings import LocalMiniLMEmbedder, _load_minilm
from dreaming_dagster.ingest.readers import longmemeval_session_records
from dreaming_dagster.storage.records import Rejection, parse_pair
from dreaming_dagster.training.longmemeval import file_sha256, iter_questions
from dreaming_dagster.training.metrics import question_metrics

POOL = 50
CACHE = ROOT / ".dreaming" / "cache"


def cached_embeddings(name: str, texts: list[str], embedder: LocalMiniLMEmbedder, cache: Path = CACHE) -> np.ndarray:
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = cache / f"encoder_coverage_{name}_{digest}.npy"
    if path.is_file():
        return np.load(path)
    vectors = np.concatenate([embedder.embed(texts[i:i + 256])
                              for i in tqdm(range(0, len(texts), 256), desc=f"embedding {name}", unit="batch")])
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def main() -> None:
    parser = bench_parser(__doc__, "encoder_coverage")
    parser.add_argument("--limit-questions", type=int, default=None, help="only the first N oracle questions")
    parser.add_argument("--cache-dir", type=Path, default=CACHE)
    args = parser.parse_args()
    dataset = ORACLE
    started = time.perf_counter()
    pairs: dict[str, tuple[str, str]] = {}  # content hash → (user, assistant), in first-seen order
    questions = []
    for raw, question in iter_questions(dataset, args.limit_questions):
        questions.append(question)
        for item in longmemeval_session_records([raw]):
            if not isinstance(item, Rejection):
                pair = parse_pair(item.raw, item.where)
                pairs.setdefault(pair.content_hash, (pair.user_message, pair.assistant_message))
    hashes = list(pairs)
    answerable = [q for q in questions if q.answerable]
    relevant_hashes = {h for q in answerable for h in q.relevant}

    tokenizer = _load_minilm().tokenizer
    window = _load_minilm().max_seq_length - 2  # [CLS] and [SEP] take two of the 256 positions
    views = {
        "pair": [f"user: {u}\nassistant: {a}" for u, a in pairs.values()],
        "user": [f"user: {u}" for u, _ in pairs.values()],
        "assistant": [f"assistant: {a}" for _, a in pairs.values()],
    }
    pieces = {name: np.array([len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]])
              for name, texts in views.items()}

    def coverage(mask: np.ndarray) -> dict:
        total = pieces["pair"][mask]
        read_pair = np.minimum(total, window)
        read_split = np.minimum(pieces["user"][mask], window) + np.minimum(pieces["assistant"][mask], window)
        return {"pairs": int(mask.sum()), "median_pieces": float(np.median(total)),
                "p90_pieces": float(np.percentile(total, 90)),
                "share_over_window": round(float((total > window).mean()), 4),
                "median_share_read": round(float(np.median(read_pair / total)), 4),
                "pieces_read": round(float(read_pair.sum() / total.sum()), 4),
                "pieces_read_user_and_assistant_apart": round(float(np.minimum(read_split, total).sum()
                                                                    / total.sum()), 4),
                "user_turn_over_window": round(float((pieces["user"][mask] > window).mean()), 4)}

    is_relevant = np.array([h in relevant_hashes for h in hashes])
    coverage_summary = {"all pairs": coverage(np.ones(len(hashes), bool)),
                        "answer-bearing pairs": coverage(is_relevant)}

    embedder = LocalMiniLMEmbedder()
    embeddings = {name: cached_embeddings(name, texts, embedder, args.cache_dir) for name, texts in views.items()}
    query_vectors = embedder.embed([q.question for q in answerable])
    # What migration 0009 stores, from the same vectors: the user turn (the assistant turn when the user's is
    # empty), and the assistant turn when both have text (no reply vector otherwise).
    has_user = np.array([bool(u.strip()) for u, _ in pairs.values()])
    has_both = has_user & np.array([bool(a.strip()) for _, a in pairs.values()])
    embeddings["first"] = np.where(has_user[:, None], embeddings["user"], embeddings["assistant"])
    embeddings["reply"] = embeddings["assistant"]
    present = {"reply": has_both}
    schemes = {"whole pair (before 0009)": ["pair"], "user turn only": ["user"],
               "assistant turn only": ["assistant"], "turns apart, best of the two (since 0009)": ["first", "reply"],
               "best of whole pair, assistant turn": ["pair", "assistant"],
               "best of whole pair and turns apart": ["pair", "first", "reply"]}
    index = {h: i for i, h in enumerate(hashes)}
    per_scheme: dict[str, list[dict]] = {name: [] for name in schemes}
    for question, query in zip(answerable, query_vectors, strict=True):
        relevant = {index[h] for h in question.relevant if h in index}
        needle = index.get(question.needle)
        for name, parts in schemes.items():
            scores = np.max(np.stack([np.where(present.get(part, True), embeddings[part] @ query, -2.0)
                                      for part in parts]), axis=0)
            top = np.argsort(-scores, kind="stable")[:POOL]
            per_scheme[name].append(question_metrics([int(i) in relevant for i in top],
                                                     [int(i) == needle for i in top], len(question.relevant)))
    ranking = {name: {metric: round(statistics.fmean(m[metric] for m in rows), 4)
                      for metric in ("recall@10", "ndcg@10", "mrr", "needle_hit", "pool_recall")}
               for name, rows in per_scheme.items()}
    results = {"command": "bench/encoder_coverage.py", "date": datetime.now(UTC).isoformat(timespec="seconds"),
               "machine": machine(),
               "dataset": dataset.name, "sha256": file_sha256(dataset), "distinct_pairs": len(hashes),
               "answerable_questions": len(answerable), "window_pieces": window,
               "coverage": coverage_summary, "cosine_ranking": ranking,
               "note": "pool_recall = share of relevant pairs in the top 50; every question ranks the whole one-user "
                       "memory (no as_of); 'best of' takes a pair's highest cosine over its views",
               "seconds": round(time.perf_counter() - started, 1)}
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({"coverage": coverage_summary, "cosine_ranking": ranking}, indent=1))


if __name__ == "__main__":
    main()
