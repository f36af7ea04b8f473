"""Pure pieces of the service: the error shape, token buckets (per key, and per client address for failed
authentications) and the request-body guard (size, time, strict JSON, parsed once)."""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


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

    max_keys: int = 100_000  # past this many, the key used longest ago is forgotten (memory stays bounded)

    def take(self, key: str) -> float:
        with self._lock:
            tokens, now = self._tokens(key)
            left = tokens - 1.0 if tokens >= 1.0 else tokens
            self._levels.pop(key, None)  # re-inserted last: the dict's order is the keys' last use
            self._levels[key] = (left, now)
            if len(self._levels) > self.max_keys:
                del self._levels[next(iter(self._levels))]
            return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def peek(self, key: str) -> float:
        """What :meth:`take` would answer, without taking: 0 or the seconds until a token is there."""
        with self._lock:
            tokens, _ = self._tokens(key)
            return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def _tokens(self, key: str) -> tuple[float, float]:
        now = self.clock()
        tokens, then = self._levels.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - then) * self.rate), now

    @staticmethod
    def retry_after(seconds: float) -> str:
        return str(max(1, math.ceil(seconds)))


class BodyRefused(Exception):
    """A request body the service will not read: the status, code, message and field of its answer."""

    def __init__(self, status: int, code: str, message: str, field_name: str = "body"):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field_name


MAX_JSON_DEPTH = 32  # the service's bodies nest 4 deep; a deeper one is an attack on the parser, not a request
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(rb"[^\[\]{}]+")


class UnreadableNumber:
    """An integer literal too long for Python to read (over ``sys.get_int_max_str_digits()`` digits): kept as
    text while parsing, so the refusal can name the field that holds it."""

    def __init__(self, text: str):
        self.digits = len(text.lstrip("-"))


def _integer(text: str) -> int | UnreadableNumber:
    limit = sys.get_int_max_str_digits()
    return UnreadableNumber(text) if limit and len(text.lstrip("-")) > limit else int(text)


def _unreadable_in(value: object) -> UnreadableNumber | None:
    """An unreadable number ``value`` is, or holds in its lists (an object's own values are checked as it is
    read, by :func:`_checked_object`)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, UnreadableNumber):
            return item
        if isinstance(item, list):
            pending.extend(item)
    return None


def _checked_object(pairs: list[tuple[str, object]]) -> dict:
    """One JSON object: a key twice in it, or a value that is a number too long to read, is refused naming
    the key."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise BodyRefused(422, "invalid_input", f"the key {key!r} appears twice in one object", key)
        unreadable = _unreadable_in(value)
        if unreadable is not None:
            raise BodyRefused(422, "invalid_input", f"holds a number of {unreadable.digits:,} digits, too long to "
                              "read", key)
        seen[key] = value
    return seen


def read_json(text: str) -> object:
    """``text`` parsed as strict JSON: :class:`BodyRefused` (422, naming the key) for a key twice in one object
    or an integer too long to read; ``json.JSONDecodeError`` or ``RecursionError`` for text that is no JSON."""
    value = json.loads(text, object_pairs_hook=_checked_object, parse_int=_integer)
    if _unreadable_in(value) is not None:
        raise BodyRefused(422, "invalid_input", "holds a number too long to read")
    return value


def read_json_loosely(text: str) -> object:
    """``text`` parsed as JSON with integers too long to read kept as :class:`UnreadableNumber` (never raises
    for them): to find the ``id`` of a message :func:`read_json` refused."""
    return json.loads(text, parse_int=_integer)


def strict_json(body: bytes) -> object:
    """``body`` parsed as JSON, or :class:`BodyRefused`: not UTF-8, not JSON, nested deeper than
    MAX_JSON_DEPTH (400 naming ``body``), a key twice in one object or an integer too long to read (422
    naming the key)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BodyRefused(400, "invalid_body", f"the body is not UTF-8 (byte {error.start})") from None
    depth = deepest = 0
    for bracket in _NOT_BRACKETS.sub(b"", _JSON_STRING.sub(b"", body)):  # strings out first: "[" in a text
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_JSON_DEPTH:
        raise BodyRefused(400, "invalid_body", f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return read_json(text)
    except json.JSONDecodeError as error:
        raise BodyRefused(400, "invalid_body", f"the body is not JSON: {error.msg} at character {error.pos}") from None


# Where RequestBodyGuard leaves the parsed body in the request's state (scope["state"]), for the routes to read
# instead of parsing the body again (service/app.py: ParsedOnceRequest).
PARSED_BODY = "dreaming_parsed_body"


class RequestBodyGuard:
    """ASGI middleware: reads a request's whole body before the app sees it and refuses, in the service's
    error shape, one over ``max_bytes`` (declared or streamed: 413), one not sent within ``timeout_seconds``
    (408) and one that is not strict JSON (:func:`strict_json`). The app then reads the body as sent, and
    finds it parsed under PARSED_BODY in the request's state."""

    def __init__(self, app, max_bytes: int, timeout_seconds: float):
        self.app, self.max_bytes, self.timeout_seconds = app, max_bytes, timeout_seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        try:
            body = await self._read(scope, receive)
            if body.strip():
                scope.setdefault("state", {})[PARSED_BODY] = strict_json(body)
        except BodyRefused as refused:
            return await self._answer(send, refused)
        except _Disconnected:
            return None
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:  # the app reads on only to see the client leave
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, scope, receive) -> bytes:
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large()
        chunks, size = [], 0
        deadline = asyncio.get_running_loop().time() + self.timeout_seconds
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(remaining, 0.001))
            except TimeoutError:
                raise BodyRefused(408, "body_timeout", f"the body was not sent within {self.timeout_seconds:g} s") from None
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> BodyRefused:
        return BodyRefused(413, "payload_too_large", f"the request body is over {self.max_bytes:,} bytes")

    @staticmethod
    async def _answer(send, refused: BodyRefused) -> None:
        body = json.dumps(error_body(refused.code, refused.message, refused.field)).encode()
        # The rest of a refused body is not read: the connection closes after the answer.
        await send({"type": "http.response.start", "status": refused.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class _Disconnected(Exception):
    pass


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
