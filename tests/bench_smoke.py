"""Run a benchmark script in this process at a tiny size: the same code path and SQL as `make bench-<name>`,
so a change that breaks a bench's own assumptions (asserted inside it) fails the test suite, not the next
person who runs the bench. Results go to a temporary file, never over the committed ones."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

from tests.conftest import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"


def bench_module(name: str):
    """``bench/<name>.py`` imported (the benches import their shared modules as ``common``, ``synthetic``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The local model's vectors of the texts the smoke runs embedded in this process, by runtime and text: the
# benches read overlapping slices of the oracle, and the model itself is tested in tests/test_embeddings.py
# and tests/test_onnx_encoder.py. The first sight of a text still runs the real model.
_REMEMBERED: dict[tuple[str, str], np.ndarray] = {}


def remembering_embed(embed):
    @functools.wraps(embed)
    def remembered(self, texts):
        texts = list(texts)
        new = list(dict.fromkeys(t for t in texts if (self.runtime, t) not in _REMEMBERED))
        if new:
            for text, vector in zip(new, embed(self, new), strict=True):
                _REMEMBERED[(self.runtime, text)] = vector
        if self.runtime_used is None:
            self.runtime_used = self.runtime
        return (np.stack([_REMEMBERED[(self.runtime, t)] for t in texts]) if texts
                else np.zeros((0, self.spec.dimension), dtype=np.float32))

    return remembered


def run_bench(name: str, *argv: str, out: Path | None = None, remember_vectors: bool = True) -> dict:
    """``bench/<name>.py`` with ``argv`` (and ``--out`` when given); returns the result it wrote.
    ``remember_vectors`` False: every embedding runs the model (a bench timing the model itself)."""
    module = bench_module(name)
    import torch

    from dreaming_dagster.embeddings import LocalMiniLMEmbedder

    # One core for the bench's model and parser: the other is the other test worker's.
    saved_argv, saved_threads = sys.argv, torch.get_num_threads()
    saved_processes = os.environ.get("DREAMING_LLM_OFFLINE_PROCESSES")
    sys.argv = [str(BENCH / f"{name}.py"), *argv, *(["--out", str(out)] if out else [])]
    os.environ["DREAMING_LLM_OFFLINE_PROCESSES"] = "1"
    torch.set_num_threads(1)
    embed = LocalMiniLMEmbedder.embed
    if remember_vectors:
        LocalMiniLMEmbedder.embed = remembering_embed(embed)
    try:
        module.main()
    finally:
        LocalMiniLMEmbedder.embed = embed
        sys.argv = saved_argv
        torch.set_num_threads(saved_threads)
        if saved_processes is None:
            os.environ.pop("DREAMING_LLM_OFFLINE_PROCESSES", None)
        else:
            os.environ["DREAMING_LLM_OFFLINE_PROCESSES"] = saved_processes
    return json.loads(out.read_text()) if out else {}
