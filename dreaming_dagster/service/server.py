"""How ``dreaming serve`` runs the HTTP API: the port bound before anything else starts, uvicorn with header,
body and idle timeouts, and an access log that never holds a query string.

Binding first means a second ``dreaming serve`` on a taken port fails before it opens the database, so it
cannot, on its way out, stop an embedded server that other processes use.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import multiprocessing
import signal
import socket

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.service.limits import error_body


def _timeout_answer() -> bytes:
    body = json.dumps(error_body("header_timeout", "the request headers came too slowly")).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


_HEADER_TIMEOUT_ANSWER = _timeout_answer()


class PortInUseError(Exception):
    pass


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), or PortInUseError naming them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as error:
        raise PortInUseError(f"cannot listen on {host}:{port}: {error.strerror}") from None


def timed_protocol(header_timeout_seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request headers have not all come within
    ``header_timeout_seconds`` of its opening (a new connection that sends nothing included) or of the
    request's first byte (uvicorn's keep-alive timeout covers the wait between requests)."""

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout_seconds, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.write(_HEADER_TIMEOUT_ANSWER)
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


class QueryStringRedaction(logging.Filter):
    """Drops the query string from uvicorn's access log lines: a key sent as ``?api_key=…`` is refused (401)
    and never written down."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            path = record.args[2]
            if "?" in path:
                record.args = (*record.args[:2], path.split("?", 1)[0] + "?[redacted]", *record.args[3:])
        return True


def _die_by_signal_after_exit_hooks(signum: int, frame) -> None:
    """uvicorn re-raises the signal that stopped it, and death by a signal skips the exit hooks: run them
    first (pgserver's stops an embedded server no other process uses), then die by the signal as before.
    Worker processes still parsing for a request cut off by the shutdown are stopped first: multiprocessing's
    exit hook would otherwise wait for them, and they only end with this process."""
    for child in multiprocessing.active_children():
        child.terminate()
    atexit._run_exitfuncs()  # noqa: SLF001 - what a normal exit runs
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


def serve(settings: DreamingSettings, host: str | None = None, port: int | None = None) -> None:
    """Run the HTTP API until SIGTERM or Ctrl-C (requests in flight finish, up to serve_shutdown_seconds)."""
    import torch
    import uvicorn

    from dreaming_dagster.service.app import create_app

    listening = bind(host or settings.serve_host, settings.serve_port if port is None else port)
    torch.set_num_threads(settings.serve_torch_threads)
    app = create_app(settings)
    config = uvicorn.Config(app, http=timed_protocol(settings.serve_header_timeout_seconds),
                            timeout_keep_alive=settings.serve_idle_timeout_seconds,  # type: ignore[arg-type] - call_later takes a float
                            timeout_graceful_shutdown=settings.serve_shutdown_seconds, log_level="info",
                            proxy_headers=bool(settings.serve_forwarded_allow_ips),
                            forwarded_allow_ips=settings.serve_forwarded_allow_ips or None,
                            access_log=True)  # paths and statuses; never headers, never a query string
    logging.getLogger("uvicorn.access").addFilter(QueryStringRedaction())  # after Config set up the loggers
    signal.signal(signal.SIGTERM, _die_by_signal_after_exit_hooks)  # uvicorn restores it before re-raising
    uvicorn.Server(config).run(sockets=[listening])
