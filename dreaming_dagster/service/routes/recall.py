"""POST /v1/recall: the k best memories for a query, with their signals and the model that ranked them."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import Field

from dreaming_dagster.service.dependencies import Key, ServiceDep
from dreaming_dagster.service.limits import ParsedOnceRoute
from dreaming_dagster.service.shapes import RecallAnswer, StrictBody

router = APIRouter(route_class=ParsedOnceRoute)


class RecallRequest(StrictBody):
    user_id: str
    query: str
    k: int = 10
    session_id: str | None = Field(default=None, description="the caller's current chat session")
    as_of: str | None = Field(default=None, description="rank the memory as it was then (ISO 8601)")


@router.post("/v1/recall", summary="The k best memories for a query, with their signals and the model")
def recall(body: RecallRequest, key: Key, service: ServiceDep) -> RecallAnswer:
    # The recaller's limits (DREAMING_RECALL_MAX_K, _MAX_QUERY_CHARS) refuse naming the field: a 422.
    return RecallAnswer(**service.recaller.recall(body.user_id, body.query, body.k, session_id=body.session_id,
                                                  as_of=body.as_of, kg_id=key.kg_id).as_dict())
