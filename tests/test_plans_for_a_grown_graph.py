"""The stages' statements stay linear in a graph the planner has no statistics for.

A new user's first dream grows its graph from nothing within one sync, before autovacuum has analyzed
anything: the planner then believes the user has about one subject. Statements that joined the user's
subjects on their (user, graph) columns were planned as a rescan of all of them for every row they
matched — quadratic, 5.8 s a refinement batch at 2,000 pairs. Here a fresh database (its tables analyzed
empty by the migrations, autovacuum off so they stay so) gets 600 subjects for one user, all waiting for
refinement, and each statement, run through EXPLAIN ANALYZE and rolled back, may handle each subject in a
few of its plan's nodes: the quadratic plans handle each once for every row they match.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from tests.retrieval_fixtures import HashEmbedder

EMBEDDER = HashEmbedder()
SUBJECTS = 600
ROWS_PER_SUBJECT = 12  # the linear plans handle a subject's row in a few nodes; the quadratic ones 100-600 times
NOW = datetime(2026, 11, 1, tzinfo=UTC)


def insert_subjects(conn: psycopg.Connection, user_id: str, count: int) -> list[str]:
    """``count`` live subjects for ``user_id`` with junk-drawer descriptions, by the merge stage's statement."""
    ids = [str(uuid.uuid4()) for _ in range(count)]
    names = [f"{user_id} subject {n}" for n in range(count)]
    conn.execute(load_sql("pipeline/insert_subjects"), {
        "user_id": user_id, "kg_id": "default", "ids": ids, "subject_texts": names,
        "description_texts": [f"{name}, first | {name}, again" for name in names],
        "subject_types": ["topic"] * count, "embeddings": list(EMBEDDER.embed(names)),
        "created_ats": [NOW] * count, "last_seen_ats": [NOW] * count, "reinforcement_counts": [2] * count})
    return ids


def rows_handled(plan: dict) -> int:
    """Rows every node of a plan produced or discarded (a filter's, a join filter's), over all its loops: a
    rescan for every outer row shows up here as rows times loops."""
    own = (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Join Filter", 0)
           + plan.get("Rows Removed by Index Recheck", 0)) * plan["Actual Loops"]
    return own + sum(rows_handled(child) for child in plan.get("Plans", []))


def run_rolled_back(conn: psycopg.Connection, model: str, params: dict) -> tuple[int, list]:
    """The rows the statement ``model``'s plan handled (EXPLAIN ANALYZE) and its rows, each run rolled back."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + load_sql(model), params).fetchone()
    with conn.transaction(force_rollback=True):
        rows = conn.execute(load_sql(model), params).fetchall()
    return rows_handled(plan["QUERY PLAN"][0]["Plan"]), rows


@pytest.fixture
def grown_graph(database: Database) -> tuple[Database, list[str]]:
    database.ensure_schema(EMBEDDER.spec)
    with database.connect() as conn:
        for table in ("subjects", "subject_refinement_queue", "subject_memory_pair_links"):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        insert_subjects(conn, "other", 20)  # another user's subjects: never read, never written
        ids = insert_subjects(conn, "new", SUBJECTS)
        estimate = conn.execute("EXPLAIN (FORMAT JSON) SELECT id FROM subjects WHERE user_id = 'new' "
                                "AND kg_id = 'default'").fetchone()["QUERY PLAN"][0]["Plan"]["Plan Rows"]
    # The condition under test: the planner believes the user has next to no subjects.
    assert estimate < SUBJECTS / 20, estimate
    return database, ids


def test_listing_subjects_to_refine_reads_each_once(grown_graph):
    database, ids = grown_graph
    with database.connect() as conn:
        handled, rows = run_rolled_back(conn, "pipeline/pending_refinement_batch",
                                     {"user_id": "new", "kg_id": "default", "limit": 50, "skip_ids": ids[:5]})
    assert len(rows) == 50 and not {str(row["id"]) for row in rows} & set(ids[:5])
    assert {str(row["id"]) for row in rows} <= set(ids)
    assert handled <= ROWS_PER_SUBJECT * SUBJECTS, handled


def test_writing_refinements_reads_each_subject_once(grown_graph):
    """A batch of 50 refinements keeping their names (so no vector and no index changes): the names held
    are looked up once for the batch; one name another live subject holds stays as it was."""
    database, ids = grown_graph
    with database.connect() as conn:
        names = {str(r["id"]): r["subject_text"] for r in conn.execute(
            "SELECT id, subject_text FROM subjects WHERE id = ANY(%s::uuid[])", (ids[:50],))}
        proposed = [names[i] for i in ids[:50]]
        proposed[0] = names[ids[1]]  # taken by another live subject: the first keeps its own name
        handled, rows = run_rolled_back(conn, "pipeline/apply_refinements", {
            "user_id": "new", "kg_id": "default", "ids": ids[:50], "subject_texts": proposed,
            "description_texts": ["a clean narrative"] * 50, "embeddings": [None] * 50})
    assert {str(row["id"]): row["subject_text"] for row in rows} == {i: names[i] for i in ids[:50]}
    assert handled <= ROWS_PER_SUBJECT * SUBJECTS, handled


def test_flagging_hubs_reads_each_subject_once(grown_graph):
    """The whole graph checked against the hub rule: the two subjects linked to more than a quarter of the
    user's 100 pairs become hubs."""
    database, ids = grown_graph
    with database.connect() as conn:
        conn.execute("INSERT INTO memory_counts (user_id, kg_id, pair_count) VALUES ('new', 'default', 100) "
                     "ON CONFLICT (user_id, kg_id) DO UPDATE SET pair_count = 100")
        conn.execute("UPDATE subjects SET link_count = 40 WHERE id = ANY(%s::uuid[])", (ids[:2],))
        handled, rows = run_rolled_back(conn, "pipeline/flag_hubs", {
            "user_id": "new", "kg_id": "default", "hub_share": 0.25, "hub_min_pairs": 50, "subject_ids": None})
    assert len(rows) == 2 and all(row["is_hub"] and row["linked_pairs"] == 40 for row in rows)
    assert handled <= ROWS_PER_SUBJECT * SUBJECTS, handled
