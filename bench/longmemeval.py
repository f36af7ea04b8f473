"""train_ranker_job on a LongMemEval file, from an empty database: results tables and each asset's wall time.

    .venv/bin/python bench/longmemeval.py [--dataset PATH] [--mode one-user] [--epochs 50] [--seed 0]

Runs the four ranker assets through Dagster (an ephemeral instance; a fresh embedded Postgres in a
temporary directory, so the memory is embedded and dreamed from scratch) with the project's default
providers: all-MiniLM-L6-v2 embeddings and the offline extractor unless DREAMING_* says otherwise.
Writes bench/results/longmemeval_<split>_<mode>.{json,md}.
"""

from __future__ import annotations

import argparse
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
from dreaming_dagster.storage import embedded
from dreaming_dagster.training.longmemeval import file_sha256
from dreaming_dagster.training.workspace import RankerWorkspace

ASSETS = ["longmemeval_memory", "longmemeval_pools", "ranker_model", "ranker_evaluation"]


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
    parser.add_argument("--dataset", type=Path, default=None)
    parser.add_argument("--mode", choices=["one-user", "per-question"], default="one-user")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=50)
    parser.add_argument("--lexical-pool-size", type=int, default=50)
    parser.add_argument("--limit-questions", type=int, default=None)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    dataset = (args.dataset or ORACLE).resolve()
    split = dataset.stem.replace("longmemeval_", "")
    run_config = {"ops": {
        "longmemeval_memory": {"config": {"dataset_path": str(dataset), "mode": args.mode,
                                          "limit_questions": args.limit_questions}},
        "longmemeval_pools": {"config": {"pool_size": args.pool_size, "lexical_pool_size": args.lexical_pool_size}},
        "ranker_model": {"config": {"epochs": args.epochs, "seed": args.seed, "promote": False}}}}

    with tempfile.TemporaryDirectory(prefix="dd-lme-") as tmp, stopped_on_exit(Path(tmp) / "pgdata"):
        data_dir = Path(tmp)
        url = embedded.fresh_database_url(embedded_admin_url(data_dir / "pgdata"), "lme")
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
        ws = RankerWorkspace(data_dir.resolve() / "ranker")
        evaluation = json.loads(ws.evaluation_json.read_text())
        training = json.loads(ws.training.read_text())
        report = ws.evaluation_markdown.read_text()
        curves = ws.curves_png.read_bytes()

    memory = metadata["longmemeval_memory"]
    command = "bench/longmemeval.py " + " ".join(sys.argv[1:])
    results = {
        "command": command, "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "dataset": dataset.name, "sha256": file_sha256(dataset), "mode": args.mode,
        "embedding_model": memory["embedding_model"], "extraction_provider": memory["extraction_provider"],
        "config": run_config["ops"], "asset_seconds": seconds, "total_seconds": total,
        "memory": {k: v for k, v in memory.items() if k not in ("questions_by_type", "dataset")},
        "pools": {k: v for k, v in metadata["longmemeval_pools"].items() if k not in ("by_question_type",)},
        "training": {"cosine_validation_ndcg@10": training["cosine_validation_ndcg@10"],
                     "classifier_validation_accuracy": training["classifier_validation_accuracy"],
                     **{v: {"best_epoch": m["best_epoch"], "best_validation_ndcg@10": m["best_validation_ndcg@10"]}
                        for v, m in training["models"].items()}},
        "evaluation": evaluation,
    }
    stem = f"longmemeval_{split}_{args.mode.replace('-', '_')}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{stem}.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (args.out_dir / f"{stem}_training_curves.png").write_bytes(curves)
    header = [f"Command: `{command}` · {results['date']} · {os.cpu_count()} cores, no GPU",
              f"Dataset: `{dataset.name}`, sha256 `{results['sha256']}` · mode {args.mode} · embeddings "
              f"{results['embedding_model']} · extraction {results['extraction_provider']}",
              f"Memory: {memory['pairs_inserted']:,} pairs, {memory['subjects_created']:,} subjects "
              f"({memory['subjects_merged']:,} merges), {memory['links']:,} links · {memory['answerable']} answerable "
              f"questions of {memory['questions']}",
              "", "| asset | wall time (s) |", "|---|---:|",
              *[f"| {name} | {seconds.get(name, float('nan'))} |" for name in ASSETS],
              f"| total | {total} |", "", f"![training curves]({stem}_training_curves.png)", ""]
    (args.out_dir / f"{stem}.md").write_text("\n".join(header) + "\n" + report)
    print(report)
    print("wall time:", seconds, "total", total)


if __name__ == "__main__":
    main()
