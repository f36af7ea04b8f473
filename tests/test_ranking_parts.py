"""The ranking statement takes its lexical pool as input (found in the recall process, or by
exact_lexical_top_k.sql): on a fixed memory, every row it returns equals the rows of the ranking written as one
statement that found the lexical top itself (tests/data/composite_ranking_reference.sql), for every side of
the pool, with and without as_of, and for both ways of finding the lexical pool. The reference predates the key
side and the v6 signals: on a memory without keys (key_match 0, no key candidates), with no weight on the
signals it lacks, the rows agree on every other column."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dreaming_dagster.dates.questions import NO_TIME, read_question
from dreaming_dagster.retrieval.lexical_postings import WordPostingsCache
from dreaming_dagster.retrieval.ranker import SignalWeights
from dreaming_dagster.retrieval.recaller import (
    NO_GRAPH_SIDE,
    NO_TIME_SIDE,
    GraphSide,
    TimeSide,
    composite_parameters,
    composite_rows,
)
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.storage import embedded
from tests.conftest import PROJECT_ROOT, ScratchDatabase
from tests.retrieval_fixtures import EPOCH, HashEmbedder, build_user, text_vector

REFERENCE = (PROJECT_ROOT / "tests" / "data" / "composite_ranking_reference.sql").read_text()
NEWER_SIGNALS = ("key_match", "session_match", "time_text")  # not in the reference
WEIGHTS = SignalWeights(tuple(0.0 if name in NEWER_SIGNALS else 1.0 / (i + 1) for i, name in enumerate(SIGNAL_NAMES)),
                        1.7, "fixed")
NOW = EPOCH + timedelta(days=70)
QUESTIONS = ["what did I say about hiking", "my sister's birthday party", "the car engine insurance",
             "what did we talk about two weeks ago", "which came first, the piano lessons or the garden?", "x"]


@pytest.fixture(scope="module")
def memory(pg_admin_url, migrated_templates):
    """Read by every case, written by none: built once for the module."""
    database = ScratchDatabase(embedded.fresh_database_url(pg_admin_url, "t"), migrated_templates)
    database.ensure_schema(HashEmbedder.spec)
    build_user(database, "alice", pairs=80, subjects=12, seed=11)
    build_user(database, "bob", pairs=30, subjects=6, seed=12)
    with database.connect() as conn:  # times the pairs mention, for the window side's second branch
        conn.execute("INSERT INTO pair_times (pair_id, user_id, kg_id, source, position, expression, first_day, "
                     "last_day, granularity, certainty) SELECT id, user_id, kg_id, 'text', 0, 'then', "
                     "(occurred_at - interval '20 days')::date, (occurred_at - interval '18 days')::date, 'day', 0.8 "
                     "FROM memory_pairs WHERE turn_index % 5 = 0")
    return database


@pytest.mark.parametrize("as_of", [None, EPOCH + timedelta(days=40)])
@pytest.mark.parametrize("lexical_pool_size", [0, 7])
@pytest.mark.parametrize("sides", ["vector and words", "all four"])
def test_the_split_statement_gives_the_one_statements_rows(memory, as_of, lexical_pool_size, sides):
    graph = GraphSide(pool_size=6, subjects=4) if sides == "all four" else NO_GRAPH_SIDE
    time_side = TimeSide(pool_size=4, scan_limit=50) if sides == "all four" else NO_TIME_SIDE
    cache = WordPostingsCache(64 * 2**20)
    compared, drawn_by = 0, set()
    with memory.connect() as conn:
        for question in QUESTIONS:
            time = read_question(question, as_of or NOW) if sides == "all four" else NO_TIME
            arguments = dict(user_id="alice", kg_id="default", query_embedding=text_vector(question),
                             query_text=question, weights=WEIGHTS, pool_size=8, lexical_pool_size=lexical_pool_size,
                             as_of=as_of, reference_time=as_of or NOW, session_id="s1", graph=graph, time=time,
                             time_side=time_side, side_embeddings=[text_vector(side) for side in time.sides])
            one_statement = conn.execute(REFERENCE, composite_parameters(**arguments)).fetchall()
            for held in (None, cache):  # found by exact_lexical_top_k.sql, or from the postings held
                rows = composite_rows(conn, lexical_postings=held, key_pool_size=5, **arguments)
                assert all(not row.pop("in_key_pool") and row.pop("key_match") == 0 for row in rows)
                for row in rows:
                    row.pop("session_match"), row.pop("time_text")
                assert rows == one_statement, question
            compared += len(one_statement)
            drawn_by |= {side for row in one_statement for side in ("in_lexical_pool", "in_graph_pool", "in_window_pool")
                         if row[side]}
    assert compared >= len(QUESTIONS) * 8  # a full pool for every question
    # Every side the case asks for drew candidates (a two-sided question and a window among the questions).
    assert drawn_by == ({"in_graph_pool", "in_window_pool"} if sides == "all four" else set()) | (
        {"in_lexical_pool"} if lexical_pool_size else set())
