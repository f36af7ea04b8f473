"""Stage 2, extraction: a summary and a few subjects for each pending pair, the times it mentions, and (an LLM
extractor's) the facts the user states about themselves, written as the pair's fact keys with their vectors."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from dreaming_dagster.dates.grammar import resolve
from dreaming_dagster.embeddings import Embedder
from dreaming_dagster.extraction.extractors import Extractor
from dreaming_dagster.extraction.keys import Key
from dreaming_dagster.llm.client import CallSkippedError, ProviderUnavailableError
from dreaming_dagster.pipeline.batches import (
    Failures,
    pending_batches,
    stage_transaction,
    write_each_if_refused,
    write_pair_times,
)
from dreaming_dagster.pipeline.keying import key_vectors, write_keys
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.storable import clean_text
from dreaming_dagster.storage.user_graphs import (
    EXTRACTION_RETRY_COOLDOWN_SECONDS,
    MAX_EXTRACTION_ATTEMPTS,
    extraction_retry_params,
)

logger = logging.getLogger(__name__)


@dataclass
class ExtractionStats(Failures):
    pairs: int = 0
    with_subjects: int = 0
    empty: int = 0
    subjects: int = 0
    facts: int = 0  # fact keys written (an LLM extractor's)
    not_attempted: int = 0  # not sent: the provider was down earlier in the batch (no attempt counted)
    provider_unavailable: bool = False  # the stage stopped early; the rest waits for the next run


def held_subject_names(database: Database, user_id: str, kg_id: str, names: Collection[str]) -> dict[str, bool]:
    """Of ``names`` (lower-cased), those the user's memory already holds → whether each is a hub (the
    ``memory`` an extractor consults: extraction.providers.SubjectMemory)."""
    if not names:
        return {}
    with database.connect(vectors=False) as conn:
        rows = conn.execute(load_sql("pipeline/held_subject_names"),
                            {"user_id": user_id, "kg_id": kg_id, "names": list(names)}).fetchall()
    return {row["name"]: row["hub"] for row in rows}


def extract_pending(database: Database, extractor: Extractor, user_id: str, kg_id: str, *,
                    embedder: Embedder | None = None, batch_size: int | None = None, max_attempts: int = MAX_EXTRACTION_ATTEMPTS,
                    cooldown_seconds: float = EXTRACTION_RETRY_COOLDOWN_SECONDS) -> ExtractionStats:
    """Stage 2: a summary and 0–5 subjects per pending pair, a batch's results written in one statement.
    Failures are recorded per pair (attempts, last_error, last_attempt_at) and retried on later runs; they
    never block other pairs. A pair whose result the database refuses is a failure of that pair alone (the
    batch is then written pair by pair, each in its own savepoint). When the provider is
    unavailable (every retry of a call failed transiently) the stage stops after the batch: pairs not sent
    keep their attempts, and nothing waits on a dead endpoint while holding the user's graph lock. With an
    ``embedder``, the facts a result carries are written as the pair's fact keys in the same transaction."""
    stats = ExtractionStats()
    # The extractor's own batch: 100 for an LLM (calls in flight); larger offline, so a backlog is parsed
    # by the extractor's worker processes (which only start for large batches).
    batch_size = batch_size or getattr(extractor, "batch_size", 100)
    failed_now: list = []  # retried on a later run, not again in this one
    for rows in pending_batches(database, "pipeline/pending_extraction_batch",
                                {"user_id": user_id, "kg_id": kg_id, "limit": batch_size, "skip_ids": failed_now,
                                 **extraction_retry_params(max_attempts, cooldown_seconds)}):
        results = extractor.extract_many(
            [(row["user_message"], row["assistant_message"]) for row in rows],
            memory=lambda names: held_subject_names(database, user_id, kg_id, names))
        with database.connect() as conn, stage_transaction(conn):
            done, failed = [], []
            for row, result in zip(rows, results, strict=True):
                if isinstance(result, CallSkippedError):
                    stats.not_attempted += 1
                    failed_now.append(row["id"])
                    continue
                stats.provider_unavailable |= isinstance(result, ProviderUnavailableError)
                (failed if isinstance(result, Exception) else done).append((row, result))
            for row, result in failed + _record_extractions(conn, done, user_id, kg_id, stats, embedder):
                failed_now.append(row["id"])
                conn.execute(load_sql("pipeline/record_extraction_failure"),
                             {"id": row["id"], "user_id": user_id, "kg_id": kg_id,
                              "error": clean_text(stats.record(result))})
        if stats.provider_unavailable:
            logger.warning("%s/%s: the LLM provider is unavailable (%s); extraction stops until the next run",
                           user_id, kg_id, stats.last_error)
            break
    return stats


def _record_extractions(conn: psycopg.Connection, done: list[tuple[dict, object]], user_id: str, kg_id: str,
                        stats: ExtractionStats, embedder: Embedder | None = None) -> list[tuple[dict, Exception]]:
    """Write a batch's extraction results in one statement (pair by pair if the database refuses a value);
    returns the refused pairs."""
    def write(items: list[tuple[dict, object]]) -> None:
        conn.execute(load_sql("pipeline/record_extractions"), {
            "user_id": user_id, "kg_id": kg_id, "ids": [row["id"] for row, _ in items],
            "summaries": [result.summary for _, result in items],
            "extracted_subjects": [Jsonb(result.as_json()) for _, result in items]})

    refused = write_each_if_refused(conn, done, write) if done else []
    refused_ids = {row["id"] for (row, _), _ in refused}
    # The times an LLM reported, resolved against when the pair was said (the dating stage reads the text).
    recorded = [(row, result) for row, result in done if row["id"] not in refused_ids]
    if recorded:
        conn.execute(load_sql("pipeline/clear_llm_times"), {"ids": [row["id"] for row, _ in recorded],
                                                             "user_id": user_id, "kg_id": kg_id})
    write_pair_times(conn, user_id, kg_id, "llm", [
        (row["id"], position, expression, resolved)
        for row, result in recorded for position, expression in enumerate(getattr(result, "times", ()))
        if (resolved := resolve(expression, row["occurred_at"])) is not None])
    if recorded and embedder is not None:
        stats.facts += _write_fact_keys(conn, recorded, user_id, kg_id, embedder)
    for row, result in done:
        if row["id"] in refused_ids:
            continue
        stats.pairs += 1
        stats.subjects += len(result.subjects)
        if result.subjects:
            stats.with_subjects += 1
        else:
            stats.empty += 1
    return [(row, error) for (row, _), error in refused]


def _write_fact_keys(conn: psycopg.Connection, recorded: list[tuple[dict, object]], user_id: str, kg_id: str,
                     embedder: Embedder) -> int:
    """The recorded pairs' facts as their fact keys (an earlier extraction's replaced), embedded in one call."""
    conn.execute(load_sql("pipeline/clear_fact_keys"), {"ids": [row["id"] for row, _ in recorded],
                                                        "user_id": user_id, "kg_id": kg_id})
    keyed = [(row["id"], Key("fact", position, text)) for row, result in recorded
             for position, text in enumerate(getattr(result, "facts", ()))]
    write_keys(conn, user_id, kg_id, keyed, key_vectors(embedder, keyed))
    return len(keyed)


def reset_failed_extractions(database: Database, user_id: str, kg_id: str | None = None, *,
                             max_attempts: int = MAX_EXTRACTION_ATTEMPTS) -> int:
    """Give the user's parked pairs (extraction failed ``max_attempts`` times) a fresh budget of attempts,
    so the next run extracts them now instead of after the cool-down. Returns how many."""
    with database.connect(vectors=False) as conn:
        return len(conn.execute(load_sql("pipeline/reset_failed_extractions"), {
            "user_id": user_id, "kg_id": kg_id, "max_attempts": max_attempts}).fetchall())
