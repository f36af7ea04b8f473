"""A memory encoder shipped small: the low-rank (LoRA) factors of a fine-tuned all-MiniLM-L6-v2, merged into
the packaged MiniLM's weights on first use.

A delta file is a safetensors file holding, for each adapted linear layer of MiniLM (named as in MiniLM's own
``model.safetensors``, e.g. ``encoder.layer.0.attention.self.query``), its factors ``<layer>.lora_A`` [r, in]
and ``<layer>.lora_B`` [out, r]; its metadata names the base model and the scale (LoRA's alpha / r). The
merged weight is W + scale · B·A. :func:`merged_encoder_dir` writes the merged model once, as a
sentence-transformers directory in the model cache named by the delta's digest, which the local embedder then
exports to ONNX like MiniLM itself. :func:`encoder_id` names the encoder in the embedding spec, so vectors of
two encoders are never compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np

BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
WEIGHTS = "model.safetensors"
_LOCK = threading.Lock()


class EncoderDeltaError(ValueError):
    """A delta file that is not a LoRA delta of the packaged MiniLM."""


def delta_digest(path: Path) -> str:
    """The digest of a delta's content (its tensors and metadata, in sorted order): the same factors saved
    twice digest alike, though safetensors orders a file's metadata as it likes."""
    from safetensors import safe_open

    digest = hashlib.sha256()
    with safe_open(str(path), framework="numpy") as handle:
        digest.update(json.dumps(handle.metadata() or {}, sort_keys=True).encode())
        for key in sorted(handle.keys()):  # noqa: SIM118
            tensor = handle.get_tensor(key)
            digest.update(f"{key}:{tensor.dtype}:{tensor.shape}".encode())
            digest.update(np.ascontiguousarray(tensor).tobytes())
    return digest.hexdigest()


def encoder_id(path: Path) -> str:
    """The embedding spec's model name for MiniLM with this delta: the base and the delta's digest."""
    return f"{BASE_MODEL}+lora-{delta_digest(path)[:12]}"


def save_delta(path: Path, factors: Mapping[str, tuple[np.ndarray, np.ndarray]], scale: float,
               metadata: Mapping[str, str] | None = None) -> None:
    """Write ``factors`` (layer → (A [r, in], B [out, r])) in float16 with the scale; atomically."""
    from safetensors.numpy import save_file

    if not factors:
        raise EncoderDeltaError("a delta needs at least one layer's factors")
    tensors = {}
    for layer, (a, b) in sorted(factors.items()):
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise EncoderDeltaError(f"{layer}: factors of shapes {a.shape} and {b.shape} do not make a rank-r update")
        tensors[f"{layer}.lora_A"] = np.ascontiguousarray(a, np.float16)
        tensors[f"{layer}.lora_B"] = np.ascontiguousarray(b, np.float16)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata={**(metadata or {}), "base_model": BASE_MODEL, "scale": repr(float(scale))})
    tmp.replace(path)


def read_delta(path: Path) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], float]:
    """(layer → (A, B) as float32, scale), checked to be a delta of :data:`BASE_MODEL`."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        metadata = handle.metadata() or {}
        if metadata.get("base_model") != BASE_MODEL:
            raise EncoderDeltaError(f"{path}: a delta of {metadata.get('base_model')!r}, not of {BASE_MODEL}")
        tensors = {key: handle.get_tensor(key).astype(np.float32) for key in handle.keys()}  # noqa: SIM118
    layers = sorted({key.rsplit(".", 1)[0] for key in tensors})
    missing = [layer for layer in layers if f"{layer}.lora_A" not in tensors or f"{layer}.lora_B" not in tensors]
    if missing or not layers:
        raise EncoderDeltaError(f"{path}: layers without both factors: {missing or 'no layers'}")
    return {layer: (tensors[f"{layer}.lora_A"], tensors[f"{layer}.lora_B"]) for layer in layers}, float(metadata["scale"])


def merged_weights(base: Mapping[str, np.ndarray], delta: Path) -> dict[str, np.ndarray]:
    """MiniLM's weights with the delta added to each of its layers."""
    factors, scale = read_delta(delta)
    merged = dict(base)
    for layer, (a, b) in factors.items():
        weight = base.get(f"{layer}.weight")
        if weight is None or weight.shape != (b.shape[0], a.shape[1]):
            raise EncoderDeltaError(f"{delta}: {layer} is not a layer of {BASE_MODEL} of shape "
                                    f"{(b.shape[0], a.shape[1])}")
        merged[f"{layer}.weight"] = (weight.astype(np.float32) + scale * (b @ a)).astype(weight.dtype)
    return merged


def merged_encoder_dir(base_dir: Path, delta: Path, cache_dir: Path) -> Path:
    """A sentence-transformers directory of MiniLM with ``delta`` merged in, written into ``cache_dir`` on the
    first call (by any process) and reused after: named by the delta's digest, moved into place whole."""
    from safetensors.numpy import load_file, save_file

    target = Path(cache_dir) / f"all-MiniLM-L6-v2-lora-{delta_digest(delta)[:16]}"
    with _LOCK:
        if (target / WEIGHTS).is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            shutil.copytree(base_dir, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(WEIGHTS, "*.onnx"))
            save_file(merged_weights(load_file(str(Path(base_dir) / WEIGHTS)), delta), str(staging / WEIGHTS),
                      metadata={"format": "pt"})
            (staging / "encoder_delta.json").write_text(json.dumps({"base_model": BASE_MODEL,
                                                                    "delta_sha256": delta_digest(delta)}))
            try:
                os.rename(staging, target)
            except OSError:  # another process moved its copy into place first: the same bytes
                if not (target / WEIGHTS).is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target
