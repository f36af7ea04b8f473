"""The HTTP API of the memory service (``dreaming serve``): FastAPI on uvicorn, OpenAPI docs at /docs.

Every /v1 route needs an API key (``Authorization: Bearer dd_…`` or ``X-API-Key``); the key's tenant is the
``kg_id`` the request reads and writes, so one tenant's key cannot reach another tenant's memory. The
routes call the same functions as the Python API (save_pairs, Recaller.recall, sync_user), through one
pool of database connections and one of recall connections. Errors always have one JSON shape
(``limits.error_body``); a field that is wrong is named.
"""

import itertools
import threading
import time
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.memory.inspection import MAX_OFFSET, jsonable
from dreaming_dagster.service import keys
from dreaming_dagster.service.limits import PARSED_BODY, RequestBodyGuard, TokenBucket, error_body
from dreaming_dagster.service.metrics import ServiceMetrics
from dreaming_dagster.service.shapes import (
    Forgotten,
    Health,
    PairDetail,
    PairsPage,
    RecallAnswer,
    Saved,
    SubjectDetail,
    SubjectsAnswer,
    Synced,
    UserStats,
)
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import InvalidInputError


class ServiceError(Exception):
    def __init__(self, status: int, code: str, message: str, field_name: str | None = None,
                 headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field_name
        self.headers, self.extra = headers or {}, extra


# -- request bodies -----------------------------------------------------------------------------------
class StrictBody(BaseModel):
    """A request body whose fields take their documented JSON types only: ``"10"`` or ``true`` is no integer,
    ``"yes"`` no boolean, ``12345`` no date (422 naming the field); unknown fields are refused too."""

    model_config = ConfigDict(strict=True, extra="forbid")


class PairsRequest(StrictBody):
    user_id: str = Field(description="whose memory the pairs join")
    pairs: list[Any] = Field(description="memory pairs: {user_message, assistant_message, session_id?, "
                             "turn_index?, occurred_at?, metadata?}")
    strict: bool = Field(default=False, description="all or nothing: one invalid record stores none (422)")
    embed: bool = Field(default=True, description="embed now; false defers it to the dreaming pipeline")
    sync: bool = Field(default=False, description="dream the pairs now, as POST /v1/sync does, in this request")


class RecallRequest(StrictBody):
    user_id: str
    query: str
    k: int = 10
    session_id: str | None = Field(default=None, description="the caller's current chat session")
    as_of: str | None = Field(default=None, description="rank the memory as it was then (ISO 8601)")


class SyncRequest(StrictBody):
    user_id: str
    # Also read the whole graph afterwards: its shape and the graph checks (costs time in proportion to the
    # user's memory; GET /v1/users/{user_id}/stats gives the shape at any time).
    report: bool = False


@dataclass
class Service:
    """What the routes share (``app.state.service``)."""

    settings: DreamingSettings
    database: Database
    embedder: Embedder
    recaller: Any
    bucket: TokenBucket
    auth_failures: TokenBucket  # per client address: failed authentications, throttled before any lookup
    metrics: ServiceMetrics
    # Hashes of keys that authenticated lately: a throttled address's known-good key is still looked up, so a
    # misconfigured client cannot lock out a good one behind the same address.
    known_keys: OrderedDict = field(default_factory=OrderedDict)
    known_keys_lock: threading.Lock = field(default_factory=threading.Lock)
    MAX_KNOWN_KEYS = 10_000

    def knows(self, key_hash: str) -> bool:
        with self.known_keys_lock:
            return key_hash in self.known_keys

    def remember_key(self, key_hash: str, good: bool) -> None:
        with self.known_keys_lock:
            if not good:
                self.known_keys.pop(key_hash, None)
                return
            self.known_keys[key_hash] = True
            self.known_keys.move_to_end(key_hash)
            while len(self.known_keys) > self.MAX_KNOWN_KEYS:
                self.known_keys.popitem(last=False)


# The two ways a client may send its key, as FastAPI's security schemes (the OpenAPI page lists both). Neither
# refuses by itself (auto_error off): `authorized` answers a missing key in the service's error shape.
BEARER = HTTPBearer(auto_error=False, description="`Authorization: Bearer dd_…` (dreaming keys create)")
API_KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, description="the same key in `X-API-Key`")


def authorized(request: Request, bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
               x_api_key: Annotated[str | None, Depends(API_KEY_HEADER)]) -> keys.ApiKey:
    """The API key of a request (401 without a live one; 429 past its rate). Its tenant scopes the request.

    Failed authentications are counted per client address: past a burst the address gets 429 before its key
    is looked up, so a flood of guessed keys costs the database nothing. A key that authenticated lately is
    still looked up (and a revoked one refused) from a throttled address."""
    service: Service = request.app.state.service
    address = request.client.host if request.client else "unknown"
    secret = x_api_key or (bearer.credentials.strip() if bearer else None)
    key_hash = keys.secret_hash(secret) if secret else ""
    wait = service.auth_failures.peek(address)
    if wait and not service.knows(key_hash):
        raise ServiceError(429, "rate_limited", "too many failed authentications from this address",
                           headers={"Retry-After": TokenBucket.retry_after(wait)}, retry_after_seconds=round(wait, 3))
    if not secret:
        service.auth_failures.take(address)
        raise ServiceError(401, "unauthorized", "an API key is required (Authorization: Bearer dd_…)",
                           headers={"WWW-Authenticate": "Bearer"})
    key = keys.key_for_secret(service.database, secret)
    service.remember_key(key_hash, good=key is not None)
    if key is None:
        service.auth_failures.take(address)
        raise ServiceError(401, "unauthorized", "unknown or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    wait = service.bucket.take(key.id)
    if wait:
        raise ServiceError(429, "rate_limited", f"over {service.settings.serve_rate_per_second:g} requests a second "
                           "for this key", headers={"Retry-After": TokenBucket.retry_after(wait)},
                           retry_after_seconds=round(wait, 3))
    return key


class ParsedOnceRequest(Request):
    """A request whose JSON body RequestBodyGuard has parsed already (strictly): FastAPI reads that value
    instead of parsing the body a second time."""

    async def json(self) -> Any:
        state = self.scope.get("state") or {}
        if PARSED_BODY in state:
            return state[PARSED_BODY]
        return await super().json()


class ParsedOnceRoute(APIRoute):
    """The service's routes: each hands FastAPI a :class:`ParsedOnceRequest` (FastAPI's custom route class)."""

    def get_route_handler(self):
        handle = super().get_route_handler()

        async def handler(request: Request) -> Response:
            return await handle(ParsedOnceRequest(request.scope, request.receive))

        return handler


Key = Annotated[keys.ApiKey, Depends(authorized)]


def create_app(settings: DreamingSettings, *, database: Database | None = None,
               embedder: Embedder | None = None) -> FastAPI:
    """The service over ``settings`` (``database``/``embedder`` given: used instead, e.g. in tests)."""
    from dreaming_dagster.embeddings import embedder_from_settings
    from dreaming_dagster.pipeline.providers import extractor_from_settings
    from dreaming_dagster.retrieval.recaller import Recaller

    database = database or Database.from_settings(settings, pool_size=settings.serve_connections)
    embedder = embedder or embedder_from_settings(settings)  # the local model serialises its own calls
    recaller = Recaller.from_settings(database, embedder, settings)
    # One extractor for the service's life: the offline one keeps its worker processes (spawned by the first
    # large sync) instead of starting two interpreters for every large sync (make bench-extraction-workers).
    extractor = extractor_from_settings(settings)
    bucket = TokenBucket(rate=settings.serve_rate_per_second, burst=settings.serve_rate_burst)
    auth_failures = TokenBucket(rate=settings.serve_auth_failure_rate, burst=settings.serve_auth_failure_burst)
    metrics = ServiceMetrics(database)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        database.ensure_schema(embedder.spec)
        embedder.embed(["warm up"])  # load the model now, not in the first request
        yield
        # uvicorn has let the requests in flight finish (serve_shutdown_seconds) before this runs.
        recaller.close()
        if hasattr(extractor, "close"):
            extractor.close()
        database.close()

    app = FastAPI(title="dreaming-dagster memory service", version="1",
                  description="Save memory pairs, recall them ranked, dream now. Every /v1 route needs an API key "
                  "(`dreaming keys create --tenant T`), sent as `Authorization: Bearer dd_…`.",
                  lifespan=lifespan)
    app.router.route_class = ParsedOnceRoute
    app.state.service = Service(settings, database, embedder, recaller, bucket, auth_failures, metrics)
    app.add_middleware(RequestBodyGuard, max_bytes=settings.serve_max_body_bytes,
                       timeout_seconds=settings.serve_body_timeout_seconds)

    @app.exception_handler(ServiceError)
    async def service_error(_request: Request, error: ServiceError):
        return JSONResponse(error_body(error.code, error.message, error.field, **error.extra),
                            status_code=error.status, headers=error.headers)

    @app.exception_handler(InvalidInputError)
    async def invalid_input(_request: Request, error: InvalidInputError):
        return JSONResponse(error_body("invalid_input", error.reason, error.field), status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_request: Request, error: RequestValidationError):
        first = error.errors()[0] if error.errors() else {"loc": ("body",), "msg": "invalid request"}
        # ("query", "offset") → "offset": the field as the client wrote it, wherever it was sent.
        location = [str(part) for part in first["loc"]] or ["body"]
        where = ".".join(location[1:]) or location[0]
        return JSONResponse(error_body("invalid_input", first["msg"], where), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, error: StarletteHTTPException):
        return JSONResponse(error_body("not_found" if error.status_code == 404 else "http_error", str(error.detail)),
                            status_code=error.status_code)

    @app.middleware("http")
    async def measure(request: Request, call_next):
        started = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        metrics.observe(getattr(route, "path", "unmatched"), request.method, response.status_code,
                        time.perf_counter() - started)
        return response

    # "sync" appears only when the request asked for one (unset fields are left out).
    @app.post("/v1/pairs", summary="Save memory pairs (a batch; per-record rejections name the field)",
              response_model_exclude_unset=True)
    def save(body: PairsRequest, key: Key) -> Saved:
        from dreaming_dagster.ingest.save import BatchRejectedError, save_pairs
        from dreaming_dagster.pipeline.sync import save_and_sync

        if len(body.pairs) > settings.serve_max_records:
            raise ServiceError(413, "too_many_records", f"at most {settings.serve_max_records} pairs a request, "
                               f"got {len(body.pairs)}", "pairs")
        synced = None
        try:
            if body.sync:  # embedding is part of the sync anyway: embed=false makes no difference here
                both = save_and_sync(body.user_id, body.pairs, key.kg_id, strict=body.strict, database=database,
                                     embedder=embedder, extractor=extractor)
                result, synced = both.saved, both.synced
            else:
                result = save_pairs(body.user_id, body.pairs, key.kg_id, strict=body.strict, embed=body.embed,
                                    database=database, embedder=embedder)
        except BatchRejectedError as error:
            raise ServiceError(422, "batch_rejected", str(error), "pairs", stored=0,
                               rejected=[asdict(r) for r in error.rejections]) from None
        saved = {"user_id": body.user_id, "inserted": result.inserted, "duplicates": result.duplicates,
                 "rejected": [asdict(r) for r in result.rejected], "embedded": result.embedded,
                 "embedding_pending": result.embedding_pending, "pair_ids": result.pair_ids}
        return Saved(**saved, **({"sync": sync_response(synced)} if synced is not None else {}))

    @app.post("/v1/recall", summary="The k best memories for a query, with their signals and the model")
    def recall(body: RecallRequest, key: Key) -> RecallAnswer:
        # The recaller's limits (DREAMING_RECALL_MAX_K, _MAX_QUERY_CHARS) refuse naming the field: a 422.
        return RecallAnswer(**recaller.recall(body.user_id, body.query, body.k, session_id=body.session_id,
                                              as_of=body.as_of, kg_id=key.kg_id).as_dict())

    @app.post("/v1/sync", summary="Dream now: every stage for one user (the fast path)")
    def sync(body: SyncRequest, key: Key) -> Synced:
        from dreaming_dagster.pipeline.sync import sync_user

        return sync_response(sync_user(body.user_id, database=database, embedder=embedder, extractor=extractor,
                                       kg_id=key.kg_id, report=body.report))

    @app.get("/v1/users/{user_id}/stats", summary="What a user's memory holds in this tenant, and its graph")
    def stats(user_id: str, key: Key) -> UserStats:
        from dreaming_dagster.ingest.embedding import user_stats
        from dreaming_dagster.pipeline import graph_reports
        from dreaming_dagster.storage.records import validate_identifier

        validate_identifier(user_id, "user_id")
        memory = user_stats(database, user_id, [key.kg_id])
        graph = graph_reports.graph_report(database, user_id, [key.kg_id])
        return UserStats(user_id=user_id, kg_id=key.kg_id, memory=jsonable(memory[0]) if memory else None,
                         graph=jsonable(graph[0]) if graph else None)

    @app.get("/v1/users/{user_id}/pairs", summary="A page of a user's pairs, oldest first (by session, time range)")
    def list_user_pairs(user_id: str, key: Key, session_id: str | None = None, since: str | None = None,
                        until: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 50,
                        cursor: str | None = None) -> PairsPage:
        from dreaming_dagster.memory.inspection import list_pairs

        return PairsPage(**list_pairs(user_id, key.kg_id, session_id=session_id, since=since, until=until,
                                      limit=limit, cursor=cursor, database=database).as_dict())

    @app.get("/v1/users/{user_id}/pairs/{pair_id}", summary="One pair with its subjects and dated events")
    def read_user_pair(user_id: str, pair_id: str, key: Key) -> PairDetail:
        from dreaming_dagster.memory.inspection import read_pair

        return PairDetail(**jsonable(found(read_pair(user_id, pair_id, key.kg_id, database=database), "pair", pair_id)))

    @app.get("/v1/users/{user_id}/subjects", summary="A user's subjects, most linked first (search by name)")
    def list_user_subjects(user_id: str, key: Key, search: str | None = None,
                           limit: Annotated[int, Query(ge=1, le=500)] = 50,
                           offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                           archived: bool = False) -> SubjectsAnswer:
        from dreaming_dagster.memory.inspection import list_subjects

        return SubjectsAnswer(subjects=jsonable(list_subjects(user_id, key.kg_id, search=search, limit=limit,
                                                              offset=offset, include_archived=archived,
                                                              database=database)))

    @app.get("/v1/users/{user_id}/subjects/{subject_id}", summary="One subject with its most recent pairs")
    def read_user_subject(user_id: str, subject_id: str, key: Key,
                          pairs: Annotated[int, Query(ge=1, le=500)] = 50) -> SubjectDetail:
        from dreaming_dagster.memory.inspection import read_subject

        return SubjectDetail(**jsonable(found(read_subject(user_id, subject_id, key.kg_id, pair_limit=pairs,
                                                           database=database), "subject", subject_id)))

    @app.get("/v1/users/{user_id}/export", summary="A user's whole memory as JSONL (`dreaming ingest` imports it)",
             response_class=StreamingResponse)
    def export_user(user_id: str, key: Key) -> StreamingResponse:
        from dreaming_dagster.memory.export import export_lines

        lines = export_lines(user_id, key.kg_id, database=database)
        header = next(lines)  # reads the memory now: a bad user id is a 422 before the stream starts
        return StreamingResponse((line + "\n" for line in itertools.chain([header], lines)),
                                 media_type="application/x-ndjson")

    @app.delete("/v1/pairs/{pair_id}", summary="Forget one pair and what dreaming derived from it")
    def forget_pair(pair_id: str, key: Key) -> Forgotten:
        from dreaming_dagster.memory.forgetting import forget_pairs
        from dreaming_dagster.memory.inspection import pair_owner

        owner = found(pair_owner(pair_id, key.kg_id, database=database), "pair", pair_id)
        return Forgotten(**forget_pairs(owner, [pair_id], key.kg_id, database=database).as_dict())

    # A session id may hold "/" ("chat/42"): the rest of the path is the id, sent as is or as %2F.
    @app.delete("/v1/users/{user_id}/sessions/{session_id:path}", summary="Forget every pair of one session")
    def forget_user_session(user_id: str, session_id: str, key: Key) -> Forgotten:
        from dreaming_dagster.memory.forgetting import forget_session

        return Forgotten(**forget_session(user_id, session_id, key.kg_id, database=database).as_dict())

    @app.delete("/v1/users/{user_id}", summary="Erase a user: every pair, subject and audit row in this tenant")
    def erase(user_id: str, key: Key) -> Forgotten:
        from dreaming_dagster.memory.forgetting import erase_user

        return Forgotten(**erase_user(user_id, key.kg_id, database=database).as_dict())

    @app.get("/healthz", summary="The database answers; the schema version", response_model=Health,
             responses={503: {"description": "the database does not answer"}})
    def healthz() -> Response:
        try:
            with database.connect(vectors=False) as conn:
                version = conn.execute(load_sql("service/health")).fetchone()["schema_version"]
        except Exception as error:  # noqa: BLE001 - any failure to answer is "unhealthy"
            return JSONResponse(error_body("unhealthy", f"database unreachable: {type(error).__name__}"),
                                status_code=503)
        return JSONResponse({"status": "ok", "database": "reachable", "schema_version": version})

    @app.get("/metrics", summary="Prometheus metrics")
    def prometheus() -> Response:
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return app


def found(value, what: str, identifier: str):
    """``value``, or a 404 naming what the tenant does not hold."""
    if value is None:
        raise ServiceError(404, "not_found", f"no {what} {identifier[:60]} in this tenant's memory", f"{what}_id")
    return value


def sync_response(result) -> Synced:
    """A SyncResult as POST /v1/sync and POST /v1/pairs (with sync) return it."""
    return Synced(**{"user_id": result.user_id, "seconds": round(result.seconds, 3), "embedding": result.embedding,
            "dating": result.dating, "keys": result.keys, "extraction": result.extraction, "merge": result.merge,
            "links": result.links, "refinement": result.refinement, "graph": [jsonable(r) for r in result.graph],
            "warnings": result.warnings})
