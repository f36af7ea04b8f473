"""The keying stage: each pair's index keys (extraction/keys.py) with their vectors.

Runs after dating, whose resolved times give the event keys. Offline and deterministic; the only model it
calls is the embedder, once a batch for all of the batch's keys that have a vector of their own
(extraction/keys.py: an event repeating a statement's sentence has none). A batch's keys and checkpoints commit
together, so a killed run keys nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import psycopg

from dreaming_dagster.dates.ranges import TimeRange
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.extraction.keys import Key, has_own_vector, pair_keys
from dreaming_dagster.pipeline.batches import pending_batches, stage_transaction
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

KEYING_BATCH_SIZE = 200


@dataclass
class KeyingStats:
    pairs: int = 0  # pairs keyed this run
    with_keys: int = 0  # of which have at least one key
    statements: int = 0
    events: int = 0


def _times(rows: list[dict]) -> list[tuple[int, TimeRange]]:
    return [(t["position"], TimeRange(date.fromisoformat(t["first_day"]), date.fromisoformat(t["last_day"]),
                                      t["granularity"], float(t["certainty"]))) for t in rows]


def key_vectors(embedder: Embedder, keyed: list[tuple[object, Key]]) -> list[np.ndarray | None]:
    """The vector of each (pair id, key), in order, None for a key without one of its own; the keys to embed
    in one embedder call."""
    by_pair: dict[object, list[Key]] = {}
    for pair_id, key in keyed:
        by_pair.setdefault(pair_id, []).append(key)
    own = [has_own_vector(key, by_pair[pair_id]) for pair_id, key in keyed]
    texts = [key.text for (_, key), embed in zip(keyed, own, strict=True) if embed]
    vectors = iter(embedder.embed(texts)) if texts else iter(())
    return [np.asarray(next(vectors), dtype=np.float32) if embed else None for embed in own]


def write_keys(conn: psycopg.Connection, user_id: str, kg_id: str, keyed: list[tuple[object, Key]],
               vectors: list[np.ndarray | None]) -> None:
    """Store ``keyed`` (pair id, key) with their ``vectors`` (:func:`key_vectors`) in the user's graph; a key
    already stored stays as it is."""
    if keyed:
        conn.execute(load_sql("pipeline/insert_keys"), {
            "user_id": user_id, "kg_id": kg_id, "pair_ids": [pair_id for pair_id, _ in keyed],
            "kinds": [key.kind for _, key in keyed], "positions": [key.position for _, key in keyed],
            "texts": [key.text for _, key in keyed], "embeddings": vectors})


def key_pending(database: Database, embedder: Embedder, user_id: str, kg_id: str, *,
                batch_size: int = KEYING_BATCH_SIZE) -> KeyingStats:
    """Key every pending pair of the graph: keys and their vectors to memory_keys, then the checkpoint, a
    batch a transaction."""
    stats = KeyingStats()
    for rows in pending_batches(database, "pipeline/pending_keying_batch",
                                {"user_id": user_id, "kg_id": kg_id, "limit": batch_size}):
        keyed = [(row["id"], key) for row in rows for key in pair_keys(row["user_message"], _times(row["times"]))]
        vectors = key_vectors(embedder, keyed)
        with database.connect() as conn, stage_transaction(conn):
            write_keys(conn, user_id, kg_id, keyed, vectors)
            conn.execute(load_sql("pipeline/record_keying"),
                         {"ids": [row["id"] for row in rows], "user_id": user_id, "kg_id": kg_id})
        stats.pairs += len(rows)
        stats.with_keys += len({pair_id for pair_id, _ in keyed})
        stats.statements += sum(key.kind == "statement" for _, key in keyed)
        stats.events += sum(key.kind == "event" for _, key in keyed)
    return stats
