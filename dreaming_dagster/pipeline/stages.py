"""The dreaming stages over Postgres, one function each, for one user's knowledge graph.

Each stage selects the rows whose previous checkpoint is set and whose own is NULL, and writes a batch's
results together with their checkpoints in one transaction. So every stage is restartable from the
database: a killed run leaves whole batches done or not done, and re-running never duplicates. Callers
hold :func:`user_graph_lock` so nothing writes one user's graph concurrently.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from dreaming_dagster.dates.expressions import TimeRange, resolve
from dreaming_dagster.embeddings import Embedder, embed_cached, subject_embedding_text
from dreaming_dagster.extraction.providers import Extractor
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.llm.client import CallSkippedError, ProviderUnavailableError
from dreaming_dagster.pipeline import merging
from dreaming_dagster.pipeline.merging import DEFAULT_THRESHOLD, Candidate
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
    Dagster runs, the fast path and any process. The lock's connection is never one the stages under it
    could need (Database.lock_connection: a pool of its own), so lock holders cannot empty a pool."""
    with database.lock_connection() as conn:
        key = f"dreaming-graph\x1f{user_id}\x1f{kg_id}"
        conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (key,))
        try:
            yield
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))


@contextmanager
def stage_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """A stage's write transaction, committed without waiting for the WAL flush (synchronous_commit off,
    for this transaction only). Safe because a stage's output is derived and its checkpoint commits with it:
    a crash can lose only the last few milliseconds of stage commits, never corrupt anything, and whatever it
    loses is still pending and done again on the next run. Saves (the user's own data) stay synchronous."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit TO off")
        yield


def pending_batches(database: Database, model: str, params: dict) -> Iterator[list[dict]]:
    """Batches of a stage's pending rows (``model``, bound with ``params``), until none is left. The query is
    run again for each batch, so rows done by the previous batch drop out; rows a stage wants to leave for a
    later run go into the list ``params["skip_ids"]``, which the query reads afresh each time."""
    while True:
        with database.connect() as conn:
            rows = conn.execute(load_sql(model), params).fetchall()
        if not rows:
            return
        yield rows


def user_kgs(database: Database, user_id: str) -> list[str]:
    with database.connect(vectors=False) as conn:
        return [row["kg_id"] for row in conn.execute(load_sql("pipeline/user_kgs"), {"user_id": user_id})]


def scoped_kgs(database: Database, user_id: str, kg_ids: Collection[str] | None) -> list[str]:
    """The graphs a user-level read or stage covers: ``kg_ids`` as given (a tenant's request names its own),
    or every graph of the user (None: the operator's Dagster runs and CLI). The SQL always filters by the
    list, so nothing keyed by user alone can reach another tenant's rows."""
    return list(kg_ids) if kg_ids is not None else user_kgs(database, user_id)


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
    """Stage 2: a summary and 0–5 subjects per pending pair, a batch's results written in one statement.
    Failures are recorded per pair (attempts, last_error, last_attempt_at) and retried on later runs; they
    never block other pairs. A pair whose result the database refuses is a failure of that pair alone (the
    batch is then written pair by pair, each in its own savepoint). When the provider is
    unavailable (every retry of a call failed transiently) the stage stops after the batch: pairs not sent
    keep their attempts, and nothing waits on a dead endpoint while holding the user's graph lock."""
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
            for row, result in failed + _record_extractions(conn, done, user_id, kg_id, stats):
                failed_now.append(row["id"])
                conn.execute(load_sql("pipeline/record_extraction_failure"),
                             {"id": row["id"], "user_id": user_id, "kg_id": kg_id,
                              "error": clean_text(stats.record(result))})
        if stats.provider_unavailable:
            logger.warning("%s/%s: the LLM provider is unavailable (%s); extraction stops until the next run",
                           user_id, kg_id, stats.last_error)
            break
    return stats


def write_each_if_refused(conn: psycopg.Connection, items: list, write) -> list[tuple[object, Exception]]:
    """``write(items)`` in one savepoint; if the database refuses a value, ``write([item])`` for each item in
    its own savepoint, so only the refused ones fail. Returns the refused items with their errors."""
    try:
        with conn.transaction():
            write(items)
        return []
    except ROW_DATA_ERRORS:
        refused = []
        for item in items:
            try:
                with conn.transaction():
                    write([item])
            except ROW_DATA_ERRORS as exc:
                refused.append((item, exc))
        return refused


def write_pair_times(conn: psycopg.Connection, user_id: str, kg_id: str, source: str,
                     times: Iterable[tuple[str, int, str, TimeRange]]) -> int:
    """Store (pair id, position, expression, range) rows for ``source`` ('text' or 'llm'); returns how many."""
    rows = list(times)
    if rows:
        conn.execute(load_sql("pipeline/insert_pair_times"), {
            "user_id": user_id, "kg_id": kg_id, "source": source,
            "pair_ids": [pair_id for pair_id, *_ in rows], "positions": [position for _, position, _, _ in rows],
            "expressions": [clean_text(expression)[:200] for _, _, expression, _ in rows],
            "first_days": [r.first_day for *_, r in rows], "last_days": [r.last_day for *_, r in rows],
            "granularities": [r.granularity for *_, r in rows], "certainties": [r.certainty for *_, r in rows]})
    return len(rows)


def _record_extractions(conn: psycopg.Connection, done: list[tuple[dict, object]], user_id: str, kg_id: str,
                        stats: ExtractionStats) -> list[tuple[dict, Exception]]:
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


def read_batch_candidates(conn: psycopg.Connection, pairs: list[dict], vectors: dict[str, object], user_id: str,
                          kg_id: str, threshold: float) -> merging.BatchCandidates:
    """What the graph holds for a batch's names, in one statement (pipeline/merge_candidates.sql)."""
    names = list(vectors)
    known_ids = sorted({s["subject_id"] for pair in pairs for s in (pair["extracted_subjects"] or [])
                        if s.get("subject_id")})
    nearest: dict[str, list[Candidate]] = {}
    between: dict[str, dict[str, float]] = {}
    same_name: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    live: set[str] = set()
    rows = conn.execute(load_sql("pipeline/merge_candidates"), {
        "user_id": user_id, "kg_id": kg_id, "names": names, "embeddings": [vectors[n] for n in names],
        "threshold": threshold, "subject_ids": known_ids}).fetchall()
    for row in rows:
        kind, subject_id = row["kind"], row["subject_id"] and str(row["subject_id"])
        if kind == "nearest":
            nearest.setdefault(row["name"], []).append(Candidate(subject_id, row["subject_text"],
                                                                 float(row["similarity"])))
        elif kind == "between":
            between.setdefault(row["name"], {})[row["other_name"]] = float(row["similarity"])
        elif kind == "same_name":
            same_name[row["name"]] = subject_id
        else:
            live.add(subject_id)
        if row["description_text"] is not None:
            descriptions[subject_id] = row["description_text"]
    for candidates in nearest.values():  # the statement's row order is not the similarity order
        candidates.sort(key=lambda c: -c.similarity)
    return merging.BatchCandidates(nearest, between, same_name, descriptions, frozenset(live))


def write_merge_plan(conn: psycopg.Connection, plan: merging.MergePlan, vectors: dict[str, object], user_id: str,
                     kg_id: str) -> None:
    """A batch's merge in three statements: the new subjects, the reinforced ones, the pairs' checkpoint."""
    new = list(plan.new_subjects.values())
    if new:
        conn.execute(load_sql("pipeline/insert_subjects"), {
            "user_id": user_id, "kg_id": kg_id, "ids": [n.subject_id for n in new],
            "subject_texts": [n.name for n in new], "description_texts": [n.description for n in new],
            "subject_types": [n.subject_type for n in new], "embeddings": [vectors[n.name] for n in new],
            "created_ats": [n.created_at for n in new], "last_seen_ats": [n.last_seen_at for n in new],
            "reinforcement_counts": [n.reinforcement_count for n in new]})
    reinforced = list(plan.reinforced.values())
    if reinforced:
        conn.execute(load_sql("pipeline/reinforce_subjects"), {
            "user_id": user_id, "kg_id": kg_id, "ids": [r.subject_id for r in reinforced],
            "description_texts": [r.description for r in reinforced],
            "last_seen_ats": [r.last_seen_at for r in reinforced],
            "reinforcements": [r.reinforcements for r in reinforced]})
    conn.execute(load_sql("pipeline/record_merges"), {
        "user_id": user_id, "kg_id": kg_id, "ids": [pair_id for pair_id, _ in plan.pair_subjects],
        "extracted_subjects": [Jsonb(subjects) for _, subjects in plan.pair_subjects]})


def merge_pending(database: Database, embedder: Embedder, user_id: str, kg_id: str, *,
                  threshold: float = DEFAULT_THRESHOLD, batch_size: int = 400) -> MergeStats:
    """Stage 3: merge each extracted subject into the graph (top-5 cosine ≥ threshold) or insert it.

    Set-based: a batch's names are embedded once, everything the graph knows about them is read in one
    statement, the decisions are made in memory in pair order (a later pair sees the subjects an earlier
    one created: pipeline/merging.plan_batch_merge) and written in three statements, one transaction a
    batch: a killed run leaves a batch whole or not started.
    """
    stats = MergeStats()
    database.ensure_schema(embedder.spec)

    for pairs in pending_batches(database, "pipeline/pending_merge_batch",
                                 {"user_id": user_id, "kg_id": kg_id, "limit": batch_size}):
        names = sorted({s["name"] for pair in pairs for s in (pair["extracted_subjects"] or [])})
        vectors = dict(zip(names, embed_cached(embedder, [subject_embedding_text(n) for n in names]), strict=True))
        with database.connect() as conn, stage_transaction(conn):
            known = read_batch_candidates(conn, pairs, vectors, user_id, kg_id, threshold)
            plan = merging.plan_batch_merge(pairs, known, lambda: str(uuid.uuid4()), threshold)
            write_merge_plan(conn, plan, vectors, user_id, kg_id)
        stats.pairs += len(pairs)
        stats.created += plan.created
        stats.merged += plan.merged
        stats.reused += plan.reused
    return stats


# ------------------------------------------------------------------------------------------------- link
@dataclass
class LinkStats:
    pairs: int = 0
    links: int = 0
    janitor_reset: int = 0
    hubs_changed: int = 0  # subjects flagged or unflagged as hubs after this run's links
    new_hubs: list[str] = field(default_factory=list)  # subjects this run flagged as hubs


def link_pending(database: Database, embedder: Embedder, user_id: str, kg_id: str, *,
                 threshold: float = DEFAULT_THRESHOLD, batch_size: int = 300,
                 hubs: HubRule = DEFAULT_HUB_RULE, whole_graph: bool = True) -> LinkStats:
    """Stage 4: one junction row per (subject, pair), a batch's links and checkpoints in one transaction
    of two statements.

    ``whole_graph`` (the Dagster asset): first the janitor — pairs marked stored with zero links although
    extraction found subjects get their merge/link checkpoints reset and are merged again here — and last,
    every subject of the graph is checked against the hub rule (hubs.py). Without it (the fast
    path) only what the pending pairs need is read: the hub rule is checked for the subjects linked now and
    the current hubs, which is exact under an unchanged rule (a subject's share of the pairs rises only when
    it gains a link; a new pair lowers every other share, so only a current hub can fall back under it).
    """
    stats = LinkStats()
    if whole_graph:
        with database.connect() as conn:
            stats.janitor_reset = len(conn.execute(load_sql("pipeline/janitor_reset"),
                                                   {"user_id": user_id, "kg_id": kg_id}).fetchall())
    if stats.janitor_reset:
        logger.warning("janitor reset %d stored pair(s) without links for %s/%s", stats.janitor_reset,
                       user_id, kg_id)
        merge_pending(database, embedder, user_id, kg_id, threshold=threshold)
    linked_subjects: set[str] = set()
    for pairs in pending_batches(database, "pipeline/pending_link_batch",
                                 {"user_id": user_id, "kg_id": kg_id, "limit": batch_size}):
        links = sorted({(str(pair["id"]), s["subject_id"]) for pair in pairs
                        for s in (pair["extracted_subjects"] or []) if s.get("subject_id")})
        with database.connect() as conn, stage_transaction(conn):
            if links:
                cursor = conn.execute(load_sql("pipeline/insert_links"), {
                    "pair_ids": [p for p, _ in links], "subject_ids": [s for _, s in links],
                    "user_id": user_id, "kg_id": kg_id})
                stats.links += cursor.rowcount  # the links' trigger marks their subjects key subjects
            conn.execute(load_sql("pipeline/record_links"), {"ids": [pair["id"] for pair in pairs],
                                                            "user_id": user_id, "kg_id": kg_id})
        stats.pairs += len(pairs)
        linked_subjects.update(s for _, s in links)
    # The whole graph on every asset run, not only when links were added: a changed hub rule
    # (DREAMING_GRAPH_HUB_SHARE) re-flags on the next run, and only changes are written.
    changes = flag_hubs(database, user_id, kg_id, hubs, subject_ids=None if whole_graph else sorted(linked_subjects))
    stats.hubs_changed = len(changes)
    stats.new_hubs = [change["subject_text"] for change in changes if change["is_hub"]]
    return stats


def flag_hubs(database: Database, user_id: str, kg_id: str, hubs: HubRule = DEFAULT_HUB_RULE, *,
              subject_ids: list[str] | None = None) -> list[dict]:
    """Flag (and unflag) the hubs of one user's graph — every subject, or only ``subject_ids`` and the
    current hubs; returns the changes."""
    with database.connect(vectors=False) as conn:
        changes = conn.execute(load_sql("pipeline/flag_hubs"), {
            "user_id": user_id, "kg_id": kg_id, "hub_share": hubs.share, "hub_min_pairs": hubs.min_pairs,
            "subject_ids": subject_ids}).fetchall()
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
    later merges compare against the consolidated subject; a batch written in one statement."""
    stats = RefineStats()
    failed: list = []  # retried on a later run, not again in this one
    for rows in pending_batches(database, "pipeline/pending_refinement_batch",
                                {"user_id": user_id, "kg_id": kg_id, "limit": batch_size, "skip_ids": failed}):
        results = refiner.refine_many([(row["subject_text"], row["description_text"]) for row in rows])
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


def graph_health(database: Database, user_id: str, kg_ids: Collection[str] | None = None) -> dict[str, int]:
    """What must be zero once the user's graphs ``kg_ids`` (None: all of them) are dreamed: unfinished pairs,
    duplicate subjects and links, orphan pairs, unlinked subjects (crash-recovery tests and
    bench/reliability.py read it)."""
    params = {"user_id": user_id, "kg_ids": scoped_kgs(database, user_id, kg_ids)}
    with database.connect(vectors=False) as conn:
        health = dict(conn.execute(load_sql("checks/graph_health"), params).fetchone())
        health["orphan_pairs"] = conn.execute(load_sql("checks/orphan_pairs"), params).fetchone()["orphans"]
    return health


def memory_count_drift(database: Database, user_id: str | None = None) -> list[dict]:
    """Graphs (of ``user_id``, or all) whose stored pair or live-subject count differs from a count of their
    rows (migration 0024's triggers keep them equal): must be empty."""
    with database.connect(vectors=False) as conn:
        return conn.execute(load_sql("checks/memory_counts_drift"), {"user_id": user_id}).fetchall()


def graph_report(database: Database, user_id: str, kg_ids: Collection[str] | None = None) -> list[dict]:
    """The shape of each of the user's graphs ``kg_ids`` (None: all of them; checks/graph_report.sql) and the
    share of its live subjects on the committed generic list (extraction/generic_subjects.txt), each with
    the names found."""
    from dreaming_dagster.extraction.entities import is_generic

    params = {"user_id": user_id, "kg_ids": scoped_kgs(database, user_id, kg_ids)}
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
    """Add a stage's counts into ``total`` (summing numbers, joining lists, keeping the latest error text)."""
    for key, value in stats_dict(stats).items():
        if key == "merge_ratio":
            continue  # a ratio does not sum; callers recompute it from the totals
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
        elif isinstance(value, list):
            total[key] = [*total.get(key, []), *value]
        elif value is not None:
            total[key] = value


def stats_dict(stats) -> dict:
    data = asdict(stats)
    if isinstance(stats, MergeStats):
        data["merge_ratio"] = stats.merge_ratio
    return data


__all__ = ["accumulate", "ExtractionStats", "LinkStats", "MergeStats", "RefineStats", "clear_user_graph", "extract_pending",
           "graph_health", "graph_signature", "graph_stats", "link_pending", "memory_count_drift", "merge_pending",
           "refine_pending", "reset_failed_extractions", "stats_dict", "top_subjects", "user_graph_lock", "user_kgs"]
