"""Stage 5, refinement: subjects renamed and described from all their pairs, once they have enough."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from dreaming_dagster.embeddings import Embedder, embed_cached, subject_embedding_text
from dreaming_dagster.pipeline.batches import (
    Failures,
    pending_batches,
    stage_transaction,
    write_each_if_refused,
)
from dreaming_dagster.pipeline.refiners import Refiner
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database


@dataclass
class RefineStats(Failures):
    refined: int = 0
    renamed: int = 0
    name_kept_on_conflict: int = 0


def refine_pending(database: Database, refiner: Refiner, embedder: Embedder, user_id: str, kg_id: str, *,
                   batch_size: int = 50) -> RefineStats:
    """Stage 5: subjects whose description holds " | " get a clean name and narrative, re-embedded so
    later merges compare against the consolidated subject; a batch written in one statement."""
    stats = RefineStats()
    failed: list = []  # retried on a later run, not again in this one
    for rows in pending_batches(database, "pipeline/pending_refinement_batch",
                                {"user_id": user_id, "kg_id": kg_id, "limit": batch_size, "skip_ids": failed}):
        results = refiner.refine_many([(row["subject_text"], row["description_text"], row["said"])
                                       for row in rows])
        done, proposed = [], set()
        for row, result in zip(rows, results, strict=True):
            if isinstance(result, Exception):
                stats.record(result)
                failed.append(row["id"])
                continue
            name = result.name
            if name != row["subject_text"] and name in proposed:
                name = row["subject_text"]  # two subjects of the batch named alike: the first one takes it
                stats.name_kept_on_conflict += 1
            proposed.add(name)
            done.append((row, name, result.narrative))
        # Only a new name (or a subject without a vector) is embedded; a kept name keeps its stored vector.
        to_embed = [n for n, (row, name, _) in enumerate(done) if name != row["subject_text"] or not row["has_vector"]]
        vectors: list = [None] * len(done)
        if to_embed:
            embedded = embed_cached(embedder, [subject_embedding_text(done[n][1]) for n in to_embed])
            for n, vector in zip(to_embed, embedded, strict=True):
                vectors[n] = vector
        with database.connect() as conn, stage_transaction(conn):
            refused = _apply_refinements(conn, [(*item, vector) for item, vector in zip(done, vectors, strict=True)],
                                         user_id, kg_id, stats)
        for row, error in refused:  # these subjects stay as they were; the others are refined
            stats.record(error)
            failed.append(row["id"])
    return stats


def _apply_refinements(conn: psycopg.Connection, done: list[tuple], user_id: str, kg_id: str,
                       stats: RefineStats) -> list[tuple[dict, Exception]]:
    """Write a batch of (row, name, narrative, vector) in one statement (subject by subject if the database
    refuses a value); returns the refused subjects."""
    names_now: dict[str, str] = {}

    def write(items: list[tuple]) -> None:
        rows = conn.execute(load_sql("pipeline/apply_refinements"), {
            "user_id": user_id, "kg_id": kg_id, "ids": [row["id"] for row, *_ in items],
            "subject_texts": [name for _, name, _, _ in items],
            "description_texts": [narrative for _, _, narrative, _ in items],
            "embeddings": [vector for *_, vector in items]}).fetchall()
        names_now.update({str(r["id"]): r["subject_text"] for r in rows})

    refused = write_each_if_refused(conn, done, write) if done else []  # a refused write returned no names
    for row, name, _, _ in done:
        now = names_now.get(str(row["id"]))
        if now is None:
            continue
        stats.refined += 1
        stats.renamed += int(now != row["subject_text"])
        stats.name_kept_on_conflict += int(now != name)
    return [(item[0], error) for item, error in refused]
