"""The HTTP API of the memory service (``dreaming serve``): FastAPI on uvicorn, OpenAPI docs at /docs.

Every /v1 route needs an API key (``Authorization: Bearer dd_…`` or ``X-API-Key``); the key's tenant is the
``kg_id`` the request reads and writes, so one tenant's key cannot reach another tenant's memory
(dependencies.py). The routes (routes/, one router a resource) call the same functions as the Python API
(save_pairs, Recaller.recall, sync_user), through one pool of database connections and one of recall
connections. Errors always have one JSON shape (errors.py); a field that is wrong is named.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.service.dependencies import Service
from dreaming_dagster.service.errors import install_error_handlers
from dreaming_dagster.service.limits import ParsedOnceRoute, RequestBodyGuard, TokenBucket
from dreaming_dagster.service.prometheus import RequestMetrics, ServiceMetrics
from dreaming_dagster.service.routes import dreaming, operations, pairs, recall, users
from dreaming_dagster.storage.database import Database


def create_app(settings: DreamingSettings, *, database: Database | None = None,
               embedder: Embedder | None = None) -> FastAPI:
    """The service over ``settings`` (``database``/``embedder`` given: used instead, e.g. in tests)."""
    from dreaming_dagster.embeddings import embedder_from_settings
    from dreaming_dagster.extraction.extractors import extractor_from_settings
    from dreaming_dagster.retrieval.recaller import Recaller

    database = database or Database.from_settings(settings, pool_size=settings.serve_connections)
    embedder = embedder or embedder_from_settings(settings)  # the local model serialises its own calls
    service = Service(settings, database, embedder, Recaller.from_settings(database, embedder, settings),
                      bucket=TokenBucket(rate=settings.serve_rate_per_second, burst=settings.serve_rate_burst),
                      auth_failures=TokenBucket(rate=settings.serve_auth_failure_rate,
                                                burst=settings.serve_auth_failure_burst),
                      metrics=ServiceMetrics(database), extractor=extractor_from_settings(settings))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        database.ensure_schema(embedder.spec)
        embedder.embed(["warm up"])  # load the model now, not in the first request
        yield
        # uvicorn has let the requests in flight finish (serve_shutdown_seconds) before this runs.
        service.recaller.close()
        if hasattr(service.extractor, "close"):
            service.extractor.close()
        database.close()

    app = FastAPI(title="dreaming-dagster memory service", version="1",
                  description="Save memory pairs, recall them ranked, dream now. Every /v1 route needs an API key "
                  "(`dreaming keys create --tenant T`), sent as `Authorization: Bearer dd_…`.",
                  lifespan=lifespan)
    app.router.route_class = ParsedOnceRoute
    app.state.service = service
    app.add_middleware(RequestBodyGuard, max_bytes=settings.serve_max_body_bytes,
                       timeout_seconds=settings.serve_body_timeout_seconds)
    app.add_middleware(RequestMetrics, metrics=service.metrics)
    install_error_handlers(app)
    for routes in (pairs, recall, dreaming, users, operations):
        app.include_router(routes.router)
    return app

