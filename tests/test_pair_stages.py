"""Stage progress in its own narrow table (migration 0019): every pair has its row from the statement that
saved it, the stages advance it without rewriting the pair, it goes with the pair, and a database dreamed
before the migration keeps every checkpoint."""

from __future__ import annotations

import psycopg
import pytest

from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.storage import database as database_module
from dreaming_dagster.storage.database import Database, load_migrations
from tests.conftest import pair
from tests.retrieval_fixtures import HashEmbedder

STAGE_COLUMNS = ("summary", "extracted_subjects", "extracted_at", "subjects_merged_at", "kg_stored_at", "attempts",
                 "last_error", "last_attempt_at")


def dream(database: Database, user_id: str) -> None:
    sync_user(user_id, database=database, embedder=HashEmbedder(), extractor=OfflineExtractor(),
              refiner=OfflineRefiner())


def texts(n: int) -> list[dict]:
    topics = ["Lisbon trip with Maria", "sourdough bread baking", "marathon training in Porto", "Lisbon hotels"]
    return [pair(i, user_message=f"I keep thinking about {topics[i % 4]}.", assistant_message="Tell me more.")
            for i in range(n)]


def test_every_saved_pair_has_a_stage_row_and_loses_it_with_the_pair(database):
    save_pairs("ana", texts(6), database=database, embedder=HashEmbedder(), embed=False)
    save_pairs("ana", texts(6), database=database, embedder=HashEmbedder(), embed=False)  # duplicates: no rows
    with database.connect() as conn:
        # An INSERT … SELECT of another user's pairs gets its rows in the same statement too.
        conn.execute("INSERT INTO memory_pairs (user_id, kg_id, session_id, turn_index, user_message, assistant_message,"
                     " occurred_at, token_count, content_hash) SELECT 'bea', kg_id, session_id, turn_index,"
                     " user_message, assistant_message, occurred_at, token_count, content_hash FROM memory_pairs"
                     " WHERE user_id = 'ana'")
        counts = conn.execute("SELECT p.user_id, count(*) AS pairs, count(s.pair_id) AS rows, "
                              "count(*) FILTER (WHERE s.user_id = p.user_id AND s.kg_id = p.kg_id) AS same_owner "
                              "FROM memory_pairs p LEFT JOIN pair_stages s ON s.pair_id = p.id "
                              "GROUP BY p.user_id ORDER BY p.user_id").fetchall()
        assert [tuple(r.values()) for r in counts] == [("ana", 6, 6, 6), ("bea", 6, 6, 6)]
        conn.execute("DELETE FROM memory_pairs WHERE user_id = 'bea'")
        assert conn.execute("SELECT count(*) AS n FROM pair_stages WHERE user_id = 'bea'").fetchone()["n"] == 0


def test_the_stages_advance_progress_without_rewriting_the_pairs(database):
    """After the embedding stage, extraction, merge and link write pair_stages only: no memory_pairs row
    gets a new version (its xmin is unchanged), so none of its indexes, the HNSW ones included, is touched."""
    save_pairs("cai", texts(8), database=database, embedder=HashEmbedder())  # embedded inline
    with database.connect() as conn:
        before = {r["id"]: r["xmin"] for r in conn.execute(
            "SELECT id, xmin::text AS xmin FROM memory_pairs WHERE user_id = 'cai'")}
    dream(database, "cai")
    with database.connect() as conn:
        after = {r["id"]: r["xmin"] for r in conn.execute(
            "SELECT id, xmin::text AS xmin FROM memory_pairs WHERE user_id = 'cai'")}
        stored = conn.execute("SELECT count(*) FILTER (WHERE kg_stored_at IS NOT NULL) AS stored, "
                              "count(*) FILTER (WHERE summary IS NOT NULL) AS summarized FROM pair_stages "
                              "WHERE user_id = 'cai'").fetchone()
    assert len(before) == 8 and after == before
    assert stored == {"stored": 8, "summarized": 8}


def test_migration_0019_moves_every_checkpoint_over(database_url, monkeypatch):
    """A database whose pairs sit at every stage before 0019 (fresh, parked after failures, extracted,
    merged, stored): the migration copies each pair's progress, drops the columns from memory_pairs, and
    dreaming carries on from where each pair was."""
    every = load_migrations()
    monkeypatch.setattr(database_module, "load_migrations", lambda: [m for m in every if m.version < "0019"])
    old = Database(database_url)
    old.ensure_schema(HashEmbedder.spec)
    save_pairs("dee", texts(5), database=old, embedder=HashEmbedder())
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE memory_pairs SET attempts = 8, last_error = 'APITimeoutError', "
                     "last_attempt_at = now() WHERE turn_index = 1")
        conn.execute("UPDATE memory_pairs SET summary = 's2', extracted_subjects = '[]', extracted_at = now() "
                     "WHERE turn_index = 2")
        conn.execute("UPDATE memory_pairs SET summary = 's3', extracted_subjects = '[]', extracted_at = now(), "
                     "subjects_merged_at = now() WHERE turn_index = 3")
        conn.execute("UPDATE memory_pairs SET summary = 's4', extracted_subjects = '[]', extracted_at = now(), "
                     "subjects_merged_at = now(), kg_stored_at = now(), attempts = 1 WHERE turn_index = 4")
        expected = {r["turn_index"]: r for r in conn.execute(
            f"SELECT turn_index, {', '.join(STAGE_COLUMNS)} FROM memory_pairs WHERE user_id = 'dee'").fetchall()
            for r in [dict(zip(["turn_index", *STAGE_COLUMNS], r, strict=True))]}
    monkeypatch.setattr(database_module, "load_migrations", lambda: every)
    database = Database(database_url)
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn:
        moved = {r["turn_index"]: {c: r[c] for c in ["turn_index", *STAGE_COLUMNS]} for r in conn.execute(
            f"SELECT p.turn_index, {', '.join('s.' + c for c in STAGE_COLUMNS)} FROM memory_pairs p "
            "JOIN pair_stages s ON s.pair_id = p.id WHERE p.user_id = 'dee'")}
        left = conn.execute("SELECT count(*) AS n FROM information_schema.columns WHERE table_name = 'memory_pairs' "
                            "AND column_name = ANY (%s)", (list(STAGE_COLUMNS),)).fetchone()["n"]
    assert moved == expected and left == 0
    dream(database, "dee")
    with database.connect() as conn:
        after = {r["turn_index"]: r for r in conn.execute(
            "SELECT p.turn_index, s.summary, s.kg_stored_at IS NOT NULL AS stored, s.attempts FROM memory_pairs p "
            "JOIN pair_stages s ON s.pair_id = p.id WHERE p.user_id = 'dee'")}
    # The parked pair waits for its cool-down; the others are dreamed, the ones extracted before keep
    # the summary they had.
    assert [after[i]["stored"] for i in range(5)] == [True, False, True, True, True]
    assert (after[1]["attempts"], after[2]["summary"], after[4]["summary"]) == (8, "s2", "s4")


@pytest.mark.parametrize("column", ["extracted_at", "summary"])
def test_stage_state_is_not_on_memory_pairs_any_more(database, column):
    """A query written against the old layout fails loudly instead of reading a column nothing updates."""
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn, pytest.raises(psycopg.errors.UndefinedColumn):
        conn.execute(f"SELECT {column} FROM memory_pairs")
