"""Prometheus metrics of the service: requests and latency by route, and the dreaming backlog (pairs
waiting for a stage, pairs whose extraction is parked), read from the database at scrape time."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.user_graphs import extraction_retry_params

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _BacklogCollector:
    def __init__(self, database: Database):
        self.database = database

    def collect(self):
        pending = GaugeMetricFamily("dreaming_pending_pairs", "pairs waiting for a dreaming stage", labels=["stage"])
        failed = GaugeMetricFamily("dreaming_failed_pairs", "pairs whose extraction failed on every attempt (parked)")
        try:
            with self.database.connect(vectors=False) as conn:
                row = conn.execute(load_sql("service/backlog"), extraction_retry_params()).fetchone()
        except Exception:  # noqa: BLE001 - a scrape while the database is down reports requests only
            return
        for stage in ("embedding", "dating", "keying", "extraction", "merge", "links"):
            pending.add_metric([stage], row[stage])
        failed.add_metric([], row["failed"])
        yield pending
        yield failed


class ServiceMetrics:
    """One registry per service instance (tests start several)."""

    def __init__(self, database: Database):
        self.registry = CollectorRegistry()
        self.requests = Counter("dreaming_http_requests", "HTTP requests by route, method and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("dreaming_http_request_seconds", "HTTP request latency by route",
                                 ["route", "method"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_BacklogCollector(database))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class RequestMetrics:
    """ASGI middleware: each request's route, method, status and seconds into ``metrics``. Plain ASGI rather
    than Starlette's BaseHTTPMiddleware, which runs every request through an extra task and stream."""

    def __init__(self, app, metrics: ServiceMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers should the app raise before starting a response

        async def send_noting_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:  # a request that raised is counted too, as the 500 the server answers
            route = scope.get("route")  # the router records the matched route in the request's scope
            self.metrics.observe(getattr(route, "path", "unmatched"), scope["method"], status,
                                 time.perf_counter() - started)
