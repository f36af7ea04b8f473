"""The local embedder's length batches against one padded call, side by side, on LongMemEval pairs.

    .venv/bin/python bench/embedding_batches.py [--pairs 40] [--bulk-pairs 192] [--runs 3]

A MiniLM call computes every text of a batch at the length of its longest. A pair's two turns (its
question, ~60 word pieces, and its reply, usually the 256-piece window) used to go through one
``SentenceTransformer.encode`` call, batch size 64: the question padded to 256. ``LocalMiniLMEmbedder``
now groups texts by length (``embeddings.padding_bounded_batches``). Measured in one run, the two ways
taking turns on the same texts:

- one pair at a time (what a save with inline embedding, and so the fast path, sends): p50 per pair;
- a bulk batch of --bulk-pairs pairs (a backlog's embedding stage): seconds, median of --runs;
- names (subject names, short texts: one call either way): p50 per call of three names;
- the largest difference between the two ways' vectors (padding under an attention mask changes nothing
  but rounding).
Results: bench/results/embedding_batches.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import ORACLE, ROOT, machine  # first: puts the project on the import path

from dreaming_dagster.embeddings import LocalMiniLMEmbedder, _load_minilm, pair_embedding_texts
from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
)


def one_padded_call(texts: list[str], batch_size: int = 64) -> np.ndarray:
    """The embedder before length batches: every text in one encode call (sentence-transformers sorts by
    characters and cuts batches of batch_size)."""
    return _load_minilm().encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40, help="pairs embedded one at a time")
    parser.add_argument("--bulk-pairs", type=int, default=192)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "embedding_batches.json")
    args = parser.parse_args()

    records = [item.raw for item in longmemeval_session_records(iter_longmemeval_questions(ORACLE))
               if isinstance(item, LineRecord)]
    assert len(records) >= args.pairs + args.bulk_pairs, "not enough oracle pairs"
    pair_texts = [[t for t in pair_embedding_texts(r["user_message"], r["assistant_message"]) if t]
                  for r in records[:args.pairs + args.bulk_pairs]]
    single, bulk = pair_texts[:args.pairs], [t for texts in pair_texts[args.pairs:] for t in texts]
    embedder = LocalMiniLMEmbedder(batch_size=64)
    embedder.embed(["warm-up"])
    one_padded_call(["warm-up"])
    model = _load_minilm()
    lengths = [[len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
               for texts in single]
    assert all(len(texts) == 2 for texts in single), "every pair of the sample has both turns"

    ways = {"padded": one_padded_call, "length_batches": embedder.embed}
    per_pair: dict[str, list[float]] = {name: [] for name in ways}
    largest_difference = 0.0
    for n, texts in enumerate(single):
        vectors = {}
        for name in (list(ways) if n % 2 == 0 else list(ways)[::-1]):  # taking turns
            started = time.perf_counter()
            vectors[name] = ways[name](texts)
            per_pair[name].append(time.perf_counter() - started)
        largest_difference = max(largest_difference, float(np.abs(vectors["padded"] - vectors["length_batches"]).max()))

    assert largest_difference < 1e-4, f"the two ways' vectors differ by {largest_difference}"

    bulk_s: dict[str, list[float]] = {name: [] for name in ways}
    for run in range(args.runs):
        for name in (list(ways) if run % 2 == 0 else list(ways)[::-1]):
            started = time.perf_counter()
            vectors = ways[name](bulk)
            bulk_s[name].append(time.perf_counter() - started)
            assert vectors.shape == (len(bulk), 384)

    names = ["Rachel", "Lisbon trip", "my sister's new apartment"]
    name_calls: dict[str, list[float]] = {name: [] for name in ways}
    for n in range(20):
        for name in (list(ways) if n % 2 == 0 else list(ways)[::-1]):
            started = time.perf_counter()
            ways[name](names)
            name_calls[name].append(time.perf_counter() - started)

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 1)

    results = {
        "benchmark": "embedding_batches",
        "command": "make bench-embedding-batches  (.venv/bin/python bench/embedding_batches.py)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "model": str(LocalMiniLMEmbedder.spec),
        "one_pair_at_a_time": {
            "pairs": len(single),
            "word_pieces_median": {"question": statistics.median(q for q, _ in lengths),
                                   "reply": statistics.median(r for _, r in lengths)},
            "padded_p50_ms": ms(per_pair["padded"]), "length_batches_p50_ms": ms(per_pair["length_batches"]),
            "ratio": round(statistics.median(per_pair["length_batches"]) / statistics.median(per_pair["padded"]), 2),
        },
        "bulk": {
            "pairs": args.bulk_pairs, "texts": len(bulk),
            "padded_median_s": round(statistics.median(bulk_s["padded"]), 2),
            "length_batches_median_s": round(statistics.median(bulk_s["length_batches"]), 2),
            "ratio": round(statistics.median(bulk_s["length_batches"]) / statistics.median(bulk_s["padded"]), 2),
        },
        "three_names": {"padded_p50_ms": ms(name_calls["padded"]),
                        "length_batches_p50_ms": ms(name_calls["length_batches"])},
        "largest_vector_difference": largest_difference,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
