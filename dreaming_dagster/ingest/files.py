"""A file's records into a user's memory: validated, stored in chunks (one transaction each), or all or nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack

from dreaming_dagster.ingest.readers import LineRecord
from dreaming_dagster.ingest.save import BatchRejectedError, SaveResult, save_validated_pairs
from dreaming_dagster.process_defaults import default_database, default_embedder, default_settings
from dreaming_dagster.storage.records import (
    InvalidInputError,
    MemoryPair,
    Rejection,
    parse_pair,
    validate_new_identifier,
)

CHUNK_SIZE = 256


def ingest_records(make_items: Callable[[], Iterable[LineRecord | Rejection]], user_id: str, kg_id: str, *,
                   strict: bool, embed: bool, on_records: Callable[[int], None] = lambda n: None) -> SaveResult:
    """Validate and store a stream of file records in chunks; each chunk is one transaction. ``on_records`` is
    told how many records each step has handled (stored or rejected).

    ``strict``: the whole file is validated first and nothing is stored if any record is invalid; the
    valid file is then stored in one transaction, so a failure at any point stores none of it.
    """
    user_id = validate_new_identifier(user_id, "user_id")
    kg_id = validate_new_identifier(kg_id, "kg_id")
    if strict:
        rejections = [r for r in validated(make_items()) if isinstance(r, Rejection)]
        if rejections:
            raise BatchRejectedError(rejections)
    database, embedder = default_database(), default_embedder()
    batch_size = default_settings().embedding_batch_size
    database.ensure_schema(embedder.spec)
    result = SaveResult()
    with ExitStack() as stack:
        connection = None
        if strict:
            connection = stack.enter_context(database.connect())
            stack.enter_context(connection.transaction())

        def store(chunk: list[tuple[str, MemoryPair]]) -> None:
            result.merge(save_validated_pairs(database, embedder, user_id, kg_id, [p for _, p in chunk],
                                              embed=embed, batch_size=batch_size, connection=connection,
                                              labels=[where for where, _ in chunk]))
            on_records(len(chunk))

        chunk = []
        for item in validated(make_items()):
            if isinstance(item, Rejection):
                result.rejected.append(item)
                on_records(1)
                continue
            chunk.append(item)
            if len(chunk) >= CHUNK_SIZE:
                store(chunk)
                chunk = []
        if chunk:
            store(chunk)
    return result


def validated(items: Iterable[LineRecord | Rejection]) -> Iterator[tuple[str, MemoryPair] | Rejection]:
    """Each record parsed into a pair (with where it came from), or the rejection naming its bad field."""
    for item in items:
        if isinstance(item, Rejection):
            yield item
            continue
        try:
            yield item.where, parse_pair(item.raw, record=item.where)
        except InvalidInputError as exc:
            yield Rejection(record=item.where, field=exc.field, reason=exc.reason)
