"""Statement keys' vectors pooled from their pair's own user-turn pass, beside today's (each key sentence
embedded on its own): what each costs, how close the two are, and what each does to cosine retrieval on the
ranker's dev splits.

    .venv/bin/python bench/key_vectors.py [--pairs 300] [--runs 3] [--dev-questions 0]

A statement key (extraction/keys.py) is a sentence of the user's turn. The embedding stage already runs the
encoder over that turn; a key's vector can be the mean of the turn's token states over the sentence's word
pieces, normalised ("late chunking": each token already read the whole turn), instead of a second encoder
pass over the sentence alone. A sentence past the turn's 256-piece window has no token states: it is
embedded alone, as today (counted as ``outside_window``). Event keys (dated sentences) are not measured here:
they need the dating stage, which runs after the embedding stage.

- speed, on --pairs oracle pairs, the ways taking turns run by run (--runs; median), ms a pair: the pair's two
  turns as the embedding stage encodes them (``turns``); the same pass also finding the statement keys and
  pooling their vectors (``turns_pooling_keys``); finding the statement sentences alone (``finding``,
  spaCy's matcher); the key sentences encoded on their own (``key_sentences``, today's keying stage) and
  through the int8 graph (``key_sentences_int8``);
- closeness: each key's cosine between its pooled and its own vector;
- quality: cosine-only NDCG@10 on the dev splits (LongMemEval oracle dev; LoCoMo dev, conv-30), a pair
  scored by the best cosine of its two turns and its statement keys, as recall draws candidates by any of
  them: without keys, with today's key vectors, with pooled ones, with the keys alone through the int8 graph
  (bench/embedding_quantization.py). --dev-questions N keeps N questions of each. The `_S` haystacks' dev
  questions (~500 pairs each) are not embedded here.
Results: bench/results/key_vectors.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import (  # first: puts the project on the import path
    bench_parser,
    machine,
    oracle_records,
)
from embedding_quantization import dev_questions, quantized, question_pairs, timed

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import (
    ONNX_BATCH_TOKENS,
    _minilm_dir,
    padding_bounded_batches,
    pair_embedding_texts,
)
from dreaming_dagster.extraction.keys import statement_sentences
from dreaming_dagster.onnx_encoder import _INPUTS, OnnxSentenceEncoder, load_onnx_encoder, mean_pooled
from dreaming_dagster.training.metrics import ndcg_at_k

Span = tuple[int, int]


def encode_pooling_spans(encoder: OnnxSentenceEncoder, texts: Sequence[str],
                         spans: Sequence[Sequence[Span]]) -> tuple[np.ndarray, list[list[np.ndarray | None]]]:
    """One encoder call: each text's vector, and for each of its character spans the normalised mean of the
    token states inside it (None when the span lies past the window)."""
    batch = encoder.tokenizer(list(texts), padding=True, truncation=True, max_length=encoder.max_seq_length,
                              return_tensors="np", return_offsets_mapping=True)
    feed = {name: np.asarray(batch[name], dtype=np.int64) for name in _INPUTS}
    hidden = encoder.session.run(None, feed)[0]
    offsets = batch["offset_mapping"]
    pooled: list[list[np.ndarray | None]] = []
    for row, text_spans in enumerate(spans):
        starts, ends = offsets[row, :, 0], offsets[row, :, 1]
        vectors: list[np.ndarray | None] = []
        for first, end in text_spans:
            inside = (ends > starts) & (starts >= first) & (ends <= end)  # special and padding tokens are (0, 0)
            if not inside.any():
                vectors.append(None)
                continue
            mean = hidden[row, inside].mean(axis=0)
            vectors.append((mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32))
        pooled.append(vectors)
    return mean_pooled(hidden, feed["attention_mask"]), pooled


class PairEncoder:
    """Pairs' turn vectors and statement-key vectors, both ways, each pair encoded once."""

    def __init__(self, encoder: OnnxSentenceEncoder, int8: OnnxSentenceEncoder):
        self.encoder, self.int8, self.known = encoder, int8, {}

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[dict]:
        new = [pair for pair in dict.fromkeys(pairs) if pair not in self.known]
        if new:
            for pair, found in zip(new, pass_with_keys(self.encoder, new), strict=True):
                found["int8"] = list(encode_alone(self.int8, [text for *_, text in found["keys"]]))
                self.known[pair] = found
        return [self.known[pair] for pair in pairs]


def pass_with_keys(encoder: OnnxSentenceEncoder, pairs: Sequence[tuple[str, str]], *,
                   own_key_vectors: bool = True) -> list[dict]:
    """The embedding stage's pass over ``pairs`` pooling the statement keys' vectors from the user turns;
    with ``own_key_vectors`` also each key sentence encoded on its own (today's keying stage)."""
    texts, spans, owner = [], [], []
    found = [{"keys": statement_sentences(user)} for user, _ in pairs]
    for index, ((user, reply), pair) in enumerate(zip(pairs, found, strict=True)):
        first, second = pair_embedding_texts(user, reply)
        texts.append(first), spans.append([(start, end) for start, end, _ in pair["keys"]]), owner.append((index, "user"))
        if second is not None:
            texts.append(second), spans.append([]), owner.append((index, "reply"))
    for batch in padding_bounded_batches(encoder.token_counts(texts), 64, max_tokens=ONNX_BATCH_TOKENS):
        vectors, pooled = encode_pooling_spans(encoder, [texts[i] for i in batch], [spans[i] for i in batch])
        for position, index in enumerate(batch):
            pair_index, turn = owner[index]
            found[pair_index][turn] = vectors[position]
            if turn == "user":
                found[pair_index]["pooled"] = pooled[position]
    for pair in found:
        pair.setdefault("reply", pair["user"])
        pair["outside_window"] = sum(vector is None for vector in pair["pooled"])
    # Today's vectors of every key (own_key_vectors), or of the keys past the window only.
    wanted = [(pair, k) for pair in found for k, vector in enumerate(pair["pooled"])
              if own_key_vectors or vector is None]
    own = encode_alone(encoder, [pair["keys"][k][2] for pair, k in wanted])
    for pair in found:
        pair["own"] = [None] * len(pair["keys"])
    for (pair, k), vector in zip(wanted, own, strict=True):
        pair["own"][k] = vector
        if pair["pooled"][k] is None:
            pair["pooled"][k] = vector
    return found


def encode_alone(encoder: OnnxSentenceEncoder, texts: Sequence[str]) -> np.ndarray:
    """Each text's vector, in length batches as the embedder makes them."""
    return timed(encoder, list(texts))[1] if texts else np.zeros((0, 384), dtype=np.float32)


def turns_only(encoder: OnnxSentenceEncoder, pairs: Sequence[tuple[str, str]]) -> None:
    texts = [text for user, reply in pairs for text in pair_embedding_texts(user, reply) if text is not None]
    encode_alone(encoder, texts)


WAYS: dict = {
    "turns": lambda encoder, int8, pairs, keys: turns_only(encoder, pairs),
    "turns_pooling_keys": lambda encoder, int8, pairs, keys: pass_with_keys(encoder, pairs, own_key_vectors=False),
    "finding": lambda encoder, int8, pairs, keys: [statement_sentences(user) for user, _ in pairs],
    "key_sentences": lambda encoder, int8, pairs, keys: encode_alone(encoder, keys),
    "key_sentences_int8": lambda encoder, int8, pairs, keys: encode_alone(int8, keys),
}


def speed(encoder: OnnxSentenceEncoder, int8: OnnxSentenceEncoder, count: int, runs: int) -> dict:
    pairs = [(r["user_message"], r["assistant_message"]) for r in oracle_records(limit=count)]
    keys = [text for user, _ in pairs for _, _, text in statement_sentences(user)]
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    names = list(WAYS)
    for run in range(runs):  # taking turns, the order reversed every other run
        for way in (names if run % 2 == 0 else names[::-1]):
            started = time.perf_counter()
            WAYS[way](encoder, int8, pairs, keys)
            seconds[way].append(time.perf_counter() - started)
    ms = {way: round(1000 * statistics.median(values) / len(pairs), 3) for way, values in seconds.items()}
    today = ms["finding"] + ms["key_sentences"]
    pooled = ms["turns_pooling_keys"] - ms["turns"]  # that pass finds the keys itself
    int8 = ms["finding"] + ms["key_sentences_int8"]
    return {"pairs": len(pairs), "statement_keys": len(keys), "ms_per_pair": ms,
            "keys_ms_per_pair": {"today": round(today, 3), "pooled": round(pooled, 3), "int8": round(int8, 3)},
            "pooled_keys_cost_vs_today": round(pooled / today, 3) if today else None,
            "int8_keys_cost_vs_today": round(int8 / today, 3) if today else None}


# A way of scoring a pair: the field of its keys' vectors (None: its turns alone).
QUALITY_WAYS = {"no_keys": None, "own_key_vectors": "own", "pooled_key_vectors": "pooled", "int8_key_vectors": "int8"}


def ndcg(pairs: list[dict], relevant: list[bool], asked: np.ndarray, keys: str | None) -> float:
    scores = []
    for pair in pairs:
        best = max(float(pair["user"] @ asked), float(pair["reply"] @ asked))
        if keys is not None and pair[keys]:
            best = max(best, max(float(vector @ asked) for vector in pair[keys]))
        scores.append(best)
    order = np.argsort(-np.asarray(scores), kind="stable")
    return ndcg_at_k([relevant[i] for i in order], sum(relevant), 10)


def quality(encoder: OnnxSentenceEncoder, int8: OnnxSentenceEncoder, limit: int) -> tuple[dict, list[float]]:
    pairs_encoder, out, cosines = PairEncoder(encoder, int8), {}, []
    for split, questions in dev_questions(limit).items():
        by_way = {way: [] for way in QUALITY_WAYS}
        for question in questions:
            listed = question_pairs(question)
            encoded = pairs_encoder.encode([(user, reply) for user, reply, _ in listed])
            relevant = [flag for *_, flag in listed]
            asked = encode_alone(encoder, [question["question"]])[0]
            for way, field in QUALITY_WAYS.items():
                by_way[way].append(ndcg(encoded, relevant, asked, field))
        mean = {way: round(float(np.mean(values)), 4) for way, values in by_way.items()}
        out[split] = {"questions": len(questions), "cosine_ndcg_at_10": mean,
                      "keys_bring": round(mean["own_key_vectors"] - mean["no_keys"], 4),
                      "pooled_minus_own": round(mean["pooled_key_vectors"] - mean["own_key_vectors"], 4),
                      "int8_minus_own": round(mean["int8_key_vectors"] - mean["own_key_vectors"], 4)}
    for pair in pairs_encoder.known.values():
        cosines += [float(own @ pooled) for own, pooled in zip(pair["own"], pair["pooled"], strict=True)]
    keys = sum(len(pair["keys"]) for pair in pairs_encoder.known.values())
    outside = sum(pair["outside_window"] for pair in pairs_encoder.known.values())
    return out | {"statement_keys": keys, "outside_window": outside}, cosines


def main() -> None:
    parser = bench_parser(__doc__, "key_vectors")
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dev-questions", type=int, default=0, help="questions of each dev split (0: all)")
    args = parser.parse_args()
    encoder = load_onnx_encoder(_minilm_dir(), Path(DreamingSettings().resolved_model_cache_dir), 2)
    with tempfile.TemporaryDirectory(prefix="dd-int8-") as folder:
        # The keys alone through the int8 graph (bench/embedding_quantization.py), the turns and questions fp32.
        int8 = OnnxSentenceEncoder(encoder.model_dir, quantized(encoder.onnx_file, Path(folder) / "int8.onnx"), 2)
        results = {"benchmark": "key_vectors",
                   "command": "make bench-key-vectors  (.venv/bin/python bench/key_vectors.py)",
                   "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                   "speed": speed(encoder, int8, args.pairs, args.runs)}
        dev, cosines = quality(encoder, int8, args.dev_questions)
    results["dev_quality"] = dev
    inside = [c for c in cosines if c < 0.99999]  # a key outside the window is its own vector both ways
    results["pooled_to_own_cosine"] = {"keys": len(cosines), "p10": round(float(np.percentile(cosines, 10)), 4),
                                       "p50": round(float(np.median(cosines)), 4),
                                       "p50_inside_window": round(float(np.median(inside)), 4) if inside else None}
    splits = [value for value in dev.values() if isinstance(value, dict)]
    for way in ("pooled", "int8"):
        results[f"{way}_within_0_005_on_every_dev_split"] = all(abs(s[f"{way}_minus_own"]) <= 0.005 for s in splits)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
