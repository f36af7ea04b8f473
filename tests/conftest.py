"""Shared fixtures: a real embedded Postgres (pgserver) for the whole session, a fresh database per test
(copied from a migrated template of its embedding size), the real local embedder, and an OpenAI-protocol stub
server for the openai provider path."""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import sql

from dreaming_dagster import embeddings
from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import LocalMiniLMEmbedder, OpenAICompatibleEmbedder
from dreaming_dagster.sql import read_statement
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import (
    CONFIG_EMBEDDING_DIMENSION,
    CONFIG_EMBEDDING_MODEL,
    Database,
    apply_migrations,
)
from dreaming_dagster.storage.embedding_spec import EmbeddingSpec
from tests.openai_stub import OpenAIStub

# A script's background job (`make test &`, nohup in a CI runner) starts with SIGINT ignored, and every
# process a test starts would inherit that; Dagster's processes map SIGTERM to SIGINT's handler, so the
# servers the tests start (a gRPC code location, `dg dev`) would ignore SIGTERM too and never stop. A handled
# signal is reset to its default in a new program: the tests start processes as a terminal would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ORACLE = PROJECT_ROOT.parent / "shared" / "data" / "longmemeval" / "longmemeval_oracle.json"
HAYSTACKS = ORACLE.with_name("longmemeval_s_train.json.gz")
LOCOMO = PROJECT_ROOT.parent / "shared" / "data" / "locomo" / "locomo_train5.json"
REALMEM = PROJECT_ROOT.parent / "shared" / "data" / "realmem"


def reference_sql(name: str) -> str:
    """The tests' reference SQL (``tests/sql/reference/<name>.sql``): the one-at-a-time merge, never shipped."""
    return read_statement(PROJECT_ROOT / "tests" / "sql" / "reference", name)


def bench_sql(name: str) -> str:
    """A benchmark's setup or probe SQL (``bench/sql/<name>.sql``), which some tests run as well."""
    return read_statement(PROJECT_ROOT / "bench" / "sql", name)


# The files that take longest go first, so with two workers the longest one (the browser test: a demo, a
# training run and a Dagster UI to start) is not left for last; beside it, the wrong-key flood, which mostly
# waits for Postgres' statistics.
SLOWEST_FIRST = ("test_ui.py", "test_bench_smoke_service.py", "test_service_hardening.py", "test_ranker_job.py",
                 "test_pipeline.py", "test_demo.py")
# The benches' smoke runs load both cores; run beside the tests that start servers under a deadline (the
# Dagster UI, the gRPC code location, `dreaming exec`), they starved them past it on a clean CI clone. Last,
# the two files run side by side once everything else is done.
LAST = ("test_bench_smoke_retrieval.py", "test_bench_smoke_dreaming.py")


# The quick tier (`make test-quick`, `-m quick`): tests of pure logic, marked here rather than by hand so a new
# test lands in a tier: quick unless it needs Postgres (a fixture that reaches the server) or is marked slow
# (it starts processes or servers, a Dagster instance or a browser, or loads a model).
NEEDS_POSTGRES = {"pg_admin_url"}


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if not NEEDS_POSTGRES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)
    rank = {name: position for position, name in enumerate(SLOWEST_FIRST)}
    rank |= {name: len(SLOWEST_FIRST) + 1 + position for position, name in enumerate(LAST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(SLOWEST_FIRST)))


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    # Short path: the server's Unix socket lives in the data directory (socket paths max ~107 bytes).
    return tmp_path_factory.mktemp("dd")


@pytest.fixture(scope="session")
def pg_admin_url(data_dir) -> str:
    url = embedded.embedded_url(data_dir / "pgdata", "postgres")
    # A scratch server: nothing on it must survive a crash, so it never waits for the disk.
    with psycopg.connect(url, autocommit=True) as conn:
        for setting in ("fsync", "full_page_writes", "synchronous_commit"):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        conn.execute("SELECT pg_reload_conf()")
    return url


class MigratedTemplates:
    """One database per embedding size with every migration applied and no embedding model recorded, built
    on first use: a test's database is a copy of one (CREATE DATABASE … TEMPLATE), which costs a fraction of
    applying every migration to an empty database."""

    def __init__(self, admin_url: str):
        self.admin_url, self._names, self._lock = admin_url, {}, threading.Lock()

    def name(self, dimension: int) -> str:
        with self._lock:
            if dimension not in self._names:
                url = embedded.fresh_database_url(self.admin_url, f"template_{dimension}")
                with psycopg.connect(url) as conn:
                    apply_migrations(conn, EmbeddingSpec("template", dimension))
                    # The copy records its own model on its first migration check.
                    conn.execute("DELETE FROM dreaming_config WHERE key IN (%s, %s)",
                                 (CONFIG_EMBEDDING_MODEL, CONFIG_EMBEDDING_DIMENSION))
                    conn.commit()
                self._names[dimension] = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
            return self._names[dimension]


@pytest.fixture(scope="session")
def migrated_templates(pg_admin_url) -> MigratedTemplates:
    return MigratedTemplates(pg_admin_url)


class ScratchDatabase(Database):
    """A test's new database. Its first ``ensure_schema`` replaces the still-empty database by a copy of the
    migrated template of the embedder's size; if anything was written to it before, it migrates as usual."""

    def __init__(self, url: str, templates: MigratedTemplates | None = None):
        super().__init__(url)
        self._templates, self._copy_pending, self._copy_lock = templates, templates is not None, threading.Lock()

    def ensure_schema(self, spec: EmbeddingSpec) -> None:
        with self._copy_lock:
            if self._copy_pending:
                self._copy_pending = False
                self._copy_template(spec.dimension)
        super().ensure_schema(spec)

    def _copy_template(self, dimension: int) -> None:
        with psycopg.connect(self.url) as conn:
            if conn.execute("SELECT to_regclass('dreaming_config') IS NOT NULL").fetchone()[0]:
                return  # migrated through another handle: keep what it holds
        name = psycopg.conninfo.conninfo_to_dict(self.url)["dbname"]
        template = self._templates.name(dimension)
        with psycopg.connect(self._templates.admin_url, autocommit=True) as conn:
            try:
                conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.ObjectInUse:
                return  # someone holds a connection to it: migrate in place instead
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                          sql.Identifier(template)))


@pytest.fixture
def bench_on_session_server(pg_admin_url, monkeypatch) -> None:
    """A bench run in the test process uses the session's server instead of starting its own."""
    monkeypatch.setenv("BENCH_EMBEDDED_ADMIN_URL", pg_admin_url)


@pytest.fixture
def database_url(pg_admin_url) -> str:
    """A brand-new, empty database on the session's embedded server."""
    return embedded.fresh_database_url(pg_admin_url, "t")


@pytest.fixture
def database(database_url, migrated_templates) -> Database:
    return ScratchDatabase(database_url, migrated_templates)


def remembering(embed: Callable) -> Callable:
    """``embed`` (LocalMiniLMEmbedder.embed) running the model only for texts this process has not embedded
    with the same runtime and encoder: the tests and the bench smoke runs ingest the same oracle slices again
    and again.
    The model itself is tested with a plain LocalMiniLMEmbedder (tests/test_embeddings.py,
    tests/test_onnx_encoder.py)."""
    vectors: dict[tuple[str, str], np.ndarray] = {}
    lock = threading.Lock()

    @functools.wraps(embed)
    def remembered(self, texts):
        texts = list(texts)
        with lock:
            new = list(dict.fromkeys(text for text in texts if (self.runtime, self.spec.model, text) not in vectors))
        if new:
            found = embed(self, new)
            with lock:
                vectors.update(((self.runtime, self.spec.model, text), vector)
                               for text, vector in zip(new, found, strict=True))
        if self.runtime_used is None:  # what a caller reads after an embed, also when nothing ran
            self.runtime_used = self.runtime
        if not texts:
            return np.zeros((0, self.spec.dimension), dtype=np.float32)
        with lock:
            return np.stack([vectors[(self.runtime, self.spec.model, text)] for text in texts])

    return remembered


class RememberingEmbedder(LocalMiniLMEmbedder):
    """The real local model, each text embedded once per test process (:func:`remembering`)."""

    embed = remembering(LocalMiniLMEmbedder.embed)


@pytest.fixture(scope="session")
def local_embedder() -> LocalMiniLMEmbedder:
    # The encoder a fresh install embeds with: the shipped memory encoder when the package has one.
    return RememberingEmbedder(batch_size=32, encoder_delta=embeddings.local_encoder_delta(DreamingSettings()))


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


def clear_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every DREAMING_*/DAGSTER_HOME variable so settings come from the test alone."""
    for name in list(os.environ):
        if name.startswith("DREAMING_") or name == "DAGSTER_HOME":
            monkeypatch.delenv(name)
    from dreaming_dagster.process_defaults import reset_defaults

    reset_defaults()


def point_cli_at(monkeypatch: pytest.MonkeyPatch, database_url: str, templates: MigratedTemplates,
                 stub: OpenAIStub) -> None:
    """The CLI's settings: ``database_url`` (migrated for the stub's model) and the stub's 16-d embeddings."""
    ScratchDatabase(database_url, templates).ensure_schema(EmbeddingSpec("stub-embed-16", 16))
    monkeypatch.setenv("DREAMING_DATABASE_URL", database_url)
    monkeypatch.setenv("DREAMING_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("DREAMING_EMBEDDING_MODEL", "stub-embed-16")
    monkeypatch.setenv("DREAMING_EMBEDDING_DIMENSIONS", "16")
    monkeypatch.setenv("DREAMING_EMBEDDING_BASE_URL", stub.base_url)


@pytest.fixture
def clean_env(monkeypatch):
    """Settings from the test alone (:func:`clear_settings`), the defaults reset after it."""
    from dreaming_dagster.process_defaults import reset_defaults

    clear_settings(monkeypatch)
    yield monkeypatch
    reset_defaults()


@pytest.fixture
def cli_env(clean_env, database_url, migrated_templates, openai_stub):
    """The CLI's settings: the test's scratch database (migrated for the stub's model) and the stub's 16-d
    embeddings."""
    point_cli_at(clean_env, database_url, migrated_templates, openai_stub)
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
    from dreaming_dagster.llm.local_server import free_port as local_free_port

    return local_free_port()


@pytest.fixture(scope="session")
def trimmed_locomo(tmp_path_factory):
    """Three LoCoMo conversations (one of each part: train, dev, test) cut to their first two sessions, with the
    questions whose evidence lies in them: a people-chat memory that embeds in seconds."""
    import re

    records = []
    for record in json.loads(LOCOMO.read_text()):
        if record["sample_id"] not in ("conv-26", "conv-30", "conv-43"):
            continue
        conversation = {key: value for key, value in record["conversation"].items()
                        if not key.startswith("session_") or re.match(r"session_[12](_date_time)?$", key)}
        qa = [q for q in record["qa"] if q.get("evidence") and all(
            re.match(r"D[12]:", part) for entry in q["evidence"] for part in re.split(r"[;,\s]+", entry) if part)]
        records.append({**record, "conversation": conversation, "qa": qa})
    path = tmp_path_factory.mktemp("locomo") / "locomo_slice.json"
    path.write_text(json.dumps(records))
    return path


# One RealMem persona of each part (train, dev, test), for the trimmed memory.
SLICE_PERSONAS = ("Adeleke_Okonjo", "Liam_O_Connor", "Lin_Wanyu")


@pytest.fixture(scope="session")
def trimmed_realmem(tmp_path_factory):
    """Three RealMem personas (one of each part) cut to the sessions up to their second query's, without the
    filler sessions: a companion memory that embeds in seconds, files in RealMem's own format."""
    directory = tmp_path_factory.mktemp("realmem")
    for persona in SLICE_PERSONAS:
        name = f"{persona}_dialogues_256k.json"
        record = json.loads((REALMEM / name).read_text())
        kept, queries = [], 0
        for session in record["dialogues"]:
            asks = sum(bool(turn.get("is_query")) for turn in session["dialogue_turns"])
            if not session["session_identifier"].startswith("Enhanced:") or asks:
                kept.append(session)
            queries += asks
            if queries >= 2:
                break
        (directory / name).write_text(json.dumps({**record, "dialogues": kept}))
    return directory


# Of the slice's questions, the two whose `_S` haystacks the slice's split chooses (one dev, one training).
SLICE_HAYSTACKS = ("0bb5a684", "2a1811e2")


@pytest.fixture(scope="session")
def trimmed_haystacks(tmp_path_factory):
    """The `_S` haystacks of the first 12 oracle questions' slice (train_ranker_job's test slice), each cut to
    its evidence sessions and its first four distractors: a per-question memory that embeds in seconds."""
    import gzip

    from dreaming_dagster.ingest.readers import iter_longmemeval_questions

    records = []
    for raw in iter_longmemeval_questions(HAYSTACKS):
        if raw["question_id"] in SLICE_HAYSTACKS:
            sessions = raw["haystack_sessions"]
            evidence = [i for i, turns in enumerate(sessions) if any(t.get("has_answer") for t in turns)]
            keep = sorted(evidence + [i for i in range(len(sessions)) if i not in evidence][:4])
            records.append({**raw, **{key: [raw[key][i] for i in keep]
                                      for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions")}})
            if len(records) == len(SLICE_HAYSTACKS):
                break
    path = tmp_path_factory.mktemp("haystacks") / "s_slice.json.gz"
    with gzip.open(path, "wt") as handle:
        json.dump(records, handle)
    return path
