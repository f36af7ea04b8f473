"""POST /v1/sync: dream now, every stage for one user in this request (the fast path)."""

from __future__ import annotations

from fastapi import APIRouter

from dreaming_dagster.memory.inspection import jsonable
from dreaming_dagster.service.dependencies import Key, ServiceDep
from dreaming_dagster.service.limits import ParsedOnceRoute
from dreaming_dagster.service.shapes import StrictBody, Synced

router = APIRouter(route_class=ParsedOnceRoute)


class SyncRequest(StrictBody):
    user_id: str
    # Also read the whole graph afterwards: its shape and the graph checks (costs time in proportion to the
    # user's memory; GET /v1/users/{user_id}/stats gives the shape at any time).
    report: bool = False


@router.post("/v1/sync", summary="Dream now: every stage for one user (the fast path)")
def sync(body: SyncRequest, key: Key, service: ServiceDep) -> Synced:
    from dreaming_dagster.pipeline.sync import sync_user

    return sync_response(sync_user(body.user_id, database=service.database, embedder=service.embedder,
                                   extractor=service.extractor, kg_id=key.kg_id, report=body.report))


def sync_response(result) -> Synced:
    """A SyncResult as POST /v1/sync and POST /v1/pairs (with sync) return it."""
    return Synced(**{"user_id": result.user_id, "seconds": round(result.seconds, 3), "embedding": result.embedding,
                     "dating": result.dating, "keys": result.keys, "extraction": result.extraction,
                     "merge": result.merge, "links": result.links, "refinement": result.refinement,
                     "graph": [jsonable(r) for r in result.graph], "warnings": result.warnings})
