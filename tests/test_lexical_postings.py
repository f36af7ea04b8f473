"""The lexical pool found in the recall process (retrieval/lexical_postings.py) on real Postgres: it draws
the same pairs, with the same scores and ranks, as the statement's own exact pool — after saves that append
to tails and re-sort words, after deletes, under a cache too small to hold a query, from threads, for
several users and databases through one cache — and it reads again only what changed."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import numpy as np
import pytest

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.retrieval.lexical_postings import WordPostingsCache, top_k_indexes, unpack_sent_arrays
from dreaming_dagster.retrieval.ranker import COSINE_ONLY
from dreaming_dagster.retrieval.recaller import Recaller, composite_rows
from dreaming_dagster.storage import embedded
from dreaming_dagster.storage.database import Database
from tests.retrieval_fixtures import EPOCH, HashEmbedder, text_vector
from tests.test_lexical import QUERIES, exact_top, stored_index, zipf_pairs

MB = 2**20


def ranked(database, user_id: str, query: str, k: int, cache: WordPostingsCache | None, as_of=None,
           pool_size: int = 1) -> list[tuple]:
    """The composite statement's rows for a lexical pool of k: (pair, in which pools, bm25, score)."""
    with database.connect() as conn:
        rows = composite_rows(conn, lexical_postings=cache, user_id=user_id, kg_id="default",
                              query_embedding=text_vector(query), query_text=query, weights=COSINE_ONLY,
                              pool_size=pool_size, lexical_pool_size=k, as_of=as_of)
    return [(str(r["id"]), r["in_vector_pool"], r["in_lexical_pool"], r["bm25"], r["score"])
            for r in rows]


def lexical_scores(rows: list[tuple]) -> list[float]:
    return sorted((bm25 for _, _, in_lexical, bm25, _ in rows if in_lexical), reverse=True)


class CountingCache(WordPostingsCache):
    """The cache, counting the blocks it reads from the database."""

    def __init__(self, max_bytes: int):
        super().__init__(max_bytes)
        self.fetched_blocks = 0

    def _fetch(self, conn, **kwargs):
        listing = super()._fetch(conn, **kwargs)
        self.fetched_blocks += sum(sent for word in listing.values() for _, _, sent in word.blocks)
        return listing


def save(database, user_id: str, pairs) -> None:
    save_validated_pairs(database, HashEmbedder(), user_id, "default", pairs, embed=False, index_words=True)


def test_the_cached_pool_is_the_statements_pool_through_saves_resorts_and_deletes(database):
    cache = CountingCache(64 * MB)
    pairs = zipf_pairs(700, seed=11)
    for chunk in range(7):  # tails appended across statements, words re-sorted on the way
        save(database, "gil", pairs[chunk * 100:][:100])
        index = stored_index(database, "gil")
        for query in QUERIES:
            for k in (1, 10, 40):
                served = ranked(database, "gil", query, k, cache)
                assert served == ranked(database, "gil", query, k, None), (chunk, query, k)
                assert lexical_scores(served) == pytest.approx(exact_top(database, "gil", query, k, index=index),
                                                               rel=1e-9)
    # Nothing changed: nothing is read again.
    fetched = cache.fetched_blocks
    for query in QUERIES:
        ranked(database, "gil", query, 10, cache)
    assert cache.fetched_blocks == fetched
    # One new pair with two of the query words: only their tail blocks are read again.
    save(database, "gil", [replace(zipf_pairs(1, seed=5)[0], **{
        "assistant_message": "garden piano", "turn_index": 9_000, "occurred_at": EPOCH + timedelta(hours=9_000)})])
    served = ranked(database, "gil", "garden piano", 10, cache)
    assert served == ranked(database, "gil", "garden piano", 10, None)
    assert 1 <= cache.fetched_blocks - fetched <= 2
    # Deletes reach into sorted blocks.
    with database.connect() as conn:
        conn.execute("DELETE FROM memory_pairs WHERE user_id = 'gil' AND turn_index % 7 = 3")
    index = stored_index(database, "gil")
    for query in QUERIES:
        assert ranked(database, "gil", query, 25, cache) == ranked(database, "gil", query, 25, None)
        assert lexical_scores(ranked(database, "gil", query, 25, cache)) == pytest.approx(
            exact_top(database, "gil", query, 25, index=index), rel=1e-9)


def test_a_cache_smaller_than_a_query_stays_exact_and_within_its_budget(database):
    save(database, "gil", zipf_pairs(400, seed=3))
    tiny = WordPostingsCache(3_000)  # a few blocks' worth: every query evicts
    for _ in range(2):
        for query in QUERIES:
            assert ranked(database, "gil", query, 20, tiny) == ranked(database, "gil", query, 20, None)
            assert tiny.held_bytes <= tiny.max_bytes


def test_recalls_from_threads_with_evictions_racing_draw_the_same_pools(database):
    save(database, "gil", zipf_pairs(500, seed=7))
    expected = {query: ranked(database, "gil", query, 30, None) for query in QUERIES}
    cache = WordPostingsCache(40_000)  # holds about one query's words: threads evict each other's
    failures: list[str] = []

    def worker(offset: int) -> None:
        for round_ in range(6):
            query = QUERIES[(offset + round_) % len(QUERIES)]
            if ranked(database, "gil", query, 30, cache) != expected[query]:
                failures.append(query)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_one_cache_serves_users_and_databases_apart(database, pg_admin_url):
    """The same words for two users, and the same user, word ids and pair numbers in another database (a
    new database numbers its words and pairs anew): each pool holds only its own user's pairs, exactly."""
    other = Database(embedded.fresh_database_url(pg_admin_url, "t"))
    save(database, "ann", zipf_pairs(200, seed=1))
    save(database, "bob", zipf_pairs(200, seed=2))
    save(other, "ann", zipf_pairs(200, seed=9))
    cache = WordPostingsCache(64 * MB)
    for _ in range(2):
        for db, user in ((database, "ann"), (database, "bob"), (other, "ann")):
            with db.connect() as conn:
                owned = {str(r["id"]) for r in conn.execute("SELECT id FROM memory_pairs WHERE user_id = %s", (user,))}
            for query in QUERIES:
                served = ranked(db, user, query, 20, cache)
                assert served == ranked(db, user, query, 20, None)
                assert {pair_id for pair_id, *_ in served} <= owned


def test_as_of_and_an_empty_cache_leave_the_pool_to_the_statement(database):
    save(database, "gil", zipf_pairs(200, seed=4))
    before = EPOCH + timedelta(hours=120)
    cache = CountingCache(64 * MB)
    for query in QUERIES:
        assert ranked(database, "gil", query, 20, cache, as_of=before) == ranked(database, "gil", query, 20, None,
                                                                                 as_of=before)
    assert cache.fetched_blocks == 0 and cache.held_bytes == 0
    off = CountingCache(0)
    assert not off.enabled
    assert ranked(database, "gil", "garden piano", 20, off) == ranked(database, "gil", "garden piano", 20, None)
    assert off.fetched_blocks == 0
    with pytest.raises(ValueError, match="max_bytes"):
        WordPostingsCache(-1)


def test_recall_holds_postings_as_configured(database):
    save(database, "gil", zipf_pairs(200, seed=6))
    held = Recaller.from_settings(database, HashEmbedder(), DreamingSettings(recall_lexical_cache_mb=16))
    plain = Recaller.from_settings(database, HashEmbedder(), DreamingSettings(recall_lexical_cache_mb=0))
    try:
        assert held.lexical_postings.max_bytes == 16 * MB and not plain.lexical_postings.enabled
        for query in QUERIES:
            assert [m.pair_id for m in held.recall("gil", query, k=10)] == [
                m.pair_id for m in plain.recall("gil", query, k=10)]
        assert held.lexical_postings.held_bytes > 0 and plain.lexical_postings.held_bytes == 0
    finally:
        held.close()
        plain.close()


def test_recall_finds_the_lexical_pool_from_held_postings_with_the_statements_ranking(database):
    save(database, "gil", zipf_pairs(300, seed=8))
    held = Recaller.from_settings(database, HashEmbedder(), DreamingSettings(recall_lexical_cache_mb=16))
    statement = Recaller.from_settings(database, HashEmbedder(), DreamingSettings(recall_lexical_cache_mb=0))
    found = []
    pool_pairs = held.lexical_postings.pool_pairs

    def spied_pool_pairs(*args, **kwargs):
        found.append(kwargs.get("query_text"))
        return pool_pairs(*args, **kwargs)

    held.lexical_postings.pool_pairs = spied_pool_pairs
    try:
        for _ in range(2):  # from postings read by the first round, then from held ones
            for query in QUERIES:
                served = held.recall("gil", query, k=10)
                expected = statement.recall("gil", query, k=10)
                assert [m.pair_id for m in served] == [m.pair_id for m in expected]
                assert [m.score for m in served] == pytest.approx([m.score for m in expected], abs=1e-6)
        assert len(found) == 2 * len(QUERIES)
        # As of a past time the statement finds the pool (the postings held are the current ones).
        held.recall("gil", QUERIES[0], k=10, as_of=EPOCH + timedelta(hours=100))
        assert len(found) == 2 * len(QUERIES)
    finally:
        held.close()
        statement.close()


def test_recalls_from_more_threads_than_connections_find_their_lexical_pools(database):
    """Eight threads over one connection all finish, each with the statement's ranking."""
    save(database, "gil", zipf_pairs(300, seed=9))
    settings = DreamingSettings(recall_lexical_cache_mb=16, recall_connections=1)
    recaller = Recaller.from_settings(database, HashEmbedder(), settings)
    statement = Recaller.from_settings(database, HashEmbedder(), DreamingSettings(recall_lexical_cache_mb=0))
    try:
        expected = {query: [m.pair_id for m in statement.recall("gil", query, k=10)] for query in QUERIES}
        failures: list[str] = []

        def worker(offset: int) -> None:
            for round_ in range(4):
                query = QUERIES[(offset + round_) % len(QUERIES)]
                if [m.pair_id for m in recaller.recall("gil", query, k=10)] != expected[query]:
                    failures.append(query)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads) and failures == []
    finally:
        recaller.close()
        statement.close()


def test_top_k_keeps_every_tie_at_the_cut():
    import numpy as np

    scores = np.array([0.0, 3.0, 2.0, 2.0, 1.0, 2.0 * (1 - 1e-12), 0.5])
    assert sorted(top_k_indexes(scores, 2).tolist()) == [1, 2, 3, 5]
    assert sorted(top_k_indexes(scores, 10).tolist()) == [1, 2, 3, 4, 5, 6]  # never a zero score
    assert top_k_indexes(np.zeros(3), 2).tolist() == []


@pytest.mark.parametrize("spread", ["compact", "sparse", "compact, then a far pair"])
def test_pair_numbers_keep_their_dense_index_as_batches_arrive(spread):
    """Whichever lookup answers (a direct table over a compact range of pair numbers, a sorted copy over a
    sparse one, the switch from one to the other mid-way), a pair number keeps its dense index, indexes are
    dense, and new numbers get the next ones in ascending order of number."""
    from dreaming_dagster.retrieval.lexical_postings import _UserPairs

    pairs, seen, rng = _UserPairs(), {}, np.random.default_rng(0)
    high = 10**12 if spread == "sparse" else 5_000
    for n in range(60):
        batch = rng.integers(1, high, size=int(rng.integers(0, 300)))
        if spread == "compact, then a far pair" and n == 30:
            batch = np.append(batch, 10**11)
        before = len(pairs.pair_nos)
        dense = pairs.dense(batch)
        assert dense.dtype == np.int32
        for pair_no, index in zip(batch.tolist(), dense.tolist(), strict=True):
            assert seen.setdefault(pair_no, index) == index and pairs.pair_nos[index] == pair_no
        assert pairs.pair_nos[before:] == sorted(set(batch.tolist()) - set(pairs.pair_nos[:before]))
        assert pairs.nbytes > 0 or not len(pairs.pair_nos)
    assert sorted(seen.values()) == list(range(len(pairs.pair_nos)))
    # The table never spans more than a few slots a pair (a sparse user's would be huge).
    assert pairs.nbytes <= 16 * len(pairs.pair_nos) + 4 * 2 * _UserPairs.TABLE_MIN_SLOTS
    assert pairs.dense(np.zeros(0, dtype=np.int64)).tolist() == []


def test_binary_arrays_unpack_to_their_values_and_a_wrong_layout_is_refused(database):
    """Postings arrive as array_send bytes joined block after block (word_block_postings.sql): the values
    round-trip for bigint and integer arrays, past 32 bits and negative too, and bytes that do not match the
    counts they come with are refused."""
    blocks = [[1, -2, 2**40 + 7], [2**63 - 1], [-(2**63), 0, 5, 6]]
    narrow_blocks = [[1, -2, 7], [-(2**31), 0, 5, 2**31 - 1]]
    with database.connect(vectors=False) as conn:
        wide = conn.execute(
            "SELECT string_agg(array_send(t.block::bigint[]), ''::bytea ORDER BY t.n) AS joined "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS t (block, n)",
            (["{" + ",".join(map(str, block)) + "}" for block in blocks],), binary=True).fetchone()["joined"]
        narrow = conn.execute("SELECT array_send(%s::integer[]) || array_send(%s::integer[]) AS joined",
                              narrow_blocks, binary=True).fetchone()["joined"]
    counts = [len(block) for block in blocks]
    for _ in range(2):  # a pure function: the same bytes, the same values
        assert unpack_sent_arrays(wide, counts, np.int64).tolist() == [v for block in blocks for v in block]
        assert unpack_sent_arrays(narrow, [3, 4], np.int32).tolist() == [v for block in narrow_blocks for v in block]
    assert unpack_sent_arrays(None, [], np.int64).tolist() == []
    for wrong in ([3, 3], [4, 3], [3, 5], [7]):
        with pytest.raises(ValueError, match="postings are not"):
            unpack_sent_arrays(narrow, wrong, np.int32)
    with pytest.raises(ValueError, match="postings are not"):
        unpack_sent_arrays(wide, counts, np.int32)  # bigint bytes read as integer
