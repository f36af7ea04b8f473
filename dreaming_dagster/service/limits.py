"""Pure pieces of the service: the error shape, a per-key token bucket, a request-body size guard."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def error_body(code: str, message: str, field_name: str | None = None, **extra) -> dict:
    """The one shape every error of the service has: ``{"error": {"code", "message", "field", …}}``."""
    return {"error": {"code": code, "message": message, "field": field_name, **extra}}


@dataclass
class TokenBucket:
    """``rate`` requests a second on average, ``burst`` at once, per key. ``take`` answers 0 (go) or the
    seconds until the next request would be allowed (the Retry-After)."""

    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _levels: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str) -> float:
        with self._lock:
            now = self.clock()
            tokens, then = self._levels.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            if tokens >= 1.0:
                self._levels[key] = (tokens - 1.0, now)
                return 0.0
            self._levels[key] = (tokens, now)
            return (1.0 - tokens) / self.rate

    @staticmethod
    def retry_after(seconds: float) -> str:
        return str(max(1, math.ceil(seconds)))


class BodyTooLarge(Exception):
    pass


class BodySizeLimit:
    """ASGI middleware: a request whose body passes ``max_bytes`` (declared or streamed) gets a 413 in the
    service's error shape before any of it is parsed."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send)
        seen = 0
        started = False

        async def counted_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracked_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send):
        body = json.dumps(error_body("payload_too_large", f"the request body is over {self.max_bytes:,} bytes",
                                     "body")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
