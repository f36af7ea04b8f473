"""The local embedder's ways of running all-MiniLM-L6-v2, side by side, on LongMemEval pairs.

    .venv/bin/python bench/embedding_batches.py [--pairs 40] [--bulk-pairs 192] [--runs 3]

A MiniLM call computes every text of a batch at the length of its longest. A pair's two turns (its
question, ~60 word pieces, and its reply, usually the 256-piece window) used to go through one
``SentenceTransformer.encode`` call, batch size 64: the question padded to 256. ``LocalMiniLMEmbedder``
groups texts by length (``embeddings.padding_bounded_batches``), and runs the model in ONNX Runtime by
default (``dreaming_dagster/onnx_encoder.py``; DREAMING_EMBEDDING_LOCAL_RUNTIME=torch for PyTorch). Four
ways, measured in one run taking turns on the same texts (torch's threads: the machine's cores):

- padded: one ``encode`` call of sentence-transformers on PyTorch (the embedder before length batches);
- length batches, torch: ``LocalMiniLMEmbedder(runtime="torch")``;
- length batches, onnx unfused: the embedder on the simple export (PyTorch's default attention as traced, no
  fusion step: the bench replaces the export's attention choice and ``fuse_transformer``), in a temporary
  cache directory;
- length batches, onnx: ``LocalMiniLMEmbedder()``, the default (attention, layer norms and GELU fused).

Per way: one pair at a time (what a save with inline embedding, and so the fast path, sends), p50 per
pair; a bulk batch of --bulk-pairs pairs (a backlog's embedding stage), seconds, median of --runs; three
subject names (short texts: one call either way), p50; one recall query, p50; and the largest difference
between any way's vectors and the padded call's (rounding only). Results: bench/results/embedding_batches.json.
"""

from __future__ import annotations

import atexit
import json
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import bench_parser, machine, oracle_records  # first: puts the project on the import path
from transformers import AutoModel

from dreaming_dagster import onnx_encoder
from dreaming_dagster.embeddings import LocalMiniLMEmbedder, _load_minilm, _minilm_dir, pair_embedding_texts


def one_padded_call(texts: list[str], batch_size: int = 64) -> np.ndarray:
    """The embedder before length batches: every text in one encode call (sentence-transformers sorts by
    characters and cuts batches of batch_size)."""
    return _load_minilm().encode(texts, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)


def main() -> None:
    parser = bench_parser(__doc__, "embedding_batches")
    parser.add_argument("--pairs", type=int, default=40, help="pairs embedded one at a time")
    parser.add_argument("--bulk-pairs", type=int, default=192)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    records = oracle_records()
    assert len(records) >= args.pairs + args.bulk_pairs, "not enough oracle pairs"
    pair_texts = [[t for t in pair_embedding_texts(r["user_message"], r["assistant_message"]) if t]
                  for r in records[:args.pairs + args.bulk_pairs]]
    single, bulk = pair_texts[:args.pairs], [t for texts in pair_texts[args.pairs:] for t in texts]
    # The simple export where the embedder looks for its export, in a temporary cache (the same embedder
    # code): PyTorch's default attention as traced, no fusion step.
    unfused_cache = Path(tempfile.mkdtemp(prefix="unfused-onnx-"))
    atexit.register(shutil.rmtree, unfused_cache, True)
    fuse, load_model = onnx_encoder.fuse_transformer, AutoModel.from_pretrained
    onnx_encoder.fuse_transformer = lambda path, **sizes: {}
    AutoModel.from_pretrained = lambda path, attn_implementation=None, **kwargs: load_model(path, **kwargs)
    try:
        onnx_encoder.export_encoder(_minilm_dir(), onnx_encoder.encoder_file(_minilm_dir(), unfused_cache))
    finally:
        onnx_encoder.fuse_transformer, AutoModel.from_pretrained = fuse, load_model
    ways = {"padded": one_padded_call, "length_batches_torch": LocalMiniLMEmbedder(batch_size=64, runtime="torch").embed,
            "length_batches_onnx_unfused": LocalMiniLMEmbedder(batch_size=64, model_cache_dir=unfused_cache).embed,
            "length_batches_onnx": LocalMiniLMEmbedder(batch_size=64).embed}
    for way in ways.values():
        way(["warm-up"])
    model = _load_minilm()
    lengths = [[len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
               for texts in single]
    assert all(len(texts) == 2 for texts in single), "every pair of the sample has both turns"

    def taking_turns(n: int) -> list[str]:
        order = list(ways)
        return order[n % len(order):] + order[:n % len(order)]

    per_pair: dict[str, list[float]] = {name: [] for name in ways}
    largest_difference = 0.0
    for n, texts in enumerate(single):
        vectors = {}
        for name in taking_turns(n):
            started = time.perf_counter()
            vectors[name] = ways[name](texts)
            per_pair[name].append(time.perf_counter() - started)
        largest_difference = max(largest_difference, *(float(np.abs(vectors["padded"] - v).max()) for v in vectors.values()))
    assert largest_difference < 1e-4, f"the ways' vectors differ by {largest_difference}"

    bulk_s: dict[str, list[float]] = {name: [] for name in ways}
    for run in range(args.runs):
        for name in taking_turns(run):
            started = time.perf_counter()
            vectors = ways[name](bulk)
            bulk_s[name].append(time.perf_counter() - started)
            assert vectors.shape == (len(bulk), 384)

    short_texts = {"three_names": ["Rachel", "Lisbon trip", "my sister's new apartment"],
                   "one_query": ["what did I say about the hotel in Lisbon?"]}
    short_calls = {kind: {name: [] for name in ways} for kind in short_texts}
    for n in range(20):
        for kind, texts in short_texts.items():
            for name in taking_turns(n):
                started = time.perf_counter()
                ways[name](texts)
                short_calls[kind][name].append(time.perf_counter() - started)

    def ms(values: list[float]) -> float:
        return round(statistics.median(values) * 1000, 1)

    def ratios(medians: dict[str, float]) -> dict[str, float]:
        return {"length_batches_torch_to_padded": round(medians["length_batches_torch"] / medians["padded"], 2),
                "onnx_to_torch": round(medians["length_batches_onnx"] / medians["length_batches_torch"], 2),
                "onnx_fused_to_unfused": round(medians["length_batches_onnx"] / medians["length_batches_onnx_unfused"], 2)}

    pair_p50 = {name: ms(per_pair[name]) for name in ways}
    bulk_median = {name: round(statistics.median(bulk_s[name]), 2) for name in ways}
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
            "p50_ms": pair_p50, **ratios(pair_p50),
        },
        "bulk": {"pairs": args.bulk_pairs, "texts": len(bulk), "median_s": bulk_median, **ratios(bulk_median)},
        **{kind: {"p50_ms": {name: ms(calls[name]) for name in ways},
                  **ratios({name: statistics.median(calls[name]) for name in ways})}
           for kind, calls in short_calls.items()},
        "largest_vector_difference": largest_difference,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
