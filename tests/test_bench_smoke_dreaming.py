"""Smoke runs of the dreaming-side benchmarks (tests/bench_smoke.py): tiny sizes, same code."""

from __future__ import annotations

import pytest

from tests.bench_smoke import run_bench
from tests.conftest import ORACLE

# On the session's Postgres server (a bench alone starts its own).
pytestmark = [pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present"),
              pytest.mark.usefixtures("bench_on_session_server")]


def test_ingest_bench(tmp_path):
    result = run_bench("ingest", "--pairs", "30", "--runs", "1", out=tmp_path / "r.json")
    assert result["ingest_embed"]["pairs_per_s"] > 0 and result["ingest_only"]["pairs_per_s"] > 0


def test_embedding_quantization_bench(tmp_path):
    result = run_bench("embedding_quantization", "--pairs", "3", "--runs", "2", "--dev-questions", "2",
                       out=tmp_path / "r.json", remember_vectors=False)
    for texts in result["speed"].values():
        assert texts["texts"] > 0 and texts["int8_speedup"] > 0 and 0.5 < texts["cosine_to_fp32"]["p50"] <= 1.0001
    assert set(result["dev_quality"]) == {"longmemeval_oracle_dev", "locomo_dev"}
    for split in result["dev_quality"].values():
        assert split["questions"] == 2
        assert set(split["cosine_ndcg_at_10"]) == {"fp32", "int8", "fp32_pairs_int8_questions"}
        assert all(0 <= ndcg <= 1 for ndcg in split["cosine_ndcg_at_10"].values())


def test_key_vectors_bench(tmp_path):
    result = run_bench("key_vectors", "--pairs", "6", "--runs", "2", "--dev-questions", "2", out=tmp_path / "r.json",
                       remember_vectors=False)
    speed = result["speed"]
    assert speed["pairs"] == 6 and speed["statement_keys"] > 0
    assert all(ms > 0 for ms in speed["ms_per_pair"].values())  # a difference of two timings may be below 0 here
    assert isinstance(speed["pooled_keys_cost_vs_today"], float) and speed["int8_keys_cost_vs_today"] > 0
    assert set(result["dev_quality"]) == {"longmemeval_oracle_dev", "locomo_dev", "statement_keys", "outside_window"}
    for split in ("longmemeval_oracle_dev", "locomo_dev"):
        assert result["dev_quality"][split]["questions"] == 2
        assert set(result["dev_quality"][split]["cosine_ndcg_at_10"]) == {
            "no_keys", "own_key_vectors", "pooled_key_vectors", "int8_key_vectors"}
    # A pooled vector is a unit vector near, not equal to, the key's own.
    assert -1 <= result["pooled_to_own_cosine"]["p10"] <= result["pooled_to_own_cosine"]["p50"] < 0.99999


def test_embedding_batches_bench(tmp_path):
    result = run_bench("embedding_batches", "--pairs", "2", "--bulk-pairs", "3", "--runs", "1", out=tmp_path / "r.json",
                       remember_vectors=False)
    assert result["one_pair_at_a_time"]["pairs"] == 2 and result["bulk"]["texts"] == 6
    ways = {"padded", "length_batches_torch", "length_batches_onnx_unfused", "length_batches_onnx"}
    for kind in ("one_pair_at_a_time", "three_names", "one_query"):
        assert set(result[kind]["p50_ms"]) == ways and min(result[kind]["p50_ms"].values()) > 0
    assert set(result["bulk"]["median_s"]) == ways and result["largest_vector_difference"] < 1e-4
    assert result["one_pair_at_a_time"]["onnx_fused_to_unfused"] > 0
    probe = result["machine"]["speed_probe"]  # how fast the machine ran at the start and the end, in every result
    assert all(probe[end][key] > 0 for end in ("at_start", "at_end") for key in ("python_loop_ms", "matmul_ms"))


def test_dreaming_bench_side_by_side(tmp_path):
    result = run_bench("dreaming", "--runs", "1", "--throughput-pairs", "20", "--background-pairs", "40",
                       "--latency-samples", "2", out=tmp_path / "r.json")
    assert result["throughput"]["extractor"] == "entities" and result["throughput"]["statements_per_pair"] > 0
    assert result["fast_path"]["p50_s_median"] > 0 and result["fast_path"]["statements_per_sample_median"] > 0
    by_runtime = result["fast_path"]["by_runtime"]  # the local model's runtimes side by side, onnx the headline
    assert set(by_runtime) == {"onnx", "torch"} and result["fast_path"]["runtime"] == "onnx"
    assert all(len(cell["runs"][0]["samples_s"]) == 2 for cell in by_runtime.values())
    assert result["fast_path"]["p50_s_median"] == by_runtime["onnx"]["p50_s_median"]


def test_stages_bench(tmp_path):
    result = run_bench("stages", "--pairs", "20", "--runs", "1", out=tmp_path / "r.json")
    profile = result["sync_profile"]
    assert result["pairs"] == 20 and profile["postgres_statements"] > 0
    assert profile["extraction_s"] > 0 and profile["embedding_model_s"] > 0


def test_sensor_bench_counts_only_the_users_it_made_pending(tmp_path):
    # The bench asserts it itself; a schema change that leaves a stage unset in generate_pairs fails here.
    result = run_bench("sensor", "--users", "40", "--pairs-per-user", "3", "--repeats", "1", out=tmp_path / "r.json")
    assert result["users_with_pending_work"] == 4 and result["run_requests"] == 4


def test_reliability_bench(tmp_path):
    result = run_bench("reliability", "--kills", "1", "--users", "1", "--questions-per-user", "1", "--recalls", "5",
                       "--bulk-users", "50", "--savers", "3", "--saver-pairs", "60", "--terminations", "1",
                       "--termination-pairs", "300", "--llm-deadline", "0.5", out=tmp_path / "r.json")
    kill = result["kill_9_mid_sync"]  # the bench asserts the kill landed mid-sync
    assert kill["kills"] == 1 and kill["graphs_equal_to_uninterrupted"] == 1 and kill["lost_pairs"] == 0
    assert result["cross_tenant_recalls"]["leaks"] == 0
    assert result["concurrent_savers"]["rows"] == result["concurrent_savers"]["distinct"] == 60
    assert result["stored_counts"]["graphs"] > 50 and result["stored_counts"]["drifted"] == 0


def test_compact_pass_bench(tmp_path):
    result = run_bench("compact_pass", "--questions", "2", out=tmp_path / "r.json")
    assert result["pass_status"] == "applied" and result["pairs"] > 0
    assert result["after"]["subjects"] <= result["before"]["subjects"]  # a pass archives and merges, never adds


def test_llm_cost_bench_reads_the_committed_results(tmp_path):
    result = run_bench("llm_cost", out=tmp_path / "r.json")
    assert result["per_1000_pairs"]["input_tokens"] > 0


def test_extraction_workers_bench(tmp_path, monkeypatch):
    from dreaming_dagster.extraction.extractors import OfflineExtractor

    monkeypatch.setattr(OfflineExtractor, "PARALLEL_MIN_PAIRS", 8)  # workers take a batch this small here
    result = run_bench("extraction_workers", "--pairs", "24", "--runs", "1", out=tmp_path / "r.json")
    assert set(result["variants"]) == {"in process", "2 workers started per sync", "2 workers kept"}
    assert all(cell["median_s"] > 0 for cell in result["variants"].values())
    assert result["variants"]["in process"]["time_vs_in_process"] == 1.0


def test_scale_bench_runs_a_user_a_run_and_times_its_steps(tmp_path):
    result = run_bench("scale", "--sizes", "", "--no-ui", "--throughput-users", "2", "--pairs-per-user", "2",
                       "--buckets", "1", "--spawned-every", "2", out=tmp_path / "r.json")
    throughput = result["throughput"]
    assert throughput["all_runs_succeeded"] and throughput["unlinked_pairs_after"] == 0
    assert throughput["per_user_runs"] == 2 and throughput["spawned_per_user_runs"] == 1
    # The same user's run on dagster-postgres' own storage, taking turns with the project's.
    assert throughput["plain_storage_per_user_runs"] == 1 and throughput["kept_vs_plain_storage_run_s"] > 0
    assert throughput["per_user_vs_sync_user"] > 0 and throughput["per_user_steps_s_median"] > 0
    assert set(throughput["per_user_step_s_medians"]) >= {"memory_pairs", "subject_links", "refined_subjects"}
    # A run's wall time counts its launch and its worker's start: never less than its steps.
    assert throughput["per_user_run_vs_steps_median"] >= 1 and throughput["spawned_per_user_run_vs_steps_median"] >= 1
