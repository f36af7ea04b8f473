"""Retrieval on real Postgres: the composite SQL against the plain-Python reference, cosine order
without a model, as_of and session semantics, v1/v2 model files, recall's inputs and tenancy."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreaming_dagster.embeddings import EmbeddingSpec
from dreaming_dagster.hubs import DEFAULT_HUB_RULE, HubRule
from dreaming_dagster.retrieval.features import FEATURE_NAMES, UserProfile, build_features
from dreaming_dagster.retrieval.ranker import (
    COSINE_ONLY,
    NO_MODEL,
    CompositeRanker,
    RankerFileError,
    SignalWeights,
    load_ranker,
    save_ranker,
)
from dreaming_dagster.retrieval.recaller import Recaller, RecallLimits, composite_parameters, composite_rows
from dreaming_dagster.retrieval.signals import LEX_WEIGHT, SIGNAL_NAMES, combined_score, pair_similarity
from dreaming_dagster.storage.records import InvalidInputError
from tests.bench_smoke import bench_module
from tests.conftest import bench_sql
from tests.retrieval_fixtures import EPOCH, HashEmbedder, build_user, text_lexemes, text_vector

QUERIES = ["what did I say about hiking", "my sister's birthday", "the car", "when did we talk", "x"]
NOW = EPOCH + timedelta(days=70)


@pytest.fixture
def memory(database):
    database.ensure_schema(HashEmbedder.spec)
    return {"alice": build_user(database, "alice", pairs=40, subjects=10, seed=1),
            "bob": build_user(database, "bob", pairs=30, subjects=8, seed=2)}


def sql_pool(database, user_id, query, *, pool_size, weights=COSINE_ONLY, query_text="", lexical_pool_size=0,
             **kwargs):
    with database.connect() as conn:
        return composite_rows(conn, user_id=user_id, kg_id="default", query_embedding=query, weights=weights,
                              query_text=query_text, pool_size=pool_size, lexical_pool_size=lexical_pool_size,
                              **kwargs)


# A strict hub rule for a 40-pair user (a subject on more than 15% of them is a hub): hubs then get no
# weight in subj_freq, subj_sem and neighbor_density, on both sides.
STRICT_HUBS = HubRule(share=0.15, min_pairs=10)


@pytest.mark.parametrize("as_of", [None, EPOCH + timedelta(days=30)])
@pytest.mark.parametrize(("session_id", "hubs"), [(None, DEFAULT_HUB_RULE), ("s1", STRICT_HUBS)])
@pytest.mark.parametrize("lexical_pool_size", [0, 6])
def test_sql_signals_equal_the_python_reference(database, memory, as_of, session_id, hubs, lexical_pool_size):
    rng = np.random.default_rng(7)
    linked = Counter(s for subjects in memory["alice"].links.values() for s in subjects)
    hub_count = sum(hubs.is_hub(n, len(memory["alice"].pairs)) for n in linked.values())
    assert (hub_count > 0) == (hubs is STRICT_HUBS)  # the strict rule really meets hubs here
    lexical_candidates = 0
    for text in QUERIES:
        query = text_vector(text)
        query_lexemes = list(text_lexemes(database, text))
        reference_time = as_of or NOW
        expected = memory["alice"].reference(query, 12, as_of=as_of, reference_time=reference_time,
                                             session_id=session_id, query_lexemes=query_lexemes,
                                             lexical_size=lexical_pool_size, hubs=hubs)
        weights = SignalWeights(tuple(rng.dirichlet(np.ones(len(SIGNAL_NAMES)))), float(rng.uniform(0.5, 3)),
                                "random")
        rows = sql_pool(database, "alice", query, pool_size=12, weights=weights, as_of=as_of,
                        reference_time=reference_time, session_id=session_id, query_text=text,
                        lexical_pool_size=lexical_pool_size, hubs=hubs)
        assert {str(r["id"]) for r in rows} == set(expected)
        lexical_candidates += sum(not r["in_vector_pool"] for r in rows)
        assert all(r["in_lexical_pool"] or r["in_vector_pool"] for r in rows)
        for row in rows:
            for name in SIGNAL_NAMES:
                assert row[name] == pytest.approx(expected[str(row["id"])][name], abs=1e-6), name
                assert 0.0 <= row[name] <= 1.0
            assert row["score"] == pytest.approx(
                combined_score(expected[str(row["id"])], weights.weights, weights.scale), abs=1e-6)
        assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    # The lexical side adds candidates cosine missed, and the fixture exercises every graph and lexical
    # signal (not all zeros), so the comparisons above mean something.
    assert (lexical_candidates > 0) == (lexical_pool_size > 0)
    everything = sql_pool(database, "alice", text_vector(QUERIES[0]), pool_size=40, reference_time=NOW,
                          query_text=QUERIES[0])
    for name in ("subj_freq", "subj_sem", "neighbor_density", "rec_exp", "lex"):
        assert max(r[name] for r in everything) > 0, name


def test_without_a_usable_model_recall_orders_by_cosine_plus_bm25(database, memory):
    """The order is checked against cosine and BM25 computed here from the fixture's vectors and words, not
    against the signals recall returns: a wrong lex or a wrong pool fails it."""
    recaller = Recaller(database, HashEmbedder(), shipped_ranker=None)
    mine = memory["alice"]
    assert len(mine.pairs) <= recaller.pool_size  # every pair is a candidate
    lexical = 0
    for text in QUERIES:
        result = recaller.recall("alice", text, k=10)
        assert result.weights == NO_MODEL and result.weights.as_dict()["lex"] == LEX_WEIGHT
        words = mine.bm25_scores(list(text_lexemes(database, text)))
        top = max(words.values(), default=0.0)
        # Cosine enters as a signal in [0, 1]: a negative cosine counts as 0.
        independent = {p.pair_id: (max(0.0, pair_similarity(text_vector(text), p)),
                                   words.get(p.pair_id, 0.0) / top if top else 0.0)
                       for p in mine.pairs}
        fused = {pid: cos + LEX_WEIGHT * lex for pid, (cos, lex) in independent.items()}
        assert [m.pair_id for m in result] == sorted(fused, key=lambda pid: -fused[pid])[:10]
        for m in result:
            assert (m.signals["cos"], m.signals["lex"]) == pytest.approx(independent[m.pair_id], abs=1e-5)
        lexical += sum(m.signals["lex"] > 0 for m in result)
    assert lexical > 0  # BM25 took part


def test_the_shipped_model_serves_until_one_is_published_and_only_for_its_embedder(database, memory, tmp_path):
    shipped = write_model(tmp_path / "shipped.safetensors", 12)
    published = tmp_path / "published.safetensors"
    recaller = Recaller(database, HashEmbedder(), ranker_path=published, shipped_ranker=shipped)
    assert recaller.recall("alice", "the car").weights.model == "v6 (shipped.safetensors)"
    write_model(published, 10)
    assert recaller.recall("alice", "the car").weights.model == "v5 (published.safetensors)"
    published.unlink()
    assert recaller.recall("alice", "the car").weights.model == "v6 (shipped.safetensors)"

    class OtherEmbedder(HashEmbedder):
        spec = EmbeddingSpec(model="another-model", dimension=HashEmbedder.spec.dimension)

    # The shipped file reads another model's vectors: that recall would order by cosine + BM25.
    assert Recaller(database, OtherEmbedder(), ranker_path=published, shipped_ranker=shipped).ranker() is None


def test_as_of_keeps_only_earlier_pairs_and_measures_recency_from_it(database, memory):
    as_of = EPOCH + timedelta(days=20)
    recaller = Recaller(database, HashEmbedder())
    result = recaller.recall("alice", "the car", k=40, as_of=as_of.isoformat())
    earlier = [p for p in memory["alice"].pairs if p.occurred_at < as_of]
    assert len(result) == len(earlier) > 0
    assert all(m.occurred_at < as_of for m in result)
    for m in result:
        age_days = (as_of - m.occurred_at).total_seconds() / 86400
        assert m.signals["rec_exp"] == pytest.approx(0.5 ** (age_days / 14), abs=1e-9)
    assert recaller.recall("alice", "the car", as_of="2020-01-01T00:00:00Z").memories == []


def test_session_signal_marks_exactly_the_callers_session(database, memory):
    result = Recaller(database, HashEmbedder()).recall("alice", "when did we talk", k=40, session_id="s2")
    for m in result:
        assert m.signals["sess"] == (1.0 if m.session_id == "s2" else 0.0)
    assert {m.session_id for m in result if m.signals["sess"]} == {"s2"}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"query": ""}, "query"), ({"query": "   "}, "query"), ({"query": None}, "query"),
    ({"k": 0}, "k"), ({"k": 201}, "k"), ({"k": "10"}, "k"),
    ({"as_of": "last tuesday"}, "as_of"), ({"as_of": 12}, "as_of"),
    ({"user_id": "no spaces allowed"}, "user_id"), ({"session_id": ""}, "session_id"),
])
def test_bad_input_names_the_field(database, kwargs, field):
    arguments = {"user_id": "alice", "query": "hello", "k": 10} | kwargs
    with pytest.raises(InvalidInputError) as error:
        Recaller(database, HashEmbedder()).recall(**arguments)
    assert error.value.field == field and f"'{field}'" in str(error.value)


def test_unknown_user_gets_an_empty_result_and_leaves_no_state(database, memory):
    recaller = Recaller(database, HashEmbedder())
    assert recaller.recall("nobody", "anything at all").memories == []
    with database.connect() as conn:
        assert conn.execute("SELECT count(*) AS n FROM recall_profiles WHERE user_id = 'nobody'").fetchone()["n"] == 0


def test_each_recall_records_the_last_query_time(database, memory):
    recaller = Recaller(database, HashEmbedder())
    before = datetime.now(UTC)
    recaller.recall("alice", "the car")
    recaller.recall("alice", "my sister's birthday")
    recaller.recall("alice", "the car", as_of=EPOCH + timedelta(days=10))  # historical: not a real query
    with database.connect() as conn:
        state = conn.execute("SELECT * FROM recall_profiles WHERE user_id = 'alice'").fetchone()
        profile = conn.execute("SELECT count(*) AS n FROM recall_profiles WHERE user_id = 'bob'").fetchone()
    assert state["query_count"] == 2 and state["last_query_at"] >= before
    assert profile["n"] == 0


# --------------------------------------------------------------------------------------- model files
def write_model(path, n_signals, dimension=8, seed=0):
    torch.manual_seed(seed)
    return save_ranker(CompositeRanker(dimension, n_signals), path, embedding_model="test-hash-vectors")


@pytest.mark.parametrize(("n_signals", "version"), [(3, "v1"), (7, "v2"), (8, "v3"), (9, "v4"), (10, "v5"), (12, "v6")])
def test_model_files_load_by_shape_and_rank(database, memory, tmp_path, n_signals, version):
    path = write_model(tmp_path / "ranker.safetensors", n_signals)
    loaded = load_ranker(path)
    assert loaded.version == version and loaded.feature_names == FEATURE_NAMES
    recaller = Recaller(database, HashEmbedder(), ranker_path=path)
    result = recaller.recall("alice", "what did I say about hiking", k=15, session_id="s1")
    assert result.weights.model.startswith(version)
    assert sum(result.weights.weights) == pytest.approx(1.0, abs=1e-5) and result.weights.scale > 0
    # A model's head covers its version's signals; the others are exactly zero.
    assert {n for n, w in result.weights.as_dict().items() if w > 0} == set(loaded.signal_names)
    assert len(loaded.signal_names) == n_signals
    assert {"profile", "model", "query"} <= set(result.timings_ms)
    for m in result:
        assert m.score == pytest.approx(combined_score(m.signals, result.weights.weights,
                                                       result.weights.scale), abs=1e-6)
    assert [m.score for m in result] == sorted((m.score for m in result), reverse=True)


def test_a_v6_file_is_small_and_self_describing(tmp_path):
    path = write_model(tmp_path / "v6.safetensors", 12, dimension=384)
    assert path.stat().st_size < 1_000_000
    loaded = load_ranker(path)
    assert loaded.embedding_dim == 384 and loaded.signal_names == SIGNAL_NAMES


def test_inconsistent_model_files_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    path = write_model(tmp_path / "v1.safetensors", 3)
    tensors = load_file(str(path))
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    save_file(tensors, str(tmp_path / "liar.safetensors"), metadata=metadata | {"version": "v2"})
    with pytest.raises(RankerFileError, match="shape is v1"):
        load_ranker(tmp_path / "liar.safetensors")
    save_file(tensors, str(tmp_path / "other.safetensors"), metadata=metadata | {"feature_names": '["a"]'})
    with pytest.raises(RankerFileError, match="trained on features"):
        load_ranker(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a model")
    with pytest.raises(RankerFileError):
        load_ranker(tmp_path / "junk.safetensors")


def test_a_replaced_model_file_is_picked_up(database, memory, tmp_path):
    path = tmp_path / "ranker.safetensors"
    recaller = Recaller(database, HashEmbedder(), ranker_path=path, shipped_ranker=None)
    assert recaller.recall("alice", "the car").weights == NO_MODEL  # no file yet: cosine + BM25
    write_model(path, 3)
    assert recaller.recall("alice", "the car").weights.model.startswith("v1")
    write_model(path, 7, seed=1)
    assert recaller.recall("alice", "the car").weights.model.startswith("v2")


def test_a_model_trained_on_other_features_is_not_used_and_recall_goes_on(database, memory, tmp_path, caplog):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    path = write_model(tmp_path / "new.safetensors", 10)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    older = tmp_path / "ranker.safetensors"  # a file published before the window_share feature
    save_file(load_file(str(path)), str(older),
              metadata=metadata | {"feature_names": json.dumps(list(FEATURE_NAMES[:-1]))})
    recaller = Recaller(database, HashEmbedder(), ranker_path=older, shipped_ranker=None)
    with caplog.at_level("WARNING"):
        for _ in range(3):
            assert recaller.recall("alice", "the car").weights == NO_MODEL
    assert sum("not used" in r.getMessage() for r in caplog.records) == 1  # said once a file
    write_model(older, 10, seed=2)  # a model trained again is picked up
    assert recaller.recall("alice", "the car").weights.model.startswith("v5")


def test_features_are_bounded_and_named():
    profile = UserProfile(memory_count=5000, first_memory_at=EPOCH, last_query_at=NOW - timedelta(hours=3),
                          subject_count=800, mean_subject_similarity=0.4, session_pair_count=12)
    features = build_features(question_type="temporal", query="when did I buy the car", query_time=NOW,
                              profile=profile, session_id="s1")
    assert features.shape == (len(FEATURE_NAMES),) and np.all(np.abs(features) <= 1.0)
    named = dict(zip(FEATURE_NAMES, features.tolist(), strict=True))
    assert named["qtype_temporal"] == 1.0 and named["in_session"] == 1.0
    assert named["subject_drift"] == pytest.approx(0.3)
    fresh = build_features(question_type="preference", query="hi", query_time=NOW, profile=UserProfile(),
                           session_id=None)
    assert dict(zip(FEATURE_NAMES, fresh.tolist(), strict=True))["since_last_query"] == 1.0


# ------------------------------------------------------------------------------------------- tenancy
@pytest.fixture(scope="module")
def crowd(pg_admin_url):
    """Twelve users with overlapping subject names, in one database shared by the property test."""
    from dreaming_dagster.storage import embedded
    from dreaming_dagster.storage.database import Database

    database = Database(embedded.fresh_database_url(pg_admin_url, "crowd"))
    database.ensure_schema(HashEmbedder.spec)
    users = {f"user{i}": build_user(database, f"user{i}", pairs=8 + 3 * i, subjects=5, seed=100 + i)
             for i in range(12)}
    return database, users


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# (Queries Postgres cannot hold are refused before any read: tests/test_fuzz.py covers those.)
@given(user=st.integers(0, 13), query=st.text(min_size=1, max_size=30).filter(lambda q: q.strip() and "\x00" not in q),
       k=st.integers(1, RecallLimits().max_k), session=st.sampled_from([None, "s0", "s1", "s3"]),
       as_of_days=st.one_of(st.none(), st.integers(0, 70)))
def test_recall_never_returns_another_users_memory(crowd, user, query, k, session, as_of_days):
    database, users = crowd
    user_id = f"user{user}"  # user12 and user13 have no memory at all
    as_of = None if as_of_days is None else EPOCH + timedelta(days=as_of_days)
    result = Recaller(database, HashEmbedder()).recall(user_id, query, k=k, session_id=session, as_of=as_of)
    own = {p.pair_id for p in users[user_id].pairs} if user_id in users else set()
    assert {m.pair_id for m in result} <= own
    eligible = [p for p in users.get(user_id, users["user0"]).pairs if as_of is None or p.occurred_at < as_of]
    assert len(result) == (min(k, len(eligible)) if user_id in users else 0)


# ------------------------------------------------------------------------- the pool at a real size
@pytest.fixture(scope="module")
def indexed_memory(pg_admin_url):
    """4,000 synthetic 384-d pairs for one user plus 10 light users, bulk-loaded as bench/recall.py does,
    with the HNSW index built and statistics current."""
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.rows import dict_row

    from dreaming_dagster.embeddings import LocalMiniLMEmbedder
    load_user = bench_module("synthetic").load_user
    from dreaming_dagster.storage import embedded
    from dreaming_dagster.storage.database import Database

    class Quiet:
        def update(self, n):
            pass

    database = Database(embedded.fresh_database_url(pg_admin_url, "hnsw"))
    database.ensure_schema(LocalMiniLMEmbedder.spec)
    rng = np.random.default_rng(3)
    with psycopg.connect(database.url, autocommit=True, row_factory=dict_row) as conn:
        register_vector(conn)
        conn.execute(bench_sql("drop_vector_indexes"))
        centres = load_user(conn, rng, "heavy", 4000, 600, 40, 365, Quiet())
        for u in range(10):
            load_user(conn, rng, f"light{u}", 100, 20, 5, 30, Quiet())
        conn.execute(bench_sql("create_vector_indexes"))
        conn.execute("VACUUM ANALYZE")
    return database, centres


def explain(conn, params):
    from dreaming_dagster.sql import load_sql

    plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + load_sql("retrieval/composite_ranking"),
                        params).fetchone()["QUERY PLAN"][0]["Plan"]

    def nodes(node):
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)
    return list(nodes(plan))


def pool_params(user_id, query, pool_size=50, query_text="pair about anything"):
    return composite_parameters(user_id=user_id, kg_id="default", query_embedding=query, query_text=query_text,
                                weights=COSINE_ONLY, pool_size=pool_size, row_limit=pool_size, reference_time=NOW)


def exact_pool(conn, user_id, query, pool_size=50):
    from dreaming_dagster.sql import load_sql

    return [r["id"] for r in conn.execute(load_sql("retrieval/exact_top_k"), {
        "user_id": user_id, "kg_id": "default", "query": query, "pool_size": pool_size})]


class FixedQueryEmbedder:
    """Embeds every text as ``query`` (the recall benchmark's synthetic vectors have no text)."""

    def __init__(self, query):
        from dreaming_dagster.embeddings import LocalMiniLMEmbedder

        self.spec, self.query = LocalMiniLMEmbedder.spec, query

    def embed(self, texts):
        return np.stack([self.query] * len(texts))


def test_the_pool_uses_the_hnsw_index_for_a_large_user(indexed_memory):
    from dreaming_dagster.retrieval.recaller import Recaller
    from dreaming_dagster.sql import load_sql
    queries_around = bench_module("synthetic").queries_around

    database, centres = indexed_memory
    query = queries_around(np.random.default_rng(5), centres, 1)[0]
    recaller = Recaller(database, FixedQueryEmbedder(query), pool_size=50, ef_search=100)
    with recaller._session() as conn:  # a connection of recall's own pool, with its settings
        nodes = explain(conn, pool_params("heavy", query))
        exact = {str(i) for i in exact_pool(conn, "heavy", query)}
    assert any(n.get("Index Name") == "memory_pairs_embedding_hnsw_idx" for n in nodes)
    exact_scan = [n for n in nodes if n.get("CTE Name") == "exact"]
    assert exact_scan and all(n.get("Actual Loops", 0) == 0 for n in exact_scan)  # never executed
    # Approximate, but close: most of the exact top-50 is in the pool.
    with recaller._session() as conn:  # the candidates cosine's side drew through the index, as recall draws them
        approx = {str(row["id"]) for row in conn.execute(load_sql("retrieval/composite_ranking"),
                                                         pool_params("heavy", query)) if row["in_vector_pool"]}
    assert len(approx) == 50 and len(approx & exact) >= 35
    recaller.close()


def test_a_short_hnsw_scan_falls_back_to_the_exact_pool(indexed_memory):
    """With ef_search below the pool size the index scan comes back short, as it does for a user with a
    small share of a big index; the exact scan then supplies the true top-K."""
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg.rows import dict_row

    queries_around = bench_module("synthetic").queries_around

    database, centres = indexed_memory
    with psycopg.connect(database.url, autocommit=True, row_factory=dict_row, prepare_threshold=None) as conn:
        register_vector(conn)
        conn.execute("SELECT set_config('hnsw.ef_search', '20', false)")
        for query in queries_around(np.random.default_rng(9), centres, 3):
            nodes = explain(conn, pool_params("heavy", query))
            assert any(n.get("CTE Name") == "exact" and n.get("Actual Loops", 0) > 0 for n in nodes)
            with conn.cursor() as cursor:
                rows = cursor.execute(load_composite(), pool_params("heavy", query)).fetchall()
            assert [r["id"] for r in rows] == exact_pool(conn, "heavy", query)
        # A light user (100 of 5,000 pairs) always gets its exact pool, whichever path the planner takes.
        for query in queries_around(np.random.default_rng(11), centres, 3):
            rows = conn.execute(load_composite(), pool_params("light3", query)).fetchall()
            assert [r["id"] for r in rows] == exact_pool(conn, "light3", query)


def test_the_profile_keeps_its_centroid_until_enough_subjects_changed(database, memory):
    from dreaming_dagster.retrieval.profiles import read_profile, refresh_profile

    query = text_vector("the car")

    def profile():
        with database.connect() as conn:
            return read_profile(conn, user_id="alice", kg_id="default", query_embedding=query, as_of=None,
                                session_id="s1")

    refresh_profile(database, "alice", "default")
    before = profile()
    with database.connect() as conn:
        archived = str(conn.execute("UPDATE subjects SET archived_at = now() WHERE user_id = 'alice' "
                                    "AND subject_text = 'Topic 2' RETURNING id").fetchone()["id"])
        live_subjects = conn.execute("SELECT count(*) AS n FROM subjects WHERE user_id = 'alice' "
                                     "AND archived_at IS NULL").fetchone()["n"]
    # One changed subject of many, under the tolerance: the counts move, the centroid is kept.
    refresh_profile(database, "alice", "default", centroid_tolerance=0.99)
    kept = profile()
    assert kept.subject_count == live_subjects == before.subject_count - 1
    assert kept.mean_subject_similarity == before.mean_subject_similarity
    # Over it: recomputed from the live subjects only.
    refresh_profile(database, "alice", "default", centroid_tolerance=0.0)
    memory_alice = memory["alice"]
    vectors = [v for s, v in memory_alice.subject_vectors.items()
               if s in memory_alice.live_subjects and s != archived and v is not None]
    centroid = np.mean(vectors, axis=0)
    assert profile().mean_subject_similarity == pytest.approx(
        float(np.dot(centroid, query) / np.linalg.norm(centroid)), abs=1e-5)
    assert profile().mean_subject_similarity != before.mean_subject_similarity


def load_composite():
    from dreaming_dagster.sql import load_sql

    return load_sql("retrieval/composite_ranking")


def test_the_profile_is_cached_by_dreaming_and_live_before_it(database, memory):
    from dreaming_dagster.retrieval.profiles import read_profile, refresh_profile

    query = text_vector("the car")
    with database.connect() as conn:
        live = read_profile(conn, user_id="alice", kg_id="default", query_embedding=query, as_of=None, session_id="s1")
        refresh_profile(database, "alice", "default")
        cached = read_profile(conn, user_id="alice", kg_id="default", query_embedding=query, as_of=None,
                              session_id="s1")
        conn.execute("UPDATE subjects SET archived_at = now() WHERE user_id = 'alice' AND subject_text = 'Topic 2'")
        stale = read_profile(conn, user_id="alice", kg_id="default", query_embedding=query, as_of=None,
                             session_id="s1")
        historical = read_profile(conn, user_id="alice", kg_id="default", query_embedding=query,
                                  as_of=EPOCH + timedelta(days=10), session_id="s1")
    memory_alice = memory["alice"]
    vectors = [v for s, v in memory_alice.subject_vectors.items() if s in memory_alice.live_subjects and v is not None]
    centroid = np.mean(vectors, axis=0)
    expected = float(np.dot(centroid, query) / np.linalg.norm(centroid))
    assert live.memory_count == cached.memory_count == 40
    assert live.subject_count == cached.subject_count == len(memory_alice.live_subjects)
    assert live.mean_subject_similarity == pytest.approx(expected, abs=1e-5)
    assert cached.mean_subject_similarity == pytest.approx(expected, abs=1e-5)
    assert live.session_pair_count == 10
    assert stale.subject_count == cached.subject_count  # until the next dreaming run refreshes it
    assert historical.memory_count == sum(1 for p in memory_alice.pairs if p.occurred_at < EPOCH + timedelta(days=10))


def test_prepared_recall_statements_are_planned_for_each_call(indexed_memory):
    """Recall prepares its statements, yet plans every call with its parameters: a generic plan, chosen after
    five runs, would take one pool strategy (HNSW or the exact scan) for the large and the light users alike."""
    queries_around = bench_module("synthetic").queries_around

    database, centres = indexed_memory
    query = queries_around(np.random.default_rng(8), centres, 1)[0]
    prepared = Recaller(database, FixedQueryEmbedder(query), connections=1)
    unprepared = Recaller(database, FixedQueryEmbedder(query), connections=1, prepared_statements=False)
    try:
        for round_number in range(4):
            for user_id in ("heavy", "light0", "light1"):
                text = f"pair about anything {round_number}"
                got = prepared.recall(user_id, text, k=10, remember_query=False)
                expected = unprepared.recall(user_id, text, k=10, remember_query=False)
                assert [m.pair_id for m in got] == [m.pair_id for m in expected] and len(got) == 10
        with prepared._session() as conn:
            assert conn.execute("SHOW plan_cache_mode").fetchone()["plan_cache_mode"] == "force_custom_plan"
            # (this query is prepared too: without parameters, its one plan is a generic one)
            ranking = conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement "
                                   "LIKE '%%vector_pool AS%%' AND statement NOT LIKE '%%pg_prepared_statements%%'"
                                   ).fetchall()
        assert ranking and sum(r["custom_plans"] for r in ranking) >= 12
        assert all(r["generic_plans"] == 0 for r in ranking)
        with unprepared._session() as conn:
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()["count"] == 0
    finally:
        prepared.close()
        unprepared.close()


def test_recall_prepares_statements_unless_the_settings_say_not(database):
    from dreaming_dagster.config.settings import DreamingSettings

    assert Recaller.from_settings(database, HashEmbedder(), DreamingSettings()).prepared_statements
    off = DreamingSettings(recall_prepared_statements=False)
    assert not Recaller.from_settings(database, HashEmbedder(), off).prepared_statements
