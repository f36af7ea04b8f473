"""Time: the resolver on the labelled set, question parsing, and recall with vs without time on LongMemEval.

    .venv/bin/python bench/time.py [--dataset PATH] [--limit-questions N] [--epochs 50] [--seed 0]

1. Resolvers on tests/data/time_expressions.tsv (each expression with a reference day and the range a careful
   reader expects): this project's grammar (its range must match exactly), dateparser (RELATIVE_BASE set to
   the reference) and parsedatetime (both give a point: right when it falls inside the expected range; for
   an expression that names no date, right when they give none).
2. Question parsing: dates/questions.read_question over every question of the dataset, p50 and p99.
3. The dataset's one-user memory embedded and dreamed (the dating stage included): the share of pairs that
   carry a dated event.
4. The ablation, one run, one split: pools with the time parts (the question's window read against its
   date → the time_fit signal and the time-window candidates) and without, the ranker trained on each
   (same seed, same split, v4), and the ordering without a model (cosine, and cosine + TIME_WEIGHT ×
   time_fit); overall, per question type, and for the questions with a time expression (listed by id);
   validation split first (the models never saw it), all answerable questions second.
Writes bench/results/time.{json,md}.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
from common import (  # first: puts the project on the import path
    ORACLE,
    ROOT,
    bench_parser,
    embedded_admin_url,
    machine,
    percentile,
    stopped_on_exit,
)

from dreaming_dagster.dates.grammar import resolve
from dreaming_dagster.dates.questions import read_question
from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.readers import iter_longmemeval_questions
from dreaming_dagster.pipeline import dating
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.retrieval.recaller import GraphSide, TimeSide
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES, TIME_WEIGHT
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import parse_timestamp
from dreaming_dagster.training.fit import PUBLISHED_VERSION, fit_rankers
from dreaming_dagster.training.memory import load_benchmark_memory
from dreaming_dagster.training.pools import Pools, build_pools
from dreaming_dagster.training.train import TrainingData, mean_metric, model_scores, ranking_metrics

LABELLED = ROOT / "tests" / "data" / "time_expressions.tsv"
TIME_WEIGHTS = tuple(sorted({0.0, 0.1, 0.25, 0.5, 1.0, TIME_WEIGHT}))


def labelled() -> list[tuple[date, str, tuple[date, date] | None]]:
    with LABELLED.open(encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle, delimiter="\t") if r and not r[0].startswith("#")][1:]
    return [(date.fromisoformat(ref), text, None if first == "-" else (date.fromisoformat(first), date.fromisoformat(last)))
            for ref, text, first, last, _ in rows]


def resolver_accuracy() -> dict:
    import dateparser
    import parsedatetime

    calendar = parsedatetime.Calendar(version=parsedatetime.VERSION_CONTEXT_STYLE)

    def ours(text, reference):
        found = resolve(text, reference)
        return None if found is None else (found.first_day, found.last_day)

    def with_dateparser(text, reference):
        found = dateparser.parse(text, settings={"RELATIVE_BASE": datetime.combine(reference, datetime.min.time()),
                                                 "PREFER_DATES_FROM": "past"})
        return None if found is None else found.date()

    def with_parsedatetime(text, reference):
        point, context = calendar.parseDT(text, sourceTime=datetime.combine(reference, datetime.min.time()))
        return point.date() if context.hasDate else None

    rows, results = labelled(), {}
    for name, read in (("this project's grammar", ours), ("dateparser", with_dateparser),
                       ("parsedatetime", with_parsedatetime)):
        right, wrong, started = 0, [], time.perf_counter()
        for reference, text, expected in rows:
            try:
                got = read(text, reference)
            except Exception as error:  # noqa: BLE001 - a library that raises on an expression gets it wrong
                got = f"error: {type(error).__name__}"
            if isinstance(got, tuple) or got is None or isinstance(got, str):
                ok = got == expected
            else:  # a point resolver: inside the expected range
                ok = expected is not None and expected[0] <= got <= expected[1]
            right += ok
            if not ok and len(wrong) < 12:
                wrong.append(f"{reference} {text!r}: expected {expected}, got {got}")
        seconds = time.perf_counter() - started
        results[name] = {"accuracy": round(right / len(rows), 4), "right": right, "expressions": len(rows),
                         "us_per_expression": round(seconds / len(rows) * 1e6, 1), "first_wrong": wrong}
        print(f"{name}: {right}/{len(rows)} ({100 * right / len(rows):.1f}%)")
    return results


def question_parsing(dataset: Path, limit: int | None) -> dict:
    seconds, windows = [], {}
    questions = list(iter_longmemeval_questions(dataset))[:limit]
    for raw in questions * 3:  # three passes: the first warms the regular expressions
        asked_on = parse_timestamp(raw["question_date"], "question_date")
        started = time.perf_counter()
        asked = read_question(raw["question"], asked_on)
        seconds.append(time.perf_counter() - started)
        if asked.window is not None:
            windows[raw["question_id"]] = asked.window.label()
    ms = [s * 1000 for s in seconds[len(questions):]]
    return {"questions": len(questions), "p50_ms": round(statistics.median(ms), 3),
            "p99_ms": round(percentile(ms, 99), 3), "with_window": len(windows)}


def windowed_question_ids(pools: Pools) -> set[str]:
    return set(pools.questions.loc[pools.questions["time_window"].notna(), "question_id"])


def evaluate_variant(pools: Pools, args, embedding_model: str) -> dict:
    """The ranker trained on these pools (fit_rankers' split and seed) and the orderings without a model,
    per question: Recall@10 and NDCG@10 of every question, by id."""
    data = TrainingData.from_pools(pools.questions, pools.candidates)
    report = fit_rankers(data, embedding_model=embedding_model, seed=args.seed, epochs=args.epochs, ablations=False,
                         log=lambda _: None)
    features = data.features([report.predicted_types[q] for q in data.question_ids])
    everyone = list(range(len(data)))
    model = report.outcomes[PUBLISHED_VERSION].model
    scores = model_scores(model, data, features, PUBLISHED_VERSION, everyone)[0]
    cos, fit = data.signals[..., SIGNAL_NAMES.index("cos")], data.signals[..., SIGNAL_NAMES.index("time_fit")]
    rankings = {PUBLISHED_VERSION: scores, **{f"cosine + {w} time_fit": cos + w * fit for w in TIME_WEIGHTS}}
    per_question = {name: dict(zip(data.question_ids, ranking_metrics(data, ranked, everyone), strict=True))
                    for name, ranked in rankings.items()}
    return {"validation_ids": report.validation_ids, "train_ids": report.train_ids,
            "best_epoch": report.outcomes[PUBLISHED_VERSION].best_epoch,
            "types": dict(zip(data.question_ids, data.longmemeval_types, strict=True)),
            "per_question": per_question}


def summary(variant: dict, ids: list[str], metric: str) -> dict[str, float]:
    return {name: round(mean_metric([rows[q] for q in ids], metric), 4) for name, rows in variant["per_question"].items()}


def compare(with_time: dict, without: dict, windowed: set[str]) -> dict:
    out = {}
    for split in ("validation", "all"):
        ids = with_time["validation_ids"] if split == "validation" else sorted(with_time["types"])
        groups = {"all questions": ids, "with a time expression": [q for q in ids if q in windowed]}
        for kind in sorted({with_time["types"][q] for q in ids}):
            groups[kind] = [q for q in ids if with_time["types"][q] == kind]
        out[split] = {group: {"n": len(members),
                              **{f"{metric} {side}": summary(variant, members, metric) if members else {}
                                 for metric in ("recall@10", "ndcg@10")
                                 for side, variant in (("with time", with_time), ("without time", without))}}
                      for group, members in groups.items()}
    return out


def main() -> None:
    parser = bench_parser(__doc__, "time")
    parser.add_argument("--dataset", type=Path, default=ORACLE)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results: dict = {"command": "bench/time.py " + " ".join(sys.argv[1:]),
                     "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                     "dataset": args.dataset.name, "time_weight": TIME_WEIGHT}
    results["resolvers"] = resolver_accuracy()
    results["question_parsing"] = question_parsing(args.dataset, args.limit_questions)
    print("question parsing", results["question_parsing"])

    embedder = LocalMiniLMEmbedder()
    with tempfile.TemporaryDirectory(prefix="dd-time-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        database = Database(embedded.fresh_database_url(embedded_admin_url(Path(tmp) / "pgdata"), "time"))
        started = time.perf_counter()
        manifest = load_benchmark_memory(database, embedder, OfflineExtractor(), OfflineRefiner(), args.dataset,
                                         mode="one-user", user_prefix="lme", limit=args.limit_questions)
        results["memory_seconds"] = round(time.perf_counter() - started, 1)
        (user,) = set(manifest.users.values())
        results["dated_pairs"] = dating.dated_pair_counts(database, user)
        print("dated pairs", results["dated_pairs"])
        variants, pools_seconds = {}, {}
        for name, aware in (("with time", True), ("without time", False)):
            started = time.perf_counter()
            pools = build_pools(database, embedder, manifest.questions, manifest.users, graph=GraphSide(),
                                time_side=TimeSide(), time_aware=aware)
            pools_seconds[name] = round(time.perf_counter() - started, 1)
            if aware:
                windowed = windowed_question_ids(pools)
                drawn = pools.candidates
                results["time_side"] = {
                    "questions with a window": len(windowed),
                    "window candidates per windowed question": round(
                        float(drawn["in_window_pool"].sum()) / max(len(windowed), 1), 1),
                    "relevant pairs only the time side drew": int(drawn.loc[drawn["in_window_pool"], "relevant"].sum())}
                results["windows"] = dict(zip(pools.questions["question_id"], pools.questions["time_window"],
                                              strict=True))
                results["windows"] = {q: w for q, w in results["windows"].items() if w is not None}
            variants[name] = evaluate_variant(pools, args, embedder.spec.model)
        results["pools_seconds"] = pools_seconds
    with_time, without = variants["with time"], variants["without time"]
    results["comparison"] = compare(with_time, without, windowed)
    results["best_epochs"] = {name: v["best_epoch"] for name, v in variants.items()}
    results["time_expression_questions"] = {
        q: {"type": with_time["types"][q], "window": results["windows"][q],
            "split": "validation" if q in set(with_time["validation_ids"]) else "train",
            "recall@10 with time": round(with_time["per_question"][PUBLISHED_VERSION][q]["recall@10"], 3),
            "recall@10 without time": round(without["per_question"][PUBLISHED_VERSION][q]["recall@10"], 3)}
        for q in sorted(windowed)}
    train_windowed = [q for q in with_time["train_ids"] if q in windowed]
    results["default_ordering_by_weight_train_windowed_recall@10"] = summary(with_time, train_windowed, "recall@10")
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    print(markdown(results))


def markdown(r: dict) -> str:
    v = PUBLISHED_VERSION
    lines = ["# Time benchmark", "", f"`{r['command']}` · {r['date']} · dataset {r['dataset']}", "",
             "## Resolvers on the labelled set", "", "| resolver | right | accuracy | µs an expression |",
             "|---|---:|---:|---:|"]
    lines += [f"| {name} | {m['right']}/{m['expressions']} | {100 * m['accuracy']:.1f}% | {m['us_per_expression']} |"
              for name, m in r["resolvers"].items()]
    q = r["question_parsing"]
    lines += ["", f"Question parsing: p50 {q['p50_ms']} ms, p99 {q['p99_ms']} ms over {q['questions']} questions; "
              f"{q['with_window']} name a time the grammar reads.",
              f"Dated pairs: {r['dated_pairs']['with_times']:,} of {r['dated_pairs']['pairs']:,} carry a dated event.",
              f"Time side: {r['time_side']}.", ""]
    for split in ("validation", "all"):
        lines += [f"## Recall@10 and NDCG@10, {split} ({'the models never saw these' if split == 'validation' else 'training questions included'})",
                  "", f"| questions | n | {v} with time | {v} without | cosine | cosine + {r['time_weight']} time_fit | "
                  f"NDCG@10 {v} with | NDCG@10 {v} without |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for group, m in r["comparison"][split].items():
            if not m["n"]:
                continue
            w, wo = m["recall@10 with time"], m["recall@10 without time"]
            timed = w[f"cosine + {r['time_weight']} time_fit"]
            lines.append(f"| {group} | {m['n']} | {w[v]:.3f} | {wo[v]:.3f} | {wo['cosine + 0.0 time_fit']:.3f} | "
                         f"{timed:.3f} | {m['ndcg@10 with time'][v]:.3f} | {m['ndcg@10 without time'][v]:.3f} |")
        lines.append("")
    lines += ["Ordering without a model, Recall@10 of the training split's windowed questions by time_fit weight: "
              + ", ".join(f"{k.split(' + ')[1].split()[0]}: {x:.3f}" for k, x in
                          r["default_ordering_by_weight_train_windowed_recall@10"].items() if k.startswith("cosine")), "",
              "## The questions with a time expression", "", "| question | type | split | window | Recall@10 with | without |",
              "|---|---|---|---|---:|---:|"]
    lines += [f"| {q} | {m['type']} | {m['split']} | {m['window']} | {m['recall@10 with time']:.2f} | "
              f"{m['recall@10 without time']:.2f} |" for q, m in r["time_expression_questions"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
