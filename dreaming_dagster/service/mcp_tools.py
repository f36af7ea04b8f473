"""Agent tools over MCP (``dreaming mcp``): ``remember`` saves a memory pair, ``recall`` ranks memories,
``browse_memory`` lists what is kept and ``forget`` deletes it, over stdio with the official ``mcp`` SDK, so an
agent framework uses the memory directly.

The server runs where the agent runs, with the operator's database settings; the tenant (``kg_id``) is
fixed when it starts (``--kg-id``), so a tool call can name a user but never another tenant. Its limits are
the recaller's, as over HTTP (DREAMING_RECALL_MAX_K, DREAMING_RECALL_MAX_QUERY_CHARS), its answers have the
shapes of service/shapes.py, and every line a client sends is answered: one that is not a JSON-RPC
message gets a JSON-RPC error (:func:`serve_stdio`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.service.limits import BodyRefused, read_json, read_json_loosely
from dreaming_dagster.service.shapes import (
    Browsed,
    Forgot,
    Memory,
    Recalled,
    Remembered,
    StoredPair,
    StoredSubject,
    TimeUnderstood,
)
from dreaming_dagster.storage.database import Database


def build_mcp_server(settings: DreamingSettings, kg_id: str = "default", *, database: Database | None = None,
                     embedder: Embedder | None = None) -> MCPServer:
    from dreaming_dagster.embeddings import embedder_from_settings
    from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_pairs
    from dreaming_dagster.pipeline.sync import save_and_sync
    from dreaming_dagster.retrieval.recaller import Recaller
    from dreaming_dagster.storage.records import InvalidInputError, validate_identifier

    kg_id = validate_identifier(kg_id, "kg_id")
    database = database or Database.from_settings(settings, pool_size=settings.serve_connections)
    embedder = embedder or embedder_from_settings(settings)
    recaller = Recaller.from_settings(database, embedder, settings)
    server = MCPServer("dreaming-memory", instructions=(
        "Long-term memory of the conversations with each user. Call `remember` after an exchange worth "
        "keeping; call `recall` before answering to bring back what the user said before; `browse_memory` "
        "lists what is kept and `forget` deletes it when the user asks."))

    @server.tool()
    def remember(user_id: str, user_message: str, assistant_message: str, session_id: str,
                 occurred_at: str | None = None, dream_now: bool = False) -> Remembered:
        """Save one exchange (the user's message and the assistant's reply) in the user's memory.

        ``session_id`` names the conversation; ``occurred_at`` (ISO 8601) defaults to now. The same exchange
        saved again with the same ``occurred_at`` (a retry) is stored once. ``dream_now``: also dream it
        before answering (its subjects extracted and linked into the user's graph; otherwise the background
        pipeline does it within a minute)."""
        record = {"user_message": user_message, "assistant_message": assistant_message, "session_id": session_id,
                  "occurred_at": occurred_at or datetime.now(UTC).isoformat()}
        linked = None
        try:
            if dream_now:  # strict: a refused exchange is answered before any dreaming starts
                both = save_and_sync(user_id, [record], kg_id, strict=True, database=database, embedder=embedder)
                result, linked = both.saved, both.synced.links.get("links", 0)
            else:
                result = save_pairs(user_id, [record], kg_id, database=database, embedder=embedder)
        except InvalidInputError as error:  # the agent sees which field, as the HTTP API says it
            raise ToolError(str(error)) from None
        except BatchRejectedError as error:
            result = SaveResult(rejected=error.rejections)
        if result.rejected:
            rejection = result.rejected[0]
            raise ToolError(f"field '{rejection.field}': {rejection.reason}")
        return Remembered(stored=result.inserted, duplicate=result.duplicates, pair_ids=result.pair_ids,
                          subjects_linked=linked)

    @server.tool()
    def recall(user_id: str, query: str, k: int = 5, session_id: str | None = None) -> Recalled:
        """The ``k`` memories of the user that best answer ``query``, best first, each with its score."""
        try:  # the recaller's limits (DREAMING_RECALL_MAX_K, DREAMING_RECALL_MAX_QUERY_CHARS), as over HTTP
            result = recaller.recall(user_id, query, k, session_id=session_id, kg_id=kg_id)
        except InvalidInputError as error:
            raise ToolError(str(error)) from None
        understood = result.time.as_dict()
        return Recalled(model=result.weights.model, time=TimeUnderstood(**understood) if understood else None, memories=[
            Memory(pair_id=m.pair_id, session_id=m.session_id, occurred_at=m.occurred_at.isoformat(),
                   user_message=m.user_message, assistant_message=m.assistant_message, score=m.score)
            for m in result.memories])

    @server.tool()
    def browse_memory(user_id: str, subjects: bool = False, search: str | None = None, session_id: str | None = None,
                      limit: int = 20, cursor: str | None = None) -> Browsed:
        """What the memory holds about the user: a page of their saved exchanges, oldest first (``session_id``:
        one conversation), or with ``subjects`` the people, places and topics it knows, most mentioned first
        (``search``: names containing it). A page cut at ``limit`` has a ``next_cursor``: pass it as ``cursor``
        (with the same ``subjects``) for the next page."""
        from dreaming_dagster.memory.inspection import (
            list_pairs,
            list_subjects,
            read_subjects_cursor,
            subjects_cursor,
        )

        try:
            if subjects:
                offset = read_subjects_cursor(cursor)
                rows = list_subjects(user_id, kg_id, search=search, limit=limit, offset=offset, database=database)
                return Browsed(next_cursor=subjects_cursor(offset + limit) if len(rows) == limit else None,
                               subjects=[StoredSubject(**{name: row[name] for name in StoredSubject.model_fields})
                                         for row in rows])
            page = list_pairs(user_id, kg_id, session_id=session_id, limit=limit, cursor=cursor, database=database)
        except InvalidInputError as error:
            raise ToolError(str(error)) from None
        return Browsed(next_cursor=page.next_cursor, pairs=[StoredPair(
            pair_id=p["pair_id"], session_id=p["session_id"], occurred_at=p["occurred_at"].isoformat(),
            user_message=p["user_message"], assistant_message=p["assistant_message"], subjects=p["subjects"])
            for p in page.pairs])

    @server.tool()
    def forget(user_id: str, pair_ids: list[str] | None = None, session_id: str | None = None,
               everything: bool = False) -> Forgot:
        """Delete what the user asked to be forgotten: the exchanges ``pair_ids`` (from `recall` or
        `browse_memory`), a whole conversation ``session_id``, or with ``everything`` all of the user's memory.
        What was learned from it goes too. Name exactly one of the three."""
        from dreaming_dagster.memory.forgetting import erase_user, forget_pairs, forget_session

        if sum((bool(pair_ids), session_id is not None, everything)) != 1:
            raise ToolError("name exactly one of pair_ids, session_id or everything")
        try:
            if everything:
                result = erase_user(user_id, kg_id, database=database)
            elif session_id is not None:
                result = forget_session(user_id, session_id, kg_id, database=database, embedder=embedder)
            else:
                result = forget_pairs(user_id, pair_ids, kg_id, database=database, embedder=embedder)
        except InvalidInputError as error:
            raise ToolError(str(error)) from None
        return Forgot(pairs=result.pairs, subjects_deleted=result.subjects_deleted,
                      subjects_rebuilt=result.subjects_rebuilt, missing=result.missing)

    return server


# JSON-RPC's error codes for a message that cannot be read.
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32602, -32603
_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params", "result", "error"})


def rpc_error(message_id: object, code: int, text: str) -> str:
    """A JSON-RPC error answer (``id`` null when the message's own cannot be read)."""
    ident = message_id if isinstance(message_id, str | int) and not isinstance(message_id, bool) else None
    return json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": text}}) + "\n"


def read_line(raw: bytes) -> tuple[str | None, str | None]:
    """One line from the client: (the message to hand the SDK, None), or (None, the error to answer), or
    (None, None) for a blank line. The SDK drops a line it cannot read without a word; here each such line
    is answered: not UTF-8, not JSON, text that cannot be text (a lone surrogate escape such as \\ud800),
    or JSON that is no JSON-RPC message."""
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as error:
        return None, rpc_error(None, PARSE_ERROR, f"Parse error: the line is not UTF-8 (byte {error.start})")
    if not text:
        return None, None
    try:
        message = read_json(text)
    except (json.JSONDecodeError, RecursionError) as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "nested too deeply"
        return None, rpc_error(None, PARSE_ERROR, f"Parse error: {reason}")
    except BodyRefused as refused:  # a key twice in one object, or a number too long to read: name it
        loose = read_json_loosely(text)
        message_id = loose.get("id") if isinstance(loose, dict) else None
        code = INVALID_REQUEST if refused.field in _ENVELOPE or refused.field == "body" else INVALID_PARAMS
        kind = "Invalid request" if code == INVALID_REQUEST else "Invalid params"
        return None, rpc_error(message_id, code, f"{kind}: field '{refused.field}': {refused.message}")
    message_id = message.get("id") if isinstance(message, dict) else None
    try:  # the SDK's own reading: it also refuses a lone surrogate escape, which Python's json accepts
        mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as error:
        return None, rpc_error(message_id, INVALID_REQUEST, f"Invalid request: {error.errors()[0]['msg']}")
    return text, None


class _LineWriter:
    """The wire to the client, one whole line at a time: the SDK's answers and this module's errors come
    from different tasks."""

    def __init__(self, fd: int):
        self._file = anyio.wrap_file(os.fdopen(fd, "w", encoding="utf-8", buffering=1))
        self._lock = anyio.Lock()

    async def write(self, line: str) -> None:
        async with self._lock:
            await self._file.write(line)
            await self._file.flush()

    async def flush(self) -> None:  # each write flushes
        return None


async def serve_stdio(server: MCPServer) -> None:
    """Serve ``server`` over this process's stdin and stdout until stdin closes, answering every line."""
    # The wire keeps private descriptors; fd 0 reads nothing and fd 1 goes to stderr meanwhile, so stray
    # output of a library cannot corrupt the protocol (what the SDK's own stdio transport does).
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    writer = _LineWriter(wire_out)

    async def lines() -> AsyncIterator[str]:
        async for raw in anyio.wrap_file(os.fdopen(wire_in, "rb")):
            try:
                message, error = read_line(raw)
            except Exception as failure:  # noqa: BLE001 - one line must never end the agent's memory tool
                message, error = None, rpc_error(None, INTERNAL_ERROR, f"Internal error: {type(failure).__name__}")
            if error:
                await writer.write(error)
            elif message:
                yield message

    async with stdio_server(stdin=lines(), stdout=writer) as (read_stream, write_stream):  # type: ignore[arg-type]
        lowlevel = server._lowlevel_server  # noqa: SLF001 - what MCPServer.run_stdio_async runs, on these streams
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


def run_stdio(server: MCPServer) -> None:
    sys.stdout.flush()
    anyio.run(serve_stdio, server)
