"""The dreaming stages over Postgres, one function each, for one user's knowledge graph.

Each stage selects the rows whose previous checkpoint is set and whose own is NULL, and writes each
pair's result together with its checkpoint in one transaction. So every stage is restartable from the
database: a killed run leaves whole pairs done or not done, and re-running never duplicates. Callers
hold :func:`user_graph_lock` so nothing writes one user's graph concurrently.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import psycopg
from psycopg.types.json import Jsonb

from dreaming_dagster.embeddings import Embedder, subject_embedding_text
from dreaming_dagster.extraction.providers import Extractor
from dreaming_dagster.llm.client import CallSkippedError, ProviderUnavailableError
from dreaming_dagster.pipeline import merging
from dreaming_dagster.pipeline.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.pipeline.merging import (
    DEFAULT_THRESHOLD,
    Candidate,
    append_description,
    choose_merge_target,
)
from dreaming_dagster.pipeline.pending_work import (
    EXTRACTION_RETRY_COOLDOWN_SECONDS,
    MAX_EXTRACTION_ATTEMPTS,
    extraction_retry_params,
)
from dreaming_dagster.pipeline.refinement import Refiner
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.storable import clean_text

logger = logging.getLogger(__name__)
# What a stage row's write may raise because of that row's data (a value the database refuses): recorded
# against the row, in its own savepoint, so the rest of the batch commits.
ROW_DATA_ERRORS = (psycopg.DataError, psycopg.IntegrityError, ValueError, TypeError)


@contextmanager
def user_graph_lock(database: Database, user_id: str, kg_id: str) -> Iterator[None]:
    """Hold the Postgres advisory lock of (user, kg) for the duration: one writer per graph, across
    Dagster runs, the fast path and any process."""
    with database.connect(vectors=False) as conn:
        key = f"dreaming-graph\x1f{user_id}\x1f{kg_id}"
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))


def pending_batches(database: Database, model: str, params: dict) -> Iterator[list[dict]]:
    """Batches of a stage's pending rows (``model``, bound with ``params``), until none is left. The query
    is run again for each batch, so rows done by the previous batch drop out; rows a stage wants to leave
    for a later run go into the list ``params["skip_ids"]``, which the query reads afresh each time."""
    while True:
        with database.connect() as conn:
            rows = conn.execute(load_sql(model), params).fetchall()
        if not rows:
            return
        yield rows


def user_kgs(database: Database, user_id: str) -> list[str]:
    with database.connect(vectors=False) as conn:
        return [row["kg_id"] for row in conn.execute(load_sql("pipeline/user_kgs"), {"user_id": user_id})]


@dataclass
class Failures:
    """How many rows of a stage failed in a run, and why the last one did."""

    failures: int = 0
    last_error: str | None = None

    def record(self, error: BaseException) -> str:
        self.failures += 1
        self.last_error = f"{type(error).__name__}: {error}"
        return self.last_error


# ------------------------------------------------------------------------------------------ extraction
@dataclass
class ExtractionStats(Failures):
    pairs: int = 0
    with_subjects: int = 0
    empty: int = 0
    subjects: int = 0
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
                    batch_size: int | None = None, max_attempts: int = MAX_EXTRACTION_ATTEMPTS,
                    cooldown_seconds: float = EXTRACTION_RETRY_COOLDOWN_SECONDS) -> ExtractionStats:
    """Stage 2: a summary and 0–5 subjects per pending pair. Failures are recorded per pair (attempts,
    last_error, last_attempt_at) and retried on later runs; they never block other pairs. A pair whose
    result the database refuses is a failure of that pair alone (its own savepoint). When the provider is
    unavailable (every retry of a call failed transiently) the stage stops after the batch: pairs not sent
    keep their attempts, and nothing waits on a dead endpoint while holding the user's graph lock."""
    stats = ExtractionStats()
    # The extractor's own batch: 100 for an LLM (calls in flight); larger offline, so a backlog is parsed
    # by the extractor's worker processes (which only start for large batches).
    batch_size = batch_size or getattr(extractor, "batch_size", 100)
    failed_now: list = []  # retried on a later run, not again in this one
    for rows in pending_batches(database, "pipeline/pending_extraction_batch", {
            "user_id": user_id, "kg_id": kg_id, "limit": batch_size, "skip_ids": failed_now,
            **extraction_retry_params(max_attempts, cooldown_seconds)}):
        results = extractor.extract_many([(row["user_message"], row["assistant_message"]) for row in rows],
                                         memory=lambda names: held_subject_names(database, user_id, kg_id, names))
        with database.connect() as conn, conn.transaction():
            for row, result in zip(rows, results, strict=True):
                if isinstance(result, CallSkippedError):
                    stats.not_attempted += 1
                    failed_now.append(row["id"])
                    continue
                stats.provider_unavailable |= isinstance(result, ProviderUnavailableError)
                if not isinstance(result, Exception):
                    try:
                        with conn.transaction():
                            conn.execute(load_sql("pipeline/record_extraction"), {
                                "id": row["id"], "user_id": user_id, "summary": result.summary,
                                "extracted_subjects": Jsonb(result.as_json())})
                    except ROW_DATA_ERRORS as exc:
                        result = exc
                if isinstance(result, Exception):
                    failed_now.append(row["id"])
                    conn.execute(load_sql("pipeline/record_extraction_failure"),
                                 {"id": row["id"], "user_id": user_id, "error": clean_text(stats.record(result))})
                    continue
                stats.pairs += 1
                stats.subjects += len(result.subjects)
                if result.subjects:
                    stats.with_subjects += 1
                else:
                    stats.empty += 1
        if stats.provider_unavailable:
            logger.warning("%s/%s: the LLM provider is unavailable (%s); extraction stops until the next run",
                           user_id, kg_id, stats.last_error)
            break
    return stats


# ------------------------------------------------------------------------------------------------ merge
@dataclass
class MergeStats:
    pairs: int = 0
    created: int = 0
    merged: int = 0
    reused: int = 0  # already merged by an earlier, interrupted or janitor-reset run

    @property
    def merge_ratio(self) -> float:
        return merging.merge_ratio(self.created, self.merged)


def _merge_pair(conn: psycopg.Connection, pair: dict, vectors: dict[str, object], user_id: str, kg_id: str,
                threshold: float, stats: MergeStats) -> None:
    subjects = list(pair["extracted_subjects"] or [])
    reinforced: set[str] = set()  # a pair reinforces a subject once, however many of its names land there
    for subject in subjects:
        known_id = subject.get("subject_id")
        if known_id and conn.execute(load_sql("pipeline/live_subject"),
                                     {"id": known_id, "user_id": user_id, "kg_id": kg_id}).fetchone():
            stats.reused += 1
            continue
        embedding = vectors[subject["name"]]
        candidates = [Candidate(str(row["id"]), row["subject_text"], float(row["similarity"]))
                      for row in conn.execute(load_sql("pipeline/similar_subjects"), {
                          "user_id": user_id, "kg_id": kg_id, "embedding": embedding, "threshold": threshold})]
        target = choose_merge_target(candidates, threshold)
        if target is None:
            row = conn.execute(load_sql("pipeline/insert_subject"), {
                "user_id": user_id, "kg_id": kg_id, "subject_text": subject["name"],
                "description_text": subject.get("description", ""), "subject_type": subject.get("type", "other"),
                "embedding": embedding, "seen_at": pair["occurred_at"]}).fetchone()
            subject_id = str(row["id"])
            if row["inserted"]:
                stats.created += 1
            else:  # the exact-string guard caught a duplicate name: treat it as a merge
                if subject_id not in reinforced:
                    _reinforce(conn, subject_id, row["description_text"], subject, pair, user_id, kg_id)
                stats.merged += 1
        else:
            subject_id = target.subject_id
            if subject_id not in reinforced:
                existing = conn.execute(load_sql("pipeline/live_subject"),
                                        {"id": subject_id, "user_id": user_id, "kg_id": kg_id}).fetchone()
                _reinforce(conn, subject_id, existing["description_text"], subject, pair, user_id, kg_id)
            stats.merged += 1
        reinforced.add(subject_id)
        subject["subject_id"] = subject_id
    conn.execute(load_sql("pipeline/record_merge"), {"id": pair["id"], "user_id": user_id,
                                                  "extracted_subjects": Jsonb(subjects)})
    stats.pairs += 1


def _reinforce(conn, subject_id, description: str, subject: dict, pair: dict, user_id: str, kg_id: str) -> None:
    conn.execute(load_sql("pipeline/merge_into_subject"), {
        "id": subject_id, "user_id": user_id, "kg_id": kg_id, "seen_at": pair["occurred_at"],
        "description_text": append_description(description, subject.get("description", ""))})


def merge_pending(database: Database, embedder: Embedder, user_id: str, kg_id: str, *,
                  threshold: float = DEFAULT_THRESHOLD, batch_size: int = 30) -> MergeStats:
    """Stage 3: merge each extracted subject into the graph (top-5 cosine ≥ threshold) or insert it.

    Pairs are handled oldest first, one transaction each, so a later pair sees the subjects an earlier
    one created. Subject names are embedded once per batch.
    """
    stats = MergeStats()
    database.ensure_schema(embedder.spec)
    for pairs in pending_batches(database, "pipeline/pending_merge_batch",
                                 {"user_id": user_id, "kg_id": kg_id, "limit": batch_size}):
        names = sorted({s["name"] for pair in pairs for s in (pair["extracted_subjects"] or [])})
        vectors = dict(zip(names, embedder.embed([subject_embedding_text(n) for n in names]), strict=True))
        with database.connect() as conn:
            for pair in pairs:
                with conn.transaction():
                    _merge_pair(conn, pair, vectors, user_id, kg_id, threshold, stats)
    return stats


# ------------------------------------------------------------------------------------------------- link
@dataclass
class LinkStats:
    pairs: int = 0
    links: int = 0
    janitor_reset: int = 0
    hubs_changed: int = 0  # subjects flagged or unflagged as hubs after this run's links


def link_pending(database: Database, embedder: Embedder, user_id: str, kg_id: str, *,
                 threshold: float = DEFAULT_THRESHOLD, batch_size: int = 300,
                 hubs: HubRule = DEFAULT_HUB_RULE) -> LinkStats:
    """Stage 4: one junction row per (subject, pair), checkpoint in the same transaction.

    First the janitor: pairs marked stored with zero links although extraction found subjects get their
    merge/link checkpoints reset and are merged again here, before linking. Last, the graph's hubs are
    flagged again (pipeline/hubs.py).
    """
    stats = LinkStats()
    with database.connect() as conn:
        stats.janitor_reset = len(conn.execute(load_sql("pipeline/janitor_reset"),
                                               {"user_id": user_id, "kg_id": kg_id}).fetchall())
    if stats.janitor_reset:
        logger.warning("janitor reset %d stored pair(s) without links for %s/%s", stats.janitor_reset,
                       user_id, kg_id)
        merge_pending(database, embedder, user_id, kg_id, threshold=threshold)
    for pairs in pending_batches(database, "pipeline/pending_link_batch",
                                 {"user_id": user_id, "kg_id": kg_id, "limit": batch_size}):
        with database.connect() as conn:
            for pair in pairs:
                subject_ids = sorted({s["subject_id"] for s in (pair["extracted_subjects"] or [])
                                      if s.get("subject_id")})
                with conn.transaction():
                    if subject_ids:
                        cursor = conn.execute(load_sql("pipeline/insert_links"), {
                            "pair_id": pair["id"], "subject_ids": subject_ids, "user_id": user_id,
                            "kg_id": kg_id})
                        stats.links += cursor.rowcount
                        conn.execute(load_sql("pipeline/mark_key_subjects"),
                                     {"subject_ids": subject_ids, "user_id": user_id})
                    conn.execute(load_sql("pipeline/record_link"), {"id": pair["id"], "user_id": user_id})
                stats.pairs += 1
    # Every run, not only when links were added: a changed hub rule (DREAMING_GRAPH_HUB_SHARE) re-flags on
    # the next run, and only changes are written.
    stats.hubs_changed = len(flag_hubs(database, user_id, kg_id, hubs))
    return stats


def flag_hubs(database: Database, user_id: str, kg_id: str, hubs: HubRule = DEFAULT_HUB_RULE) -> list[dict]:
    """Flag (and unflag) the hubs of one user's graph; returns the changes."""
    with database.connect(vectors=False) as conn:
        changes = conn.execute(load_sql("pipeline/flag_hubs"), {
            "user_id": user_id, "kg_id": kg_id, "hub_share": hubs.share, "hub_min_pairs": hubs.min_pairs}).fetchall()
    for change in changes:
        logger.info("%s/%s: %s %s a hub (%d pairs)", user_id, kg_id, change["subject_text"],
                    "is now" if change["is_hub"] else "is no longer", change["linked_pairs"])
    return changes


# ------------------------------------------------------------------------------------------- refinement
@dataclass
class RefineStats(Failures):
    refined: int = 0
    renamed: int = 0
    name_kept_on_conflict: int = 0


def refine_pending(database: Database, refiner: Refiner, embedder: Embedder, user_id: str, kg_id: str, *,
                   batch_size: int = 50) -> RefineStats:
    """Stage 5: subjects whose description holds " | " get a clean name and narrative, re-embedded so
    later merges compare against the consolidated subject."""
    stats = RefineStats()
    failed: list = []  # retried on a later run, not again in this one
    for rows in pending_batches(database, "pipeline/pending_refinement_batch",
                                {"user_id": user_id, "kg_id": kg_id, "limit": batch_size, "skip_ids": failed}):
        results = refiner.refine_many([(row["subject_text"], row["description_text"]) for row in rows])
        done = [(row, result) for row, result in zip(rows, results, strict=True)
                if not isinstance(result, Exception)]
        for row, result in zip(rows, results, strict=True):
            if isinstance(result, Exception):
                stats.record(result)
                failed.append(row["id"])
        vectors = embedder.embed([subject_embedding_text(result.name) for _, result in done]) if done else []
        with database.connect() as conn:
            for (row, result), vector in zip(done, vectors, strict=True):
                try:
                    with conn.transaction():
                        name = result.name
                        if name != row["subject_text"] and conn.execute(load_sql("pipeline/name_taken"), {
                                "user_id": user_id, "kg_id": kg_id, "subject_text": name,
                                "id": row["id"]}).fetchone():
                            # Another live subject already has that name; keep ours (dream passes merge them).
                            name = row["subject_text"]
                            stats.name_kept_on_conflict += 1
                        conn.execute(load_sql("pipeline/apply_refinement"), {
                            "id": row["id"], "user_id": user_id, "kg_id": kg_id, "subject_text": name,
                            "description_text": result.narrative, "embedding": vector})
                except ROW_DATA_ERRORS as exc:  # this subject stays as it was; the others are refined
                    stats.record(exc)
                    failed.append(row["id"])
                    continue
                stats.refined += 1
                stats.renamed += int(name != row["subject_text"])
    return stats


# ------------------------------------------------------------------------------------------------ rebuild
def clear_user_graph(database: Database, user_id: str, kg_id: str) -> None:
    """Delete the user's subjects (links cascade) and reset every pair's stage checkpoints."""
    params = {"user_id": user_id, "kg_id": kg_id}
    with database.connect() as conn, conn.transaction():
        conn.execute(load_sql("pipeline/delete_user_subjects"), params)
        conn.execute(load_sql("pipeline/reset_user_checkpoints"), params)


def reset_failed_extractions(database: Database, user_id: str, kg_id: str | None = None, *,
                             max_attempts: int = MAX_EXTRACTION_ATTEMPTS) -> int:
    """Give the user's parked pairs (extraction failed ``max_attempts`` times) a fresh budget of attempts,
    so the next run extracts them now instead of after the cool-down. Returns how many."""
    with database.connect(vectors=False) as conn:
        return len(conn.execute(load_sql("pipeline/reset_failed_extractions"), {
            "user_id": user_id, "kg_id": kg_id, "max_attempts": max_attempts}).fetchall())


def graph_stats(database: Database, user_id: str) -> dict:
    with database.connect(vectors=False) as conn:
        return dict(conn.execute(load_sql("pipeline/graph_stats"), {"user_id": user_id}).fetchone())


def graph_signature(database: Database, user_id: str) -> set[tuple[str, tuple[str, ...]]]:
    """The user's graph as comparable data (subject name, linked pairs' content hashes): a resumed or
    rebuilt run must give the same set as an uninterrupted one."""
    with database.connect(vectors=False) as conn:
        rows = conn.execute(load_sql("checks/graph_signature"), {"user_id": user_id}).fetchall()
    return {(row["subject_text"], tuple(row["pairs"])) for row in rows}


def graph_health(database: Database, user_id: str) -> dict[str, int]:
    """What must be zero once the user's graph is dreamed: unfinished pairs, duplicate subjects and links,
    orphan pairs, unlinked subjects (crash-recovery tests and bench/reliability.py read it)."""
    params = {"user_id": user_id}
    with database.connect(vectors=False) as conn:
        health = dict(conn.execute(load_sql("checks/graph_health"), params).fetchone())
        health["orphan_pairs"] = conn.execute(load_sql("checks/orphan_pairs"), params).fetchone()["orphans"]
    return health


def graph_report(database: Database, user_id: str) -> list[dict]:
    """The shape of each of the user's graphs (checks/graph_report.sql) and the share of its live subjects
    on the committed generic list (extraction/generic_subjects.txt), each with the names found."""
    from dreaming_dagster.extraction.entities import is_generic

    params = {"user_id": user_id}
    with database.connect(vectors=False) as conn:
        reports = conn.execute(load_sql("checks/graph_report"), params).fetchall()
        names = conn.execute(load_sql("checks/live_subject_names"), params).fetchall()
    for report in reports:
        generic = sorted(row["subject_text"] for row in names
                         if row["kg_id"] == report["kg_id"] and is_generic(row["subject_text"]))
        report["generic_subjects"] = len(generic)
        report["generic_share"] = len(generic) / report["subjects"] if report["subjects"] else 0.0
        report["generic_examples"] = generic[:10]
    return reports


def top_subjects(database: Database, user_id: str, limit: int = 10) -> list[dict]:
    with database.connect(vectors=False) as conn:
        return conn.execute(load_sql("pipeline/top_subjects"), {"user_id": user_id, "limit": limit}).fetchall()



def accumulate(total: dict, stats) -> None:
    """Add a stage's counts into ``total`` (summing numbers, keeping the latest error text)."""
    for key, value in stats_dict(stats).items():
        if key == "merge_ratio":
            continue  # a ratio does not sum; callers recompute it from the totals
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
        elif value is not None:
            total[key] = value


def stats_dict(stats) -> dict:
    data = asdict(stats)
    if isinstance(stats, MergeStats):
        data["merge_ratio"] = stats.merge_ratio
    return data


__all__ = ["accumulate", "ExtractionStats", "LinkStats", "MergeStats", "RefineStats", "clear_user_graph", "extract_pending",
           "graph_health", "graph_signature", "graph_stats", "link_pending", "merge_pending", "refine_pending",
           "reset_failed_extractions", "stats_dict", "top_subjects", "user_graph_lock", "user_kgs"]
