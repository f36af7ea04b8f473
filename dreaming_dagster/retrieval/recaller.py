"""recall(): the best memories for a query, ranked by the twelve signals with the weights a model chose.

One statement (``sql/queries/retrieval/composite_ranking``) builds the candidate pool (the top pairs by
cosine, the BM25 top it is given, pairs through the graph and from the question's time window), computes
every signal, scores and orders; it also records the user's last-query time. The BM25 top is found in this
process from the query words' postings it holds (``lexical_postings.py``: one small statement reads their
versions first), or, when no postings are held (``as_of``, a cache of 0 MB), by
``retrieval/exact_lexical_top_k`` from the word index: the same pairs either way. With a trained model
loaded, one small statement before it reads the model's per-user inputs (``retrieval/user_profile``), then
the model runs (well under a millisecond): the model published for this deployment, else the one shipped with
the package. With no usable model the ranking is cosine + BM25 (signals.py: FUSION) and the profile is skipped.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from dreaming_dagster.config.settings import DECLARED_DEFAULTS, DreamingSettings
from dreaming_dagster.dates.questions import NO_TIME, TimeQuery, read_question
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.retrieval.coverage import gathers, spread_over_sessions
from dreaming_dagster.retrieval.features import QUESTION_TYPES, build_features
from dreaming_dagster.retrieval.lexical_postings import WordPostingsCache
from dreaming_dagster.retrieval.profiles import read_profile
from dreaming_dagster.retrieval.question_type import QuestionTypeClassifier, shipped_classifier
from dreaming_dagster.retrieval.ranker import (
    NO_MODEL,
    NO_MODEL_WITH_TIME,
    SHIPPED_RANKER,
    RankerFile,
    RankerFileError,
    SignalWeights,
    load_ranker,
    predict_weights,
)
from dreaming_dagster.retrieval.signals import BM25_B, BM25_K1, SIGNAL_NAMES
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import (
    MAX_SESSION_ID_CHARS,
    InvalidInputError,
    checked_text,
    parse_timestamp,
    validate_identifier,
)
from dreaming_dagster.storage.storable import clean_text

logger = logging.getLogger(__name__)
# Defaults are the settings' declared ones (DREAMING_RECALL_*), stated once there.
DEFAULT_POOL_SIZE: int = DECLARED_DEFAULTS.recall_pool_size
DEFAULT_LEXICAL_POOL_SIZE: int = DECLARED_DEFAULTS.recall_lexical_pool_size
SPREAD_READ = 4  # a question that gathers reads 4k rows to spread its top k over sessions


@dataclass(frozen=True)
class RecallLimits:
    """What one recall may ask: at most ``max_k`` memories, a query of at most ``max_query_chars`` characters
    (a question, not a document: the encoder reads ~256 word pieces, the lexical side a posting list per
    distinct word). The Python API, HTTP and MCP all refuse past them, naming the field."""

    max_k: int = DECLARED_DEFAULTS.recall_max_k
    max_query_chars: int = DECLARED_DEFAULTS.recall_max_query_chars

    @classmethod
    def from_settings(cls, settings: DreamingSettings) -> RecallLimits:
        return cls(max_k=settings.recall_max_k, max_query_chars=settings.recall_max_query_chars)


DEFAULT_RECALL_LIMITS = RecallLimits()


@dataclass(frozen=True)
class LexicalPruning:
    """How exact_lexical_top_k.sql reads the word index for the lexical pool: a first round reads the
    ``seed_postings`` best-bounded postings of the query's words to set the bar (the pool-size-th best sum
    read); the rest of the index is read only where a pair could still reach it. The pool is the exact BM25
    top whatever the value; it sets the speed. 0 reads every posting (the reference tests compare with)."""

    seed_postings: int = DECLARED_DEFAULTS.recall_lexical_seed_postings

    @classmethod
    def from_settings(cls, settings: DreamingSettings) -> LexicalPruning:
        return cls(seed_postings=settings.recall_lexical_seed_postings)

    def __post_init__(self) -> None:
        if not isinstance(self.seed_postings, int) or isinstance(self.seed_postings, bool) or self.seed_postings < 0:
            raise ValueError(f"lexical pruning: seed_postings must be an integer of at least 0, got {self.seed_postings!r}")


DEFAULT_LEXICAL_PRUNING = LexicalPruning()


def _within(what: str, **values: tuple[int, int, int]) -> None:
    """Refuse, naming ``what`` and the field, any ``name=(value, low, high)`` outside its range."""
    for name, (value, low, high) in values.items():
        if not low <= value <= high:
            raise ValueError(f"{what}: {name} must be between {low} and {high}, got {value}")


@dataclass(frozen=True)
class GraphSide:
    """The graph's share of the candidate pool: up to ``pool_size`` pairs linked to the ``subjects``
    subjects nearest the query (by embedding, and by name words), pairs the other two sides missed."""

    pool_size: int = DECLARED_DEFAULTS.recall_graph_pool_size
    subjects: int = DECLARED_DEFAULTS.recall_graph_subjects

    def __post_init__(self) -> None:
        _within("graph side", pool_size=(self.pool_size, 0, 1000), subjects=(self.subjects, 1, 1000))


NO_GRAPH_SIDE = GraphSide(pool_size=0)
DEFAULT_GRAPH_SIDE = GraphSide()


@dataclass(frozen=True)
class TimeSide:
    """The time-window share of the pool, when the question names a time: up to ``pool_size`` pairs nearest
    the query and ``pool_size`` best by BM25 among the ``scan_limit`` most recent pairs inside the window
    (said in it, or mentioning a time in it) that the other sides missed."""

    pool_size: int = DECLARED_DEFAULTS.recall_time_pool_size
    scan_limit: int = DECLARED_DEFAULTS.recall_time_scan_limit

    def __post_init__(self) -> None:
        _within("time side", pool_size=(self.pool_size, 0, 1000), scan_limit=(self.scan_limit, 1, 1_000_000))


NO_TIME_SIDE = TimeSide(pool_size=0)
DEFAULT_TIME_SIDE = TimeSide()


@dataclass(frozen=True)
class RecalledMemory:
    pair_id: str
    session_id: str
    turn_index: int | None
    occurred_at: datetime
    user_message: str
    assistant_message: str
    metadata: Mapping[str, Any]
    signals: Mapping[str, float]
    score: float
    # Which sides drew it: "vector", "lexical", "graph", "time".
    drawn_by: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"pair_id": self.pair_id, "session_id": self.session_id, "turn_index": self.turn_index,
                "occurred_at": self.occurred_at.isoformat(), "user_message": self.user_message,
                "assistant_message": self.assistant_message, "signals": dict(self.signals),
                "score": self.score, "drawn_by": list(self.drawn_by)}


@dataclass(frozen=True)
class RecallResult:
    user_id: str
    kg_id: str
    query: str
    memories: list[RecalledMemory]
    weights: SignalWeights
    question_type: str | None
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    time: TimeQuery = NO_TIME  # the time the question asks about, as understood (dates/questions.py)

    def __len__(self) -> int:
        return len(self.memories)

    def __iter__(self) -> Iterator[RecalledMemory]:
        return iter(self.memories)

    def as_dict(self) -> dict:
        return {"user_id": self.user_id, "kg_id": self.kg_id, "query": self.query,
                "model": self.weights.model, "question_type": self.question_type, "time": self.time.as_dict(),
                "weights": self.weights.as_dict(), "scale": self.weights.scale,
                "timings_ms": dict(self.timings_ms), "memories": [m.as_dict() for m in self.memories]}


@dataclass(frozen=True)
class RecallRequest:
    """Validated recall arguments."""

    user_id: str
    kg_id: str
    query: str
    k: int
    session_id: str | None
    as_of: datetime | None


def validate_request(user_id: object, query: object, k: object = 10, session_id: object = None,
                     as_of: object = None, kg_id: object = "default",
                     limits: RecallLimits = DEFAULT_RECALL_LIMITS) -> RecallRequest:
    """Check every argument against ``limits``; errors name the field (:class:`InvalidInputError`)."""
    user_id = validate_identifier(user_id, "user_id")
    kg_id = validate_identifier(kg_id, "kg_id")
    query = checked_text(query, "query", max_chars=limits.max_query_chars, if_blank="is empty; ask something")
    if isinstance(k, bool) or not isinstance(k, int):
        raise InvalidInputError("k", f"must be an integer, got {type(k).__name__}")
    if not 1 <= k <= limits.max_k:
        raise InvalidInputError("k", f"must be between 1 and {limits.max_k}, got {k}")
    if session_id is not None:
        checked_text(session_id, "session_id", max_chars=MAX_SESSION_ID_CHARS,
                     if_blank="must be a non-empty string or None")
    parsed_as_of = None if as_of is None else parse_timestamp(as_of, "as_of")
    return RecallRequest(user_id=user_id, kg_id=kg_id, query=query.strip(), k=k, session_id=session_id,
                         as_of=parsed_as_of)


def composite_rows(conn: psycopg.Connection, *, lexical_postings: WordPostingsCache | None = None,
                   **arguments: Any) -> list[dict]:
    """Run the ranking statement with :func:`composite_parameters`' arguments: the pool with its signals and
    scores, best first.

    Training calls this with ``row_limit=pool_size + lexical_pool_size`` to read the whole pool; recall
    with its k. ``lexical_pool_size=0`` gives the cosine-only pool (``lex`` is still computed). The lexical
    pool is an input of the statement: the pairs the caller found (``lexical_pool_pairs``), else those found in
    this process from ``lexical_postings`` (an enabled cache, no ``as_of``: retrieval/lexical_postings.py),
    else those found by exact_lexical_top_k.sql (the same pairs, read from the word index).
    """
    parameters = composite_parameters(**arguments)
    if parameters["lexical_pool_pairs"] is None and parameters["lexical_pool_size"] > 0:
        parameters["lexical_pool_pairs"] = lexical_pool_pairs(conn, parameters, lexical_postings)
    return conn.execute(load_sql("retrieval/composite_ranking"), parameters).fetchall()


def lexical_pool_pairs(conn: psycopg.Connection, parameters: Mapping[str, Any],
                       lexical_postings: WordPostingsCache | None = None) -> list[int]:
    """The pair numbers of the exact BM25 top ``lexical_pool_size`` (ties at the cut included), from the
    postings held in this process when they apply, else read by exact_lexical_top_k.sql."""
    if held_pool_applies(lexical_postings, parameters["lexical_pool_size"], parameters["as_of"]):
        return lexical_postings.pool_pairs(conn, user_id=parameters["user_id"], kg_id=parameters["kg_id"],
                                           query_text=parameters["query_text"], k=parameters["lexical_pool_size"])
    return [row["pair_no"] for row in conn.execute(load_sql("retrieval/exact_lexical_top_k"), parameters)]


def held_pool_applies(lexical_postings: WordPostingsCache | None, lexical_pool_size: int,
                      as_of: datetime | None) -> bool:
    """Whether the lexical pool is found in this process, from ``lexical_postings`` (an enabled cache, a
    lexical pool wanted, no ``as_of``: the postings held are the current ones), rather than by the statement."""
    return lexical_postings is not None and lexical_postings.enabled and lexical_pool_size > 0 and as_of is None


def composite_parameters(*, user_id: str, kg_id: str, query_embedding: np.ndarray, query_text: str,
                         weights: SignalWeights, pool_size: int = DEFAULT_POOL_SIZE,
                         lexical_pool_size: int = DEFAULT_LEXICAL_POOL_SIZE,
                         lexical_pruning: LexicalPruning = DEFAULT_LEXICAL_PRUNING,
                         lexical_pool_pairs: list[int] | None = None,
                         row_limit: int | None = None,
                         as_of: datetime | None = None, reference_time: datetime | None = None,
                         session_id: str | None = None, remember_query: bool = False,
                         hubs: HubRule = DEFAULT_HUB_RULE, graph: GraphSide = NO_GRAPH_SIDE,
                         time: TimeQuery = NO_TIME, time_side: TimeSide = NO_TIME_SIDE,
                         side_embeddings: Sequence[np.ndarray] = (), key_pool_size: int = 0) -> dict[str, Any]:
    """The ranking statement's parameters (also what EXPLAIN in tests and benchmarks binds).
    ``lexical_pool_pairs``: the BM25 top's pair numbers (None: :func:`composite_rows` finds them);
    ``time``: the question's time (its window feeds time_fit and, with ``time_side``, the window pool);
    ``side_embeddings``: the embeddings of ``time.sides`` (a two-sided question: each side draws candidates);
    ``key_pool_size``: candidates drawn through their index keys (0: none)."""
    window = time.window
    sides = [np.asarray(e, dtype=np.float32) for e in side_embeddings][:2] if time_side.pool_size else []
    sides += [None] * (2 - len(sides))
    return {
        "user_id": user_id, "kg_id": kg_id, "query": np.asarray(query_embedding, dtype=np.float32),
        # recall() rejects what Postgres text cannot hold; training's dataset questions are cleaned here.
        "query_text": clean_text(query_text), "pool_size": pool_size, "lexical_pool_size": lexical_pool_size,
        "lexical_seed_postings": lexical_pruning.seed_postings, "lexical_pool_pairs": lexical_pool_pairs,
        "bm25_k1": BM25_K1, "bm25_b": BM25_B,
        "row_limit": row_limit or pool_size + lexical_pool_size + graph.pool_size + key_pool_size
        + 2 * time_side.pool_size,
        "as_of": as_of,
        "reference_time": reference_time or as_of or datetime.now(UTC), "session_id": session_id,
        "weights": list(weights.weights), "scale": weights.scale, "remember_query": remember_query,
        "hub_share": hubs.share, "hub_min_pairs": hubs.min_pairs,
        "graph_pool_size": graph.pool_size, "graph_subjects": graph.subjects, "key_pool_size": key_pool_size,
        "window_first": window.first_day if window else None, "window_last": window.last_day if window else None,
        "window_margin_days": time.margin_days, "window_certainty": window.certainty if window else 0.0,
        "window_pool_size": time_side.pool_size if window or sides[0] is not None else 0,
        "window_scan_limit": time_side.scan_limit, "side_a": sides[0], "side_b": sides[1],
    }


# The pool's sides, as a result names them, and the statement's column for each.
DRAWN_BY = {"vector": "in_vector_pool", "lexical": "in_lexical_pool", "graph": "in_graph_pool",
            "key": "in_key_pool", "time": "in_window_pool"}


def to_memory(row: Mapping[str, Any]) -> RecalledMemory:
    return RecalledMemory(pair_id=str(row["id"]), session_id=row["session_id"], turn_index=row["turn_index"],
                          occurred_at=row["occurred_at"], user_message=row["user_message"],
                          assistant_message=row["assistant_message"], metadata=row["metadata"],
                          signals={name: float(row[name]) for name in SIGNAL_NAMES}, score=float(row["score"]),
                          drawn_by=tuple(side for side, column in DRAWN_BY.items() if row.get(column)))


def _configure_recall_connection(conn: psycopg.Connection, ef_search: int) -> None:
    register_vector(conn)
    conn.execute(load_sql("retrieval/connection_settings"), {"ef_search": str(ef_search)})


def recall_connection_options(prepared_statements: bool) -> dict[str, Any]:
    """psycopg options of a recall connection. Prepared statements (psycopg prepares a statement at its
    first run, prepare_threshold 0) spare Postgres parsing the ranking statement on every recall; every run
    is still planned with its own parameters (plan_cache_mode force_custom_plan, connection_settings.sql):
    a cached generic plan would pick one pool strategy (HNSW or exact scan) for users of every size. Off
    (prepare_threshold None): nothing prepared, for poolers that cannot keep prepared statements."""
    return {"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0 if prepared_statements else None}


def open_recall_connection(database: Database, ef_search: int, *,
                           prepared_statements: bool = DECLARED_DEFAULTS.recall_prepared_statements
                           ) -> psycopg.Connection:
    """A connection set up as recall needs it (training builds its pools through one too)."""
    conn = psycopg.connect(database.url, **recall_connection_options(prepared_statements))
    _configure_recall_connection(conn, ef_search)
    return conn


class Recaller:
    """Serves recall for one database and embedder: a pool of up to ``connections`` connections (HNSW search
    settings applied once per connection; recalls from several threads run at once), the ranker file
    (reloaded when it changes on disk) and the question-type classifier. Thread-safe."""

    def __init__(self, database: Database, embedder: Embedder, *, ranker_path: Path | None = None,
                 classifier: QuestionTypeClassifier | None = None, pool_size: int = DEFAULT_POOL_SIZE,
                 lexical_pool_size: int = DEFAULT_LEXICAL_POOL_SIZE,
                 lexical_pruning: LexicalPruning = DEFAULT_LEXICAL_PRUNING,
                 ef_search: int = DECLARED_DEFAULTS.recall_ef_search, hubs: HubRule = DEFAULT_HUB_RULE,
                 graph: GraphSide = DEFAULT_GRAPH_SIDE, time_side: TimeSide = DEFAULT_TIME_SIDE,
                 key_pool_size: int = DECLARED_DEFAULTS.recall_key_pool_size,
                 session_spread: int = DECLARED_DEFAULTS.recall_session_spread,
                 connections: int = DECLARED_DEFAULTS.recall_connections,
                 lexical_cache_mb: int = DECLARED_DEFAULTS.recall_lexical_cache_mb,
                 prepared_statements: bool = DECLARED_DEFAULTS.recall_prepared_statements,
                 limits: RecallLimits = DEFAULT_RECALL_LIMITS, shipped_ranker: Path | None = SHIPPED_RANKER):
        if not 1 <= connections <= 1000:
            raise ValueError(f"connections must be between 1 and 1000, got {connections}")
        if not 1 <= pool_size <= 1000:
            raise ValueError(f"pool_size must be between 1 and 1000, got {pool_size}")
        if not 0 <= lexical_pool_size <= 1000:
            raise ValueError(f"lexical_pool_size must be between 0 and 1000, got {lexical_pool_size}")
        if not 0 <= lexical_cache_mb <= 1_000_000:
            raise ValueError(f"lexical_cache_mb must be between 0 and 1000000, got {lexical_cache_mb}")
        self.lexical_pool_size, self.lexical_pruning = lexical_pool_size, lexical_pruning
        # The query words' postings held in this process: the lexical pool found here (lexical_postings.py).
        self.lexical_postings = WordPostingsCache(lexical_cache_mb * 2**20)
        self.database, self.embedder = database, embedder
        self.ranker_path = Path(ranker_path) if ranker_path else None
        self.shipped_ranker = Path(shipped_ranker) if shipped_ranker else None
        self.classifier = classifier if classifier is not None else shipped_classifier()
        self.pool_size, self.ef_search, self.hubs, self.graph = pool_size, ef_search, hubs, graph
        self.time_side, self.key_pool_size, self.session_spread = time_side, key_pool_size, session_spread
        self.connections, self.prepared_statements, self.limits = connections, prepared_statements, limits
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()
        self._ranker: RankerFile | None = None
        self._ranker_stamp: tuple[Path, int, int] | None = None

    # -- the model --------------------------------------------------------------------------------
    def ranker(self) -> RankerFile | None:
        """The ranker file published at ``ranker_path``, else the one shipped with the package, reloaded when
        the file changes (publishing a model is replacing the file); None — recall then orders by cosine +
        BM25 — when there is neither, or the file cannot serve this code (trained on other features or
        signals, unreadable) or, for the shipped file, this embedder: that is logged once a file, and recall
        goes on without it until a model is trained again."""
        published = self.ranker_path is not None and self.ranker_path.is_file()
        path = self.ranker_path if published else self.shipped_ranker
        if path is None or not path.is_file():
            self._ranker, self._ranker_stamp = None, None
            return None
        stat = path.stat()
        stamp = (path, stat.st_mtime_ns, stat.st_size)
        if stamp != self._ranker_stamp:
            try:
                ranker = load_ranker(path)
            except RankerFileError as error:
                logger.warning("ranker %s not used, recall ranks without a model: %s (run train_ranker_job)",
                               path, error)
                self._ranker, self._ranker_stamp = None, stamp
                return None
            if not published and (ranker.embedding_dim != self.embedder.spec.dimension
                                  or ranker.embedding_model != self.embedder.spec.model):
                logger.info("the shipped ranker reads %s embeddings, not %s's: recall orders by cosine + BM25 "
                            "until train_ranker_job publishes a model for this embedder", ranker.embedding_model,
                            self.embedder.spec.model)
                self._ranker, self._ranker_stamp = None, stamp
                return None
            if ranker.embedding_dim != self.embedder.spec.dimension:
                raise ValueError(f"ranker {path} reads {ranker.embedding_dim}-d embeddings but the "
                                 f"embedder is {self.embedder.spec}; retrain it for this embedder")
            self._ranker, self._ranker_stamp = ranker, stamp
            logger.info("loaded ranker %s in %.1f ms", ranker.name, ranker.load_seconds * 1000)
        return self._ranker

    def predict_question_type(self, query_embedding: np.ndarray) -> str | None:
        classifier = self.classifier
        if classifier is None or classifier.embedding_dim != len(query_embedding) or (
                classifier.embedding_model and classifier.embedding_model != self.embedder.spec.model):
            return None  # no classifier for this embedder: the question-type features stay zero
        return classifier.predict(query_embedding)

    # -- the connections --------------------------------------------------------------------------
    def _connections(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                self.database.ensure_schema(self.embedder.spec)
                ef_search = max(self.ef_search, self.pool_size)
                self._pool = ConnectionPool(
                    self.database.url, min_size=1, max_size=self.connections, open=True, name="recall",
                    kwargs=recall_connection_options(self.prepared_statements), check=ConnectionPool.check_connection,
                    configure=lambda conn: _configure_recall_connection(conn, ef_search))
                # Its first connection ready before any recall: a recaller dropped at once leaves no pool
                # worker busy filling it (a pool collected from its own worker thread cannot stop).
                self._pool.wait(timeout=60)
            return self._pool

    @classmethod
    def from_settings(cls, database: Database, embedder: Embedder, settings: DreamingSettings) -> Recaller:
        """The Recaller the settings describe (ranker file, pool sizes, pruning, ef_search, prepared statements)."""
        return cls(database, embedder, ranker_path=settings.resolved_ranker_path, pool_size=settings.recall_pool_size,
                   lexical_pool_size=settings.recall_lexical_pool_size,
                   lexical_pruning=LexicalPruning.from_settings(settings), ef_search=settings.recall_ef_search,
                   hubs=HubRule.from_settings(settings), graph=GraphSide(pool_size=settings.recall_graph_pool_size,
                                                                      subjects=settings.recall_graph_subjects),
                   time_side=TimeSide(pool_size=settings.recall_time_pool_size,
                                      scan_limit=settings.recall_time_scan_limit),
                   key_pool_size=settings.recall_key_pool_size, session_spread=settings.recall_session_spread,
                   connections=settings.recall_connections, lexical_cache_mb=settings.recall_lexical_cache_mb,
                   prepared_statements=settings.recall_prepared_statements,
                   limits=RecallLimits.from_settings(settings))

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection]:
        # A broken connection is checked, and replaced, by the pool before it is handed out again.
        with self._connections().connection() as conn:
            yield conn

    # -- recall -----------------------------------------------------------------------------------
    def recall(self, user_id: object, query: object, k: object = 10, session_id: object = None,
               as_of: object = None, kg_id: object = "default", *, question_type: str | None = None,
               remember_query: bool = True) -> RecallResult:
        request = validate_request(user_id, query, k, session_id, as_of, kg_id, self.limits)
        if question_type is not None and question_type not in QUESTION_TYPES:
            raise InvalidInputError("question_type", f"must be one of {list(QUESTION_TYPES)}")
        timings: dict[str, float] = {}
        query_time = request.as_of or datetime.now(UTC)
        started = time.perf_counter()
        asked = read_question(request.query, query_time)
        timings["time"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        # A two-sided question's sides are embedded with it, in one call: each draws candidates of its own.
        query_embedding, *side_embeddings = self.embedder.embed(
            [request.query, *(asked.sides if self.time_side.pool_size else ())])
        timings["embed"] = (time.perf_counter() - started) * 1000
        ranker = self.ranker()
        pool_size = max(self.pool_size, request.k)
        with self._session() as conn:
            weights = NO_MODEL_WITH_TIME if asked.window else NO_MODEL
            if ranker is not None:
                started = time.perf_counter()
                profile = read_profile(conn, user_id=request.user_id, kg_id=request.kg_id,
                                       query_embedding=query_embedding, as_of=request.as_of,
                                       session_id=request.session_id)
                timings["profile"] = (time.perf_counter() - started) * 1000
                started = time.perf_counter()
                question_type = question_type or self.predict_question_type(query_embedding)
                features = build_features(question_type=question_type, query=request.query,
                                          query_time=query_time, profile=profile, session_id=request.session_id,
                                          window_days=asked.window.days if asked.window else None)
                weights = predict_weights(ranker, query_embedding, features)
                timings["model"] = (time.perf_counter() - started) * 1000
            # A question that gathers reads more rows, so its top k can be spread over sessions.
            spread = self.session_spread and gathers(request.query, question_type)
            started = time.perf_counter()
            rows = composite_rows(conn, lexical_postings=self.lexical_postings, user_id=request.user_id, kg_id=request.kg_id,
                                  query_embedding=query_embedding, query_text=request.query, weights=weights,
                                  pool_size=pool_size, lexical_pool_size=self.lexical_pool_size,
                                  lexical_pruning=self.lexical_pruning,
                                  row_limit=SPREAD_READ * request.k if spread else request.k, as_of=request.as_of,
                                  reference_time=query_time,
                                  session_id=request.session_id, hubs=self.hubs, graph=self.graph,
                                  time=asked, time_side=self.time_side, side_embeddings=side_embeddings,
                                  key_pool_size=self.key_pool_size,
                                  remember_query=remember_query and request.as_of is None)
            timings["query"] = (time.perf_counter() - started) * 1000
        if any(not math.isfinite(float(row["score"])) for row in rows):
            raise RuntimeError(f"ranker {weights.model} produced a non-finite score")
        if spread:
            order = spread_over_sessions([row["session_id"] for row in rows], request.k, self.session_spread)
            rows = [rows[i] for i in order[:request.k]]
        return RecallResult(user_id=request.user_id, kg_id=request.kg_id, query=request.query,
                            memories=[to_memory(row) for row in rows], weights=weights,
                            question_type=question_type, timings_ms=timings, time=asked)
