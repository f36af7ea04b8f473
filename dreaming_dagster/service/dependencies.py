"""What every route depends on (FastAPI's ``Depends``): the service's shared parts, and the caller's API key,
whose tenant is the ``kg_id`` the request reads and writes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.service import api_keys
from dreaming_dagster.service.errors import ServiceError
from dreaming_dagster.service.limits import TokenBucket
from dreaming_dagster.service.prometheus import ServiceMetrics
from dreaming_dagster.storage.database import Database


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
    # One extractor for the service's life: the offline one keeps its worker processes (spawned by the first
    # large sync) instead of starting two interpreters for every large sync (make bench-extraction-workers).
    extractor: Any
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
               x_api_key: Annotated[str | None, Depends(API_KEY_HEADER)]) -> api_keys.ApiKey:
    """The API key of a request (401 without a live one; 429 past its rate). Its tenant scopes the request.

    Failed authentications are counted per client address: past a burst the address gets 429 before its key
    is looked up, so a flood of guessed keys costs the database nothing. A key that authenticated lately is
    still looked up (and a revoked one refused) from a throttled address."""
    service: Service = request.app.state.service
    address = request.client.host if request.client else "unknown"
    secret = x_api_key or (bearer.credentials.strip() if bearer else None)
    key_hash = api_keys.secret_hash(secret) if secret else ""
    wait = service.auth_failures.peek(address)
    if wait and not service.knows(key_hash):
        raise ServiceError(429, "rate_limited", "too many failed authentications from this address",
                           headers={"Retry-After": TokenBucket.retry_after(wait)}, retry_after_seconds=round(wait, 3))
    if not secret:
        service.auth_failures.take(address)
        raise ServiceError(401, "unauthorized", "an API key is required (Authorization: Bearer dd_…)",
                           headers={"WWW-Authenticate": "Bearer"})
    key = api_keys.key_for_secret(service.database, secret)
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


def current_service(request: Request) -> Service:
    """The service the app was built with (``app.state.service``)."""
    return request.app.state.service


# The two dependencies every /v1 route declares: the shared parts, and the caller's key (its tenant).
ServiceDep = Annotated[Service, Depends(current_service)]
Key = Annotated[api_keys.ApiKey, Depends(authorized)]
