"""Fill in the vectors of pairs stored without them (deferred, or the embedder failed at save time), and
re-embed turn by turn the pairs embedded whole before migration 0009. A deferred save's words are
indexed here too, just before its vectors (migration 0016)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import psycopg

from dreaming_dagster.embeddings import Embedder, embed_pair_turns
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.user_graphs import extraction_retry_params

logger = logging.getLogger(__name__)


@dataclass
class EmbeddingRun:
    embedded: int = 0
    failed_pairs: list[str] = field(default_factory=list)
    last_error: str | None = None
    stopped_early: bool = False  # the embedder kept failing; the rest stays pending for the next run
    words_not_indexed: int = 0  # pairs whose words the database refused to index (logged; embedded anyway)


def index_words(database: Database, user_id: str, pair_ids: list, kg_ids: Collection[str]) -> int:
    """Index the words of ``user_id``'s pairs ``pair_ids`` in the graphs ``kg_ids`` (idempotent); a batch the
    database refuses is indexed pair by pair, and a pair refused alone is logged and left out. Returns how
    many were left out."""
    params = {"user_id": user_id, "kg_ids": list(kg_ids), "ids": pair_ids}
    with database.connect() as conn:
        try:
            conn.execute(load_sql("memory_pairs/index_words"), params)
            return 0
        except psycopg.OperationalError:
            raise
        except psycopg.DatabaseError:
            refused = 0
            for pair_id in pair_ids:
                try:
                    conn.execute(load_sql("memory_pairs/index_words"), params | {"ids": [pair_id]})
                except psycopg.OperationalError:
                    raise
                except psycopg.DatabaseError as error:
                    logger.warning("the words of pair %s (%s) could not be indexed: %s", pair_id, user_id, error)
                    refused += 1
            return refused


def embed_pending_pairs(database: Database, embedder: Embedder, user_id: str, *,
                        kg_ids: Collection[str] | None = None, batch_size: int = 64,
                        max_consecutive_failures: int = 5,
                        on_batch: Callable[[int], None] | None = None) -> EmbeddingRun:
    """Embed ``user_id``'s pending pairs in the graphs ``kg_ids`` (None: every graph of the user, the
    operator's runs; a tenant's sync names its own) batch by batch, committing each batch.

    Restartable: an interrupted run leaves committed batches done and the rest pending. When a batch
    fails, its pairs are retried one by one so a single bad pair cannot block the others; pairs that
    still fail stay pending (reported in ``failed_pairs``). An embedder that fails
    ``max_consecutive_failures`` pairs in a row (an outage) ends the run early.
    """
    from dreaming_dagster.storage.user_graphs import scoped_kgs

    database.ensure_schema(embedder.spec)
    kg_ids = scoped_kgs(database, user_id, kg_ids)
    run = EmbeddingRun()
    consecutive_failures = 0
    written: set = set()  # pairs whose vectors this run has written
    while True:
        with database.connect() as conn:
            batch = conn.execute(load_sql("memory_pairs/pending_embedding_batch"),
                                 {"user_id": user_id, "kg_ids": kg_ids, "limit": batch_size,
                                  "skip_ids": run.failed_pairs}
                                 ).fetchall()
        if not batch:
            break
        still_pending = [str(r["id"]) for r in batch if r["id"] in written]
        if still_pending:  # written and yet pending (a row changed under the run): left for a later run, no loop
            run.failed_pairs += still_pending
            run.last_error = f"{len(still_pending)} pair(s) still pending after their vectors were written"
            continue
        # Words first (a deferred save left them out; a no-op for pairs already indexed), in their own
        # transaction: an embedder outage below does not keep the pairs from word search.
        run.words_not_indexed += index_words(database, user_id, [r["id"] for r in batch], kg_ids)
        turns = [(r["user_message"], r["assistant_message"]) for r in batch]
        updates = []
        try:
            updates = list(zip(batch, embed_pair_turns(embedder, turns), strict=True))
            consecutive_failures = 0
        except Exception:
            for row, pair_turns in zip(batch, turns, strict=True):
                try:
                    updates.append((row, embed_pair_turns(embedder, [pair_turns])[0]))
                    consecutive_failures = 0
                except Exception as exc:  # keep the row pending; a later run retries it
                    run.failed_pairs.append(str(row["id"]))
                    run.last_error = str(exc)
                    consecutive_failures += 1
                    if consecutive_failures >= max_consecutive_failures:
                        run.stopped_early = True
                        break
        if updates:
            with database.connect() as conn, conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(load_sql("memory_pairs/set_embedding"), [
                    {"id": row["id"], "user_id": user_id, "kg_ids": kg_ids, "embedding": vector, "reply_embedding": reply}
                    for row, (vector, reply) in updates])
            run.embedded += len(updates)
            written.update(row["id"] for row, _ in updates)
            if on_batch:
                on_batch(len(updates))
        if run.stopped_early:
            break
    return run


def user_stats(database: Database, user_id: str, kg_ids: Collection[str] | None = None) -> list[dict]:
    """Per graph of ``kg_ids`` (None: every graph of the user): pairs, tokens, sessions, pending work and
    the time span of the memory."""
    from dreaming_dagster.storage.user_graphs import scoped_kgs

    params = {"user_id": user_id, "kg_ids": scoped_kgs(database, user_id, kg_ids), **extraction_retry_params()}
    with database.connect() as conn:
        return conn.execute(load_sql("memory_pairs/user_stats"), params).fetchall()
