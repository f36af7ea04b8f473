"""Encoders for memory recall side by side: MiniLM as it is, a query-side adapter, MiniLM fine-tuned (LoRA).

    .venv/bin/python bench/encoder_training.py [--data-dir .dreaming/longmemeval] [--seeds 0 1 2]
                                               [--adapter-epochs 8] [--lora-seeds 0 1 2] [--lora-epochs 1]
                                               [--lora-questions N] [--lora-positive random|nearest]
                                               [--lora-hard-negatives 1] [--lora-negatives-outside-evidence]
                                               [--contexts CONTEXT ...]

Reads the benchmark memories a ranker run built and kept (`bench/longmemeval.py --data-dir DIR
--memories-only`): every memory whose manifest is there (oracle, `_S`, LoCoMo, RealMem). Each encoder is
judged by cosine alone over each question's whole memory as of the question (a pair scores the better of its
two turns), NDCG@10 and Recall@10, on each distribution's dev part (which chose epochs) and held-out part
(the oracle's validation questions, the other memories' test part; nothing was chosen on them). Every trained
encoder runs with each seed; a difference within the seeds' spread is a tie. Writes
bench/results/encoder_training.{json,md}.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import ROOT, bench_parser, machine, stopped_on_exit  # first: puts the project on the import path

from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training import encoder
from dreaming_dagster.training.workspace import RankerWorkspace

HELD_OUT = {"oracle": "validation", "s": "test", "locomo": "test", "realmem": "test"}
NAMES = {"oracle": "oracle", "s": "`_S`", "locomo": "LoCoMo", "realmem": "RealMem"}


def load_sets(database: Database, ws: RankerWorkspace, embedder) -> list[encoder.RecallQuestions]:
    started = time.perf_counter()
    try:
        sets = encoder.benchmark_question_sets(database, ws)
    except FileNotFoundError as error:
        raise SystemExit(f"{error}: build the memories with bench/longmemeval.py --data-dir DIR --memories-only "
                         "first") from None
    for questions in sets:
        questions.query_vectors = np.asarray(embedder.embed(questions.texts), np.float32)
        print(f"{questions.memory}: {len(questions.question_ids)} questions, "
              f"{len(questions.pairs.content_hashes):,} pairs", flush=True)
    print(f"read in {time.perf_counter() - started:.1f} s", flush=True)
    return sets


def evaluate(sets, query_vectors, pair_vectors=None) -> dict:
    """{memory: {part: metrics}} for dev and the held-out part."""
    out = {}
    for q in sets:
        vectors = (pair_vectors or {}).get(q.memory, (None, None))
        out[q.memory] = {part: encoder.cosine_metrics(q, q.rows(part), query_vectors[q.memory], *vectors)
                         for part in ("dev", HELD_OUT[q.memory]) if q.rows(part)}
    return out


def spread(runs: list[dict], memory: str, part: str) -> dict:
    values = [run[memory][part]["ndcg@10"] for run in runs if part in run[memory]]
    return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values)), "runs": values}


def lora_cell(results: dict, memory: str, part: str) -> str:
    if "lora" not in results:
        return "–"
    cell = results["lora"]["ndcg@10"][memory][part]
    return f"{cell['mean']:.3f} ({cell['min']:.3f}–{cell['max']:.3f})"


def main() -> None:
    parser = bench_parser(__doc__, "encoder_training")
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".dreaming" / "longmemeval",
                        help="where bench/longmemeval.py --data-dir kept the memories")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--adapter-epochs", type=int, default=8)
    parser.add_argument("--lora-seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--lora-epochs", type=int, default=1)
    parser.add_argument("--contexts", nargs="*", default=list(encoder.CONTEXTS), choices=encoder.CONTEXTS,
                        help="context put before each pair's first turn, measured with MiniLM")
    parser.add_argument("--lora-questions", type=int, default=None, help="train LoRA on this many questions")
    # The defaults are the memory_encoder asset's: the recipe that ships.
    parser.add_argument("--lora-positive", choices=("random", "nearest"), default="nearest",
                        help="the relevant pair a LoRA step trains on: any, or the one MiniLM ranks highest")
    parser.add_argument("--lora-hard-negatives", type=int, default=0,
                        help="MiniLM's hardest non-relevant pairs beside each LoRA positive (0: in-batch only)")
    parser.add_argument("--lora-negatives-outside-evidence", action="store_true",
                        help="draw LoRA's hard negatives from sessions without a relevant pair")
    args = parser.parse_args()
    data_dir = args.data_dir.resolve()
    embedder = LocalMiniLMEmbedder()
    results: dict = {"command": "bench/encoder_training.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine()}
    with stopped_on_exit(data_dir / "pgdata"):
        database = Database(embedded.embedded_url(data_dir / "pgdata", "lme"))
        sets = load_sets(database, RankerWorkspace(data_dir / "ranker"), embedder)
    results["questions"] = {q.memory: {part: len(q.rows(part)) for part in ("train", "dev", HELD_OUT[q.memory])}
                            for q in sets}
    minilm = {q.memory: q.query_vectors for q in sets}
    results["minilm"] = evaluate(sets, minilm)
    adapter_runs, histories = [], {}
    started = time.perf_counter()
    for seed in args.seeds:
        adapter, history = encoder.train_query_adapter(sets, seed=seed, epochs=args.adapter_epochs)
        histories[seed] = history
        adapter_runs.append(evaluate(sets, {q.memory: adapter.apply(q.query_vectors) for q in sets}))
    results["adapter"] = {"seconds_per_seed": round((time.perf_counter() - started) / len(args.seeds), 1),
                          "best_epochs": {seed: max(h, key=lambda r: r["dev_gain"])["epoch"] for seed, h in histories.items()},
                          "by_seed": adapter_runs, "histories": histories,
                          "ndcg@10": {q.memory: {part: spread(adapter_runs, q.memory, part)
                                                 for part in ("dev", HELD_OUT[q.memory])} for q in sets}}
    lora_runs, lora_seconds = [], []
    for seed in args.lora_seeds:
        started = time.perf_counter()
        tuned = encoder.fine_tune_encoder(sets, seed=seed, epochs=args.lora_epochs,
                                          limit_questions=args.lora_questions, positive=args.lora_positive,
                                          hard_negatives=args.lora_hard_negatives,
                                          negatives_outside_evidence=args.lora_negatives_outside_evidence)
        trained = time.perf_counter() - started
        with encoder.delta_encoder(tuned) as embedder_with_delta:
            vectors = {q.memory: encoder.reembedded(embedder_with_delta, q, ("dev", HELD_OUT[q.memory])) for q in sets}
        lora_runs.append(evaluate(sets, {m: v[0] for m, v in vectors.items()},
                                  {m: (v[1], v[2]) for m, v in vectors.items()}))
        lora_seconds.append({"training": round(trained, 1), "re-embedding": round(time.perf_counter() - started - trained, 1),
                             "final_loss": float(np.mean(tuned.losses[-10:]))})
    if lora_runs:
        results["lora"] = {"seconds": lora_seconds, "by_seed": lora_runs,
                           "ndcg@10": {q.memory: {part: spread(lora_runs, q.memory, part)
                                                  for part in ("dev", HELD_OUT[q.memory])} for q in sets}}
    results["context"] = {}
    for context in args.contexts:
        started = time.perf_counter()
        pair_vectors = {}
        for q in sets:
            needed = encoder.needed_pairs(q, ("dev", HELD_OUT[q.memory]))
            vectors = q.pairs.vectors.copy()
            vectors[needed] = embedder.embed(encoder.context_texts(q.pairs, context, needed))
            pair_vectors[q.memory] = (vectors, None)
        results["context"][context] = {**evaluate(sets, minilm, pair_vectors),
                                       "seconds": round(time.perf_counter() - started, 1)}
        print(f"context {context}: {results['context'][context]}", flush=True)
    lines = [f"Command: `{results['command']}` · {results['date']}", "",
             "Cosine alone over each question's whole memory, NDCG@10 (trained encoders: mean of the seeds, "
             "min–max); the context columns: MiniLM with the context before each pair's first turn.", "",
             "| distribution | part | questions | MiniLM | query adapter | MiniLM + LoRA | "
             + " | ".join(f"+ {c}" for c in results["context"]) + " |",
             "|---|---|---:|---:|---:|---:|" + "---:|" * len(results["context"])]
    for q in sets:
        for part in ("dev", HELD_OUT[q.memory]):
            if part not in results["minilm"][q.memory]:
                continue
            a = results["adapter"]["ndcg@10"][q.memory][part]
            lines.append(f"| {NAMES[q.memory]} | {part} | {len(q.rows(part))} | "
                         f"{results['minilm'][q.memory][part]['ndcg@10']:.3f} | "
                         f"{a['mean']:.3f} ({a['min']:.3f}–{a['max']:.3f}) | {lora_cell(results, q.memory, part)} | "
                         + " | ".join(f"{results['context'][c][q.memory][part]['ndcg@10']:.3f}" for c in results["context"])
                         + " |")
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
