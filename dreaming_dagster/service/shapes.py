"""The shapes of the service's answers, stated once: the HTTP routes declare them as response models (the
OpenAPI page at /docs shows them) and the MCP tools return them (an agent's client reads the same fields).
An MCP answer is the slimmer sibling of the HTTP one where an agent needs less (:class:`Memory` against
:class:`RankedMemory`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictBody(BaseModel):
    """A request body whose fields take their documented JSON types only: ``"10"`` or ``true`` is no integer,
    ``"yes"`` no boolean, ``12345`` no date (422 naming the field); unknown fields are refused too."""

    model_config = ConfigDict(strict=True, extra="forbid")


class TimeUnderstood(BaseModel):
    """The time the question asks about, as recall read it (null: the question names no time)."""

    first_day: str | None = None
    last_day: str | None = None
    granularity: str | None = None
    certainty: float | None = None
    label: str | None = None  # "1–30 April 2023"
    relation: str | None = None
    expression: str | None = None
    order: str | None = None
    sides: list[str] = []


class PairText(BaseModel):
    """A saved exchange as every answer names it."""

    pair_id: str
    session_id: str
    occurred_at: str
    user_message: str
    assistant_message: str


class Memory(PairText):
    """A recalled memory, best first (the MCP tool's answer)."""

    score: float


class RankedMemory(Memory):
    """A recalled memory with everything recall knows of it (the HTTP answer)."""

    turn_index: int | None
    signals: dict[str, float]
    drawn_by: list[str]  # the pool's sides that drew it: vector, lexical, graph, key, time


class Recalled(BaseModel):
    model: str
    time: TimeUnderstood | None = None
    memories: list[Memory]


class RecallAnswer(BaseModel):
    user_id: str
    kg_id: str
    query: str
    model: str
    question_type: str | None
    time: TimeUnderstood | None
    weights: dict[str, float]
    scale: float
    timings_ms: dict[str, float]
    memories: list[RankedMemory]


class Remembered(BaseModel):
    stored: int
    duplicate: int
    pair_ids: list[str]
    subjects_linked: int | None = None  # with dream_now: links the sync made (None: not dreamed yet)


class Rejected(BaseModel):
    record: int | str  # the index in the batch
    field: str
    reason: str


class Synced(BaseModel):
    """What a sync did, stage by stage (each stage's counts), and the graph afterwards when asked."""

    model_config = ConfigDict(extra="allow")

    user_id: str
    seconds: float
    embedding: dict[str, Any]
    dating: dict[str, Any]
    keys: dict[str, Any]
    extraction: dict[str, Any]
    merge: dict[str, Any]
    links: dict[str, Any]
    refinement: dict[str, Any]
    graph: list[dict[str, Any]]
    warnings: list[str]


class Saved(BaseModel):
    user_id: str
    inserted: int
    duplicates: int
    rejected: list[Rejected]
    embedded: int
    embedding_pending: int
    pair_ids: list[str]
    sync: Synced | None = None  # with "sync": true


class StoredPair(PairText):
    subjects: list[str]  # the names of its subjects, most linked first


class StoredSubject(BaseModel):
    subject_id: str
    name: str
    type: str
    description: str
    pairs: int


class Browsed(BaseModel):
    """A page of the user's memory: pairs oldest first (``next_cursor`` continues), or subjects."""

    pairs: list[StoredPair] = []
    subjects: list[StoredSubject] = []
    next_cursor: str | None = None


class Forgot(BaseModel):
    pairs: int
    subjects_deleted: int
    subjects_rebuilt: int
    missing: list[str] = []


class Forgotten(Forgot):
    """What a forget request deleted (the HTTP answer; the MCP tool's is :class:`Forgot`)."""

    user_id: str
    scope: str  # pairs | session | user
    kg_ids: list[str]
    passes_redacted: int
    pair_ids: list[str]
    seconds: float


class Health(BaseModel):
    status: str
    database: str
    schema_version: str | None


# -- what the inspection routes read back (the columns of sql/queries/inspect/*.sql) ------------------------
class PairState(BaseModel):
    """Where a saved pair stands: its place in the session, its size and metadata, the stages done."""

    turn_index: int | None
    ingested_at: str
    token_count: int | None
    metadata: dict[str, Any]
    embedded: bool
    dated: bool
    extracted: bool
    linked: bool


class ListedPair(PairState, StoredPair):
    pass


class PairsPage(BaseModel):
    pairs: list[ListedPair]
    next_cursor: str | None  # pass it back as `cursor` for the next page; null: this was the last


class PairSubject(BaseModel):
    subject_id: str
    name: str
    type: str
    pairs: int
    archived: bool
    hub: bool


class PairTime(BaseModel):
    expression: str
    first_day: str
    last_day: str
    granularity: str
    certainty: float
    source: str


class PairKey(BaseModel):
    kind: str  # statement or event
    position: int
    text: str
    embedded: bool


class PairDetail(PairState, PairText):
    keyed: bool
    summary: str | None
    extraction_attempts: int | None
    extraction_error: str | None
    subjects: list[PairSubject]
    times: list[PairTime]
    keys: list[PairKey]


class SubjectRow(StoredSubject):
    importance: float | None
    reinforcement_count: int | None
    key_subject: bool | None
    hub: bool
    pinned: bool | None
    archived_at: str | None
    archive_reason: str | None
    last_seen_at: str | None


class SubjectsAnswer(BaseModel):
    subjects: list[SubjectRow]


class LinkedPair(PairText):
    turn_index: int | None


class SubjectDetail(SubjectRow):
    created_at: str | None
    refined_at: str | None
    merged_into: str | None
    superseded_by: str | None
    linked_pairs: list[LinkedPair]


class UserStats(BaseModel):
    """What a user's memory holds in the tenant (memory: counts and span; graph: its shape and checks)."""

    user_id: str
    kg_id: str
    memory: dict[str, Any] | None
    graph: dict[str, Any] | None
