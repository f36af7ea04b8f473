"""/v1/users/{user_id}/…: what a user's memory holds (stats, pairs, subjects, export) and forgetting it
(a session, or the whole user), always within the caller's tenant."""

from __future__ import annotations

import itertools
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from dreaming_dagster.memory.inspection import MAX_OFFSET, jsonable
from dreaming_dagster.service.dependencies import Key, ServiceDep
from dreaming_dagster.service.errors import found
from dreaming_dagster.service.limits import ParsedOnceRoute
from dreaming_dagster.service.shapes import (
    Forgotten,
    PairDetail,
    PairsPage,
    SubjectDetail,
    SubjectsAnswer,
    UserStats,
)

router = APIRouter(prefix="/v1/users/{user_id}", route_class=ParsedOnceRoute)


@router.get("/stats", summary="What a user's memory holds in this tenant, and its graph")
def stats(user_id: str, key: Key, service: ServiceDep) -> UserStats:
    from dreaming_dagster.ingest.embedding import user_stats
    from dreaming_dagster.pipeline import graph_reports
    from dreaming_dagster.storage.records import validate_identifier

    validate_identifier(user_id, "user_id")
    memory = user_stats(service.database, user_id, [key.kg_id])
    graph = graph_reports.graph_report(service.database, user_id, [key.kg_id])
    return UserStats(user_id=user_id, kg_id=key.kg_id, memory=jsonable(memory[0]) if memory else None,
                     graph=jsonable(graph[0]) if graph else None)


@router.get("/pairs", summary="A page of a user's pairs, oldest first (by session, time range)")
def list_user_pairs(user_id: str, key: Key, service: ServiceDep, session_id: str | None = None,
                    since: str | None = None, until: str | None = None,
                    limit: Annotated[int, Query(ge=1, le=500)] = 50, cursor: str | None = None) -> PairsPage:
    from dreaming_dagster.memory.inspection import list_pairs

    return PairsPage(**list_pairs(user_id, key.kg_id, session_id=session_id, since=since, until=until,
                                  limit=limit, cursor=cursor, database=service.database).as_dict())


@router.get("/pairs/{pair_id}", summary="One pair with its subjects and dated events")
def read_user_pair(user_id: str, pair_id: str, key: Key, service: ServiceDep) -> PairDetail:
    from dreaming_dagster.memory.inspection import read_pair

    pair = read_pair(user_id, pair_id, key.kg_id, database=service.database)
    return PairDetail(**jsonable(found(pair, "pair", pair_id)))


@router.get("/subjects", summary="A user's subjects, most linked first (search by name)")
def list_user_subjects(user_id: str, key: Key, service: ServiceDep, search: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=500)] = 50,
                       offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                       archived: bool = False) -> SubjectsAnswer:
    from dreaming_dagster.memory.inspection import list_subjects

    return SubjectsAnswer(subjects=jsonable(list_subjects(user_id, key.kg_id, search=search, limit=limit,
                                                          offset=offset, include_archived=archived,
                                                          database=service.database)))


@router.get("/subjects/{subject_id}", summary="One subject with its most recent pairs")
def read_user_subject(user_id: str, subject_id: str, key: Key, service: ServiceDep,
                      pairs: Annotated[int, Query(ge=1, le=500)] = 50) -> SubjectDetail:
    from dreaming_dagster.memory.inspection import read_subject

    subject = read_subject(user_id, subject_id, key.kg_id, pair_limit=pairs, database=service.database)
    return SubjectDetail(**jsonable(found(subject, "subject", subject_id)))


@router.get("/export", summary="A user's whole memory as JSONL (`dreaming ingest` imports it)",
            response_class=StreamingResponse)
def export_user(user_id: str, key: Key, service: ServiceDep) -> StreamingResponse:
    from dreaming_dagster.memory.export import export_lines

    lines = export_lines(user_id, key.kg_id, database=service.database)
    header = next(lines)  # reads the memory now: a bad user id is a 422 before the stream starts
    return StreamingResponse((line + "\n" for line in itertools.chain([header], lines)),
                             media_type="application/x-ndjson")


# A session id may hold "/" ("chat/42"): the rest of the path is the id, sent as is or as %2F.
@router.delete("/sessions/{session_id:path}", summary="Forget every pair of one session")
def forget_user_session(user_id: str, session_id: str, key: Key, service: ServiceDep) -> Forgotten:
    from dreaming_dagster.memory.forgetting import forget_session

    return Forgotten(**forget_session(user_id, session_id, key.kg_id, database=service.database,
                                            embedder=service.embedder).as_dict())


# The same with the id in the query string, which clients send as it is: the way to forget a session whose id a
# path cannot carry (saved before such ids were refused: "..", "a/./b", "chat/").
@router.delete("/sessions", summary="Forget every pair of one session (the id in the query string)")
def forget_user_session_by_query(user_id: str, session_id: str, key: Key, service: ServiceDep) -> Forgotten:
    return forget_user_session(user_id, session_id, key, service)


# The confirmation repeats the user id, so no other route's path, shortened by a client's dot-segment removal
# (".../sessions/.." arrives as "/v1/users/alice"), can erase a user.
@router.delete("", summary="Erase a user: every pair, subject and audit row in this tenant (?confirm=<user_id>)")
def erase(user_id: str, key: Key, service: ServiceDep, confirm: str | None = None) -> Forgotten:
    from dreaming_dagster.memory.forgetting import erase_user
    from dreaming_dagster.storage.records import InvalidInputError

    if confirm != user_id:
        raise InvalidInputError("confirm", f"erasing a user needs ?confirm=<the user id> (here {user_id[:40]!r})")
    return Forgotten(**erase_user(user_id, key.kg_id, database=service.database).as_dict())
