"""What the dreamed graph is worth: extractor throughput, graph health, and an ablation on LongMemEval.

    .venv/bin/python bench/graph.py [--dataset PATH] [--limit-questions N] [--epochs 50]

1. Extractor throughput on LongMemEval pairs (the oracle's, shuffled): the offline (spaCy entities)
   extractor on one core and with two worker processes; medians.
2. The oracle's one-user memory (every session in one user's memory, the reference's protocol) embedded
   and dreamed: graph health (subjects, singleton share, median subjects per pair, largest subject's share,
   hubs, share of subjects on the committed generic list, 30 random subject names); the same report for each
   of the demo's users (`make demo`: 5 users, 8 questions each), dreamed by sync_user.
3. The ablation, one run, validation split (the same questions for every variant): v3
   trained and evaluated on pools with graph candidates and graph signals, against v3 trained and
   evaluated with the graph signals zeroed and no graph candidates; overall and per question type.
Writes bench/results/graph.{json,md}.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import common  # first: puts the project on the import path
import numpy as np

from dreaming_dagster.demo import build_demo_users
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.readers import iter_longmemeval_questions
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import graph_reports
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.retrieval.recaller import GraphSide
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training.evaluation import evaluate
from dreaming_dagster.training.fit import fit_rankers
from dreaming_dagster.training.memory import load_benchmark_memory
from dreaming_dagster.training.pools import Pools, build_pools
from dreaming_dagster.training.train import TrainingData

GRAPH_SIGNALS = ("subj_freq", "subj_sem", "neighbor_density")


def oracle_pairs(dataset: Path, count: int, seed: int = 1) -> list[tuple[str, str]]:
    pairs = []
    for question in iter_longmemeval_questions(dataset):
        for session in question["haystack_sessions"]:
            pairs += [(a["content"], b["content"]) for a, b in zip(session[::2], session[1::2], strict=False)
                      if a.get("role") == "user"]
    random.Random(seed).shuffle(pairs)
    return pairs[:count]


def throughput(pairs: list[tuple[str, str]], runs: int) -> dict:
    configs = {"entities (spaCy), one core": OfflineExtractor(processes=1),
               "entities (spaCy), two processes": OfflineExtractor(processes=2)}
    results = {}
    for name, extractor in configs.items():
        extractor.extract_many(pairs[:20])  # load the pipeline outside the timing
        seconds = []
        for _ in range(runs):
            started = time.perf_counter()
            extractor.extract_many(pairs)
            seconds.append(time.perf_counter() - started)
        results[name] = {"pairs_per_s": round(len(pairs) / statistics.median(seconds), 1),
                         "runs_s": [round(s, 2) for s in seconds]}
        print(f"{name}: {results[name]['pairs_per_s']} pairs/s")
    return results


def health(database: Database, user_id: str, seed: int = 7) -> dict:
    (report,) = graph_reports.graph_report(database, user_id)
    with database.connect(vectors=False) as conn:
        names = sorted(row["subject_text"] for row in conn.execute(
            load_sql("checks/live_subject_names"), {"user_id": user_id, "kg_ids": [report["kg_id"]]}))
        over_five = conn.execute(common.bench_sql("unflagged_large_subjects"), {
            "user_id": user_id, "max_share": 0.05, "pairs": report["pairs"]}).fetchone()["n"]
    top = graph_reports.top_subjects(database, user_id, limit=15)
    return {**{k: (round(v, 4) if isinstance(v, float) else v) for k, v in report.items()},
            "unflagged_subjects_over_5pct": over_five,
            "top_subjects": [(row["subject_text"], row["linked_pairs"], bool(row["hub"])) for row in top],
            "random_subjects": random.Random(seed).sample(names, min(30, len(names)))}


def demo_health(database: Database, embedder, dataset: Path, users: int = 5, questions_per_user: int = 8) -> dict:
    """Each demo user's memory (as `make demo` builds it) dreamed by sync_user, and its graph's health."""
    reports = {}
    for user in build_demo_users(dataset, users=users, questions_per_user=questions_per_user):
        save_pairs(user.user_id, user.records, database=database, embedder=embedder)
        sync_user(user.user_id, database=database, embedder=embedder, extractor=OfflineExtractor(),
                  refiner=OfflineRefiner())
        report = health(database, user.user_id)
        reports[user.user_id] = {**report, "random_subjects": report["random_subjects"][:10]}
        print(user.user_id, {k: v for k, v in report.items() if k not in ("random_subjects", "top_subjects")})
    return reports


def without_graph(pools: Pools) -> Pools:
    """The same questions with no graph candidates and the graph signals zeroed."""
    candidates = pools.candidates[~pools.candidates["in_graph_pool"]].copy()
    for name in GRAPH_SIGNALS:
        candidates[name] = 0.0
    candidates["rank"] = candidates.groupby("question_id").cumcount()
    return Pools(pools.questions, candidates)


def v3_metrics(pools: Pools, args, embedding_model: str) -> dict:
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    report = fit_rankers(data, embedding_model=embedding_model, seed=args.seed, epochs=args.epochs, ablations=False,
                         log=lambda _: None)
    position = {q: i for i, q in enumerate(data.question_ids)}
    models = {version: outcome.model for version, outcome in report.outcomes.items() if version in ("v3",)}
    evaluation = evaluate(data, models, predicted_types=[report.predicted_types[q] for q in data.question_ids],
                          splits={"validation": [position[q] for q in report.validation_ids]}, gold_type_keys=())
    result = evaluation.as_dict()
    validation = result["overall"]["validation"]
    return {"v3": validation["v3"], "bm25": validation.get("bm25"), "rrf": validation.get("cosine+bm25 (RRF)"),
            "cosine": validation["cosine"],
            "recall@10_by_type": {t: row["v3"]["recall@10"] for t, row in result["by_type"]["validation"].items()
                                  if "v3" in row},
            "mean_weights_v3": result["mean_weights"].get("v3"),
            "validation_questions": len(report.validation_ids)}


def main() -> None:
    parser = common.bench_parser(__doc__, "graph")
    parser.add_argument("--dataset", type=Path, default=common.ORACLE)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--throughput-pairs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--demo-users", type=int, default=5, help="users of `make demo` whose graphs are reported")
    parser.add_argument("--demo-questions-per-user", type=int, default=8)
    args = parser.parse_args()
    results: dict = {"command": "bench/graph.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": common.machine(),
                     "dataset": args.dataset.name}
    results["extractor_throughput"] = throughput(oracle_pairs(args.dataset, args.throughput_pairs), args.runs)

    embedder = LocalMiniLMEmbedder()
    graph = GraphSide()
    with tempfile.TemporaryDirectory(prefix="dd-graph-") as tmp, common.stopped_on_exit(Path(tmp) / "pgdata"):
        admin = common.embedded_admin_url(Path(tmp) / "pgdata")
        first = Database(embedded.fresh_database_url(admin, "graph"))
        started = time.perf_counter()
        manifest = load_benchmark_memory(first, embedder, OfflineExtractor(), OfflineRefiner(), args.dataset,
                                         mode="one-user", user_prefix="lme", limit=args.limit_questions)
        memory_seconds = {"entities": round(time.perf_counter() - started, 1)}
        (user,) = set(manifest.users.values())
        memories = {"entities": first}
        results["memory_seconds"] = memory_seconds
        results["demo_health"] = demo_health(Database(embedded.fresh_database_url(admin, "demo")), embedder,
                                             args.dataset, args.demo_users, args.demo_questions_per_user)
        results["health"], results["ablation"] = {}, {}
        for name, database in memories.items():
            results["health"][name] = health(database, user)
            print(name, {k: v for k, v in results["health"][name].items() if k != "random_subjects"})
            pools = build_pools(database, embedder, manifest.questions, manifest.users, graph=graph)
            drawn = pools.candidates
            results["ablation"][name] = {
                "graph candidates per question": round(float(drawn["in_graph_pool"].sum()) / len(pools.questions), 1),
                "relevant graph-only candidates": int(drawn.loc[drawn["in_graph_pool"], "relevant"].sum()),
                "with graph": v3_metrics(pools, args, embedder.spec.model),
                "without graph": v3_metrics(without_graph(pools), args, embedder.spec.model)}
            print(name, json.dumps(results["ablation"][name], default=str)[:600])
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))


def markdown(r: dict) -> str:
    lines = ["# Graph benchmark", "", f"`{r['command']}` · {r['date']} · dataset {r['dataset']}", "",
             "## Extractor throughput (LongMemEval pairs)", "", "| extractor | pairs/s | runs (s) |", "|---|---:|---|"]
    lines += [f"| {k} | {v['pairs_per_s']} | {v['runs_s']} |" for k, v in r["extractor_throughput"].items()]
    lines += ["", "## Graph health, oracle one-user memory", "",
              "| extractor | pairs | subjects | singletons | median subjects/pair | largest subject | hubs | "
              "unflagged > 5% | generic |", "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for name, h in r["health"].items():
        lines.append(f"| {name} | {h['pairs']:,} | {h['subjects']:,} | {100 * h['singleton_share']:.1f}% | "
                     f"{h['median_subjects_per_pair']} | {h['largest_subject']} ({100 * h['largest_share']:.1f}%"
                     f"{', hub' if h['largest_is_hub'] else ''}) | {h['hubs']} | {h['unflagged_subjects_over_5pct']} | "
                     f"{h['generic_subjects']} ({100 * h['generic_share']:.1f}%) |")
    for name, h in r["health"].items():
        lines += ["", f"30 random subjects ({name}): " + ", ".join(h["random_subjects"])]
    lines += ["", "## Graph health, the demo's users (entities extractor, sync_user)", "",
              "| user | pairs | subjects | singletons | median subjects/pair | largest subject | hubs | generic | "
              "top subjects |", "|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for user, h in r.get("demo_health", {}).items():
        lines.append(f"| {user} | {h['pairs']:,} | {h['subjects']:,} | {100 * h['singleton_share']:.1f}% | "
                     f"{h['median_subjects_per_pair']} | {h['largest_subject']} ({100 * h['largest_share']:.1f}%) | "
                     f"{h['hubs']} | {h['generic_subjects']} | "
                     + ", ".join(f"{name} ({n})" for name, n, _ in h["top_subjects"][:5]) + " |")
    lines += ["", "## Ablation (validation split; v3 with vs without the graph)", "",
              "| extractor | variant | NDCG@10 | Recall@10 | MRR | BM25 Recall@10 | RRF Recall@10 |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for name, a in r["ablation"].items():
        for variant in ("with graph", "without graph"):
            m = a[variant]
            lines.append(f"| {name} | {variant} | {m['v3']['ndcg@10']:.3f} | {m['v3']['recall@10']:.3f} | "
                         f"{m['v3']['mrr']:.3f} | {m['bm25']['recall@10']:.3f} | {m['rrf']['recall@10']:.3f} |")
    for name, a in r["ablation"].items():
        types = sorted(a["with graph"]["recall@10_by_type"])
        lines += ["", f"Recall@10 by type, with vs without the graph ({name}): " + "; ".join(
            f"{t} {a['with graph']['recall@10_by_type'][t]:.3f} vs {a['without graph']['recall@10_by_type'][t]:.3f}"
            for t in types if a["with graph"]["recall@10_by_type"][t] is not None)]
        lines += [f"Graph candidates per question ({name}): {a['graph candidates per question']}; relevant "
                  f"pairs only the graph drew: {a['relevant graph-only candidates']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
