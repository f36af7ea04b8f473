"""Smoke runs of the retrieval-side benchmarks (tests/bench_smoke.py): tiny sizes, same code."""

from __future__ import annotations

import json
import re

import pytest

from dreaming_dagster.storage.embedded import resolved_shared_buffers
from tests.bench_smoke import run_bench
from tests.conftest import ORACLE

# On the session's Postgres server (a bench alone starts its own).
pytestmark = [pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present"),
              pytest.mark.usefixtures("bench_on_session_server")]


def megabytes(size: str) -> float:
    """A size as Postgres shows it (SHOW shared_buffers: 128MB, 6GB)."""
    number, unit = re.fullmatch(r"(\d+)(kB|MB|GB|TB)", size).groups()
    return int(number) * {"kB": 1 / 1024, "MB": 1, "GB": 1024, "TB": 2**20}[unit]


def test_recall_bench(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCH_EMBEDDED_ADMIN_URL")  # its shared_buffers rounds restart a server of its own
    result = run_bench("recall", "--pairs", "1500", "--subjects", "300", "--topics", "20", "--light-users", "3",
                       "--mid-pairs", "400", "--queries", "15", "--shared-buffers-rounds", "1", out=tmp_path / "r.json")
    latency = result["latency_heavy_user"]
    assert result["data"]["heavy_user_postings"] > 0 and latency["hybrid"] and latency["hybrid_statement_pool"]
    # The pool found in the process and the statement's own draw the same rows, query by query.
    assert latency["hybrid_rows_equal_to_statement_pool"] == "25/25"
    # The served statement (with the graph side) ran every query, its subjects read through their indexes.
    assert latency["served"]["n"] == latency["hybrid"]["n"] == 15
    assert {"subjects_embedding_hnsw_idx", "subjects_name_words_idx"} <= set(result["plan_heavy_user_served"]["indexes"])
    # The mid-sized user's series measures the exact path: its scans must come back short, and its vectors
    # must be read in line (migration 0021; out of line they cost ~3 buffers each, two a pair).
    mid = result["mid_user"]
    assert mid["served"]["n"] == 15 and mid["plan_served"]["exact_fallback_executed"]
    assert mid["exact_scan"]["pairs"] == 400 and mid["exact_scan"]["buffers_per_pair"] < 1
    assert set(mid["vector_storage"].values()) == {"m"}
    assert result["recall_end_to_end"]["recall"]["n"] == 15  # recall() end to end, every question timed
    # The bench's server ran with the embedded default; the comparison's rounds each started it with their own
    # setting and timed every query.
    auto = megabytes(resolved_shared_buffers("auto"))
    assert megabytes(result["data"]["shared_buffers"]) == auto
    compared = result["shared_buffers"]
    assert megabytes(compared["postgres_default"]["shared_buffers"]) == 128
    assert megabytes(compared["embedded_default"]["shared_buffers"]) == auto
    assert all(compared[name][series]["n"] == 25 for name in ("postgres_default", "embedded_default")
               for series in ("composite", "hybrid"))


def test_lexical_bench(tmp_path):
    result = run_bench("lexical", "--limit-questions", "6", out=tmp_path / "r.json")
    assert result["answerable_questions"] > 0 and result["methods"]


def test_encoder_coverage_bench(tmp_path):
    result = run_bench("encoder_coverage", "--limit-questions", "4", "--cache-dir", str(tmp_path / "cache"),
                       out=tmp_path / "r.json")
    assert result["answerable_questions"] > 0
    assert all(0 <= m["recall@10"] <= 1 for m in result["cosine_ranking"].values())


def test_question_type_bench(tmp_path):
    assert run_bench("question_type", out=tmp_path / "r.json")["cv_accuracy_5_fold"] > 0


def test_longmemeval_bench(tmp_path, trimmed_haystacks, trimmed_locomo, trimmed_realmem):
    run_bench("longmemeval", "--limit-questions", "12", "--haystacks", str(trimmed_haystacks), "--locomo",
              str(trimmed_locomo), "--realmem", str(trimmed_realmem), "--training-questions", "3", "--epochs", "1",
              "--out-dir", str(tmp_path))
    result = json.loads((tmp_path / "longmemeval.json").read_text())
    assert result["haystack_memory"]["questions"] == 2 and result["locomo_memory"]["questions"] == 40
    assert result["realmem_memory"]["questions"] == 7
    assert list(result["evaluation"]["overall"]) == ["oracle validation", "`_S` test", "LoCoMo test", "RealMem test",
                                                     "oracle dev", "`_S` dev", "LoCoMo dev", "RealMem dev"]
    assert result["memory"]["pairs_inserted"] > 0  # built from nothing by default
    assert result["shipped_model"]["shipped"] is False and len(result["shipped_model"]["sha256"]) == 64
    assert (tmp_path / "longmemeval.md").read_text().count("by question type") == 8


def test_graph_bench(tmp_path):
    result = run_bench("graph", "--limit-questions", "10", "--throughput-pairs", "20", "--runs", "1", "--epochs", "1",
                       "--demo-users", "1", "--demo-questions-per-user", "1", out=tmp_path / "r.json")
    assert set(result["ablation"]) == {"entities"} and result["health"]["entities"]["subjects"] > 0


def test_serve_bench(tmp_path):
    result = run_bench("serve", "--users", "300", "--clients", "1,2", "--seconds", "1", "--max-requests", "10",
                       "--profile-seconds", "3", "--answer-questions", "2", out=tmp_path / "r.json")
    assert result["cells"] and all(cell["errors"] == 0 for cell in result["cells"].values())
    profile = result["cpu_profile"]
    assert profile["cell"]["requests"] > 0 and profile["cpu_seconds"]["service"] > 0
    assert profile["cpu_seconds"]["postgres"] > 0 and profile["service_samples"]["samples"] > 0
    assert profile["service_samples"]["by_stage"]["recall()"] > 0  # py-spy saw the service's recalls
    assert [len(ids) for ids in result["answers"]["u300"]] == [10, 10]
    # Each recall's stages are read from its own timings; the 1-client ratio sets recall against its statement.
    one_client = result["one_client_recall_to_statement"]
    assert set(one_client) == {"u300 · http · 1", "u300 · in-process · 1"}
    for name, ratio in one_client.items():
        stages = result["cells"][name]["recall_stages_p50_ms"]
        assert set(stages) >= {"embed", "query"} and ratio["statement_p50_ms"] == stages["query"] > 0
        assert ratio["recall_p50_ms"] > ratio["statement_p50_ms"]  # recall runs the statement and more
    bound = profile["requests_per_s_the_cores_carry"]
    assert 0 < bound["every side"] < bound["postgres alone"]


def test_time_bench(tmp_path):
    result = run_bench("time", "--limit-questions", "12", "--epochs", "1", out=tmp_path / "r.json")
    assert result["resolvers"]["this project's grammar"]["accuracy"] >= 0.95
    assert result["question_parsing"]["questions"] == 12 and result["dated_pairs"]["pairs"] > 0
    assert set(result["comparison"]) == {"validation", "all"}


def test_encoder_training_bench(tmp_path, trimmed_haystacks, trimmed_locomo, trimmed_realmem):
    data_dir = tmp_path / "memories"
    run_bench("longmemeval", "--limit-questions", "12", "--haystacks", str(trimmed_haystacks), "--locomo",
              str(trimmed_locomo), "--realmem", str(trimmed_realmem), "--training-questions", "3",
              "--data-dir", str(data_dir), "--memories-only")
    # From a fresh process, as `make bench-encoder-training` runs it after the memories' bench (which stopped
    # their server); every embedding runs its model, a fine-tuned encoder's among them.
    import subprocess
    import sys

    from tests.bench_smoke import BENCH

    subprocess.run([sys.executable, str(BENCH / "encoder_training.py"), "--data-dir", str(data_dir), "--seeds", "0",
                    "--adapter-epochs", "2", "--lora-seeds", "0", "--lora-questions", "4", "--contexts",
                    "previous pair", "--out", str(tmp_path / "r.json")], check=True, timeout=900)
    result = json.loads((tmp_path / "r.json").read_text())
    assert set(result["questions"]) == {"oracle", "s", "locomo", "realmem"}
    assert result["questions"]["realmem"] == {"train": 3, "dev": 2, "test": 2}
    for method in (result["minilm"], result["context"]["previous pair"], *result["adapter"]["by_seed"],
                   *result["lora"]["by_seed"]):
        assert 0 <= method["locomo"]["test"]["ndcg@10"] <= 1 and method["oracle"]["dev"]["questions"] > 0
    assert len(result["adapter"]["histories"]["0"]) == 3 and result["lora"]["seconds"][0]["training"] > 0
    assert "| RealMem | test | 2 |" in (tmp_path / "r.md").read_text()


def test_graph_expansion_bench(tmp_path, trimmed_locomo):
    import subprocess
    import sys

    from tests.bench_smoke import BENCH

    data_dir = tmp_path / "memories"
    run_bench("longmemeval", "--locomo", str(trimmed_locomo), "--data-dir", str(data_dir),
              "--memories-only", "locomo_memory")
    # A fresh process, as after `make bench-encoder-training`'s memories (that bench stopped their server).
    subprocess.run([sys.executable, str(BENCH / "graph_expansion.py"), "--data-dir", str(data_dir), "--leaders", "3",
                    "--weights", "0.5", "1", "--out", str(tmp_path / "r.json")], check=True, timeout=900)
    result = json.loads((tmp_path / "r.json").read_text())
    assert [(g["leaders"], g["weight"]) for g in result["rerank"]["grid"]] == [(3, 0.5), (3, 1.0)]
    for part in ("dev", "test"):
        recall = result["pool_recall"][part]
        assert 0 <= recall["without"] <= recall["with graph candidates"] <= 1
        assert 0 <= result["shipped"][part]["all"] <= 1
    assert {(e["part"], e["leaders"]) for e in result["expansion"]} == {("dev", 3), ("test", 3)}
    assert "Pool expansion through" in (tmp_path / "r.md").read_text()
