"""The local sentence encoder (all-MiniLM-L6-v2) run by ONNX Runtime instead of PyTorch's eager mode.

Same weights, same fp32 arithmetic, same tokenizer, pooling and normalisation as sentence-transformers: the
vectors agree with PyTorch's to ~2e-7 (checked on every export and in tests/test_embeddings.py), so stored
vectors need no re-embedding and both runtimes can write to one database. What changes is the time
(`make bench-embedding-batches` times both side by side) — eager PyTorch pays Python and dispatch overhead
per operator, most of a short text's cost, and the exported graph is fused (:func:`fuse_transformer`: one
Attention operator a layer), which takes about a fifth off a long text's arithmetic.

The ONNX graph is exported once from the installed weights (torch.onnx and the fusion, ~10 s) into a cache directory,
keyed by the weights' digest, and loaded from there by later processes (~0.3 s). Nothing is downloaded.
sentence-transformers' own ONNX backend would do the same through optimum-onnx, which cannot be installed
beside transformers 5 (its releases pin transformers < 5), hence this small module.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

EXPORT_OPSET = 17
# Bump when the export itself changes (inputs, outputs, options): old files are then ignored, not reused.
EXPORT_FORMAT = 2  # the export's file name carries it: a change of format is a new file
# Largest |difference| allowed between ONNX Runtime's and PyTorch's pooled, normalised vectors on the probe
# texts when an export is checked; fp32 reorderings give ~2e-7.
EXPORT_TOLERANCE = 1e-5
# Texts of very different lengths in one padded batch: the export must honour the attention mask.
PROBE_TEXTS = (
    "user: where does my sister live?",
    "assistant: " + "Lisbon has steep hills, trams and tiled facades; the light is soft in the evening. " * 30,
    "Hawaii",
    "",
)


_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class ExportMismatchError(RuntimeError):
    """An exported graph's vectors differ from PyTorch's: the export is not used."""


def _weights_file(model_dir: Path) -> Path:
    return model_dir / "model.safetensors"


def encoder_file(model_dir: Path, cache_dir: Path) -> Path:
    """Where the ONNX export of the model in ``model_dir`` lives in ``cache_dir``: named by the digest of
    the weights and the export format, so other weights or another export never read a stale file."""
    digest = hashlib.sha256()
    with _weights_file(model_dir).open("rb") as weights:
        for block in iter(lambda: weights.read(1 << 20), b""):
            digest.update(block)
    return cache_dir / f"{model_dir.parent.name}-{digest.hexdigest()[:16]}-opset{EXPORT_OPSET}-v{EXPORT_FORMAT}.onnx"


def max_seq_length(model_dir: Path) -> int:
    """The word pieces the encoder reads (sentence-transformers' setting for the model; 256 for MiniLM)."""
    return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])


def mean_pooled(hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling over the unpadded tokens, then L2 normalisation."""
    mask = attention_mask[..., None].astype(np.float32)
    summed = (hidden * mask).sum(axis=1)
    pooled = summed / np.clip(mask.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


def export_encoder(model_dir: Path, target: Path) -> Path:
    """Export the transformer of ``model_dir`` to ``target`` (atomically: a concurrent process sees the
    whole file or none), fused (:func:`fuse_transformer`), after checking that ONNX Runtime gives PyTorch's
    vectors on :data:`PROBE_TEXTS`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    # Eager attention, not PyTorch's fused kernel: its traced matmul-softmax-matmul is the pattern ONNX
    # Runtime's transformer optimizer rewrites into one Attention operator (see fuse_transformer).
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    probe = tokenizer(list(PROBE_TEXTS), padding=True, truncation=True, max_length=max_seq_length(model_dir),
                      return_tensors="pt")

    # PyTorch's vectors before the export: torch.onnx.export leaves the module in training mode (dropout on).
    with torch.inference_mode():
        expected = mean_pooled(model(**probe).last_hidden_state.numpy(), probe["attention_mask"].numpy())
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
    os.close(handle)
    try:
        trace_to_onnx(model, probe, Path(partial))
        fuse_transformer(Path(partial), num_heads=model.config.num_attention_heads,
                         hidden_size=model.config.hidden_size)
        session = _session(Path(partial), threads=1)
        got = mean_pooled(session.run(None, {name: probe[name].numpy() for name in _INPUTS})[0],
                          probe["attention_mask"].numpy())
        difference = float(np.abs(got - expected).max())
        if difference > EXPORT_TOLERANCE:
            raise ExportMismatchError(f"ONNX export of {model_dir.name} differs from PyTorch by {difference:.2e}")
        # mkstemp makes the file private; the export is public weights, and an image built by one user is
        # read by another.
        os.chmod(partial, 0o644)
        os.replace(partial, target)
    finally:
        Path(partial).unlink(missing_ok=True)
    return target


def trace_to_onnx(model, probe, path: Path) -> None:
    """Trace the transformer's last hidden state into an (unfused) ONNX graph at ``path``, dynamic in batch
    and length: the slow part of an export."""
    import torch

    class LastHiddenState(torch.nn.Module):
        def __init__(self, transformer):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                    token_type_ids=token_type_ids).last_hidden_state

    dynamic = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    with warnings.catch_warnings():
        # The TorchScript exporter warns that it is the older of torch's two exporters, and its tracer that
        # Python-side shape checks become constants: neither holds for this graph, as the export's check shows.
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHiddenState(model), (probe["input_ids"], probe["attention_mask"], probe["token_type_ids"]),
                          str(path), input_names=list(_INPUTS), output_names=["last_hidden_state"],
                          dynamic_axes=dynamic, opset_version=EXPORT_OPSET, dynamo=False)


def fuse_transformer(path: Path, *, num_heads: int, hidden_size: int) -> dict[str, int]:
    """Rewrite the BERT graph at ``path`` in place with ONNX Runtime's transformer optimizer: each layer's
    attention becomes one Attention operator, the embeddings one EmbedLayerNormalization, residual adds and
    layer norms SkipLayerNormalization, the exact (erf) GELU with its bias BiasGelu. The same fp32 arithmetic
    in fewer, fused kernels (`make bench-embedding-batches` times it against the simple export).
    Returns the fused operators' counts. Should the optimizer fail (another transformers' graph, say), the
    unfused graph is kept with a warning: it is correct, only slower; the caller checks either against PyTorch."""
    try:
        from onnxruntime.transformers import optimizer

        # opt_level 0: pattern fusion only; the session applies ONNX Runtime's own graph optimisations at load.
        fused = optimizer.optimize_model(str(path), model_type="bert", num_heads=num_heads, hidden_size=hidden_size,
                                         opt_level=0)
        counts = {name: count for name, count in fused.get_fused_operator_statistics().items() if count}
        fused.save_model_to_file(str(path))
    except Exception as exc:  # the optimizer's failures are not one class; any of them leaves the plain graph
        log.warning("ONNX transformer fusion failed (%s); the unfused graph is used", exc)
        return {}
    if not counts.get("Attention"):
        log.warning("ONNX transformer fusion found no attention to fuse (%s): the graph runs slower", counts)
    return counts


def _session(path: Path, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # ONNX Runtime's workers spin after a run by default, taking a core from Postgres and spaCy, which a
    # sync runs right after an embedding on the same two cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class OnnxSentenceEncoder:
    """A sentence-transformers model's transformer in ONNX Runtime with ``threads`` intra-op threads, the
    model's tokenizer and mean pooling. One batch per :meth:`encode` call, padded to its longest text (the
    caller groups texts by length). ONNX Runtime sessions may be run from several threads at once."""

    def __init__(self, model_dir: Path, onnx_file: Path, threads: int):
        from transformers import AutoTokenizer

        self.model_dir, self.onnx_file, self.threads = model_dir, onnx_file, threads
        self.max_seq_length = max_seq_length(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.session = _session(onnx_file, threads)

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Word pieces of each text the encoder reads (truncated at the window, [CLS] and [SEP] included)."""
        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length)["input_ids"]
        return [len(row) for row in ids]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_seq_length,
                               return_tensors="np")
        feed = {name: np.asarray(batch[name], dtype=np.int64) for name in _INPUTS}
        return mean_pooled(self.session.run(None, feed)[0], feed["attention_mask"])


_LOAD_LOCK = threading.Lock()


@cache
def load_onnx_encoder(model_dir: Path, cache_dir: Path, threads: int) -> OnnxSentenceEncoder:
    """The encoder for ``model_dir`` with ``threads`` threads, exporting the model into ``cache_dir`` first
    if no process has (one load per process and thread count). A cached file ONNX Runtime cannot load
    (truncated, say) is exported again."""
    import onnxruntime  # noqa: F401  (missing: fail before spending seconds on an export)

    with _LOAD_LOCK:
        target = encoder_file(model_dir, cache_dir)
        if not target.exists():
            log.info("exporting %s to ONNX in %s (once)", model_dir.name, cache_dir)
            export_encoder(model_dir, target)
        try:
            return OnnxSentenceEncoder(model_dir, target, threads)
        except Exception as exc:  # onnxruntime raises its own classes; any of them means "file unusable"
            log.warning("cached ONNX encoder %s unusable (%s); exporting it again", target, exc)
            export_encoder(model_dir, target)
            return OnnxSentenceEncoder(model_dir, target, threads)
