"""Migrations, the recorded embedding model, and `dreaming reembed` (real Postgres)."""

import hashlib

import psycopg
import pytest

from dreaming_dagster.embeddings import EmbeddingSpec
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.reembed import reembed
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import database as database_module
from dreaming_dagster.storage.database import (
    EmbeddingMismatchError,
    Migration,
    MigrationChecksumError,
    apply_migrations,
    load_migrations,
)
from tests.conftest import bench_sql, pair, run_concurrently, stub_embedder
from tests.retrieval_fixtures import HashEmbedder, text_vector

SPEC = EmbeddingSpec("stub-embed-16", 16)


def test_migrations_apply_once_and_are_idempotent(database_url):
    with psycopg.connect(database_url) as conn:
        first = apply_migrations(conn, SPEC)
        second = apply_migrations(conn, SPEC)
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        tables = {row[0] for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        dims = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = 'memory_pairs'::regclass AND attname = 'embedding'").fetchone()
    assert first == [m.version for m in load_migrations()] and second == []
    assert versions == first
    assert {"memory_pairs", "subjects", "subject_memory_pair_links", "schema_migrations",
            "dreaming_config"} <= tables
    assert dims == ("vector(16)",)


def test_concurrent_migrations_serialise(database_url):
    def migrate():
        with psycopg.connect(database_url) as conn:
            return apply_migrations(conn, SPEC)

    applied = run_concurrently(migrate, 4)
    assert sorted(len(versions) for versions in applied) == [0, 0, 0, len(load_migrations())]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(load_migrations())


def test_an_edited_applied_migration_is_refused(database_url, monkeypatch):
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, SPEC)
    edited = [Migration(m.version, m.name, m.template + "\nSELECT 1;") if m.version == "0002" else m
              for m in load_migrations()]
    monkeypatch.setattr(database_module, "load_migrations", lambda: edited)
    with psycopg.connect(database_url) as conn, pytest.raises(MigrationChecksumError, match="0002"):
        apply_migrations(conn, SPEC)


def test_an_applied_migration_s_comments_can_be_corrected(database_url, monkeypatch):
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, SPEC)
    commented = [Migration(m.version, m.name, "-- why, said better\n\n" + m.template + "\n  -- a last word\n")
                 if m.version == "0002" else m for m in load_migrations()]
    monkeypatch.setattr(database_module, "load_migrations", lambda: commented)
    with psycopg.connect(database_url) as conn:
        assert apply_migrations(conn, SPEC) == []


def test_whole_file_checksums_of_older_databases_are_accepted_and_rewritten(database_url):
    migrations = load_migrations()
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, SPEC)
        # What earlier versions recorded: each file's whole-text hash, and for migrations whose comments
        # changed since, the hash of the text before the change.
        for migration in migrations:
            whole_file = hashlib.sha256(migration.template.encode()).hexdigest()
            before = database_module.WHOLE_FILE_CHECKSUMS_BEFORE_COMMENT_EDITS.get(migration.version, whole_file)
            conn.execute("UPDATE schema_migrations SET checksum = %s WHERE version = %s", (before, migration.version))
        conn.commit()
        assert apply_migrations(conn, SPEC) == []
        recorded = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())
    assert recorded == {m.version: m.checksum for m in migrations}
    assert all(m.checksum != hashlib.sha256(m.template.encode()).hexdigest() for m in migrations)


def test_dimension_mismatch_names_both_models_and_the_fix(database_url):
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, SPEC)
        with pytest.raises(EmbeddingMismatchError) as info:
            apply_migrations(conn, EmbeddingSpec("stub-embed-8", 8))
    message = str(info.value)
    assert "16-dimensional" in message and "stub-embed-16" in message
    assert "stub-embed-8" in message and "8 dimensions" in message
    assert "dreaming reembed" in message


def test_same_dimension_other_model_is_also_a_mismatch(database_url):
    with psycopg.connect(database_url) as conn:
        apply_migrations(conn, SPEC)
        with pytest.raises(EmbeddingMismatchError):
            apply_migrations(conn, EmbeddingSpec("another-16-d-model", 16))


def test_reembed_switches_model_and_dimension(database, openai_stub):
    old, new = stub_embedder(openai_stub, 16), stub_embedder(openai_stub, 8)
    stored = save_pairs("alice", [pair(i) for i in range(20)], database=database, embedder=old)
    save_pairs("bob", [pair(i) for i in range(5)], database=database, embedder=old, embed=False)
    with database.connect() as conn:
        conn.execute("INSERT INTO subjects (user_id, subject_text) VALUES ('alice', 'Hiking')")
        # Two index keys, one with a vector of its own and one without (an event repeating a statement).
        conn.execute("INSERT INTO memory_keys (pair_id, user_id, kg_id, kind, position, key_text, embedding) "
                     "VALUES (%s, 'alice', 'default', 'statement', 0, 'I love hiking.', %s), "
                     "(%s, 'alice', 'default', 'event', 0, 'I love hiking. (May 2023)', NULL)",
                     (stored.pair_ids[0], old.embed(["I love hiking."])[0], stored.pair_ids[0]))
    assert stored.embedded == 20

    fresh = type(database)(database.url)  # a new process's view: nothing cached
    with pytest.raises(EmbeddingMismatchError):
        fresh.ensure_schema(new.spec)

    result = reembed(database, new, batch_size=7)
    assert (result.pairs, result.subjects, result.keys, result.skipped) == (25, 1, 1, False)
    assert result.previous == old.spec and result.current == new.spec
    type(database)(database.url).ensure_schema(new.spec)  # the new model is now accepted…
    with pytest.raises(EmbeddingMismatchError):
        type(database)(database.url).ensure_schema(old.spec)  # …and the old one refused
    with database.connect() as conn:
        pairs = conn.execute("SELECT count(*) AS n, count(embedding) AS e, "
                             "max(vector_dims(embedding)) AS d FROM memory_pairs").fetchone()
        subject_dims = conn.execute("SELECT vector_dims(embedding) AS d FROM subjects").fetchone()
        key_dims = [row["d"] for row in conn.execute(
            "SELECT vector_dims(embedding) AS d FROM memory_keys ORDER BY kind")]
        indexes = {row["indexname"] for row in conn.execute("SELECT indexname FROM pg_indexes")}
        staging = conn.execute("SELECT count(*) AS n FROM pg_attribute WHERE attname = 'embedding_next' "
                               "AND NOT attisdropped").fetchone()
    assert pairs == {"n": 25, "e": 25, "d": 8}  # bob's unembedded pairs got vectors too
    assert subject_dims == {"d": 8} and key_dims == [None, 8]  # the key without a vector keeps none
    with database.connect() as conn:
        replies = conn.execute("SELECT count(reply_embedding) AS r, max(vector_dims(reply_embedding)) AS d "
                               "FROM memory_pairs").fetchone()
    assert replies == {"r": 25, "d": 8}  # both turns of every pair re-embedded
    assert {"memory_pairs_embedding_hnsw_idx", "memory_pairs_reply_embedding_hnsw_idx",
            "memory_pairs_pending_embedding_idx", "memory_pairs_pending_reply_embedding_idx",
            "subjects_embedding_hnsw_idx", "memory_keys_embedding_idx"} <= indexes
    assert staging == {"n": 0}
    assert vector_storage(database) == INLINE_VECTORS  # the swapped-in columns stay inline (0021)
    assert reembed(database, new).skipped  # already current


def test_interrupted_reembed_resumes(database, openai_stub):
    old, new = stub_embedder(openai_stub, 16), stub_embedder(openai_stub, 8)
    save_pairs("alice", [pair(i) for i in range(10)], database=database, embedder=old)
    with database.connect() as conn:  # poison one pair so the first attempt dies half-way
        poisoned = conn.execute("UPDATE memory_pairs SET user_message = 'POISON' WHERE id = "
                                "(SELECT id FROM memory_pairs ORDER BY id DESC LIMIT 1) RETURNING id").fetchone()["id"]
    with pytest.raises(Exception, match="stub failure"):
        reembed(database, new, batch_size=3)
    with database.connect() as conn:
        done = conn.execute("SELECT count(embedding_next) AS n FROM memory_pairs").fetchone()["n"]
        conn.execute("UPDATE memory_pairs SET user_message = 'fine again' WHERE id = %s", (poisoned,))
    assert 0 < done < 10
    database.ensure_schema(old.spec)  # still serving the old model meanwhile
    result = reembed(database, new, batch_size=3)
    assert result.pairs == 10 - done


VECTOR_COLUMNS = ("memory_keys.embedding", "memory_pairs.embedding", "memory_pairs.reply_embedding", "subjects.embedding")
INLINE_VECTORS = dict.fromkeys(VECTOR_COLUMNS, "m")  # attstorage 'm': MAIN


def vector_storage(database) -> dict[str, str]:
    with database.connect() as conn:
        return {row["name"]: row["attstorage"] for row in conn.execute(load_sql("schema/vector_storage"))}


class Vectors384(HashEmbedder):
    """Unit vectors of MiniLM's width, so two of them (3,088 bytes) pass the 2 kB toasting threshold."""
    spec = EmbeddingSpec("test-hash-vectors-384", 384)


def test_vectors_are_stored_in_their_rows(database):
    """Migration 0021: an exact scan of a user's vectors reads the heap pages their rows are on, not one
    TOAST tuple per vector (pgvector's default storage): fewer buffers than pairs, where toasted vectors
    cost ~3 a vector. Long messages still go out of line, so two 384-d rows share a page."""
    database.ensure_schema(Vectors384.spec)
    assert vector_storage(database) == INLINE_VECTORS
    long_turn = "We talked about the garden, the tomatoes and the trail up the mountains. " * 40  # ~3 kB
    pairs = [pair(i, user_message=f"{long_turn} {i}", assistant_message=f"{long_turn} reply {i}")
             for i in range(120)]
    saved = save_pairs("alice", pairs, database=database, embedder=Vectors384())
    assert saved.embedded == 120
    with database.connect() as conn:
        conn.execute("SET enable_indexscan = off; SET enable_bitmapscan = off")  # every row read
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + bench_sql("exact_vector_scan"),
                            {"user_id": "alice", "kg_id": "default", "query": text_vector("the garden", 384)},
                            ).fetchone()["QUERY PLAN"][0]["Plan"]
        sizes = conn.execute("SELECT min(pg_column_size(embedding)) AS smallest, "
                             "max(pg_column_size(reply_embedding)) AS largest FROM memory_pairs").fetchone()
    buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert plan["Actual Rows"] == 120
    assert buffers <= 70, f"{buffers} buffers for 120 pairs: the vectors are read out of line"
    assert sizes == {"smallest": 4 * 384 + 8, "largest": 4 * 384 + 8}  # stored whole, not compressed
