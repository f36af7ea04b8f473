"""Shared fixtures: a real embedded Postgres (pgserver) for the whole session, a fresh database per test,
the real local embedder, and an OpenAI-protocol stub server for the openai provider path."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from dreaming_dagster.embeddings import LocalMiniLMEmbedder, OpenAICompatibleEmbedder
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from tests.openai_stub import OpenAIStub

# A script's background job (`make test &`, nohup in a CI runner) starts with SIGINT ignored, and every
# process a test starts would inherit that; Dagster's processes map SIGTERM to SIGINT's handler, so the
# servers the tests start (a gRPC code location, `dg dev`) would ignore SIGTERM too and never stop. A handled
# signal is reset to its default in a new program: the tests start processes as a terminal would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ORACLE = PROJECT_ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_oracle.json"


# The files that take longest go first, so with two workers the longest one (the browser test: a demo, a
# training run and a Dagster UI to start) is not left for last.
SLOWEST_FIRST = ("test_ui.py", "test_pipeline.py", "test_ranker_job.py", "test_demo.py")
# The benches' smoke runs load both cores; run beside the tests that start servers under a deadline (the
# Dagster UI, the gRPC code location, `dreaming exec`), they starved them past it on a clean CI clone. Last,
# the two files run side by side once everything else is done.
LAST = ("test_bench_smoke_retrieval.py", "test_bench_smoke_dreaming.py")


def pytest_collection_modifyitems(items) -> None:
    rank = {name: position for position, name in enumerate(SLOWEST_FIRST)}
    rank |= {name: len(SLOWEST_FIRST) + 1 + position for position, name in enumerate(LAST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(SLOWEST_FIRST)))


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    # Short path: the server's Unix socket lives in the data directory (socket paths max ~107 bytes).
    return tmp_path_factory.mktemp("dd")


@pytest.fixture(scope="session")
def pg_admin_url(data_dir) -> str:
    return embedded.embedded_url(data_dir / "pgdata", "postgres")


@pytest.fixture
def database_url(pg_admin_url) -> str:
    """A brand-new, empty database on the session's embedded server."""
    return embedded.fresh_database_url(pg_admin_url, "t")


@pytest.fixture
def database(database_url) -> Database:
    return Database(database_url)


@pytest.fixture(scope="session")
def local_embedder() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder(batch_size=32)


@pytest.fixture(scope="session")
def openai_stub_server():
    with OpenAIStub() as stub:
        yield stub


@pytest.fixture
def openai_stub(openai_stub_server):
    openai_stub_server.reset()
    yield openai_stub_server
    openai_stub_server.reset()


def stub_embedder(stub: OpenAIStub, dimension: int, batch_size: int = 16) -> OpenAICompatibleEmbedder:
    # No client retries: a failure must surface at once in tests.
    return OpenAICompatibleEmbedder(model=f"stub-embed-{dimension}", dimension=dimension,
                                    base_url=stub.base_url, api_key="test", batch_size=batch_size,
                                    max_retries=0, timeout_s=10)


@pytest.fixture
def embedder16(openai_stub) -> OpenAICompatibleEmbedder:
    return stub_embedder(openai_stub, 16)


@pytest.fixture
def clean_env(monkeypatch):
    """Remove every DREAMING_*/DAGSTER_HOME variable so settings come from the test alone."""
    for name in list(os.environ):
        if name.startswith("DREAMING_") or name == "DAGSTER_HOME":
            monkeypatch.delenv(name)
    from dreaming_dagster.config.runtime import reset_defaults

    reset_defaults()
    yield monkeypatch
    reset_defaults()


@pytest.fixture
def cli_env(clean_env, database_url, openai_stub):
    """The CLI's settings: the test's scratch database and the stub's 16-d embeddings."""
    clean_env.setenv("DREAMING_DATABASE_URL", database_url)
    clean_env.setenv("DREAMING_EMBEDDING_PROVIDER", "openai")
    clean_env.setenv("DREAMING_EMBEDDING_MODEL", "stub-embed-16")
    clean_env.setenv("DREAMING_EMBEDDING_DIMENSIONS", "16")
    clean_env.setenv("DREAMING_EMBEDDING_BASE_URL", openai_stub.base_url)
    return clean_env


def pair(n: int, session: str = "s1", **overrides) -> dict:
    record = {"session_id": session, "user_message": f"user message {n}",
              "assistant_message": f"assistant reply {n}", "occurred_at": f"2024-03-{1 + n % 28:02d}T10:00:00Z",
              "turn_index": n}
    record.update(overrides)
    return record


def run_concurrently(func, times: int) -> list:
    """Call ``func`` from ``times`` threads started together; return the results, re-raising any error."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=times) as pool:
        futures = [pool.submit(func) for _ in range(times)]
        return [future.result() for future in futures]


def free_port() -> int:
    """A TCP port nothing listens on now (for servers a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
