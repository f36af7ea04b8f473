"""A deployment switching the local model to a delta encoder (DREAMING_EMBEDDING_ENCODER_DELTA), from outside:
the memory MiniLM embedded is refused with a message naming `dreaming reembed`, which moves it."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import psycopg
import pytest

from dreaming_dagster.embeddings import EmbeddingSpec
from dreaming_dagster.encoder_delta import encoder_id, save_delta
from dreaming_dagster.storage.database import recorded_spec
from tests.conftest import PROJECT_ROOT

DREAMING = str(PROJECT_ROOT / ".venv" / "bin" / "dreaming")
pytestmark = pytest.mark.slow  # three processes load MiniLM; the delta's merge is exported to ONNX once


def dreaming(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([DREAMING, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


def test_a_delta_encoder_asks_for_reembed_and_recalls_after_it(clean_env, database_url, tmp_path):
    clean_env.setenv("DREAMING_DATABASE_URL", database_url)
    clean_env.setenv("DREAMING_EMBEDDING_MODEL_CACHE_DIR", str(tmp_path / "models"))
    records = tmp_path / "pairs.jsonl"
    records.write_text("".join(json.dumps({"session_id": "s1", "user_message": text, "assistant_message": "Noted.",
                                           "occurred_at": f"2024-05-0{n + 1}T08:00:00Z", "turn_index": n}) + "\n"
                               for n, text in enumerate(["My sister Dana moved to Lyon.", "I adopted a dog, Biscuit.",
                                                         "I run by the river on Sundays."])))
    assert dreaming("ingest", str(records), "--user", "maya").returncode == 0  # MiniLM's vectors
    rng = np.random.default_rng(0)
    delta = tmp_path / "encoder_delta.safetensors"
    save_delta(delta, {f"encoder.layer.{n}.attention.self.query": (rng.normal(0, 0.05, (4, 384)),
                                                                   rng.normal(0, 0.05, (384, 4))) for n in range(6)}, 2.0)
    with_delta = {"DREAMING_EMBEDDING_ENCODER_DELTA": str(delta)}

    refused = dreaming("recall", "--user", "maya", "where did my sister move?", "--json", **with_delta)
    assert refused.returncode != 0
    assert "dreaming reembed" in refused.stderr and encoder_id(delta) in refused.stderr
    missing = dreaming("recall", "--user", "maya", "x", DREAMING_EMBEDDING_ENCODER_DELTA=str(tmp_path / "none"))
    assert missing.returncode != 0 and "DREAMING_EMBEDDING_ENCODER_DELTA" in missing.stderr

    moved = dreaming("reembed", **with_delta)
    assert moved.returncode == 0, moved.stderr[-2000:]
    recalled = dreaming("recall", "--user", "maya", "where did my sister move?", "--json", **with_delta)
    assert recalled.returncode == 0, recalled.stderr[-2000:]
    assert "Lyon" in json.loads(recalled.stdout)["memories"][0]["user_message"]
    with psycopg.connect(database_url) as conn:
        assert recorded_spec(conn) == EmbeddingSpec(model=encoder_id(delta), dimension=384)
    assert dreaming("recall", "--user", "maya", "x").returncode != 0  # MiniLM is refused now in turn
