"""Fill in the vectors of pairs stored without them (deferred, or the embedder failed at save time), and
re-embed turn by turn the pairs embedded whole before migration 0009."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dreaming_dagster.embeddings import Embedder, embed_pair_turns
from dreaming_dagster.pipeline.pending_work import extraction_retry_params
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database


@dataclass
class EmbeddingRun:
    embedded: int = 0
    failed_pairs: list[str] = field(default_factory=list)
    last_error: str | None = None
    stopped_early: bool = False  # the embedder kept failing; the rest stays pending for the next run


def embed_pending_pairs(database: Database, embedder: Embedder, user_id: str, *, batch_size: int = 64,
                        max_consecutive_failures: int = 5,
                        on_batch: Callable[[int], None] | None = None) -> EmbeddingRun:
    """Embed ``user_id``'s pending pairs batch by batch, committing each batch.

    Restartable: an interrupted run leaves committed batches done and the rest pending. When a batch
    fails, its pairs are retried one by one so a single bad pair cannot block the others; pairs that
    still fail stay pending (reported in ``failed_pairs``). An embedder that fails
    ``max_consecutive_failures`` pairs in a row (an outage) ends the run early.
    """
    database.ensure_schema(embedder.spec)
    run = EmbeddingRun()
    consecutive_failures = 0
    while True:
        with database.connect() as conn:
            batch = conn.execute(load_sql("memory_pairs/pending_embedding_batch"),
                                 {"user_id": user_id, "limit": batch_size, "skip_ids": run.failed_pairs}
                                 ).fetchall()
        if not batch:
            break
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
                    {"id": row["id"], "user_id": user_id, "embedding": vector, "reply_embedding": reply}
                    for row, (vector, reply) in updates])
            run.embedded += len(updates)
            if on_batch:
                on_batch(len(updates))
        if run.stopped_early:
            break
    return run


def user_stats(database: Database, user_id: str) -> list[dict]:
    """Per knowledge graph: pairs, tokens, sessions, pending work and the time span of the memory."""
    with database.connect() as conn:
        return conn.execute(load_sql("memory_pairs/user_stats"),
                            {"user_id": user_id, **extraction_retry_params()}).fetchall()
