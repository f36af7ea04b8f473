"""Can the dreamed graph lift multi-hop recall? Two graph expansions measured on LoCoMo's conversations.

    .venv/bin/python bench/graph_expansion.py [--data-dir .dreaming/longmemeval] [--leaders 3 5 10]
                                              [--weights 0.25 0.5 1 2]

Reads the LoCoMo memory a ranker run built and kept (`bench/longmemeval.py --data-dir DIR --memories-only
locomo_memory`), pools every question as recall draws it (the graph side included), scores the pools with the
shipped ranker (each question's gold type) and measures two ways the graph could gather the several pairs a
multi-hop question needs:

1. **Re-ranking by shared subjects**: a candidate's score plus λ × the spread of the question's scores × the
   share of the top k candidates that share a live, non-hub subject with it. The (k, λ) kept is the one with
   the best dev multi-hop gain among those that lose nothing on dev overall; test is reported for it.
2. **Pool expansion**: the relevant pairs of multi-hop questions that the pool misses, how many of them the
   top k candidates' subjects reach (pairs before the question), and how many pairs that would add.

Beside them, what the graph side of the pool gives today: the shipped ranker and the pool recall with and
without the candidates only the graph side drew.

NDCG@10 per LoCoMo question type, on dev (11 multi-hop questions: small) and test. Writes
bench/results/graph_expansion.{json,md}.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from common import ROOT, bench_parser, bench_sql, machine, stopped_on_exit  # first: the project on the path

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.defs.training.config import LongMemEvalPoolsConfig
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.hubs import HubRule
from dreaming_dagster.retrieval.ranker import SHIPPED_RANKER, load_ranker
from dreaming_dagster.retrieval.recaller import GraphSide, TimeSide
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.training import locomo
from dreaming_dagster.training.memory import MemoryManifest
from dreaming_dagster.training.pools import build_pools
from dreaming_dagster.training.train import TrainingData, mean_metric, model_scores, ranking_metrics
from dreaming_dagster.training.workspace import RankerWorkspace

MULTI_HOP = "locomo-multi-hop"
PARTS = ("dev", "test")


def ndcg_by_type(data: TrainingData, scores: np.ndarray, rows: list[int]) -> dict[str, float]:
    metrics = ranking_metrics(data, scores, rows)
    out = {"all": mean_metric(metrics, "ndcg@10")}
    for kind in sorted({data.longmemeval_types[q] for q in rows}):
        out[kind] = mean_metric([m for m, q in zip(metrics, rows, strict=True) if data.longmemeval_types[q] == kind],
                                "ndcg@10")
    return out


def ranked(data: TrainingData, scores: np.ndarray, q: int) -> np.ndarray:
    """Question ``q``'s candidate slots, best first (ties: higher cosine, as in SQL)."""
    valid = np.flatnonzero(data.mask[q])
    return valid[np.lexsort((-data.similarity[q, valid], -scores[q, valid]))]


def shared_subject_scores(data, scores, subjects, rows, leaders: int, weight: float) -> np.ndarray:
    """``scores`` of ``rows`` re-ranked: + weight × spread × share of the top ``leaders`` sharing a subject."""
    out = scores[rows].copy()
    for position, q in enumerate(rows):
        order = ranked(data, scores, q)
        top = [(j, subjects[q][j]) for j in order[:leaders]]
        spread = float(scores[q, order].std()) or 1.0
        for j in order:
            mine = subjects[q][j]
            if mine:
                shared = sum(1 for other, theirs in top if other != j and mine & theirs)
                out[position, j] += weight * spread * shared / leaders
    return out


def main() -> None:
    parser = bench_parser(__doc__, "graph_expansion")
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".dreaming" / "longmemeval",
                        help="where bench/longmemeval.py --data-dir kept the memories")
    parser.add_argument("--leaders", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--weights", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0])
    args = parser.parse_args()
    data_dir = args.data_dir.resolve()
    ws = RankerWorkspace(data_dir / "ranker")
    if not ws.locomo_manifest.is_file():
        raise SystemExit(f"{ws.locomo_manifest} is missing: build it with bench/longmemeval.py --data-dir DIR "
                         "--memories-only locomo_memory")
    manifest = MemoryManifest.from_json(ws.locomo_manifest.read_text())
    config, settings = LongMemEvalPoolsConfig(), DreamingSettings()
    with stopped_on_exit(data_dir / "pgdata"):
        database = Database(embedded.embedded_url(data_dir / "pgdata", "lme"))
        pools = build_pools(
            database, LocalMiniLMEmbedder(), manifest.questions, manifest.users, kg_id=manifest.kg_id,
            pool_size=config.pool_size, lexical_pool_size=config.lexical_pool_size,
            graph=GraphSide(pool_size=config.graph_pool_size, subjects=settings.recall_graph_subjects),
            time_side=TimeSide(pool_size=config.time_pool_size, scan_limit=settings.recall_time_scan_limit),
            key_pool_size=config.key_pool_size, hubs=HubRule.from_settings(settings), historical=True,
            ef_search=settings.recall_ef_search, memory="locomo")
        with database.connect() as conn:
            pairs = conn.execute(bench_sql("pair_subjects"), {"user_ids": sorted(set(manifest.users.values())),
                                                               "kg_id": manifest.kg_id}).fetchall()
    subjects_of = {r["pair_id"]: frozenset(r["subject_ids"]) for r in pairs}
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    index = {question_id: q for q, question_id in enumerate(data.question_ids)}
    subjects = [[frozenset()] * data.mask.shape[1] for _ in data.question_ids]
    for row in pools.candidates.itertuples():
        subjects[index[row.question_id]][row.rank] = subjects_of.get(row.pair_id, frozenset())
    ranker = load_ranker(SHIPPED_RANKER)
    scores, _, _ = model_scores(ranker.model, data, data.features(data.ranker_types), ranker.version)
    rows = {part: [q for q, question_id in enumerate(data.question_ids) if locomo.part_of(question_id) == part]
            for part in PARTS}
    results: dict = {"command": "bench/graph_expansion.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                     "ranker": ranker.version, "questions": {part: {kind: sum(data.longmemeval_types[q] == kind
                                                                              for q in rows[part])
                                                                    for kind in sorted(set(data.longmemeval_types))}
                                                             for part in PARTS},
                     "shipped": {part: ndcg_by_type(data, scores[rows[part]], rows[part]) for part in PARTS}}
    without = data.without_side("graph")
    results["without_graph_candidates"] = {part: ndcg_by_type(without, scores[rows[part]], rows[part]) for part in PARTS}
    results["pool_recall"] = {part: {name: float(np.mean([(d.labels[q] * d.mask[q]).sum() / d.total_relevant[q]
                                                          for q in rows[part]]))
                                     for name, d in (("with graph candidates", data), ("without", without))}
                              for part in PARTS}
    grid = []
    for leaders, weight in itertools.product(args.leaders, args.weights):
        grid.append({"leaders": leaders, "weight": weight, **{
            part: ndcg_by_type(data, shared_subject_scores(data, scores, subjects, rows[part], leaders, weight),
                               rows[part]) for part in PARTS}})
        print(f"k={leaders} λ={weight}: " + " | ".join(
            f"{part} multi-hop {grid[-1][part].get(MULTI_HOP, float('nan')):.3f} all {grid[-1][part]['all']:.3f}" for part in PARTS),
            flush=True)
    base = results["shipped"]
    harmless = [g for g in grid if g["dev"]["all"] >= base["dev"]["all"]]
    chosen = max(harmless, key=lambda g: (g["dev"].get(MULTI_HOP, g["dev"]["all"]), -g["weight"])) if harmless else None
    results["rerank"] = {"grid": grid, "chosen": chosen}

    # Pool expansion: what the top candidates' subjects reach that the pool missed.
    pairs_of_subject, pair_of_hash, occurred = defaultdict(set), {}, {}
    for r in pairs:
        occurred[r["pair_id"]] = r["occurred_at"]
        pair_of_hash[(r["user_id"], r["content_hash"])] = r["pair_id"]
        for subject in r["subject_ids"]:
            pairs_of_subject[subject].add(r["pair_id"])
    question_of = {q.question_id: q for q in manifest.questions}
    expansion = []
    for part, leaders in itertools.product(PARTS, args.leaders):
        missing = reached = added = 0
        for q in rows[part]:
            if data.longmemeval_types[q] != MULTI_HOP:
                continue
            question = question_of[data.question_ids[q]]
            user = manifest.users[question.question_id]
            relevant = {pair_of_hash.get((user, h)) for h in question.relevant} - {None}
            order = ranked(data, scores, q)
            pooled = {pools_pair for pools_pair in pools.candidates.loc[
                pools.candidates["question_id"] == question.question_id, "pair_id"]}
            reach = {p for j in order[:leaders] for s in subjects[q][j] for p in pairs_of_subject[s]
                     if occurred[p] < question.question_date} - pooled
            missing += len(relevant - pooled)
            reached += len((relevant - pooled) & reach)
            added += len(reach)
        expansion.append({"part": part, "leaders": leaders, "relevant_missing": missing,
                          "relevant_reached": reached, "pairs_added": added,
                          "questions": results["questions"][part].get(MULTI_HOP, 0)})
    results["expansion"] = expansion

    kinds = [k for k in base["test"] if k != "all"]
    lines = [f"Command: `{results['command']}` · {results['date']}", "",
             f"LoCoMo, shipped ranker {ranker.version} on recall's pools; NDCG@10. Re-ranking: + λ × spread × share of "
             "the top k sharing a live, non-hub subject. Chosen on dev: the best multi-hop gain that loses nothing "
             "on dev overall.", "",
             "| part | ordering | all | " + " | ".join(k.removeprefix("locomo-") for k in kinds) + " |",
             "|---|---|---:|" + "---:|" * len(kinds)]
    for part in PARTS:
        rows_out = [("shipped", base[part]), ("shipped, no graph candidates", results["without_graph_candidates"][part])] + [(f"k={g['leaders']} λ={g['weight']}", g[part]) for g in grid]
        for name, cell in rows_out:
            mark = " (chosen)" if chosen and name == f"k={chosen['leaders']} λ={chosen['weight']}" else ""
            lines.append(f"| {part} | {name}{mark} | {cell['all']:.3f} | "
                         + " | ".join(f"{cell[k]:.3f}" if k in cell else "–" for k in kinds) + " |")
    lines += ["", "Pool recall (relevant pairs in the pool): " + "; ".join(
        f"{part} {r['with graph candidates']:.3f} with graph candidates, {r['without']:.3f} without"
        for part, r in results["pool_recall"].items()) + "."]
    lines += ["", "Pool expansion through the top k candidates' subjects, multi-hop questions:", "",
              "| part | k | questions | relevant pairs the pool misses | of them reached | pairs added |",
              "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {e['part']} | {e['leaders']} | {e['questions']} | {e['relevant_missing']} | {e['relevant_reached']} | "
              f"{e['pairs_added']:,} |" for e in expansion]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
