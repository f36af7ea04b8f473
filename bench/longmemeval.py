"""train_ranker_job on four distributions, side by side in one run: results tables and each asset's wall time.

    .venv/bin/python bench/longmemeval.py [--training-questions 20] [--epochs 50] [--seed 0] [--ship]
                                          [--no-encoder] [--encoder-questions N]
                                          [--data-dir DIR [--memories-only [MEMORY ...]]]

Runs the nine ranker assets through Dagster (an ephemeral instance) with the project's default providers
(all-MiniLM-L6-v2 embeddings and the offline extractor unless DREAMING_* says otherwise): the pooled
oracle (one user, every session), the memory encoder trained on it and on LoCoMo and RealMem (kept only if it
beats MiniLM on every distribution's dev questions; then every memory is embedded by it), the `_S` haystacks of the dev and test questions and of
``--training-questions`` training ones (one user a question), LoCoMo's conversations between people (one user
a conversation), RealMem's personas (one user a persona, each query asked as of its session's start), their
pools, the models and the evaluation: each distribution's held-out part (the oracle's validation questions, the
`_S` test haystacks, LoCoMo's test conversation, RealMem's test persona) and its dev part, per question type.

By default every memory is built from nothing in a temporary directory (the `_S` haystacks are most of the
time); ``--data-dir`` keeps them in an embedded Postgres there for the next run, and ``--memories-only``
builds them and stops. ``--ship`` copies the v6 model into the package (what recall uses until a deployment
publishes its own) when it beats every distribution's best ordering without a model on dev, and with it the
memory encoder's delta it was trained on (or removes the shipped delta when MiniLM stays). Writes
bench/results/longmemeval.{json,md} and the training curves.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
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
    bench_sql,
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
from dreaming_dagster.embeddings import SHIPPED_ENCODER_DELTA
from dreaming_dagster.ingest.readers import default_haystacks_path
from dreaming_dagster.pipeline.pending_work import TRAINING_KG_ID
from dreaming_dagster.retrieval.ranker import SHIPPED_RANKER, load_ranker
from dreaming_dagster.storage import embedded
from dreaming_dagster.training.longmemeval import file_sha256
from dreaming_dagster.training.variants import PUBLISHED_VERSION
from dreaming_dagster.training.workspace import RankerWorkspace

MEMORIES = ["longmemeval_memory", "longmemeval_haystacks", "locomo_memory", "realmem_memory"]
ASSETS = [*MEMORIES, "memory_encoder", "encoded_memories", "longmemeval_pools", "ranker_model", "ranker_evaluation"]


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


def ship_question_type_classifier(settings) -> dict:
    """Recall reads question types only from a classifier fitted on its encoder's vectors: when the shipped
    encoder changed, the shipped classifier is fitted anew on the oracle's questions with it."""
    from dreaming_dagster.embeddings import local_embedder
    from dreaming_dagster.retrieval.question_type import (
        SHIPPED_CLASSIFIER,
        shipped_classifier,
        train_from_longmemeval,
    )

    encoder = local_embedder(settings, SHIPPED_ENCODER_DELTA if SHIPPED_ENCODER_DELTA.is_file() else None)
    current = shipped_classifier()
    if current is not None and current.embedding_model == encoder.spec.model:
        return {"refitted": False, "embedding_model": encoder.spec.model}
    report = train_from_longmemeval(ORACLE, encoder, SHIPPED_CLASSIFIER)
    return {"refitted": True, "embedding_model": encoder.spec.model, "questions": report.questions,
            "cv_accuracy": round(report.accuracy, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=None, help="the oracle-format file pooled as one user")
    parser.add_argument("--haystacks", type=Path, default=None, help="the `_S` haystacks file")
    parser.add_argument("--locomo", type=Path, default=None, help="the LoCoMo file (conversations between people)")
    parser.add_argument("--realmem", type=Path, default=None, help="the RealMem directory (a companion's personas)")
    parser.add_argument("--training-questions", type=int, default=20)
    parser.add_argument("--held-out-questions", type=int, default=None,
                        help="`_S` dev and test haystacks, a stratified sample of this many each (default: all)")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-encoder", action="store_true",
                        help="train no memory encoder: the memories and the ranker stay on MiniLM")
    parser.add_argument("--encoder-questions", type=int, default=None,
                        help="train the memory encoder on this many questions (a quick look)")
    parser.add_argument("--pool-size", type=int, default=50)
    parser.add_argument("--lexical-pool-size", type=int, default=50)
    parser.add_argument("--limit-questions", type=int, default=None, help="only the oracle's first N questions")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="keep the memories here and reuse them (default: a temporary directory, built anew)")
    parser.add_argument("--ship", action="store_true",
                        help="copy the v6 model into the package when it beats every distribution's bar on dev")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--memories-only", nargs="*", choices=MEMORIES, default=None, metavar="MEMORY",
                        help="build these memories (default: all four) under --data-dir, the slow part, and stop")
    parser.add_argument("--name", default="longmemeval",
                        help="the result files' name (a comparison run beside the committed one)")
    args = parser.parse_args()
    dataset = (args.dataset or ORACLE).resolve()
    haystacks = (args.haystacks or default_haystacks_path()).resolve()
    run_config = {"ops": {
        "longmemeval_memory": {"config": {"dataset_path": str(dataset), "mode": "one-user",
                                          "limit_questions": args.limit_questions}},
        "longmemeval_haystacks": {"config": {"dataset_path": str(haystacks),
                                             "training_questions": args.training_questions,
                                             "held_out_questions": args.held_out_questions}},
        "locomo_memory": {"config": {"dataset_path": str(args.locomo.resolve()) if args.locomo else ""}},
        "realmem_memory": {"config": {"dataset_path": str(args.realmem.resolve()) if args.realmem else ""}},
        "longmemeval_pools": {"config": {"pool_size": args.pool_size, "lexical_pool_size": args.lexical_pool_size}},
        "memory_encoder": {"config": {"enabled": not args.no_encoder, "limit_questions": args.encoder_questions}},
        "ranker_model": {"config": {"epochs": args.epochs, "seed": args.seed, "promote": False}}}}

    with contextlib.ExitStack() as stack:
        fresh = args.data_dir is None
        if fresh:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dd-lme-")))
        else:
            data_dir = args.data_dir.resolve()
            data_dir.mkdir(parents=True, exist_ok=True)
        stack.enter_context(stopped_on_exit(data_dir / "pgdata"))
        admin = embedded_admin_url(data_dir / "pgdata")
        url = (embedded.fresh_database_url(admin, "lme") if fresh
               else embedded.embedded_url(data_dir / "pgdata", "lme"))
        resources = {"dreaming_db": DreamingDatabaseResource(database_url=url, data_dir=str(data_dir)),
                     # From MiniLM, whatever the package ships: the run trains the encoder it may ship.
                     "embedder": EmbedderResource(local_encoder="minilm"), "llm": LLMResource(),
                     "dreaming_policy": DreamingPolicyResource()}
        started = time.perf_counter()
        with dg.instance_for_test() as instance:
            if args.memories_only is not None:
                names = args.memories_only or MEMORIES
                result = dg.materialize([getattr(ranker_assets, name) for name in names], instance=instance,
                                        resources=resources, run_config={"ops": {
                                            name: run_config["ops"][name] for name in names}})
                assert result.success
                print("memories built:", step_seconds(instance, result.run_id))
                return
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
                    for row in conn.execute(bench_sql("key_counts"), {
                        "kg_id": TRAINING_KG_ID, "oracle_user": "longmemeval", "haystack_users": "longmemeval-s-%",
                        "locomo_users": "locomo-%", "realmem_users": "realmem-%"})}
        ws = RankerWorkspace(data_dir / "ranker")
        evaluation = json.loads(ws.evaluation_json.read_text())
        training = json.loads(ws.training.read_text())
        report = ws.evaluation_markdown.read_text()
        curves = ws.curves_png.read_bytes()
        scored = ws.model(PUBLISHED_VERSION).read_bytes()  # the v6 file the evaluation scored
        ships = args.ship and training["models"][PUBLISHED_VERSION]["best_dev_gain"] > 0
        if ships:
            SHIPPED_RANKER.write_bytes(scored)
            # The ranker read the memory encoder's vectors when it was kept: the package ships both, or neither.
            if ws.encoder_delta.is_file():
                SHIPPED_ENCODER_DELTA.write_bytes(ws.encoder_delta.read_bytes())
            else:
                SHIPPED_ENCODER_DELTA.unlink(missing_ok=True)
            shipped_classifier = ship_question_type_classifier(resources["embedder"].settings())
        else:
            shipped_classifier = None
        ranker = load_ranker(ws.model(PUBLISHED_VERSION))
        shipped_model = {"sha256": hashlib.sha256(scored).hexdigest(), "version": ranker.version,
                         "embedding_model": ranker.embedding_model, "hidden": training["hidden"],
                         "shipped": ships, "path": str(SHIPPED_RANKER.relative_to(ROOT))}

    memory, haystack_memory = metadata["longmemeval_memory"], metadata["longmemeval_haystacks"]
    locomo_memory, realmem_memory = metadata["locomo_memory"], metadata["realmem_memory"]
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
        "locomo_memory": {k: v for k, v in locomo_memory.items() if k != "dataset"},
        "realmem_memory": {k: v for k, v in realmem_memory.items() if k != "dataset"},
        "memory_encoder": {**metadata["memory_encoder"], **metadata["encoded_memories"]},
        "keys": keys,
        "pools": {k: v for k, v in metadata["longmemeval_pools"].items()
                  if k not in ("by_question_type", "questions_table", "candidates_table")},
        "shipped_model": shipped_model, "shipped_question_type_classifier": shipped_classifier,
        "training": {"split": {part: len(training[f"{part}_ids"]) for part in ("train", "dev", "validation", "test")},
                     "classifier_dev_accuracy": training["classifier_dev_accuracy"],
                     "model_free_dev_ndcg@10": training["model_free_dev_ndcg@10"],
                     "hidden": training["hidden"], "seeds": training["seeds"],
                     "hidden_dev_gain": training["hidden_dev_gain"], "part_dev_gain": training["part_dev_gain"],
                     "parts": training["parts"], "bars": training["bars"],
                     "fallback": training["fallback"],
                     **{v: {"best_epoch": m["best_epoch"], "best_dev_ndcg@10": m["best_dev_ndcg@10"],
                            "best_dev_gain": m["best_dev_gain"]}
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
              f"{haystack_memory['test_questions']} test, {haystack_memory['training_questions']} training questions)",
              f"LoCoMo memory: {locomo_memory['users']} conversations, {locomo_memory['questions']} questions "
              f"({locomo_memory.get('train_questions', 0)} train, {locomo_memory.get('dev_questions', 0)} dev, "
              f"{locomo_memory.get('test_questions', 0)} test)",
              f"RealMem memory: {realmem_memory['users']} personas, {realmem_memory['questions']} queries "
              f"({realmem_memory.get('train_questions', 0)} train, {realmem_memory.get('dev_questions', 0)} dev, "
              f"{realmem_memory.get('test_questions', 0)} test), each asked as of its session's start",
              f"Memory encoder: {'kept' if results['memory_encoder'].get('kept') else 'not kept, MiniLM embeds'}"
              f" (worst dev gain of cosine NDCG@10 {results['memory_encoder'].get('worst_dev_gain', float('nan')):+.4f})"
              f" · the memories and the ranker embedded by {results['memory_encoder'].get('embedding_model')}",
              f"Shipped model: {'yes' if ships else 'no'} · v6 sha256 `{shipped_model['sha256']}`",
              "", "| asset | wall time (s) |", "|---|---:|",
              *[f"| {name} | {seconds.get(name, float('nan'))} |" for name in ASSETS],
              f"| total | {total} |", "", f"![training curves]({stem}_training_curves.png)", ""]
    (args.out_dir / f"{stem}.md").write_text("\n".join(header) + "\n" + report)
    print(report)
    print("wall time:", seconds, "total", total)


if __name__ == "__main__":
    main()
