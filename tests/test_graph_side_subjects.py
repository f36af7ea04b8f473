"""The subjects the graph side of recall starts from (retrieval/composite_ranking, query_subjects): the
nearest by embedding come from the subjects' HNSW index, with an exact scan when that comes back short, and
the name matches from the name-word index (migration 0020). Both must be the subjects an exact scan of the
user's own live, non-hub subjects gives, whichever path runs, and never another user's."""

from __future__ import annotations

import numpy as np
import pytest

from dreaming_dagster.retrieval.ranker import COSINE_ONLY
from dreaming_dagster.retrieval.recaller import GraphSide, composite_parameters
from dreaming_dagster.sql import load_sql
from tests.retrieval_fixtures import HashEmbedder, text_vector

WORDS = ["kyoto", "sister", "garden", "violin", "marathon", "bakery", "lisbon", "chess", "orchid", "tax"]


def subject_names(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{WORDS[int(rng.integers(len(WORDS)))]} {WORDS[int(rng.integers(len(WORDS)))]} {i}"
            for i in range(count)]


@pytest.fixture
def subject_graphs(database):
    """'big' owns 120 live subjects (a few archived, a few hubs), 'small' 3, 'other' 150 with the same names."""
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn:
        for user, count, seed in (("big", 120, 1), ("small", 3, 2), ("other", 150, 1)):
            for i, name in enumerate(subject_names(count, seed)):
                conn.execute(
                    "INSERT INTO subjects (user_id, subject_text, embedding, archived_at, hub_since) "
                    "VALUES (%s, %s, %s, CASE WHEN %s THEN now() END, CASE WHEN %s THEN now() END)",
                    (user, name, text_vector(f"{user} {name}"), i % 17 == 5, i % 23 == 7))
        conn.execute("ANALYZE subjects")
    return database


def query_subjects(conn, user: str, query: str, graph_subjects: int) -> tuple[set, int]:
    """The statement's query_subjects (its own text up to there) and how many rows its HNSW scan gave."""
    statement = load_sql("retrieval/composite_ranking")
    prefix = statement[:statement.index("graph_links AS MATERIALIZED")].rstrip().rstrip(",")
    parameters = composite_parameters(user_id=user, kg_id="default", query_embedding=text_vector(query),
                                      query_text=query, weights=COSINE_ONLY, pool_size=5, lexical_pool_size=0,
                                      graph=GraphSide(pool_size=5, subjects=graph_subjects))
    rows = conn.execute(prefix + "\nSELECT id, (SELECT count(*) FROM query_subjects_approximate) AS scanned "
                                 "FROM query_subjects", parameters).fetchall()
    return {row["id"] for row in rows}, (rows[0]["scanned"] if rows else 0)


def exact_subjects(conn, user: str, query: str, graph_subjects: int) -> set:
    live = ("user_id = %(user)s AND kg_id = 'default' AND archived_at IS NULL AND hub_since IS NULL")
    parameters = {"user": user, "query": text_vector(query), "n": graph_subjects,
                  "words": " | ".join(query.lower().split())}
    conn.execute("SET enable_indexscan = off; SET enable_bitmapscan = off")  # a scan of every subject
    try:
        nearest = conn.execute(f"SELECT id FROM subjects WHERE {live} AND embedding IS NOT NULL "
                               "ORDER BY embedding <=> %(query)s, id LIMIT %(n)s", parameters).fetchall()
        named = conn.execute(f"SELECT id FROM subjects WHERE {live} "
                             "AND to_tsvector('english', subject_text) @@ to_tsquery('english', %(words)s) "
                             "ORDER BY embedding <=> %(query)s, id LIMIT %(n)s", parameters).fetchall()
    finally:
        conn.execute("RESET enable_indexscan; RESET enable_bitmapscan")
    return {row["id"] for row in nearest + named}


@pytest.mark.parametrize("query", ["my sister in lisbon", "violin lessons", "the marathon and a bakery", "nothing"])
def test_graph_side_subjects_are_the_exact_ones_by_either_path(subject_graphs, query):
    with subject_graphs.connect() as conn:
        conn.execute("SET hnsw.ef_search = 400")  # at least every subject: the HNSW scan finds the true top
        for _ in range(2):
            got, scanned = query_subjects(conn, "big", query, 8)
            assert scanned == 8 and got == exact_subjects(conn, "big", query, 8)  # the index's scan sufficed
            got, scanned = query_subjects(conn, "small", query, 8)
            assert scanned < 8 and got == exact_subjects(conn, "small", query, 8)  # short: scanned exactly
            assert len(got) == 3
        with_others = {row["id"] for row in conn.execute("SELECT id FROM subjects WHERE user_id <> 'big'")}
        assert not (query_subjects(conn, "big", query, 8)[0] & with_others)


def test_the_name_match_can_read_the_name_word_index(subject_graphs):
    """The statement's name match is the indexed expression (else every recall computes it for every subject
    of the user: 73 ms at 20,000 subjects)."""
    statement = load_sql("retrieval/composite_ranking")
    parameters = composite_parameters(user_id="big", kg_id="default", query_embedding=text_vector("violin"),
                                      query_text="violin", weights=COSINE_ONLY, pool_size=5, lexical_pool_size=0,
                                      graph=GraphSide(pool_size=5, subjects=8))
    with subject_graphs.connect() as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row["QUERY PLAN"] for row in conn.execute("EXPLAIN " + statement, parameters).fetchall())
    assert "subjects_name_words_idx" in plan and "subjects_embedding_hnsw_idx" in plan
