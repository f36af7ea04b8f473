"""int8 dynamic quantization of the ONNX encoder: its speed beside today's fp32 graph, and what it does to
cosine-only retrieval on the ranker's dev splits.

    .venv/bin/python bench/embedding_quantization.py [--pairs 200] [--runs 3] [--dev-questions 0]

The fp32 graph is the embedder's own (``onnx_encoder.load_onnx_encoder``: exported and fused). It is
quantized with ONNX Runtime's ``quantize_dynamic`` (int8 weights, per output channel: per-tensor scales
move a text's vector to a cosine of ~0.96 with its fp32 one), into a temporary file. Nothing in the product
uses the int8 graph.

- speed: the same texts through both graphs, taking turns run by run (--runs; median): --pairs oracle pairs'
  two turns (what the embedding stage sends) and the key sentences of their user turns (what the keying
  stage sends), length batches as the embedder makes them; and each text's cosine between the two vectors;
- quality: cosine-only NDCG@10 on the dev splits the ranker's settings are chosen on (LongMemEval oracle
  dev; LoCoMo dev, conv-30), each question's pairs ranked by the better cosine of their two turns, as the
  vector side does: every vector fp32 (today), every vector int8 (a new database), and fp32 pairs asked by
  int8 questions (an existing database whose queries switch). --dev-questions N keeps N questions of each.
  The `_S` haystacks' dev questions (~500 pairs each) are not embedded here.
Results: bench/results/embedding_quantization.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import (  # first: puts the project on the import path
    ORACLE,
    ROOT,
    bench_parser,
    machine,
    oracle_records,
)

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import (
    ONNX_BATCH_TOKENS,
    _minilm_dir,
    padding_bounded_batches,
    pair_embedding_texts,
)
from dreaming_dagster.extraction.keys import pair_keys
from dreaming_dagster.onnx_encoder import OnnxSentenceEncoder, load_onnx_encoder
from dreaming_dagster.training import locomo
from dreaming_dagster.training.metrics import ndcg_at_k
from dreaming_dagster.training.split import ranker_split

LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_train5.json"
GRAPHS = ("fp32", "int8")
# (pairs' vectors, questions' vectors)
QUALITY_WAYS = {"fp32": ("fp32", "fp32"), "int8": ("int8", "int8"), "fp32_pairs_int8_questions": ("fp32", "int8")}


def quantized(fp32: Path, target: Path) -> Path:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The fused graph's operators (Attention, SkipLayerNormalization) are ONNX Runtime's own domain, whose
    # outputs shape inference cannot type: they are fp32.
    quantize_dynamic(str(fp32), str(target), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return target


class Vectors:
    """Each graph's vectors of texts, each text embedded once per graph."""

    def __init__(self, encoders: dict[str, OnnxSentenceEncoder]):
        self.encoders, self.known = encoders, {name: {} for name in encoders}

    def embed(self, graph: str, texts: list[str]) -> np.ndarray:
        encoder, known = self.encoders[graph], self.known[graph]
        new = [text for text in dict.fromkeys(texts) if text not in known]
        if new:
            for batch in padding_bounded_batches(encoder.token_counts(new), 64, max_tokens=ONNX_BATCH_TOKENS):
                for index, vector in zip(batch, encoder.encode([new[i] for i in batch]), strict=True):
                    known[new[index]] = vector
        return np.array([known[text] for text in texts])


def timed(encoder: OnnxSentenceEncoder, texts: list[str]) -> tuple[float, np.ndarray]:
    vectors = np.zeros((len(texts), 384), dtype=np.float32)
    started = time.perf_counter()
    for batch in padding_bounded_batches(encoder.token_counts(texts), 64, max_tokens=ONNX_BATCH_TOKENS):
        vectors[batch] = encoder.encode([texts[i] for i in batch])
    return time.perf_counter() - started, vectors


def speed(encoders: dict[str, OnnxSentenceEncoder], pairs: int, runs: int) -> dict:
    records = oracle_records(limit=pairs)
    sets = {"pair_turns": [text for r in records for text in pair_embedding_texts(r["user_message"], r["assistant_message"])
                           if text is not None],
            "key_sentences": [key.text for r in records for key in pair_keys(r["user_message"])]}
    out = {}
    for name, texts in sets.items():
        seconds, vectors = {graph: [] for graph in GRAPHS}, {}
        for run in range(runs):  # taking turns, the first graph alternating
            for graph in (GRAPHS if run % 2 == 0 else GRAPHS[::-1]):
                elapsed, vectors[graph] = timed(encoders[graph], texts)
                seconds[graph].append(elapsed)
        median = {graph: statistics.median(seconds[graph]) for graph in GRAPHS}
        cosines = (vectors["fp32"] * vectors["int8"]).sum(axis=1)
        out[name] = {"texts": len(texts), "median_s": {g: round(s, 3) for g, s in median.items()},
                     "int8_speedup": round(median["fp32"] / median["int8"], 2),
                     "cosine_to_fp32": {"min": round(float(cosines.min()), 4),
                                        "p50": round(float(np.median(cosines)), 4)}}
    return out


def question_pairs(question: dict) -> list[tuple[str, str, bool]]:
    """(user turn, reply, relevant) of each exchange of the question's haystack."""
    pairs = []
    for turns in question["haystack_sessions"]:
        for first, second in zip(turns[0::2], turns[1::2], strict=False):
            pairs.append((first["content"], second["content"], bool(first.get("has_answer") or second.get("has_answer"))))
    return pairs


def cosine_ndcg(vectors: Vectors, questions: list[dict], pair_graph: str, question_graph: str) -> float:
    scores = []
    for question in questions:
        pairs = question_pairs(question)
        relevant = [flag for _, _, flag in pairs]
        texts = [pair_embedding_texts(user, reply) for user, reply, _ in pairs]
        users = vectors.embed(pair_graph, [first for first, _ in texts])
        replies = vectors.embed(pair_graph, [second or first for first, second in texts])
        asked = vectors.embed(question_graph, [question["question"]])[0]
        order = np.argsort(-np.maximum(users @ asked, replies @ asked), kind="stable")
        scores.append(ndcg_at_k([relevant[i] for i in order], sum(relevant), 10))
    return float(np.mean(scores))


def dev_questions(limit: int) -> dict[str, list[dict]]:
    oracle = [q for q in json.loads(ORACLE.read_text()) if not q["question_id"].endswith("_abs")]
    split = ranker_split([q["question_id"] for q in oracle], [q["question_type"] for q in oracle])
    dev = set(split.dev)
    people = [q for record in json.loads(LOCOMO.read_text()) for q in locomo.as_longmemeval(record)
              if locomo.part_of(q["question_id"]) == "dev"]
    chosen = {"longmemeval_oracle_dev": [q for q in oracle if q["question_id"] in dev], "locomo_dev": people}
    return {name: [q for q in questions if any(flag for *_, flag in question_pairs(q))][:limit or None]
            for name, questions in chosen.items()}


def main() -> None:
    parser = bench_parser(__doc__, "embedding_quantization")
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dev-questions", type=int, default=0, help="questions of each dev split (0: all)")
    args = parser.parse_args()
    model_dir = _minilm_dir()
    fp32 = load_onnx_encoder(model_dir, Path(DreamingSettings().resolved_model_cache_dir), 2).onnx_file
    with tempfile.TemporaryDirectory(prefix="dd-int8-") as folder:
        int8 = quantized(fp32, Path(folder) / "encoder-int8.onnx")
        encoders = {"fp32": OnnxSentenceEncoder(model_dir, fp32, 2), "int8": OnnxSentenceEncoder(model_dir, int8, 2)}
        results = {"benchmark": "embedding_quantization",
                   "command": "make bench-embedding-quantization  (.venv/bin/python bench/embedding_quantization.py)",
                   "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                   "quantization": "onnxruntime quantize_dynamic, int8 weights per channel, of the fused fp32 graph",
                   "graph_mb": {"fp32": round(fp32.stat().st_size / 1e6, 1), "int8": round(int8.stat().st_size / 1e6, 1)},
                   "speed": speed(encoders, args.pairs, args.runs)}
        vectors = Vectors(encoders)
        quality = {}
        for split_name, questions in dev_questions(args.dev_questions).items():
            ndcg = {way: round(cosine_ndcg(vectors, questions, *graphs), 4) for way, graphs in QUALITY_WAYS.items()}
            quality[split_name] = {"questions": len(questions), "cosine_ndcg_at_10": ndcg,
                                   "int8_minus_fp32": round(ndcg["int8"] - ndcg["fp32"], 4),
                                   "mixed_minus_fp32": round(ndcg["fp32_pairs_int8_questions"] - ndcg["fp32"], 4)}
        results["dev_quality"] = quality
        results["within_0_005_on_every_dev_split"] = all(abs(q["int8_minus_fp32"]) <= 0.005 for q in quality.values())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
