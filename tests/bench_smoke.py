"""Run a benchmark script in this process at a tiny size: the same code path and SQL as `make bench-<name>`,
so a change that breaks a bench's own assumptions (asserted inside it) fails the test suite, not the next
person who runs the bench. Results go to a temporary file, never over the committed ones."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from dreaming_dagster.embeddings import LocalMiniLMEmbedder
from tests.conftest import PROJECT_ROOT, remembering

BENCH = PROJECT_ROOT / "bench"
# One memory of vectors for every smoke run of this process: the oracle slices the benches read overlap.
REMEMBERING_EMBED = remembering(LocalMiniLMEmbedder.embed)


def bench_module(name: str):
    """``bench/<name>.py`` imported (the benches import their shared modules as ``common``, ``synthetic``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(name: str, *argv: str, out: Path | None = None, remember_vectors: bool = True) -> dict:
    """``bench/<name>.py`` with ``argv`` (and ``--out`` when given); returns the result it wrote.
    ``remember_vectors`` False: every embedding runs the model (a bench timing the model itself)."""
    module = bench_module(name)
    import torch

    # One core for the bench's model and parser: the other is the other test worker's.
    saved_argv, saved_threads = sys.argv, torch.get_num_threads()
    saved_processes = os.environ.get("DREAMING_LLM_OFFLINE_PROCESSES")
    sys.argv = [str(BENCH / f"{name}.py"), *argv, *(["--out", str(out)] if out else [])]
    os.environ["DREAMING_LLM_OFFLINE_PROCESSES"] = "1"
    torch.set_num_threads(1)
    embed = LocalMiniLMEmbedder.embed
    if remember_vectors:
        LocalMiniLMEmbedder.embed = REMEMBERING_EMBED
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
