"""A memory encoder shipped as a low-rank delta over the packaged MiniLM (encoder_delta.py): the merge, the
checks on a delta file, and the merged model written once into the cache."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from dreaming_dagster.encoder_delta import (
    BASE_MODEL,
    EncoderDeltaError,
    encoder_id,
    merged_encoder_dir,
    merged_weights,
    read_delta,
    save_delta,
)

LAYER = "encoder.layer.0.attention.self.query"


def factors(seed: int = 0, rank: int = 2, size: int = 6):
    rng = np.random.default_rng(seed)
    return {LAYER: (rng.normal(size=(rank, size)).astype(np.float32), rng.normal(size=(size, rank)).astype(np.float32))}


def test_the_merged_weight_is_the_base_plus_the_scaled_product(tmp_path):
    delta = tmp_path / "d.safetensors"
    save_delta(delta, factors(), scale=0.5)
    base = {f"{LAYER}.weight": np.eye(6, dtype=np.float32), f"{LAYER}.bias": np.zeros(6, np.float32)}
    merged = merged_weights(base, delta)
    (a, b), scale = read_delta(delta)[0][LAYER], read_delta(delta)[1]
    assert scale == 0.5 and a.dtype == np.float32
    assert np.allclose(merged[f"{LAYER}.weight"], np.eye(6) + 0.5 * b @ a, atol=1e-6)
    assert merged[f"{LAYER}.bias"] is base[f"{LAYER}.bias"]  # only the adapted weights change
    # Stored in float16: within its rounding of the factors given.
    a0, b0 = factors()[LAYER]
    assert np.allclose(a, a0, atol=2e-3) and np.allclose(b, b0, atol=2e-3)


def test_a_delta_names_its_encoder_by_its_bytes(tmp_path):
    one, two = tmp_path / "1.safetensors", tmp_path / "2.safetensors"
    save_delta(one, factors(0), 1.0)
    save_delta(two, factors(1), 1.0)
    assert encoder_id(one).startswith(f"{BASE_MODEL}+lora-") and encoder_id(one) != encoder_id(two)
    save_delta(two, factors(0), 1.0)
    assert encoder_id(one) == encoder_id(two)


def test_a_file_that_is_not_a_minilm_delta_is_refused(tmp_path):
    with pytest.raises(EncoderDeltaError, match="at least one layer"):
        save_delta(tmp_path / "empty.safetensors", {}, 1.0)
    with pytest.raises(EncoderDeltaError, match="rank-r"):
        save_delta(tmp_path / "bad.safetensors", {LAYER: (np.zeros((2, 6)), np.zeros((6, 3)))}, 1.0)
    other = tmp_path / "other.safetensors"
    save_file({f"{LAYER}.lora_A": np.zeros((2, 6), np.float16), f"{LAYER}.lora_B": np.zeros((6, 2), np.float16)},
              str(other), metadata={"base_model": "bert-base-uncased", "scale": "1.0"})
    with pytest.raises(EncoderDeltaError, match="not of sentence-transformers/all-MiniLM-L6-v2"):
        read_delta(other)
    half = tmp_path / "half.safetensors"
    save_file({f"{LAYER}.lora_A": np.zeros((2, 6), np.float16)}, str(half),
              metadata={"base_model": BASE_MODEL, "scale": "1.0"})
    with pytest.raises(EncoderDeltaError, match="without both factors"):
        read_delta(half)
    wrong_shape = tmp_path / "wide.safetensors"
    save_delta(wrong_shape, factors(size=7), 1.0)
    with pytest.raises(EncoderDeltaError, match="not a layer of"):
        merged_weights({f"{LAYER}.weight": np.eye(6, dtype=np.float32)}, wrong_shape)


def test_the_merged_model_is_written_once_into_the_cache(tmp_path):
    base = tmp_path / "base"
    (base / "1_Pooling").mkdir(parents=True)
    (base / "config.json").write_text("{}")
    (base / "1_Pooling" / "config.json").write_text("{}")
    save_file({f"{LAYER}.weight": np.eye(6, dtype=np.float32)}, str(base / "model.safetensors"))
    delta = tmp_path / "d.safetensors"
    save_delta(delta, factors(), 1.0)
    first = merged_encoder_dir(base, delta, tmp_path / "cache")
    written = (first / "model.safetensors").stat().st_mtime_ns
    assert (first / "1_Pooling" / "config.json").is_file() and (first / "config.json").is_file()
    (a, b), _ = read_delta(delta)[0][LAYER], None
    assert np.allclose(load_file(str(first / "model.safetensors"))[f"{LAYER}.weight"], np.eye(6) + b @ a, atol=1e-6)
    assert merged_encoder_dir(base, delta, tmp_path / "cache") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == written  # reused, not written again
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]  # no staging left behind


def test_the_local_provider_embeds_with_the_delta_the_settings_name(tmp_path, monkeypatch, clean_env):
    from dreaming_dagster import embeddings
    from dreaming_dagster.config.settings import DreamingSettings

    shipped, own = tmp_path / "shipped.safetensors", tmp_path / "own.safetensors"
    save_delta(own, factors(1), 1.0)
    monkeypatch.setattr(embeddings, "SHIPPED_ENCODER_DELTA", shipped)
    assert embeddings.local_encoder_delta(DreamingSettings()) is None  # a package that ships none: MiniLM
    save_delta(shipped, factors(0), 1.0)
    assert embeddings.local_encoder_delta(DreamingSettings()) == shipped
    clean_env.setenv("DREAMING_EMBEDDING_LOCAL_ENCODER", "minilm")
    assert embeddings.local_encoder_delta(DreamingSettings()) is None
    clean_env.setenv("DREAMING_EMBEDDING_ENCODER_DELTA", str(own))
    assert embeddings.local_encoder_delta(DreamingSettings()) == own.resolve()
    clean_env.setenv("DREAMING_EMBEDDING_ENCODER_DELTA", str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError, match="DREAMING_EMBEDDING_ENCODER_DELTA"):
        embeddings.local_encoder_delta(DreamingSettings())
    clean_env.setenv("DREAMING_EMBEDDING_LOCAL_ENCODER", "mpnet")
    with pytest.raises(ValueError, match="embedding_local_encoder"):
        DreamingSettings()
