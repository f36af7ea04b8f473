"""``dreaming reembed``: move a database to another embedding model (and dimension).

1. Stage: add ``embedding_next vector(D_new)`` beside every vector column.
2. Fill: embed every pair, subject and index key into the staging column, batch by batch, each batch
   committed.
   Interrupted? Run it again: it resumes with the rows still NULL.
3. Swap, in one transaction with writers blocked: embed any rows saved meanwhile, replace the old
   columns, rebuild the HNSW indexes, and record the new model and dimension.
Until the swap, the database keeps serving the old model; afterwards only the new one is accepted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from dreaming_dagster.embeddings import Embedder, embed_pair_turns, subject_embedding_text
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import (
    CONFIG_EMBEDDING_DIMENSION,
    CONFIG_EMBEDDING_MODEL,
    Database,
    apply_migrations,
    lock_schema,
    recorded_spec,
    render_dimension,
    write_config,
)
from dreaming_dagster.storage.embedding_spec import EmbeddingSpec


@dataclass
class ReembedResult:
    previous: EmbeddingSpec | None
    current: EmbeddingSpec
    pairs: int = 0
    subjects: int = 0
    keys: int = 0
    skipped: bool = False


def _fill(conn: psycopg.Connection, batch_sql: str, set_sql: str,
          parameters_of: Callable[[list[dict]], list[dict]], batch_size: int,
          on_rows: Callable[[int], None] | None) -> int:
    done = 0
    while True:
        rows = conn.execute(load_sql(batch_sql), {"limit": batch_size}).fetchall()
        if not rows:
            return done
        parameters = parameters_of(rows)
        with conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(load_sql(set_sql), parameters)
        done += len(rows)
        if on_rows:
            on_rows(len(rows))


def _fill_pairs(conn: psycopg.Connection, embedder: Embedder, batch_size: int,
                on_rows: Callable[[int], None] | None) -> int:
    def parameters(rows: list[dict]) -> list[dict]:
        vectors = embed_pair_turns(embedder, [(row["user_message"], row["assistant_message"]) for row in rows])
        return [{"id": row["id"], "embedding": vector, "reply_embedding": reply}
                for row, (vector, reply) in zip(rows, vectors, strict=True)]
    return _fill(conn, "reembed/pairs_batch", "reembed/set_pair", parameters, batch_size, on_rows)


def _fill_subjects(conn: psycopg.Connection, embedder: Embedder, batch_size: int,
                   on_rows: Callable[[int], None] | None) -> int:
    def parameters(rows: list[dict]) -> list[dict]:
        vectors = embedder.embed([subject_embedding_text(row["subject_text"], row["description_text"])
                                  for row in rows])
        return [{"id": row["id"], "embedding": vector} for row, vector in zip(rows, vectors, strict=True)]
    return _fill(conn, "reembed/subjects_batch", "reembed/set_subject", parameters, batch_size, on_rows)


def _fill_keys(conn: psycopg.Connection, embedder: Embedder, batch_size: int,
               on_rows: Callable[[int], None] | None) -> int:
    def parameters(rows: list[dict]) -> list[dict]:
        vectors = embedder.embed([row["key_text"] for row in rows])
        return [{"pair_id": row["pair_id"], "kind": row["kind"], "position": row["position"], "embedding": vector}
                for row, vector in zip(rows, vectors, strict=True)]
    return _fill(conn, "reembed/keys_batch", "reembed/set_key", parameters, batch_size, on_rows)


def count_rows(database: Database) -> int:
    with database.connect() as conn:
        row = conn.execute(load_sql("reembed/count_rows")).fetchone()
    return int(row["n"])


def reembed(database: Database, embedder: Embedder, *, force: bool = False, batch_size: int = 64,
            on_rows: Callable[[int], None] | None = None) -> ReembedResult:
    target = embedder.spec
    with psycopg.connect(database.url) as conn, conn.transaction():
        lock_schema(conn)
        conn.execute(load_sql("schema/bootstrap"))
        previous = recorded_spec(conn)
    if previous is None:  # an empty database: nothing to convert, just create it for this embedder
        with psycopg.connect(database.url) as conn:
            apply_migrations(conn, target)
        return ReembedResult(previous=None, current=target, skipped=True)
    if previous == target and not force:
        return ReembedResult(previous=previous, current=target, skipped=True)

    with database.connect() as conn:
        with conn.transaction():
            lock_schema(conn)
            staged = conn.execute(load_sql("reembed/staged_dimension")).fetchone()
            if staged and staged["column_type"] != f"vector({target.dimension})":
                conn.execute(load_sql("reembed/drop_staging"))  # left by a run aimed at another model
            conn.execute(render_dimension(load_sql("reembed/stage_columns"), target.dimension))
        result = ReembedResult(previous=previous, current=target)
        result.pairs = _fill_pairs(conn, embedder, batch_size, on_rows)
        result.subjects = _fill_subjects(conn, embedder, batch_size, on_rows)
        result.keys = _fill_keys(conn, embedder, batch_size, on_rows)
        with conn.transaction():
            lock_schema(conn)
            conn.execute(load_sql("reembed/lock_tables"))
            # Rows written while we filled: few, embedded here under the lock (batches become savepoints).
            result.pairs += _fill_pairs(conn, embedder, batch_size, on_rows)
            result.subjects += _fill_subjects(conn, embedder, batch_size, on_rows)
            result.keys += _fill_keys(conn, embedder, batch_size, on_rows)
            conn.execute(load_sql("reembed/swap_columns"))
            conn.execute(render_dimension(load_sql("reembed/recompute_centroids"), target.dimension))
            write_config(conn, CONFIG_EMBEDDING_MODEL, target.model)
            write_config(conn, CONFIG_EMBEDDING_DIMENSION, str(target.dimension))
    return result

