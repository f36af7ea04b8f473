"""Stages 3 and 4, merging and linking: each pending pair's subjects merged into the user's graph by name
and embedding, linked to the pair; hubs flagged; a graph cleared for a rebuild."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from dreaming_dagster.embeddings import Embedder, embed_cached, subject_embedding_text
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.pipeline import merging
from dreaming_dagster.pipeline.batches import (
    pending_batches,
    stage_transaction,
)
from dreaming_dagster.pipeline.merging import DEFAULT_THRESHOLD, Candidate
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database

logger = logging.getLogger(__name__)


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


def clear_user_graph(database: Database, user_id: str, kg_id: str) -> None:
    """Delete the user's subjects (links cascade) and reset every pair's stage checkpoints."""
    params = {"user_id": user_id, "kg_id": kg_id}
    with database.connect() as conn, conn.transaction():
        conn.execute(load_sql("pipeline/delete_user_subjects"), params)
        conn.execute(load_sql("pipeline/reset_user_checkpoints"), params)
