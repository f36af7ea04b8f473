"""POST /v1/pairs (save, optionally dream now) and DELETE /v1/pairs/{pair_id} (forget one pair)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from pydantic import Field

from dreaming_dagster.service.dependencies import Key, ServiceDep
from dreaming_dagster.service.errors import ServiceError, found
from dreaming_dagster.service.limits import ParsedOnceRoute
from dreaming_dagster.service.routes.dreaming import sync_response
from dreaming_dagster.service.shapes import Forgotten, Saved, StrictBody

router = APIRouter(route_class=ParsedOnceRoute)


class PairsRequest(StrictBody):
    user_id: str = Field(description="whose memory the pairs join")
    pairs: list[Any] = Field(description="memory pairs: {user_message, assistant_message, session_id?, "
                             "turn_index?, occurred_at?, metadata?}")
    strict: bool = Field(default=False, description="all or nothing: one invalid record stores none (422)")
    embed: bool = Field(default=True, description="embed now; false defers it to the dreaming pipeline")
    sync: bool = Field(default=False, description="dream the pairs now, as POST /v1/sync does, in this request")


# "sync" appears only when the request asked for one (unset fields are left out).
@router.post("/v1/pairs", summary="Save memory pairs (a batch; per-record rejections name the field)",
             response_model_exclude_unset=True)
def save(body: PairsRequest, key: Key, service: ServiceDep) -> Saved:
    from dreaming_dagster.ingest.save import BatchRejectedError, save_pairs
    from dreaming_dagster.pipeline.sync import save_and_sync

    most = service.settings.serve_max_records
    if len(body.pairs) > most:
        raise ServiceError(413, "too_many_records", f"at most {most} pairs a request, got {len(body.pairs)}", "pairs")
    synced = None
    try:
        if body.sync:  # embedding is part of the sync anyway: embed=false makes no difference here
            both = save_and_sync(body.user_id, body.pairs, key.kg_id, strict=body.strict, database=service.database,
                                 embedder=service.embedder, extractor=service.extractor)
            result, synced = both.saved, both.synced
        else:
            result = save_pairs(body.user_id, body.pairs, key.kg_id, strict=body.strict, embed=body.embed,
                                database=service.database, embedder=service.embedder)
    except BatchRejectedError as error:
        raise ServiceError(422, "batch_rejected", str(error), "pairs", stored=0,
                           rejected=[asdict(r) for r in error.rejections]) from None
    saved = {"user_id": body.user_id, "inserted": result.inserted, "duplicates": result.duplicates,
             "rejected": [asdict(r) for r in result.rejected], "embedded": result.embedded,
             "embedding_pending": result.embedding_pending, "pair_ids": result.pair_ids}
    return Saved(**saved, **({"sync": sync_response(synced)} if synced is not None else {}))


@router.delete("/v1/pairs/{pair_id}", summary="Forget one pair and what dreaming derived from it")
def forget_pair(pair_id: str, key: Key, service: ServiceDep) -> Forgotten:
    from dreaming_dagster.memory.forgetting import forget_pairs
    from dreaming_dagster.memory.inspection import pair_owner

    owner = found(pair_owner(pair_id, key.kg_id, database=service.database), "pair", pair_id)
    return Forgotten(**forget_pairs(owner, [pair_id], key.kg_id, database=service.database,
                                          embedder=service.embedder).as_dict())
