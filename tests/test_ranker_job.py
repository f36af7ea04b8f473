"""train_ranker_job end to end on real Postgres and a real Dagster instance: a 12-question slice of the
oracle (one-user mode, 2 epochs) beside trimmed `_S` haystacks of its questions (per-question mode), three
LoCoMo conversations cut to two sessions and three RealMem personas cut to their first queries (both
per-conversation mode)."""

from __future__ import annotations

import json
import os
from unittest import mock

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
from tests.conftest import HAYSTACKS, ORACLE

RANKER_ASSETS = ["longmemeval_memory", "locomo_memory", "realmem_memory", "memory_encoder", "encoded_memories",
                 "longmemeval_haystacks", "longmemeval_pools", "ranker_model", "ranker_evaluation"]
def run_job(database_url, data_dir, run_config, only=RANKER_ASSETS):
    """The chain on MiniLM itself, as `make bench-longmemeval` runs it (the memory encoder trains from MiniLM)."""
    from dreaming_dagster.defs.training import assets as ranker_assets

    with mock.patch.dict(os.environ, {"DREAMING_DATABASE_URL": database_url}):  # the partitioning is read there
        job = load_defs().resolve_job_def("train_ranker_job")
    resources = {"dreaming_db": DreamingDatabaseResource(database_url=database_url, data_dir=str(data_dir)),
                 "embedder": EmbedderResource(provider="local", local_encoder="minilm"), "llm": LLMResource(provider="offline"),
                 "dreaming_policy": DreamingPolicyResource()}
    assets = [getattr(ranker_assets, name) for name in only]
    with dg.instance_for_test() as instance:
        result = dg.materialize(assets, instance=instance, resources=resources, run_config=run_config)
        metadata = {name: {k: v.value for k, v in result.asset_materializations_for_node(name)[0].metadata.items()}
                    for name in only}
    assert {key.to_user_string() for key in job.asset_layer.executable_asset_keys} == set(RANKER_ASSETS)
    return result, metadata


def config(mode="one-user", limit=12, epochs=2, prefix="lme", dataset=ORACLE, haystacks=HAYSTACKS, locomo="",
           realmem="", encoder=None):
    return {"ops": {"longmemeval_memory": {"config": {"dataset_path": str(dataset), "mode": mode,
                                                      "user_prefix": prefix, "limit_questions": limit}},
                    "longmemeval_haystacks": {"config": {"dataset_path": str(haystacks), "training_questions": 3}},
                    "locomo_memory": {"config": {"dataset_path": str(locomo)}},
                    "realmem_memory": {"config": {"dataset_path": str(realmem)}},
                    "memory_encoder": {"config": encoder or {"enabled": False}},
                    "longmemeval_pools": {"config": {"pool_size": 20, "lexical_pool_size": 10}},
                    "ranker_model": {"config": {"epochs": epochs, "seed": 3, "seeds": [3, 4]}}}}


def test_train_ranker_job_on_a_12_question_slice(database_url, tmp_path, trimmed_haystacks, trimmed_locomo,
                                                 trimmed_realmem):
    # The memory encoder trained on a few questions and kept whatever dev says, to run what follows a kept one.
    slice_config = config(haystacks=trimmed_haystacks, locomo=trimmed_locomo, realmem=trimmed_realmem,
                          encoder={"limit_questions": 8, "keep_without_gain": True})
    result, metadata = run_job(database_url, tmp_path, slice_config)
    assert result.success
    memory, locomo, realmem, tuned, encoded, haystacks, pools, model, evaluation = (
        metadata[name] for name in RANKER_ASSETS)
    # The memory encoder: its delta in the workspace; every benchmark vector, the `_S` memory's and the
    # ranker's queries come from it; MiniLM's first (the three memories it trained on).
    ws = RankerWorkspace(tmp_path.resolve() / "ranker")
    from dreaming_dagster.encoder_delta import encoder_id

    assert tuned["kept"] is True and tuned["training_seconds"] > 0 and ws.encoder_delta.is_file()
    assert "| oracle |" in tuned["dev_ndcg@10"] and "| realmem |" in tuned["dev_ndcg@10"]
    assert memory["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert encoded["re_embedded"] is True and encoded["embedding_model"] == encoder_id(ws.encoder_delta)
    assert encoded["pairs"] == memory["pairs_inserted"] + locomo["pairs_inserted"] + realmem["pairs_inserted"]
    assert haystacks["embedding_model"] == encoder_id(ws.encoder_delta)
    assert load_ranker(ws.model("v6")).embedding_model == encoder_id(ws.encoder_delta)
    assert memory["questions"] == 12 and memory["answerable"] <= 12 and memory["pairs_inserted"] > 100
    assert memory["users"] == 1 and memory["subjects_created"] > 0
    # The `_S` memory: each chosen haystack its own user (the slice's dev question and a test one).
    assert haystacks["users"] == 2 and (haystacks["dev_questions"], haystacks["test_questions"]) == (1, 1)
    assert haystacks["pairs_inserted"] > 20 and haystacks["subjects_created"] > 0
    # The people-chat memory: a user a conversation, each session saved once however many questions share it.
    assert locomo["users"] == 3 and locomo["questions"] == 40
    assert (locomo["train_questions"], locomo["dev_questions"], locomo["test_questions"]) == (15, 17, 8)
    sessions = [turns for record in json.loads(trimmed_locomo.read_text())
                for key, turns in record["conversation"].items() if key in ("session_1", "session_2")]
    assert locomo["pairs_inserted"] == sum((len(turns) + 1) // 2 for turns in sessions)  # two turns a pair
    # Hybrid pools: the 20 by cosine, up to 10 more by BM25, up to 20 through the graph and, for a question
    # naming a time, up to 2 × 25 from inside its window; only more.
    # The companion memory: a user a persona, one of each part; each query asked as of its session's start.
    assert realmem["users"] == 3 and realmem["questions"] == 7
    assert (realmem["train_questions"], realmem["dev_questions"], realmem["test_questions"]) == (3, 2, 2)
    assert pools["questions"] == memory["answerable"] + 2 + 40 + 7 and pools["s_questions"] == 2
    assert pools["locomo_questions"] == 40 and pools["realmem_questions"] == 7
    assert 20 * pools["oracle_questions"] < pools["candidates"] <= (20 + 10 + pools["graph_pool_size"] + 50) * pools["questions"]
    assert pools["graph_pool_size"] == 20  # the declared default reaches the pools
    assert 0 < pools["oracle_cosine_pool_recall"] <= pools["oracle_pool_recall"] <= 1
    import pandas as pd

    candidates = pd.read_parquet(ws.pool_candidates)
    manifest = json.loads(ws.haystacks_manifest.read_text())
    sessions = {q["question_id"]: set(q["session_ids"]) for q in manifest["questions"]}
    for row in candidates[candidates["memory"] == "s"].itertuples():
        assert row.session_id in sessions[row.question_id]  # an `_S` pool holds only its own haystack
    # A RealMem pool holds only pairs from before its query's session (recall's as_of).
    asked_at = {row.question_id: row.question_date for row in pd.read_parquet(ws.pool_questions).itertuples()
                if row.memory == "realmem"}
    import psycopg

    with psycopg.connect(database_url) as conn:
        occurred = {(session, turn): at for session, turn, at in conn.execute(
            "SELECT session_id, turn_index, occurred_at FROM memory_pairs WHERE user_id LIKE 'realmem-%'")}
    realmem_rows = candidates[candidates["memory"] == "realmem"]
    assert len(realmem_rows) and all(occurred[(row.session_id, row.turn_index)] < asked_at[row.question_id]
                                     for row in realmem_rows.itertuples())
    training = json.loads(ws.training.read_text())
    assert len(training["models"]["v6"]["history"]) == 2 and "dev_ndcg@10" in training["models"]["v6"]["history"][0]
    parts = [set(training[f"{part}_ids"]) for part in ("train", "dev", "validation", "test")]
    assert all(not a & b for i, a in enumerate(parts) for b in parts[i + 1:])
    assert {q.split(":")[0] for q in parts[1] if q.startswith("conv-")} == {"conv-30"}
    assert {q.split(":")[0] for q in parts[3] if q.startswith("conv-")} == {"conv-43"} and "2a1811e2" in parts[3]
    assert {q.split(":")[0] for q in parts[1] if ":Q-" in q} == {"Liam_O_Connor"}
    assert {q.split(":")[0] for q in parts[3] if ":Q-" in q} == {"Lin_Wanyu"}
    # Every network tried with each seed; the chosen one's worst-distribution gain decides publishing.
    assert training["seeds"] == [3, 4] and all(len(v) == 2 for v in training["hidden_dev_gain"].values())
    # Each part recall could drop is judged over the same seeds against the chosen network.
    assert {"v6", "v6-without-keys", "v6-without-key-candidates"} <= set(training["part_dev_gain"])
    assert all(len(v) == 2 for v in training["part_dev_gain"].values())
    assert set(training["parts"]) == set(training["part_dev_gain"]) - {"v6"}
    # Each verdict follows from the gains recorded beside it (the rule: tests/test_training.py).
    gains = training["part_dev_gain"]
    for part, verdict in training["parts"].items():
        spread = max(max(gains["v6"]) - min(gains["v6"]), max(gains[part]) - min(gains[part]))
        difference = sum(gains["v6"]) / len(gains["v6"]) - sum(gains[part]) / len(gains[part])
        assert verdict == ("pays" if difference > spread else "costs" if difference < -spread else "tie"), part
    # The fallback weight is the swept weight whose worst distribution scores best, from the scores recorded.
    swept = training["fallback"]["dev_ndcg@10"]
    assert set(map(float, swept)) == {0.25, 0.5, 1.0, 2.0}
    assert training["fallback"]["chosen_lex_weight"] == float(max(swept, key=lambda w: min(swept[w].values())))
    assert set(training["bars"]) == {"oracle", "s", "locomo", "realmem"}
    keys = ("v1", "v2", "v3", "v4", "v5", "v6", "v2-cosine-pool", "v6-oracle-only", "v6-without-keys",
            "v6-without-key-candidates", "v6-without-time", "v6-without-people-chat")
    assert {key: load_ranker(ws.model(key)).version for key in keys if ws.model(key).is_file()} == {
        "v1": "v1", "v2": "v2", "v3": "v3", "v4": "v4", "v5": "v5", "v6": "v6", "v2-cosine-pool": "v2",
        "v6-oracle-only": "v6", "v6-without-keys": "v6", "v6-without-key-candidates": "v6",
        "v6-without-people-chat": "v6", **({"v6-without-time": "v6"} if ws.model("v6-without-time").is_file() else {})}
    # Published only when v6 beats every distribution's best ordering without a model on dev.
    published = (tmp_path / "models" / "ranker.safetensors").resolve()
    should_publish = model["worst_dev_gain"] > 0
    assert model["worst_dev_gain"] == training["models"]["v6"]["best_dev_gain"]
    assert model["published"] == should_publish == published.is_file()
    # Whichever way the slice went, the file at recall's path is v6 exactly when it was published.
    assert (load_ranker(published).version if published.is_file() else None) == ("v6" if should_publish else None)
    assert "| ndcg@10 |" in evaluation["report"] and "by question type" in evaluation["report"]
    assert "| session recall_all@10 |" in evaluation["report"]
    assert "data:image/png;base64," in evaluation["training_curves"]
    report = json.loads(ws.evaluation_json.read_text())
    assert list(report["overall"]) == ["oracle validation", "`_S` test", "LoCoMo test", "RealMem test", "oracle dev",
                                       "`_S` dev", "LoCoMo dev", "RealMem dev"]
    # RealMem is reported at session level too: an evidence session among the top 5 / 10.
    realmem_test = report["overall"]["RealMem test"]
    assert 0 <= realmem_test["v6"]["session_any@5"] <= realmem_test["v6"]["session_any@10"] <= 1
    s_dev = report["overall"]["`_S` dev"]
    assert {"cosine", "bm25", "cosine+bm25 (RRF)", "v5", "v6", "v6 + sessions spread", "v6-oracle-only",
            "v6-without-keys", "v6-without-key-candidates", "v2-cosine-pool", "v6 (gold type)"} <= set(s_dev)
    assert s_dev["cosine"]["pool_recall"] <= s_dev["v6"]["pool_recall"]
    assert s_dev["v6"]["session_any@10"] >= s_dev["v6"]["session_all@10"]
    # Re-running the memory assets stores nothing twice.
    names = ["longmemeval_memory", "longmemeval_haystacks", "locomo_memory", "realmem_memory"]
    memories = {"ops": {name: slice_config["ops"][name] for name in names}}
    again, metadata_again = run_job(database_url, tmp_path, memories, only=names)
    assert again.success and all(metadata_again[name]["pairs_inserted"] == 0 for name in names)


@pytest.fixture(autouse=True)
def _no_env_leak(clean_env):
    yield
