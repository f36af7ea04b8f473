"""train_ranker_job on both memories, side by side in one run: results tables and each asset's wall time.

    .venv/bin/python bench/longmemeval.py [--training-questions 100] [--epochs 50] [--seed 0]
                                          [--data-dir .dreaming/longmemeval | --fresh]

Runs the five ranker assets through Dagster (an ephemeral instance) with the project's default providers
(all-MiniLM-L6-v2 embeddings and the offline extractor unless DREAMING_* says otherwise): the pooled
oracle (one user, every session), the `_S` haystacks of the dev questions and of ``--training-questions``
training ones (one user a question), their pools, the models and the evaluation: the oracle's 93
validation questions, the oracle dev questions and the `_S` dev questions, per question type.

The memories live in an embedded Postgres under ``--data-dir`` and are reused by the next run (building
the `_S` memory is ~50 minutes on 2 cores; pools and training then take minutes); ``--fresh`` builds
everything in a temporary directory. Writes bench/results/longmemeval.{json,md} and the training curves.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
from common import (  # first: puts the project on the import path
    ORACLE,
    ROOT,
    embedded_admin_url,
    machine,
    stopped_on_exit,
)

from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
)
from dreaming_dagster.defs.training import assets as ranker_assets
from dreaming_dagster.ingest.readers import default_haystacks_path
from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import embedded
from dreaming_dagster.training.longmemeval import file_sha256
from dreaming_dagster.training.workspace import RankerWorkspace

ASSETS = ["longmemeval_memory", "longmemeval_haystacks", "longmemeval_pools", "ranker_model", "ranker_evaluation"]


def step_seconds(instance: dg.DagsterInstance, run_id: str) -> dict[str, float]:
    started, seconds = {}, {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or not event.step_key:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            started[event.step_key] = entry.timestamp
        elif event.event_type == dg.DagsterEventType.STEP_SUCCESS:
            seconds[event.step_key] = round(entry.timestamp - started[event.step_key], 1)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=None, help="the oracle-format file pooled as one user")
    parser.add_argument("--haystacks", type=Path, default=None, help="the `_S` haystacks file")
    parser.add_argument("--training-questions", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=50)
    parser.add_argument("--lexical-pool-size", type=int, default=50)
    parser.add_argument("--limit-questions", type=int, default=None, help="only the oracle's first N questions")
    parser.add_argument("--data-dir", type=Path, default=ROOT / ".dreaming" / "longmemeval")
    parser.add_argument("--fresh", action="store_true", help="build every memory in a temporary directory")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", default="longmemeval",
                        help="the result files' name (a comparison run beside the committed one)")
    args = parser.parse_args()
    dataset = (args.dataset or ORACLE).resolve()
    haystacks = (args.haystacks or default_haystacks_path()).resolve()
    run_config = {"ops": {
        "longmemeval_memory": {"config": {"dataset_path": str(dataset), "mode": "one-user",
                                          "limit_questions": args.limit_questions}},
        "longmemeval_haystacks": {"config": {"dataset_path": str(haystacks),
                                             "training_questions": args.training_questions}},
        "longmemeval_pools": {"config": {"pool_size": args.pool_size, "lexical_pool_size": args.lexical_pool_size}},
        "ranker_model": {"config": {"epochs": args.epochs, "seed": args.seed, "promote": False}}}}

    with contextlib.ExitStack() as stack:
        if args.fresh:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dd-lme-")))
        else:
            data_dir = args.data_dir.resolve()
            data_dir.mkdir(parents=True, exist_ok=True)
        stack.enter_context(stopped_on_exit(data_dir / "pgdata"))
        admin = embedded_admin_url(data_dir / "pgdata")
        url = (embedded.fresh_database_url(admin, "lme") if args.fresh
               else embedded.embedded_url(data_dir / "pgdata", "lme"))
        resources = {"dreaming_db": DreamingDatabaseResource(database_url=url, data_dir=str(data_dir)),
                     "embedder": EmbedderResource(), "llm": LLMResource(),
                     "dreaming_policy": DreamingPolicyResource()}
        started = time.perf_counter()
        with dg.instance_for_test() as instance:
            result = dg.materialize([getattr(ranker_assets, name) for name in ASSETS], instance=instance,
                                    resources=resources, run_config=run_config)
            assert result.success
            seconds = step_seconds(instance, result.run_id)
            metadata = {name: {k: v.value for k, v in result.asset_materializations_for_node(name)[0].metadata.items()
                               if not isinstance(v.value, str) or not v.value.startswith("![")}
                        for name in ASSETS}
        total = round(time.perf_counter() - started, 1)
        with resources["dreaming_db"].database().connect() as conn:
            keys = {row["memory"]: {**row, "keys_per_pair": round(row["keys"] / row["pairs"], 3)}
                    for row in conn.execute(load_sql("bench/key_counts"), {
                        "kg_id": TRAINING_KG_ID, "oracle_user": "longmemeval", "haystack_users": "longmemeval-s-%"})}
        ws = RankerWorkspace(data_dir / "ranker")
        evaluation = json.loads(ws.evaluation_json.read_text())
        training = json.loads(ws.training.read_text())
        report = ws.evaluation_markdown.read_text()
        curves = ws.curves_png.read_bytes()

    memory, haystack_memory = metadata["longmemeval_memory"], metadata["longmemeval_haystacks"]
    command = "bench/longmemeval.py " + " ".join(sys.argv[1:])
    results = {
        "command": command, "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "dataset": dataset.name, "sha256": file_sha256(dataset),
        "haystacks": haystacks.name, "haystacks_sha256": file_sha256(haystacks),
        "embedding_model": memory["embedding_model"], "extraction_provider": memory["extraction_provider"],
        "config": run_config["ops"], "asset_seconds": seconds, "total_seconds": total,
        "memory": {k: v for k, v in memory.items() if k not in ("questions_by_type", "dataset")},
        "haystack_memory": {k: v for k, v in haystack_memory.items() if k != "dataset"},
        "keys": keys,
        "pools": {k: v for k, v in metadata["longmemeval_pools"].items()
                  if k not in ("by_question_type", "questions_table", "candidates_table")},
        "training": {"split": {part: len(training[f"{part}_ids"]) for part in ("train", "dev", "validation")},
                     "classifier_dev_accuracy": training["classifier_dev_accuracy"],
                     "model_free_dev_ndcg@10": training["model_free_dev_ndcg@10"],
                     "hidden": training["hidden"], "hidden_dev_ndcg@10": training["hidden_dev_ndcg@10"],
                     **{v: {"best_epoch": m["best_epoch"], "best_dev_ndcg@10": m["best_dev_ndcg@10"]}
                        for v, m in training["models"].items()}},
        "evaluation": evaluation,
    }
    stem = args.name
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (args.out_dir / f"{stem}_training_curves.png").write_bytes(curves)
    header = [f"Command: `{command}` · {results['date']} · {os.cpu_count()} cores, no GPU",
              f"Datasets: `{dataset.name}` (sha256 `{results['sha256']}`) pooled as one user; `{haystacks.name}` "
              f"(sha256 `{results['haystacks_sha256']}`), one user a question · embeddings "
              f"{results['embedding_model']} · extraction {results['extraction_provider']}",
              f"Oracle memory: {memory['pairs_inserted'] + memory['pairs_duplicate']:,} pairs · {memory['answerable']} "
              f"answerable questions of {memory['questions']}",
              f"`_S` memory: {haystack_memory['questions']} haystacks ({haystack_memory['dev_questions']} dev, "
              f"{haystack_memory['training_questions']} training questions)",
              "", "| asset | wall time (s) |", "|---|---:|",
              *[f"| {name} | {seconds.get(name, float('nan'))} |" for name in ASSETS],
              f"| total | {total} |", "", f"![training curves]({stem}_training_curves.png)", ""]
    (args.out_dir / f"{stem}.md").write_text("\n".join(header) + "\n" + report)
    print(report)
    print("wall time:", seconds, "total", total)


if __name__ == "__main__":
    main()
