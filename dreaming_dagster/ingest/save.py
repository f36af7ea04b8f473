"""Stage 1 of dreaming: persist memory pairs with their embeddings.

Batch semantics (docs/ingestion.md):
- ``user_id``/``kg_id`` are checked first; a bad one raises :class:`InvalidInputError` and nothing is written.
- Every record is validated before anything is written. By default (per-record) the invalid ones are
  returned as rejections with the record and field named, and the valid ones are stored. With
  ``strict=True`` the batch is all-or-nothing: any invalid record raises :class:`BatchRejectedError`
  and nothing is written.
- The valid records of one call are inserted in one transaction: a database error stores none of them,
  and rows stored earlier are never changed.
- A pair whose embedding failed is stored anyway with a NULL embedding; the ``memory_pairs`` asset (or
  ``embed_pending_pairs``) fills it in later. Embedding is never a reason to lose a pair.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from dreaming_dagster.embeddings import Embedder, embed_pair_turns
from dreaming_dagster.ingest.tokens import count_tokens
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import (
    InvalidInputError,
    MemoryPair,
    Rejection,
    parse_pair,
    validate_new_identifier,
)

logger = logging.getLogger(__name__)


class BatchRejectedError(ValueError):
    """A strict batch held invalid records; nothing was written."""

    def __init__(self, rejections: Sequence[Rejection]):
        self.rejections = list(rejections)
        shown = "; ".join(str(r) for r in self.rejections[:5])
        more = f" (and {len(self.rejections) - 5} more)" if len(self.rejections) > 5 else ""
        super().__init__(f"{len(self.rejections)} invalid record(s), nothing stored: {shown}{more}")


@dataclass
class SaveResult:
    inserted: int = 0
    duplicates: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    embedded: int = 0
    embedding_pending: int = 0  # stored with a NULL embedding (embedding failed or was deferred)
    tokens: int = 0
    pair_ids: list[str] = field(default_factory=list)

    def merge(self, other: SaveResult) -> None:
        self.inserted += other.inserted
        self.duplicates += other.duplicates
        self.rejected.extend(other.rejected)
        self.embedded += other.embedded
        self.embedding_pending += other.embedding_pending
        self.tokens += other.tokens
        self.pair_ids.extend(other.pair_ids)

    def as_dict(self) -> dict:
        return {"inserted": self.inserted, "duplicates": self.duplicates, "rejected": len(self.rejected),
                "embedded": self.embedded, "embedding_pending": self.embedding_pending, "tokens": self.tokens}


def validate_records(records: Iterable[object]) -> tuple[list[MemoryPair], list[Rejection], list[int]]:
    """(the valid pairs, the rejections, each valid pair's index in ``records``)."""
    # A mapping is one record, not a batch: iterating it would read its keys as records.
    if isinstance(records, Mapping | MemoryPair | str | bytes) or not isinstance(records, Iterable):
        raise InvalidInputError("pairs", f"must be a list of pair records, got {type(records).__name__} "
                                "(wrap a single record in a list)")
    pairs, rejections, indexes = [], [], []
    for index, raw in enumerate(records):
        try:
            pairs.append(parse_pair(raw, record=index))
            indexes.append(index)
        except InvalidInputError as exc:
            rejections.append(Rejection(record=index, field=exc.field, reason=exc.reason))
    return pairs, rejections, indexes


PairVectors = tuple[np.ndarray | None, np.ndarray | None]  # (embedding, reply_embedding)


def embed_or_none(embedder: Embedder, pairs: Sequence[MemoryPair], batch_size: int) -> list[PairVectors]:
    """Embed each pair's turns in batches; a failing batch yields (None, None) for its pairs instead of
    raising."""
    vectors: list[PairVectors] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        try:
            vectors.extend(embed_pair_turns(embedder, [(p.user_message, p.assistant_message) for p in chunk]))
        except Exception as exc:  # any provider failure: keep the pairs, embed them later
            logger.warning("embedding %d pair(s) failed, storing them as pending: %s", len(chunk), exc)
            vectors.extend([(None, None)] * len(chunk))
    return vectors


def save_validated_pairs(database: Database, embedder: Embedder, user_id: str, kg_id: str,
                         pairs: Sequence[MemoryPair], *, embed: bool = True, batch_size: int = 64,
                         connection: psycopg.Connection | None = None,
                         labels: Sequence[int | str] | None = None, index_words: bool | None = None,
                         vectors: Mapping[str, PairVectors] | None = None) -> SaveResult:
    """Insert already-validated pairs for one user in one transaction.

    ``embed=False`` defers the vectors and, unless ``index_words=True``, the lexical index as well: the
    embedding stage indexes a pair's words and then embeds it, so a deferred pair is found by words and by
    vector from the same step on (migration 0016), and the save itself is ~6× faster.

    Should the database refuse the batch (a value no validation foresaw), the pairs are stored one by one
    and each refused one becomes a rejection labelled by ``labels`` (its record index or file line): one
    record never costs the batch. With ``connection`` the insert joins the caller's open transaction
    instead, and a refusal raises (``ingest --strict`` keeps a whole file in one transaction, so a failure
    anywhere stores none of it). ``vectors`` (by content hash) are the pairs' vectors as the caller computed
    them before it opened that transaction, so no lock it holds waits for the model (a pair missing from it
    is stored pending, for the embedding stage).
    """
    result = SaveResult()
    database.ensure_schema(embedder.spec)
    label_of = dict(zip((p.content_hash for p in pairs), labels or range(len(pairs)), strict=False))

    unique: dict[str, MemoryPair] = {}
    for pair in pairs:
        unique.setdefault(pair.content_hash, pair)
    result.duplicates += len(pairs) - len(unique)
    if not unique:
        return result

    with _connection(database, connection) as conn:
        known = {row["content_hash"] for row in conn.execute(
            load_sql("memory_pairs/existing_content_hashes"),
            {"user_id": user_id, "kg_id": kg_id, "content_hashes": list(unique)})}
    result.duplicates += len(known)
    new_pairs = [pair for content_hash, pair in unique.items() if content_hash not in known]
    if not new_pairs:
        return result

    # Embed outside the transaction: the model is the slow part, the transaction stays short.
    if vectors is not None:
        found = [vectors.get(pair.content_hash, (None, None)) for pair in new_pairs]
    else:
        found = embed_or_none(embedder, new_pairs, batch_size) if embed else [(None, None)] * len(new_pairs)

    tokens = [count_tokens(pair.user_message, pair.assistant_message) for pair in new_pairs]
    rows = list(zip(new_pairs, tokens, found, strict=True))
    refused: set[str] = set()
    with _connection(database, connection) as conn:
        try:
            index_words = embed if index_words is None else index_words
            inserted_ids = _insert(conn, user_id, kg_id, rows, index_words=index_words)
        except psycopg.DatabaseError as error:
            if connection is not None or isinstance(error, psycopg.OperationalError):
                raise  # the caller's all-or-nothing transaction, or the database itself is gone
            logger.warning("the database refused a batch of %d pair(s) (%s); storing them one by one",
                           len(rows), error)
            inserted_ids = {}
            for row in rows:
                try:
                    inserted_ids |= _insert(conn, user_id, kg_id, [row], index_words=index_words)
                except psycopg.DatabaseError as row_error:
                    if isinstance(row_error, psycopg.OperationalError):
                        raise
                    refused.add(row[0].content_hash)
                    result.rejected.append(Rejection(
                        record=label_of.get(row[0].content_hash, "?"), field="record",
                        reason=f"the database refused it: {str(row_error).splitlines()[0][:300]}"))
    for pair, token_count, (vector, _) in rows:
        if pair.content_hash in refused:
            continue
        if pair.content_hash not in inserted_ids:  # lost a race with a concurrent save of the same pair
            result.duplicates += 1
            continue
        result.inserted += 1
        result.tokens += token_count
        result.pair_ids.append(str(inserted_ids[pair.content_hash]))
        if vector is None:
            result.embedding_pending += 1
        else:
            result.embedded += 1
    return result


def _insert(conn: psycopg.Connection, user_id: str, kg_id: str,
            rows: Sequence[tuple[MemoryPair, int, PairVectors]], *, index_words: bool = True) -> dict[str, object]:
    """Insert (pair, tokens, vectors) rows in one transaction; the ids of those inserted, by content hash.
    Without ``index_words`` the insert trigger leaves the lexical index to the embedding stage."""
    batch = {
        "user_id": user_id, "kg_id": kg_id,
        "session_ids": [p.session_id for p, _, _ in rows], "turn_indexes": [p.turn_index for p, _, _ in rows],
        "user_messages": [p.user_message for p, _, _ in rows],
        "assistant_messages": [p.assistant_message for p, _, _ in rows],
        "occurred_ats": [p.occurred_at for p, _, _ in rows], "token_counts": [t for _, t, _ in rows],
        "content_hashes": [p.content_hash for p, _, _ in rows],
        "metadatas": [Jsonb(dict(p.metadata)) for p, _, _ in rows],
        "embeddings": [v for _, _, (v, _) in rows], "reply_embeddings": [r for _, _, (_, r) in rows],
    }
    with conn.transaction():
        if not index_words:
            conn.execute("SET LOCAL dreaming.defer_word_index = on")
        # One statement for the batch: the lexical index trigger indexes it in one pass.
        inserted_ids = {row["content_hash"]: row["id"]
                        for row in conn.execute(load_sql("memory_pairs/insert_pairs"), batch)}
        if not index_words:  # SET LOCAL outlives this savepoint in a caller's transaction: undo it now
            conn.execute("SET LOCAL dreaming.defer_word_index = off")
        # The consolidation trigger's counter moves with the pairs: same transaction, so a save is never
        # lost from it or counted twice (dreaming_state, token_budget_sensor).
        new_tokens = sum(t for p, t, _ in rows if p.content_hash in inserted_ids)
        if new_tokens:
            conn.execute(load_sql("dreaming/add_tokens"), {"user_id": user_id, "kg_id": kg_id, "tokens": new_tokens})
    return inserted_ids


@contextmanager
def _connection(database: Database, connection: psycopg.Connection | None) -> Iterator[psycopg.Connection]:
    if connection is not None:
        yield connection
        return
    with database.connect() as conn:
        yield conn


def save_pairs(user_id: str, pairs: Iterable[object], kg_id: str = "default", *,
               strict: bool = False, embed: bool = True, database: Database | None = None,
               embedder: Embedder | None = None) -> SaveResult:
    """Store ``pairs`` (mappings or :class:`MemoryPair`) in ``user_id``'s memory.

    ``embed=False`` (a deferred save) leaves the vectors and the word index to the embedding stage (the
    sensor's next run, Dagster's memory_pairs asset or ``sync_user``): the pair is recallable from then on.

    Returns counts: inserted, duplicates (already stored, or repeated in the batch), rejected (each with
    the record index, field and reason), embedded and embedding_pending. See the module docstring for
    the all-or-nothing vs per-record rules.
    """
    from dreaming_dagster.process_defaults import default_database, default_embedder, default_settings

    user_id = validate_new_identifier(user_id, "user_id")
    kg_id = validate_new_identifier(kg_id, "kg_id")
    valid, rejections, indexes = validate_records(pairs)
    if strict and rejections:
        raise BatchRejectedError(rejections)
    embedder = embedder or default_embedder()
    database = database or default_database()
    result = save_validated_pairs(database, embedder, user_id, kg_id, valid, embed=embed, labels=indexes,
                                  batch_size=default_settings().embedding_batch_size)
    result.rejected.extend(rejections)
    return result
