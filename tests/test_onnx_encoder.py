"""The local model in ONNX Runtime: the same vectors as PyTorch, exported once into a cache, reused by
later processes, re-exported when the file is broken, and PyTorch when ONNX Runtime is not there."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from dreaming_dagster import onnx_encoder
from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import LocalMiniLMEmbedder, _minilm_dir, embedder_from_settings

pytestmark = pytest.mark.slow  # exports the encoder to ONNX

TEXTS = ["user: where does my sister live?",
         "assistant: " + "Lisbon has steep hills, trams and tiled facades. " * 40,  # past the 256-piece window
         "Hawaii", "", "user: I adopted a beagle named Max", "assistant: Congratulations on Max!",
         "Molokini crater", "my sister's wedding in Porto", "x " * 120]


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return LocalMiniLMEmbedder(runtime="torch").embed(TEXTS)


@pytest.fixture(scope="module")
def cached_export() -> Path:
    """The encoder file in the default cache, where the whole suite's local embedder reads it: exported by
    whichever test first needs it (the session's one real export on a cold cache), and read here."""
    LocalMiniLMEmbedder().embed(["Hawaii"])
    target = onnx_encoder.encoder_file(_minilm_dir(), DreamingSettings().resolved_model_cache_dir)
    assert target.exists()
    return target


@pytest.fixture
def copying_tracer(cached_export, monkeypatch) -> list[Path]:
    """Stands in for the slow trace of an export by copying the cached graph: the export's other steps (fusion,
    the check against PyTorch, the atomic write) run for real. Returns the paths it wrote."""
    traced = []

    def copy(model, probe, path: Path) -> None:
        shutil.copyfile(cached_export, path)
        traced.append(path)

    monkeypatch.setattr(onnx_encoder, "trace_to_onnx", copy)
    return traced


def test_onnx_runtime_gives_pytorchs_vectors_in_any_batching(torch_vectors, cached_export):
    embedder = LocalMiniLMEmbedder(batch_size=4, model_cache_dir=cached_export.parent)
    for _ in range(2):  # called repeatedly: the same answer
        vectors = embedder.embed(TEXTS)
        assert embedder.runtime_used == "onnx"
        assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
        assert np.abs(vectors - torch_vectors).max() < 1e-5
    # One text at a time, and all of them in one padded batch: the mask is honoured.
    one_by_one = np.vstack([embedder.embed([text]) for text in TEXTS])
    assert np.abs(one_by_one - torch_vectors).max() < 1e-5
    encoder = onnx_encoder.load_onnx_encoder(_minilm_dir(), cached_export.parent, 1)
    assert np.abs(encoder.encode(TEXTS) - torch_vectors).max() < 1e-5
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_the_export_is_cached_by_the_weights_digest_and_reused(cached_export):
    model_dir = _minilm_dir()
    assert onnx_encoder.encoder_file(model_dir, cached_export.parent) == cached_export  # a stable name
    assert "-opset17-" in cached_export.name
    assert cached_export.stat().st_mode & 0o777 == 0o644  # readable by other users (an image's cache)
    written = cached_export.stat().st_mtime_ns
    # A fresh process loads the file without exporting (no write, and no PyTorch model built).
    script = ("import sys; from pathlib import Path; from dreaming_dagster.embeddings import LocalMiniLMEmbedder;"
              f"e = LocalMiniLMEmbedder(model_cache_dir=Path({str(cached_export.parent)!r})); v = e.embed(['Hawaii']);"
              "print(e.runtime_used, 'sentence_transformers' in sys.modules, round(float(v[0] @ v[0]), 4))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split() == ["onnx", "False", "1.0"]
    assert cached_export.stat().st_mtime_ns == written


def test_a_broken_cached_file_is_exported_again(copying_tracer, tmp_path, caplog):
    model_dir = _minilm_dir()
    target = onnx_encoder.encoder_file(model_dir, tmp_path)
    target.write_bytes(b"not an onnx graph")
    with caplog.at_level(logging.WARNING, logger="dreaming_dagster.onnx_encoder"):
        encoder = onnx_encoder.load_onnx_encoder(model_dir, tmp_path, 1)
    assert "exporting it again" in caplog.text and len(copying_tracer) == 1
    assert target.stat().st_size > 10_000_000 and target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no leftover part files
    assert encoder.encode(["Hawaii"]).shape == (1, 384)


def test_an_export_that_disagrees_with_pytorch_is_refused_and_leaves_no_file(copying_tracer, tmp_path, monkeypatch):
    # A tolerance no fp32 export can meet: the check compares, it does not assume.
    monkeypatch.setattr(onnx_encoder, "EXPORT_TOLERANCE", 0.0)
    target = tmp_path / "encoder.onnx"
    with pytest.raises(onnx_encoder.ExportMismatchError, match="differs from PyTorch"):
        onnx_encoder.export_encoder(_minilm_dir(), target)
    assert copying_tracer and list(tmp_path.iterdir()) == []


def _operators(path) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node}


def test_the_export_is_fused_and_an_optimizer_failure_keeps_the_graph(cached_export, tmp_path, monkeypatch, caplog):
    assert {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu"} <= _operators(cached_export)
    assert "Softmax" not in _operators(cached_export)  # no attention left unfused

    from onnxruntime.transformers import optimizer

    def broken(*args, **kwargs):
        raise RuntimeError("no pattern here")

    monkeypatch.setattr(optimizer, "optimize_model", broken)
    graph = tmp_path / "graph.onnx"
    shutil.copyfile(cached_export, graph)
    with caplog.at_level(logging.WARNING, logger="dreaming_dagster.onnx_encoder"):
        assert onnx_encoder.fuse_transformer(graph, num_heads=12, hidden_size=384) == {}
    assert "fusion failed (no pattern here)" in caplog.text
    assert graph.read_bytes() == cached_export.read_bytes()  # the graph as it was, unfused or not


def test_exports_at_once_all_leave_one_whole_file(copying_tracer, tmp_path):
    # Each export writes a private part file and renames it over the target: a reader sees the whole file or none.
    target = tmp_path / "encoder.onnx"
    with ThreadPoolExecutor(max_workers=2) as pool:
        written = list(pool.map(lambda _: onnx_encoder.export_encoder(_minilm_dir(), target), range(2)))
    assert written == [target, target] and len(copying_tracer) == 2
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    assert onnx_encoder.OnnxSentenceEncoder(_minilm_dir(), target, 1).encode(["Hawaii"]).shape == (1, 384)


def test_without_onnx_runtime_the_embedder_says_so_and_uses_pytorch(torch_vectors, tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    onnx_encoder.load_onnx_encoder.cache_clear()
    try:
        embedder = LocalMiniLMEmbedder(model_cache_dir=tmp_path)
        with caplog.at_level(logging.WARNING, logger="dreaming_dagster.embeddings"):
            vectors = embedder.embed(TEXTS)
            embedder.embed(["again"])
        assert embedder.runtime_used == "torch"
        assert caplog.text.count("embedding with PyTorch") == 1  # said once, not on every call
        assert np.abs(vectors - torch_vectors).max() < 1e-6
    finally:
        onnx_encoder.load_onnx_encoder.cache_clear()


def test_the_runtime_is_a_setting_and_a_bad_value_names_it(clean_env, tmp_path):
    clean_env.setenv("DREAMING_EMBEDDING_LOCAL_RUNTIME", "torch")
    clean_env.setenv("DREAMING_EMBEDDING_MODEL_CACHE_DIR", str(tmp_path))
    settings = DreamingSettings()
    embedder = embedder_from_settings(settings)
    assert (embedder.runtime, embedder.model_cache_dir) == ("torch", tmp_path.resolve())
    embedder.embed(["Hawaii"])
    # Nothing exported (the shipped encoder's merged weights may be written there: PyTorch reads them too).
    assert embedder.runtime_used == "torch" and list(tmp_path.rglob("*.onnx")) == []
    clean_env.setenv("DREAMING_EMBEDDING_LOCAL_RUNTIME", "tensorrt")
    with pytest.raises(ValueError, match="embedding_local_runtime"):
        DreamingSettings()
    with pytest.raises(ValueError, match="runtime must be"):
        LocalMiniLMEmbedder(runtime="tensorrt")
    clean_env.delenv("DREAMING_EMBEDDING_LOCAL_RUNTIME")
    clean_env.delenv("DREAMING_EMBEDDING_MODEL_CACHE_DIR")
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert DreamingSettings().resolved_model_cache_dir == (tmp_path / "xdg" / "dreaming-dagster").resolve()


def test_the_probe_covers_padding_and_the_window():
    # The export check is only as good as its probe: texts of very different lengths, one past the window.
    from transformers import AutoTokenizer

    model_dir = _minilm_dir()
    counts = [len(ids) for ids in AutoTokenizer.from_pretrained(str(model_dir))(
        list(onnx_encoder.PROBE_TEXTS), truncation=True, max_length=onnx_encoder.max_seq_length(model_dir))["input_ids"]]
    assert max(counts) == onnx_encoder.max_seq_length(model_dir) == 256
    assert min(counts) == 2  # "" is [CLS] [SEP]
    assert json.loads((model_dir / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"] is True


def test_the_dagster_embedder_resource_carries_the_runtime_and_the_cache(clean_env, tmp_path):
    from dreaming_dagster.defs.resources import EmbedderResource

    embedder = EmbedderResource(local_runtime="torch", model_cache_dir=str(tmp_path)).embedder()
    assert (embedder.runtime, embedder.model_cache_dir) == ("torch", tmp_path.resolve())
    clean_env.setenv("DREAMING_EMBEDDING_LOCAL_RUNTIME", "onnx")  # the resource's field wins over the variable
    assert EmbedderResource(local_runtime="torch").embedder().runtime == "torch"
    assert EmbedderResource().embedder().runtime == "onnx"
