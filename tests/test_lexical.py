"""The lexical index (migration 0008) on real Postgres: its postings and BM25 statistics equal what the
pairs' texts say after saves, duplicates, deletes, edits, concurrent saves and a rebuild; and recall
draws candidates through it that cosine misses."""

from __future__ import annotations

import math
import random
import threading
from collections import Counter
from datetime import timedelta

import pytest

from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.retrieval.ranker import COSINE_ONLY, SignalWeights
from dreaming_dagster.retrieval.recaller import (
    LexicalPruning,
    Recaller,
    composite_parameters,
    composite_rows,
)
from dreaming_dagster.retrieval.signals import BM25_B, BM25_K1, SIGNAL_NAMES, bm25
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.records import InvalidInputError, MemoryPair
from tests.retrieval_fixtures import EPOCH, HashEmbedder, build_user, text_lexemes, text_vector


def expected_index(database, user_id: str) -> tuple[dict, Counter, tuple[int, int]]:
    """Postings, document frequencies and corpus size recomputed from the stored texts."""
    with database.connect() as conn:
        pairs = conn.execute("SELECT id, user_message, assistant_message FROM memory_pairs WHERE user_id = %s",
                             (user_id,)).fetchall()
    postings, frequency, length = {}, Counter(), 0
    for pair in pairs:
        lexemes = text_lexemes(database, f"{pair['user_message']} {pair['assistant_message']}")
        for lexeme, tf in lexemes.items():
            postings[(str(pair["id"]), lexeme)] = (tf, sum(lexemes.values()))
        frequency.update(lexemes.keys())
        length += sum(lexemes.values())
    return postings, frequency, (sum(1 for p in pairs if text_lexemes(
        database, f"{p['user_message']} {p['assistant_message']}")), length)


def stored_index(database, user_id: str) -> tuple[dict, Counter, tuple[int, int]]:
    """The index as stored (migration 0017): postings read from the forward rows, after checking that the
    word blocks hold exactly the same postings and that every block's bounds hold."""
    with database.connect() as conn:
        forward = conn.execute(
            "SELECT w.pair_no, w.pair_id::text AS pair_id, u.lexeme, u.id AS lexeme_id, f.term_frequency, "
            "w.pair_length FROM pair_words w "
            "CROSS JOIN LATERAL unnest(w.lexeme_ids, w.term_frequencies) AS f (lexeme_id, term_frequency) "
            "JOIN user_lexemes u ON u.id = f.lexeme_id WHERE u.user_id = %s", (user_id,)).fetchall()
        blocks = conn.execute(
            "SELECT b.* FROM word_blocks b JOIN user_lexemes u ON u.id = b.lexeme_id WHERE u.user_id = %s",
            (user_id,)).fetchall()
        frequency = Counter({r["lexeme"]: r["pair_count"] for r in conn.execute(
            "SELECT lexeme, pair_count FROM user_lexemes WHERE user_id = %s AND pair_count > 0", (user_id,))})
        corpus = conn.execute("SELECT pair_count, lexeme_count FROM lexical_corpora WHERE user_id = %s",
                              (user_id,)).fetchone()
    in_blocks = Counter()
    for block in blocks:
        assert block["posting_count"] == len(block["pair_nos"]) == len(block["term_frequencies"]) > 0
        for pair_no, tf, length in zip(block["pair_nos"], block["term_frequencies"], block["pair_lengths"],
                                       strict=True):
            assert tf <= block["max_term_frequency"] and length >= block["min_pair_length"]
            weight = tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / block["weight_length"]))
            assert weight <= block["max_weight"] * (1 + 1e-12)
            in_blocks[(pair_no, block["lexeme_id"], tf, length)] += 1
    assert in_blocks == Counter((r["pair_no"], r["lexeme_id"], r["term_frequency"], r["pair_length"]) for r in forward)
    postings = {(r["pair_id"], r["lexeme"]): (r["term_frequency"], r["pair_length"]) for r in forward}
    return postings, frequency, (corpus["pair_count"], corpus["lexeme_count"]) if corpus else (0, 0)


def pair(i: int, text: str, user: str = "how is the garden") -> MemoryPair:
    return MemoryPair(session_id="s", user_message=user, assistant_message=text, turn_index=i,
                      occurred_at=EPOCH + timedelta(hours=i))


def test_the_index_follows_saves_duplicates_deletes_and_edits(database):
    embedder = HashEmbedder()
    first = save_validated_pairs(database, embedder, "ada", "default", [
        pair(0, "the tomatoes are ripe, tomatoes everywhere"), pair(1, "the piano lessons start monday")])
    save_validated_pairs(database, embedder, "ada", "default", [pair(1, "the piano lessons start monday"),
                                                                 pair(2, "insurance renewal for the car")])
    build_user(database, "bob", pairs=10, subjects=3, seed=4)
    assert stored_index(database, "ada") == expected_index(database, "ada")
    assert stored_index(database, "ada")[2][0] == 3
    assert stored_index(database, "ada")[0][(first.pair_ids[0], "tomato")] == (2, 5)
    # Indexing the same pairs again (a retried trigger, a re-run backfill) changes nothing.
    with database.connect() as conn:
        conn.execute("SELECT lexical_index_apply(ARRAY(SELECT id FROM memory_pairs), 1)")
    assert stored_index(database, "ada") == expected_index(database, "ada")
    with database.connect() as conn:
        conn.execute("DELETE FROM memory_pairs WHERE id = %s", (first.pair_ids[0],))
        conn.execute("UPDATE memory_pairs SET assistant_message = 'the car insurance went up' WHERE id = %s",
                     (first.pair_ids[1],))
    assert stored_index(database, "ada") == expected_index(database, "ada")
    assert "tomato" not in stored_index(database, "ada")[1]
    # Another user's index is untouched by all of it.
    assert stored_index(database, "bob") == expected_index(database, "bob")


def test_a_rebuild_from_memory_pairs_equals_the_incremental_index(database):
    """What migration 0008 runs over pairs stored before it gives the index the triggers keep."""
    build_user(database, "cy", pairs=25, subjects=4, seed=9)
    incremental = stored_index(database, "cy")
    with database.connect() as conn:
        conn.execute("TRUNCATE pair_words, word_blocks, user_lexemes, lexical_corpora")
        conn.execute("SELECT lexical_index_apply(ARRAY(SELECT id FROM memory_pairs), 1)")
    assert stored_index(database, "cy") == incremental == expected_index(database, "cy")


def test_the_bulk_path_is_planned_without_merge_joins(database):
    """Migration 0015: from a fresh database's empty statistics, a 1,500-pair first save merge-joined on a
    one-value key and took 192 s (2.4 s with hash joins). A later CREATE OR REPLACE of the function drops
    its SET clause; this says so."""
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn:
        config = conn.execute("SELECT proconfig FROM pg_proc WHERE proname = 'lexical_index_apply'").fetchone()
    assert "enable_mergejoin=off" in config["proconfig"]


def test_a_deferred_save_leaves_the_words_to_the_embedding_stage(database):
    """Migration 0016: embed=False defers the word index with the vectors; the embedding stage indexes
    the words first (idempotently), so an embedding outage does not keep a pair from word search."""
    from dreaming_dagster.ingest.embedding import embed_pending_pairs, index_words

    class DownEmbedder(HashEmbedder):
        def embed(self, texts):
            raise RuntimeError("the embedding endpoint is down")

    saved = save_validated_pairs(database, HashEmbedder(), "fay", "default",
                                 [pair(1, "the piano lessons start monday"), pair(2, "my zucchini bread")], embed=False)
    assert saved.inserted == 2 and stored_index(database, "fay") == ({}, Counter(), (0, 0))
    run = embed_pending_pairs(database, DownEmbedder(), "fay")
    assert run.embedded == 0 and run.failed_pairs and run.words_not_indexed == 0
    indexed = stored_index(database, "fay")
    assert indexed == expected_index(database, "fay") and indexed[2][0] == 2  # found by words already
    assert embed_pending_pairs(database, HashEmbedder(), "fay").embedded == 2
    assert index_words(database, "fay", saved.pair_ids, ["default"]) == 0
    assert stored_index(database, "fay") == indexed  # indexing again changes nothing
    # Another user's pair ids index nothing for this user.
    assert index_words(database, "gus", saved.pair_ids, ["default"]) == 0 and stored_index(database, "gus")[2] == (0, 0)


def test_concurrent_saves_for_one_user_keep_exact_statistics(database):
    database.ensure_schema(HashEmbedder.spec)
    errors = []

    def save(offset: int) -> None:
        try:
            for i in range(offset, offset + 30, 3):
                # Each save shares words with the others, so their statistics rows collide.
                save_validated_pairs(database, HashEmbedder(), "dee", "default", [
                    pair(i, f"garden tomatoes piano number {i}"), pair(i + 1, f"piano car garden {i}"),
                    pair(i + 2, f"tomatoes insurance {i}")])
        except Exception as error:  # surfaced below; a deadlock would land here
            errors.append(error)

    threads = [threading.Thread(target=save, args=(offset,)) for offset in (0, 100, 200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stored = stored_index(database, "dee")
    assert stored == expected_index(database, "dee") and stored[2][0] == 90


def test_the_pool_draws_pairs_by_their_words_and_scores_every_candidate(database):
    build_user(database, "eve", pairs=60, subjects=5, seed=3)
    # A pair with words no other pair has, its words indexed and no embedding yet (the embedder failed at
    # save time, so its embedding is pending).
    saved = save_validated_pairs(database, HashEmbedder(), "eve", "default",
                                 [pair(99, "my zucchini bread recipe", user="baking")], embed=False, index_words=True)
    query = "the zucchini bread"

    def pool(lexical_pool_size):
        with database.connect() as conn:
            return composite_rows(conn, user_id="eve", kg_id="default", query_embedding=text_vector(query),
                                  query_text=query, weights=COSINE_ONLY, pool_size=5,
                                  lexical_pool_size=lexical_pool_size)

    hybrid = {str(r["id"]): r for r in pool(5)}
    hit = hybrid[saved.pair_ids[0]]
    assert hit["in_lexical_pool"] and not hit["in_vector_pool"]
    assert hit["lex"] == 1.0 and hit["cos"] == 0.0 and hit["similarity"] == 0.0  # best BM25; no vector yet
    assert 5 < len(hybrid) <= 10 and sum(r["in_vector_pool"] for r in hybrid.values()) == 5
    # Every candidate has all eight signals, whichever side drew it.
    assert all(0.0 <= r[name] <= 1.0 for r in hybrid.values() for name in SIGNAL_NAMES)
    cosine_only = {str(r["id"]) for r in pool(0)}
    assert saved.pair_ids[0] not in cosine_only and len(cosine_only) == 5
    # Recall serves the hybrid pool; a model that weights lex puts the pair first.
    weights = SignalWeights(tuple(1.0 if name == "lex" else 0.0 for name in SIGNAL_NAMES), 1.0, "lex only")
    with database.connect() as conn:
        rows = composite_rows(conn, user_id="eve", kg_id="default", query_embedding=text_vector(query),
                              query_text=query, weights=weights, pool_size=5, lexical_pool_size=5, row_limit=1)
    assert str(rows[0]["id"]) == saved.pair_ids[0]


@pytest.mark.parametrize("query", ["the of and", "a\x00"])
def test_queries_without_words_fall_back_to_the_vector_pool(database, query):
    build_user(database, "fay", pairs=20, subjects=3, seed=5)
    with database.connect() as conn:
        rows = composite_rows(conn, user_id="fay", kg_id="default", query_embedding=text_vector(query),
                              query_text=query, weights=COSINE_ONLY, pool_size=8, lexical_pool_size=8)
    assert len(rows) == 8 and all(r["in_vector_pool"] and r["lex"] == 0.0 for r in rows)
    recaller = Recaller(database, HashEmbedder(), pool_size=8, lexical_pool_size=8)
    if "\x00" in query:  # recall() refuses what Postgres text cannot hold; the statement cleans it
        with pytest.raises(InvalidInputError, match="NUL"):
            recaller.recall("fay", query, k=5)
    else:
        assert len(recaller.recall("fay", query, k=5)) == 5


WORDS = ["garden", "piano", "river", "bread", "violin", "mountain", "kitten", "rocket", "lemon", "pepper",
         "castle", "bridge", "forest", "marble", "candle", "harbor", "meadow", "saddle", "anchor", "glacier"]


def zipf_pairs(count: int, seed: int) -> list[MemoryPair]:
    """Pairs over a small vocabulary with skewed word frequencies, repeated words and varied lengths: long
    posting lists (sorted blocks, tails) and many BM25 ties and near-ties."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** 1.1 for rank in range(len(WORDS))]
    return [pair(i, " ".join(rng.choices(WORDS, weights, k=rng.randint(3, 40))), user=rng.choice(WORDS))
            for i in range(count)]


def exact_top(database, user_id: str, query: str, k: int, before=None, index=None) -> list[float]:
    """The exact BM25 top-k scores, every pair scored in Python from the stored (and checked) index: ``index``
    (:func:`stored_index`, read once for queries of one state of the memory), else read now."""
    postings, frequency, (pair_count, lexeme_count) = index or stored_index(database, user_id)
    pairs: dict[str, dict[str, int]] = {}
    for (pair_id, lexeme), (tf, _length) in postings.items():
        pairs.setdefault(pair_id, {})[lexeme] = tf
    if before is not None:
        with database.connect() as conn:
            kept = {str(r["id"]) for r in conn.execute(
                "SELECT id FROM memory_pairs WHERE user_id = %s AND occurred_at < %s", (user_id, before))}
        pairs = {pair_id: words for pair_id, words in pairs.items() if pair_id in kept}
    terms = list(text_lexemes(database, query))
    scores = [bm25(terms, words, document_frequency=frequency, pair_count=pair_count,
                   average_length=lexeme_count / pair_count) for words in pairs.values()]
    return sorted((score for score in scores if score > 0), reverse=True)[:k]


def served_top(database, user_id: str, query: str, k: int, pruning: LexicalPruning, as_of=None) -> list[float]:
    with database.connect() as conn:
        rows = composite_rows(conn, user_id=user_id, kg_id="default", query_embedding=text_vector(query),
                              query_text=query, weights=COSINE_ONLY, pool_size=1, lexical_pool_size=k,
                              lexical_pruning=pruning, as_of=as_of)
    return sorted((r["bm25"] for r in rows if r["in_lexical_pool"]), reverse=True)


QUERIES = ["garden piano", "glacier anchor garden", "the river bread violin kitten rocket", "meadow", "saddle garden"]


def test_the_lexical_pool_is_the_exact_bm25_top_whatever_the_first_round_reads(database):
    """Migration 0017's blocks and the MaxScore-style pool: for any first round (none, one posting, the
    default, everything), the served pool's scores are the exact BM25 top-k computed in Python over every
    pair (ties included), also with as_of, also after deletes inside sorted blocks."""
    for chunk in range(7):  # saves of 100 pairs: tails filled across statements, words re-sorted on the way
        save_validated_pairs(database, HashEmbedder(), "gil", "default", zipf_pairs(700, seed=11)[chunk * 100:][:100],
                             embed=False, index_words=True)
    with database.connect() as conn:
        blocks = conn.execute("SELECT count(*) FILTER (WHERE block_no > 0) AS sorted, count(*) AS every "
                              "FROM word_blocks b JOIN user_lexemes u ON u.id = b.lexeme_id "
                              "WHERE u.user_id = 'gil'").fetchone()
    assert blocks["sorted"] > 10 and blocks["every"] > blocks["sorted"]
    rules = [LexicalPruning(seed_postings=0), LexicalPruning(seed_postings=1), LexicalPruning()]
    index = stored_index(database, "gil")
    for query in QUERIES:
        for k in (1, 10, 40):
            expected = exact_top(database, "gil", query, k, index=index)
            assert len(expected) == k
            for rule in rules:
                assert served_top(database, "gil", query, k, rule) == pytest.approx(expected, rel=1e-9), (query, k, rule)
    before = EPOCH + timedelta(hours=300)
    for query in QUERIES[:3]:
        assert served_top(database, "gil", query, 20, LexicalPruning(), as_of=before) == pytest.approx(
            exact_top(database, "gil", query, 20, before=before, index=index), rel=1e-9)
    # Deletes reach into sorted blocks; the index and the pool stay exact.
    with database.connect() as conn:
        conn.execute("DELETE FROM memory_pairs WHERE user_id = 'gil' AND turn_index % 7 = 3")
    index = stored_index(database, "gil")
    assert index == expected_index(database, "gil")
    for query in QUERIES:
        assert served_top(database, "gil", query, 25, LexicalPruning()) == pytest.approx(
            exact_top(database, "gil", query, 25, index=index), rel=1e-9)


def test_the_pool_reads_a_fraction_of_a_common_words_postings(database):
    """The point of the bounds: a query with a rare word and a common one skips some of their blocks and
    scores exactly far fewer pairs than hold the common word, and still gives the exact top."""
    save_validated_pairs(database, HashEmbedder(), "hal", "default", zipf_pairs(900, seed=5), embed=False,
                         index_words=True)
    query = "glacier garden"
    params = composite_parameters(user_id="hal", kg_id="default", query_embedding=text_vector(query),
                                  query_text=query, weights=COSINE_ONLY, pool_size=1, lexical_pool_size=10,
                                  lexical_pruning=LexicalPruning(seed_postings=128))
    with database.connect() as conn:
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + load_sql("retrieval/exact_lexical_top_k"),
                            params).fetchone()["QUERY PLAN"][0]["Plan"]
        holders = conn.execute(
            "SELECT count(*) AS n FROM pair_words w JOIN user_lexemes u ON u.id = ANY (w.lexeme_ids) "
            "WHERE u.user_id = 'hal' AND u.lexeme = 'garden'").fetchone()["n"]

    def rows(node, name):
        if node.get("Subplan Name") == f"CTE {name}":
            return node["Actual Rows"]
        return next((found for child in node.get("Plans", []) if (found := rows(child, name)) is not None), None)

    assert holders > 500
    assert rows(plan, "read_blocks") < rows(plan, "word_bounds") and rows(plan, "lexical_candidates") < holders / 4
    # Candidates are scored exactly in two rounds, the second only where a pair's bound reaches the
    # threshold the first raised: on a six-word query most candidates are never scored.
    wide = "the river bread violin kitten rocket"
    with database.connect() as conn:
        plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + load_sql("retrieval/exact_lexical_top_k"),
                            params | {"query_text": wide, "query": text_vector(wide), "lexical_pool_size": 5}
                            ).fetchone()["QUERY PLAN"][0]["Plan"]
    assert rows(plan, "first_scores") + rows(plan, "second_scores") < rows(plan, "lexical_candidates") / 2
    assert served_top(database, "hal", wide, 5, LexicalPruning(seed_postings=128)) == pytest.approx(
        exact_top(database, "hal", wide, 5), rel=1e-9)
    assert served_top(database, "hal", query, 10, LexicalPruning(seed_postings=128)) == pytest.approx(
        exact_top(database, "hal", query, 10), rel=1e-9)


def test_the_sql_term_weight_is_the_python_one_and_is_inlined(database):
    """bm25_term_weight (migration 0010) is what signals.bm25 adds per word, and the planner writes it out
    in place, so naming it costs nothing per posting."""
    database.ensure_schema(HashEmbedder.spec)
    # One word held by 1 pair in 10; the pair holds it g times among 12 other words; average length 9.5.
    idf = math.log(1 + (10 - 1 + 0.5) / (1 + 0.5))
    statement = ("SELECT bm25_term_weight(%(idf)s, g::float8, 12 + g, 9.5, %(k1)s, %(b)s) AS weight "
                 "FROM generate_series(1, 4) AS g ORDER BY g")
    params = {"idf": idf, "k1": BM25_K1, "b": BM25_B}
    with database.connect() as conn:
        weights = [row["weight"] for row in conn.execute(statement, params)]
        plan = "\n".join(row["QUERY PLAN"] for row in conn.execute("EXPLAIN (VERBOSE) " + statement, params))
    expected = [bm25(["word"], {"word": tf, "other": 12}, document_frequency={"word": 1}, pair_count=10,
                     average_length=9.5) for tf in range(1, 5)]
    assert weights == pytest.approx(expected, rel=1e-12)
    assert weights == sorted(weights)  # more occurrences weigh more, saturating
    assert "bm25_term_weight" not in plan and "generate_series" in plan


@pytest.mark.parametrize("value", [-1, 2.5, True, "10"])
def test_lexical_pruning_refuses_bad_settings_by_name(value):
    with pytest.raises(ValueError, match="lexical pruning: seed_postings must be an integer"):
        LexicalPruning(seed_postings=value)


def test_migration_0017_moves_an_existing_index_over(database_url, monkeypatch):
    """A database indexed by 0008's postings table: migration 0017 builds the forward rows, the sorted blocks
    and their bounds from it (no re-tokenising), drops the old table, and the pool is then exact."""
    import psycopg

    from dreaming_dagster.storage import database as database_module
    from dreaming_dagster.storage.database import Database, apply_migrations, load_migrations

    every = load_migrations()
    monkeypatch.setattr(database_module, "load_migrations", lambda: [m for m in every if m.version < "0017"])
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, HashEmbedder.spec)
        for i, item in enumerate(zipf_pairs(400, seed=21)):
            conn.execute("INSERT INTO memory_pairs (user_id, session_id, turn_index, user_message, assistant_message,"
                         " occurred_at, token_count, content_hash) VALUES ('ivy', 's', %s, %s, %s, %s, 5, md5(%s))",
                         (i, item.user_message, item.assistant_message, item.occurred_at, str(i)))
        assert conn.execute("SELECT count(DISTINCT pair_id) FROM pair_lexemes").fetchone()[0] == 400
    monkeypatch.setattr(database_module, "load_migrations", lambda: every)
    database = Database(database_url)
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn:
        assert conn.execute("SELECT to_regclass('pair_lexemes') AS old").fetchone()["old"] is None
        assert conn.execute("SELECT count(*) AS n FROM word_blocks WHERE block_no > 0").fetchone()["n"] > 0
    assert stored_index(database, "ivy") == expected_index(database, "ivy")
    for query in QUERIES[:3]:
        assert served_top(database, "ivy", query, 20, LexicalPruning()) == pytest.approx(
            exact_top(database, "ivy", query, 20), rel=1e-9)


def test_pair_words_bm25_is_the_python_score_and_is_inlined(database):
    """pair_words_bm25 (migration 0018) scores a forward row as signals.bm25 does, and the planner writes it
    out in place (a function call per candidate would cost more than the scoring)."""
    save_validated_pairs(database, HashEmbedder(), "iva", "default", zipf_pairs(60, seed=3), embed=False,
                         index_words=True)
    postings, frequency, (pair_count, lexeme_count) = stored_index(database, "iva")
    statement = ("WITH q AS (SELECT array_agg(id ORDER BY id) AS ids, "
                 "array_agg(ln(1 + (%(n)s - pair_count + 0.5) / (pair_count + 0.5)) ORDER BY id) AS idfs "
                 "FROM user_lexemes WHERE user_id = 'iva' AND lexeme = ANY (%(terms)s)) "
                 "SELECT w.pair_id::text AS pair_id, s.bm25 FROM pair_words w CROSS JOIN q "
                 "CROSS JOIN LATERAL pair_words_bm25(w.lexeme_ids, w.term_frequencies, w.pair_length, q.ids, q.idfs, "
                 "%(average)s, %(k1)s, %(b)s) s JOIN memory_pairs p ON p.id = w.pair_id AND p.user_id = 'iva'")
    terms = ["garden", "piano", "meadow"]
    params = {"n": pair_count, "terms": terms, "average": lexeme_count / pair_count, "k1": BM25_K1, "b": BM25_B}
    with database.connect() as conn:
        served = {r["pair_id"]: r["bm25"] for r in conn.execute(statement, params)}
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute("EXPLAIN (VERBOSE) " + statement, params))
    words: dict[str, dict[str, int]] = {}
    for (pair_id, lexeme), (tf, _length) in postings.items():
        words.setdefault(pair_id, {})[lexeme] = tf
    assert len(served) == 60
    for pair_id, held in words.items():
        expected = bm25(terms, held, document_frequency=frequency, pair_count=pair_count,
                        average_length=lexeme_count / pair_count)
        assert (served[pair_id] or 0.0) == pytest.approx(expected, rel=1e-12, abs=1e-12), pair_id
    assert any(served.values()) and "pair_words_bm25" not in plan and "array_position" in plan


def test_migration_0018_stores_forward_rows_uncompressed(database_url, monkeypatch):
    """A long pair's forward row was compressed in line by 0017 (every element read decompressed it);
    0018 rewrites it uncompressed, later saves store theirs so, and the pool stays exact."""
    import psycopg

    from dreaming_dagster.storage import database as database_module
    from dreaming_dagster.storage.database import Database, apply_migrations, load_migrations

    long_text = " ".join(f"w{i}x" for i in range(400))  # 400 distinct words: a ~5 KB forward row
    every = load_migrations()
    monkeypatch.setattr(database_module, "load_migrations", lambda: [m for m in every if m.version < "0018"])
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, HashEmbedder.spec)
        for i, text in enumerate([long_text, "garden piano meadow", "garden w7x w9x"]):
            conn.execute("INSERT INTO memory_pairs (user_id, session_id, turn_index, user_message, assistant_message,"
                         " occurred_at, token_count, content_hash) VALUES ('jo', 's', %s, %s, 'ok', now(), 5, md5(%s))",
                         (i, text, str(i)))
        compressed = "SELECT count(*) FROM pair_words WHERE pg_column_compression(lexeme_ids) IS NOT NULL"
        assert conn.execute(compressed).fetchone()[0] == 1
    monkeypatch.setattr(database_module, "load_migrations", lambda: every)
    database = Database(database_url)
    database.ensure_schema(HashEmbedder.spec)
    save_validated_pairs(database, HashEmbedder(), "jo", "default", [pair(9, long_text.replace("x", "y"))],
                         embed=False, index_words=True)
    with database.connect() as conn:
        stored = conn.execute(
            "SELECT count(*) AS pairs, count(*) FILTER (WHERE pg_column_compression(lexeme_ids) IS NOT NULL"
            " OR pg_column_compression(term_frequencies) IS NOT NULL) AS compressed,"
            " max(cardinality(lexeme_ids)) AS widest FROM pair_words").fetchone()
    assert stored == {"pairs": 4, "compressed": 0, "widest": 401}
    assert stored_index(database, "jo") == expected_index(database, "jo")
    for query in ("w7x garden", "w9x w300x", "garden piano meadow"):
        assert served_top(database, "jo", query, 3, LexicalPruning()) == pytest.approx(
            exact_top(database, "jo", query, 3), rel=1e-9)


def test_the_word_index_lock_functions_name_the_lock_the_index_writer_takes(database):
    """lexical_index_apply (migrations 0011, 0017) takes its lock by literal numbers; word_index_lock_class and
    word_index_lock_bucket (migration 0029, what an erasure takes) must name that same lock."""
    database.ensure_schema(HashEmbedder.spec)
    with database.connect() as conn:
        writer = conn.execute("SELECT pg_get_functiondef('lexical_index_apply'::regproc) AS body").fetchone()["body"]
        lock_class = conn.execute("SELECT word_index_lock_class() AS n").fetchone()["n"]
        buckets = conn.execute(
            "SELECT word_index_lock_bucket(u, k) AS named, (hashtextextended(u || '/' || k, 0) & 255)::int AS taken "
            "FROM (VALUES ('alice', 'default'), ('bob', 'acme'), ('ünï', 'x')) AS v (u, k)").fetchall()
    assert f"pg_advisory_xact_lock({lock_class}, bucket)" in writer
    assert "(hashtextextended(p.user_id || '/' || p.kg_id, 0) & 255)::int AS bucket" in writer
    assert all(row["named"] == row["taken"] for row in buckets)
