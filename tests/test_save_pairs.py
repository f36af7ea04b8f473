"""save_pairs and deferred embedding against real Postgres."""

import numpy as np
import pytest

from dreaming_dagster.ingest.embedding import embed_pending_pairs, user_stats
from dreaming_dagster.ingest.save import BatchRejectedError, save_pairs, save_validated_pairs
from dreaming_dagster.storage.records import InvalidInputError, parse_pair
from tests.conftest import pair, run_concurrently, stub_embedder


def rows(database, user_id=None):
    query = "SELECT * FROM memory_pairs" + (" WHERE user_id = %s" if user_id else "") + " ORDER BY turn_index"
    with database.connect() as conn:
        return conn.execute(query, (user_id,) if user_id else ()).fetchall()


def test_save_then_duplicate_is_one_row(database, embedder16):
    first = save_pairs("alice", [pair(1)], database=database, embedder=embedder16)
    again = save_pairs("alice", [pair(1)], database=database, embedder=embedder16)
    assert (first.inserted, first.duplicates, first.embedded) == (1, 0, 1)
    assert (again.inserted, again.duplicates) == (0, 1)
    (row,) = rows(database)
    assert row["id"] is not None and str(row["id"]) == first.pair_ids[0]
    assert row["token_count"] > 0 and row["kg_id"] == "default"
    # The pipeline's progress row is made with the pair, every checkpoint NULL for the later stages.
    with database.connect() as conn:
        (stage,) = conn.execute("SELECT * FROM pair_stages").fetchall()
    assert (stage["pair_id"], stage["user_id"], stage["kg_id"]) == (row["id"], "alice", "default")
    assert stage["summary"] is None and stage["extracted_subjects"] is None
    assert stage["extracted_at"] is None and stage["subjects_merged_at"] is None and stage["kg_stored_at"] is None
    assert stage["attempts"] == 0


def test_duplicates_inside_one_batch_and_per_kg(database, embedder16):
    result = save_pairs("alice", [pair(1), pair(1), pair(2)], database=database, embedder=embedder16)
    other_kg = save_pairs("alice", [pair(1)], kg_id="work", database=database, embedder=embedder16)
    assert (result.inserted, result.duplicates) == (2, 1)
    assert other_kg.inserted == 1  # unique per user + kg, not globally


def test_local_embedder_vectors_are_stored_normalised(database, local_embedder):
    save_pairs("alice", [pair(1, user_message="I adopted a beagle named Max")], database=database,
               embedder=local_embedder)
    (row,) = rows(database)
    vector = np.asarray(row["embedding"].to_numpy())
    assert vector.shape == (384,) and abs(np.linalg.norm(vector) - 1) < 1e-5


def test_each_turn_gets_its_own_vector_and_whole_pair_vectors_are_redone(database, local_embedder):
    from dreaming_dagster.embeddings import pair_embedding_texts

    save_pairs("alice", [pair(1, user_message="I adopted a beagle named Max", assistant_message="Congrats!"),
                         pair(2, user_message="", assistant_message="Here is a pasta recipe")],
               database=database, embedder=local_embedder)
    both, reply_only = rows(database)
    expected = local_embedder.embed(["user: I adopted a beagle named Max", "assistant: Congrats!",
                                     "assistant: Here is a pasta recipe"])
    assert np.allclose(both["embedding"].to_numpy(), expected[0], atol=1e-5)
    assert np.allclose(both["reply_embedding"].to_numpy(), expected[1], atol=1e-5)
    # A one-sided pair has one vector, of the side that has text.
    assert np.allclose(reply_only["embedding"].to_numpy(), expected[2], atol=1e-5)
    assert reply_only["reply_embedding"] is None
    assert pair_embedding_texts("  ", "x") == ("assistant: x", None)
    # A pair embedded whole (before migration 0009) is pending until both turns are embedded in place.
    with database.connect() as conn:
        conn.execute("UPDATE memory_pairs SET embedding = %s, reply_embedding = NULL WHERE turn_index = 1",
                     (local_embedder.embed(["user: I adopted a beagle named Max\nassistant: Congrats!"])[0],))
    assert user_stats(database, "alice")[0]["pending_embedding"] == 1
    assert embed_pending_pairs(database, local_embedder, "alice").embedded == 1
    redone, _ = rows(database)
    assert np.allclose(redone["embedding"].to_numpy(), expected[0], atol=1e-5)
    assert np.allclose(redone["reply_embedding"].to_numpy(), expected[1], atol=1e-5)
    assert user_stats(database, "alice")[0]["pending_embedding"] == 0
    assert embed_pending_pairs(database, local_embedder, "alice").embedded == 0  # a no-op once done


def test_per_record_mode_stores_the_valid_records(database, embedder16):
    batch = [pair(1), pair(2, occurred_at="not a date"), pair(3, user_message="", assistant_message=""), pair(4)]
    result = save_pairs("alice", batch, database=database, embedder=embedder16)
    assert result.inserted == 2
    assert [(r.record, r.field) for r in result.rejected] == [(1, "occurred_at"), (2, "user_message")]
    assert [row["turn_index"] for row in rows(database)] == [1, 4]


def test_strict_mode_is_all_or_nothing(database, embedder16):
    save_pairs("alice", [pair(0)], database=database, embedder=embedder16)
    with pytest.raises(BatchRejectedError) as info:
        save_pairs("alice", [pair(1), pair(2, turn_index=-3)], strict=True, database=database,
                   embedder=embedder16)
    assert "record 1: field 'turn_index'" in str(info.value)
    assert [row["turn_index"] for row in rows(database)] == [0]


@pytest.mark.parametrize(("user_id", "kg_id"), [("bad user", "default"), ("x" * 129, "default"),
                                                ("alice", "no/slashes")])
def test_bad_user_or_kg_writes_nothing(database, embedder16, user_id, kg_id):
    save_pairs("alice", [pair(0)], database=database, embedder=embedder16)
    with pytest.raises(InvalidInputError) as info:
        save_pairs(user_id, [pair(1)], kg_id=kg_id, database=database, embedder=embedder16)
    assert info.value.field == ("user_id" if user_id != "alice" else "kg_id")
    assert len(rows(database)) == 1


def test_a_record_the_database_refuses_is_rejected_alone_or_refuses_a_strict_batch(database, embedder16):
    save_pairs("alice", [pair(0)], database=database, embedder=embedder16)
    with database.connect() as conn:  # a real failure inside Postgres, on the third row of the batch
        conn.execute("""
            CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.user_message = 'boom' THEN RAISE EXCEPTION 'refused by test trigger'; END IF;
            RETURN NEW; END $$;
            CREATE TRIGGER refuse_boom BEFORE INSERT ON memory_pairs
            FOR EACH ROW EXECUTE FUNCTION refuse_boom();""")
    batch = [pair(1), pair(2), pair(3, user_message="boom")]
    with database.connect() as conn, pytest.raises(Exception, match="refused by test trigger"), conn.transaction():
        # Inside a caller's transaction (how --strict stores a file) the refusal is the caller's: nothing stays.
        save_validated_pairs(database, embedder16, "alice", "default", [parse_pair(r) for r in batch],
                             connection=conn)
    assert [row["turn_index"] for row in rows(database)] == [0]
    result = save_pairs("alice", batch, database=database, embedder=embedder16)
    assert result.inserted == 2 and [(r.record, r.field) for r in result.rejected] == [(2, "record")]
    assert "refused by test trigger" in result.rejected[0].reason
    assert [row["turn_index"] for row in rows(database)] == [0, 1, 2]


def test_embedding_outage_keeps_the_pairs_and_the_asset_catches_up(database, openai_stub):
    embedder = stub_embedder(openai_stub, 16)
    openai_stub.fail_all = True
    try:
        result = save_pairs("alice", [pair(i) for i in range(5)], database=database, embedder=embedder)
    finally:
        openai_stub.fail_all = False
    assert (result.inserted, result.embedded, result.embedding_pending) == (5, 0, 5)
    assert all(row["embedding"] is None for row in rows(database))
    run = embed_pending_pairs(database, embedder, "alice", batch_size=2)
    assert run.embedded == 5 and not run.failed_pairs
    assert all(row["embedding"] is not None for row in rows(database))
    assert embed_pending_pairs(database, embedder, "alice").embedded == 0  # idempotent


def test_a_poison_pair_does_not_block_the_others(database, embedder16):
    batch = [pair(i) for i in range(6)] + [pair(6, user_message="POISON pill")]
    save_pairs("alice", batch, database=database, embedder=embedder16, embed=False)
    run = embed_pending_pairs(database, embedder16, "alice", batch_size=4)
    assert run.embedded == 6 and len(run.failed_pairs) == 1 and "stub failure" in run.last_error
    pending = [row["turn_index"] for row in rows(database) if row["embedding"] is None]
    assert pending == [6]


def test_one_users_work_never_touches_another(database, embedder16):
    save_pairs("alice", [pair(i) for i in range(3)], database=database, embedder=embedder16, embed=False)
    save_pairs("bob", [pair(i) for i in range(4)], database=database, embedder=embedder16, embed=False)
    assert embed_pending_pairs(database, embedder16, "alice").embedded == 3
    assert all(row["embedding"] is None for row in rows(database, "bob"))
    (alice,) = user_stats(database, "alice")
    (bob,) = user_stats(database, "bob")
    assert (alice["pairs"], alice["pending_embedding"]) == (3, 0)
    assert (bob["pairs"], bob["pending_embedding"]) == (4, 4)
    assert user_stats(database, "carol") == []


def test_concurrent_saves_of_the_same_pairs_store_each_once(database, embedder16):
    batch = [pair(i) for i in range(40)]
    results = run_concurrently(lambda: save_pairs("alice", batch, database=database, embedder=embedder16), 4)
    assert sum(r.inserted for r in results) == 40
    assert sum(r.duplicates for r in results) == 120
    assert len(rows(database)) == 40


def test_the_name_vector_cache_embeds_each_text_once_per_embedder_and_forgets_the_oldest():
    import numpy as np

    from dreaming_dagster.embeddings import EmbeddingSpec, TextVectorCache, embed_cached

    class CountingEmbedder:
        spec = EmbeddingSpec("counting-4", 4)

        def __init__(self, offset: float):
            self.offset, self.calls = offset, []

        def embed(self, texts):
            self.calls.append(list(texts))
            return np.array([[len(t), self.offset, 0, 1] for t in texts], dtype=np.float32)

    first, second = CountingEmbedder(0.0), CountingEmbedder(5.0)
    assert embed_cached(first, ["Lisbon", "Max"]).tolist() == [[6, 0, 0, 1], [3, 0, 0, 1]]
    again = embed_cached(first, ["Max", "Rachel Green", "Lisbon"])
    assert again.tolist() == [[3, 0, 0, 1], [12, 0, 0, 1], [6, 0, 0, 1]]
    assert first.calls == [["Lisbon", "Max"], ["Rachel Green"]]  # only the new name, in one call
    assert embed_cached(second, ["Max"]).tolist() == [[3, 5, 0, 1]]  # another embedder: its own vectors
    assert embed_cached(first, []).shape == (0, 4)

    cache = TextVectorCache(capacity=2)
    cache.embed(first, ["a", "bb"])
    cache.embed(first, ["a"])  # "a" is now the most recent; "bb" goes when "ccc" comes
    cache.embed(first, ["ccc"])
    first.calls.clear()
    cache.embed(first, ["a", "ccc", "bb"])
    assert first.calls == [["bb"]]
