"""train_ranker_job end to end on real Postgres and a real Dagster instance: a 12-question slice of the
oracle (one-user mode, 2 epochs), and the per-question mode on a tiny haystack."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from dreaming_dagster.definitions import defs as load_defs
from dreaming_dagster.defs.resources import (
    DreamingDatabaseResource,
    DreamingPolicyResource,
    EmbedderResource,
    LLMResource,
)
from dreaming_dagster.retrieval.ranker import load_ranker
from dreaming_dagster.training.workspace import RankerWorkspace
from tests.conftest import ORACLE

RANKER_ASSETS = ["longmemeval_memory", "longmemeval_pools", "ranker_model", "ranker_evaluation"]


def run_job(database_url, data_dir, run_config, only=RANKER_ASSETS):
    from dreaming_dagster.defs.training import assets as ranker_assets

    job = load_defs().resolve_job_def("train_ranker_job")
    resources = {"dreaming_db": DreamingDatabaseResource(database_url=database_url, data_dir=str(data_dir)),
                 "embedder": EmbedderResource(provider="local"), "llm": LLMResource(provider="offline"),
                 "dreaming_policy": DreamingPolicyResource()}
    assets = [getattr(ranker_assets, name) for name in only]
    with dg.instance_for_test() as instance:
        result = dg.materialize(assets, instance=instance, resources=resources, run_config=run_config)
        metadata = {name: {k: v.value for k, v in result.asset_materializations_for_node(name)[0].metadata.items()}
                    for name in only}
    assert {key.to_user_string() for key in job.asset_layer.executable_asset_keys} == set(RANKER_ASSETS)
    return result, metadata


def config(mode="one-user", limit=12, epochs=2, prefix="lme", dataset=ORACLE):
    return {"ops": {"longmemeval_memory": {"config": {"dataset_path": str(dataset), "mode": mode,
                                                      "user_prefix": prefix, "limit_questions": limit}},
                    "longmemeval_pools": {"config": {"pool_size": 20, "lexical_pool_size": 10}},
                    "ranker_model": {"config": {"epochs": epochs, "seed": 3}}}}


def test_train_ranker_job_on_a_12_question_slice(database_url, tmp_path):
    result, metadata = run_job(database_url, tmp_path, config())
    assert result.success
    memory, pools, model, evaluation = (metadata[name] for name in RANKER_ASSETS)
    assert memory["questions"] == 12 and memory["answerable"] <= 12 and memory["pairs_inserted"] > 100
    assert memory["users"] == 1 and memory["subjects_created"] > 0
    # Hybrid pools: the 20 by cosine, up to 10 more by BM25, up to 20 through the graph and, for a question
    # naming a time, up to 2 × 25 from inside its window; only more.
    assert pools["questions"] == memory["answerable"]
    assert 20 * pools["questions"] < pools["candidates"] <= (20 + 10 + pools["graph_pool_size"] + 50) * pools["questions"]
    assert pools["graph_pool_size"] == 20  # the declared default reaches the pools
    assert 0 < pools["cosine_pool_recall"] <= pools["pool_recall"] <= 1
    ws = RankerWorkspace(tmp_path.resolve() / "ranker")
    training = json.loads(ws.training.read_text())
    assert len(training["models"]["v4"]["history"]) == 2
    assert {v: load_ranker(ws.model(v)).version for v in ("v1", "v2", "v3", "v4", "v2-cosine-pool")} == {
        "v1": "v1", "v2": "v2", "v3": "v3", "v4": "v4", "v2-cosine-pool": "v2"}
    # Published only when v4 beats every model-free ranking on validation; either way the decision is recorded.
    published = (tmp_path / "models" / "ranker.safetensors").resolve()
    should_publish = model["validation_ndcg@10_v4"] > model["publishing_bar_ndcg@10"]
    assert model["publishing_bar_ndcg@10"] >= model["validation_ndcg@10_cosine"]  # the best of cosine, BM25, RRF
    assert model["publishing_bar"] in ("cosine", "bm25", "cosine+bm25 (RRF)")
    assert model["published"] == should_publish == published.is_file()
    # Whichever way the slice went, the file at recall's path is v4 exactly when it was published.
    assert (load_ranker(published).version if published.is_file() else None) == ("v4" if should_publish else None)
    assert "| ndcg@10 |" in evaluation["report"] and "Recall@10 by question type" in evaluation["report"]
    assert "data:image/png;base64," in evaluation["training_curves"]
    report = json.loads(ws.evaluation_json.read_text())
    assert set(report["overall"]["validation"]) == {"cosine", "bm25", "cosine+bm25 (RRF)", "v2 (cosine pool)",
                                                    "v1", "v2", "v3", "v4", "v4 (gold type)"}
    validation = report["overall"]["validation"]
    assert validation["cosine"]["pool_recall"] <= validation["v4"]["pool_recall"]
    assert validation["v2 (cosine pool)"]["pool_recall"] == validation["cosine"]["pool_recall"]
    # Re-running the memory asset stores nothing twice.
    memory_only = {"ops": {"longmemeval_memory": config()["ops"]["longmemeval_memory"]}}
    again, metadata_again = run_job(database_url, tmp_path, memory_only, only=["longmemeval_memory"])
    assert again.success and metadata_again["longmemeval_memory"]["pairs_inserted"] == 0


def test_per_question_mode_gives_each_question_its_own_user(database_url, tmp_path):
    # A tiny haystack: the first 6 oracle questions, each its own user.
    result, metadata = run_job(database_url, tmp_path, config(mode="per-question", limit=6, epochs=1, prefix="pq"))
    assert result.success
    memory, pools = metadata["longmemeval_memory"], metadata["longmemeval_pools"]
    assert memory["users"] == 6 and memory["mode"] == "per-question"
    ws = RankerWorkspace(tmp_path.resolve() / "ranker")
    import pandas as pd

    questions = pd.read_parquet(ws.pool_questions)
    candidates = pd.read_parquet(ws.pool_candidates)
    assert set(questions["user_id"]) == {f"pq-{q}" for q in questions["question_id"]}
    # Each pool holds only its own question's haystack.
    manifest = json.loads(ws.memory_manifest.read_text())
    sessions = {q["question_id"]: set(q["session_ids"]) for q in manifest["questions"]}
    for row in candidates.itertuples():
        assert row.session_id in sessions[row.question_id]
    assert pools["questions"] == len(questions)


@pytest.fixture(autouse=True)
def _no_env_leak(clean_env):
    yield
