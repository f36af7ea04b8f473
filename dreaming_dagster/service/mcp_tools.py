"""Agent tools over MCP (``dreaming mcp``): ``remember`` saves a memory pair, ``recall`` ranks memories, over
stdio with the official ``mcp`` SDK, so an agent framework uses the memory directly.

The server runs where the agent runs, with the operator's database settings; the tenant (``kg_id``) is
fixed when it starts (``--kg-id``), so a tool call can name a user but never another tenant.
"""

from __future__ import annotations

from datetime import UTC, datetime

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.storage.database import Database


class Remembered(BaseModel):
    stored: int
    duplicate: int
    pair_ids: list[str]
    subjects_linked: int | None = None  # with dream_now: links the sync made (None: not dreamed yet)


class Memory(BaseModel):
    pair_id: str
    session_id: str
    occurred_at: str
    user_message: str
    assistant_message: str
    score: float


class Recalled(BaseModel):
    model: str
    memories: list[Memory]


def build_mcp_server(settings: DreamingSettings, kg_id: str = "default", *, database: Database | None = None,
                     embedder: Embedder | None = None) -> MCPServer:
    from dreaming_dagster.embeddings import embedder_from_settings
    from dreaming_dagster.ingest.records import InvalidInputError, validate_identifier
    from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_pairs
    from dreaming_dagster.pipeline.sync import save_and_sync
    from dreaming_dagster.retrieval.recaller import Recaller

    kg_id = validate_identifier(kg_id, "kg_id")
    database = database or Database.from_settings(settings, pool_size=settings.serve_connections)
    embedder = embedder or embedder_from_settings(settings)
    recaller = Recaller.from_settings(database, embedder, settings)
    server = MCPServer("dreaming-memory", instructions=(
        "Long-term memory of the conversations with each user. Call `remember` after an exchange worth "
        "keeping; call `recall` before answering to bring back what the user said before."))

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
        try:
            result = recaller.recall(user_id, query, k, session_id=session_id, kg_id=kg_id)
        except InvalidInputError as error:
            raise ToolError(str(error)) from None
        return Recalled(model=result.weights.model, memories=[
            Memory(pair_id=m.pair_id, session_id=m.session_id, occurred_at=m.occurred_at.isoformat(),
                   user_message=m.user_message, assistant_message=m.assistant_message, score=m.score)
            for m in result.memories])

    return server
