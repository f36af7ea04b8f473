"""Index keys: what the user states about themselves and dated events, each a row with its own vector and
words pointing to its pair; written by the keying stage once, drawn and ranked by recall, forgotten with the
pair, exported and imported, shown by inspect."""

from __future__ import annotations

import json
import threading
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest

from dreaming_dagster.dates.ranges import TimeRange
from dreaming_dagster.extraction.keys import (
    MAX_STATEMENTS,
    event_keys,
    has_own_vector,
    pair_keys,
    statement_sentences,
    user_statements,
)
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.memory.export import export_lines, import_records
from dreaming_dagster.memory.forgetting import forget_pairs
from dreaming_dagster.memory.inspection import read_pair
from dreaming_dagster.pipeline import dating, keying
from dreaming_dagster.pipeline.pending_work import pending_work_params
from dreaming_dagster.retrieval.ranker import SignalWeights
from dreaming_dagster.retrieval.recaller import composite_rows
from dreaming_dagster.retrieval.signals import SIGNAL_NAMES
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import load_migrations
from dreaming_dagster.storage.records import MemoryPair
from tests.retrieval_fixtures import EPOCH, HashEmbedder, build_user, text_vector

TALK = ("Hi there! I usually take the 7:15 train to work, but it has been late a lot. My sister Rachel says I "
        "should drive instead. I'm planning to buy a hybrid car next month. What do you think about hybrids? "
        "The weather is nice today.")


def test_statements_are_the_sentences_where_the_user_speaks_of_themselves():
    assert user_statements(TALK) == [
        "I usually take the 7:15 train to work, but it has been late a lot.",
        "My sister Rachel says I should drive instead.",
        "I'm planning to buy a hybrid car next month."]
    assert user_statements("What is the capital of France? Tell me about rivers.") == []
    assert user_statements("") == [] and user_statements("   ") == []
    many = " ".join(f"I love item number {i}." for i in range(20)) + " I love item number 0."
    assert len(user_statements(many)) == MAX_STATEMENTS  # capped, each once
    assert user_statements(TALK) == user_statements(TALK)  # deterministic


def test_a_statement_is_found_with_the_characters_of_its_sentence():
    said = "Hello there. I usually take the 7:15 train to work. What time is it? My sister Rachel  lives in Oslo."
    (start, end, text), (second_start, second_end, second) = statement_sentences(said)
    assert said[start:end] == text == "I usually take the 7:15 train to work."
    assert said[second_start:second_end] == "My sister Rachel  lives in Oslo." and second == "My sister Rachel lives in Oslo."
    assert [found for *_, found in statement_sentences(TALK)] == user_statements(TALK)


def test_event_keys_carry_the_day_the_dating_stage_resolved():
    june = TimeRange(date(2023, 6, 1), date(2023, 6, 30), "month")
    assert event_keys(TALK, [(TALK.index("next month"), june)]) == [
        "I'm planning to buy a hybrid car next month. (1–30 June 2023)"]
    keys = pair_keys(TALK, [(TALK.index("next month"), june)])
    assert [(k.kind, k.position) for k in keys] == [("statement", 0), ("statement", 1), ("statement", 2),
                                                     ("event", 0)]
    # The event repeats the third statement's sentence: that statement's vector finds it, it has none.
    assert [has_own_vector(k, keys) for k in keys] == [True, True, True, False]
    assert has_own_vector(keys[3], keys[3:])


def _pairs(texts, day=0):
    return [MemoryPair(session_id="s1", user_message=text, assistant_message="ok, noted.",
                       occurred_at=EPOCH + timedelta(days=day, minutes=i), turn_index=i)
            for i, text in enumerate(texts)]


def _keys(database, user_id):
    with database.connect() as conn:
        rows = conn.execute("SELECT pair_id::text, kind, position, key_text, embedding FROM memory_keys "
                            "WHERE user_id = %s ORDER BY pair_id, kind, position", (user_id,)).fetchall()
    return [row | {"embedding": None if row["embedding"] is None else np.asarray(row["embedding"].to_numpy())}
            for row in rows]


def _dream_keys(database, user_id):
    dating.date_pending(database, user_id, "default")
    return keying.key_pending(database, HashEmbedder(), user_id, "default")


def test_the_keying_stage_writes_each_key_once_for_its_own_user(database):
    database.ensure_schema(HashEmbedder.spec)
    embedder = HashEmbedder()
    saved = save_validated_pairs(database, embedder, "alice", "default",
                                 _pairs([TALK, "Tell me a joke.", "I bought a red kayak last Saturday."]))
    save_validated_pairs(database, embedder, "bob", "default", _pairs(["I prefer tea over coffee."]))
    stats = _dream_keys(database, "alice")
    assert (stats.pairs, stats.with_keys, stats.statements, stats.events) == (3, 2, 4, 3)  # "today" too
    rows = _keys(database, "alice")
    assert len(rows) == 7 and not _keys(database, "bob")  # bob's pairs wait for bob's own run
    # Each key's vector is its own text's; an event repeating one of its pair's statements has none.
    statements = {(r["pair_id"], r["key_text"]) for r in rows if r["kind"] == "statement"}
    for row in rows:
        repeats = row["kind"] == "event" and any(
            pair == row["pair_id"] and row["key_text"].startswith(text + " (") for pair, text in statements)
        if repeats:
            assert row["embedding"] is None
        else:
            assert np.allclose(row["embedding"], text_vector(row["key_text"]))
    assert sum(row["embedding"] is None for row in rows) == 2  # "next month" and the kayak's Saturday
    kayak = [r["key_text"] for r in rows if r["pair_id"] == str(saved.pair_ids[2])]
    assert kayak[0].startswith("I bought a red kayak last Saturday.") and "(" in kayak[0]
    # A second run keys nothing; a pair whose checkpoint is lost is keyed again without a duplicate.
    assert _dream_keys(database, "alice").pairs == 0
    with database.connect() as conn:
        conn.execute("UPDATE pair_stages SET keyed_at = NULL WHERE user_id = 'alice'")
    assert _dream_keys(database, "alice").pairs == 3 and len(_keys(database, "alice")) == 7
    # A user whose pairs were dreamed before keys existed has work: the sensor dreams them once more.
    with database.connect() as conn:
        conn.execute("UPDATE pair_stages SET keyed_at = NULL, extracted_at = now(), subjects_merged_at = now(), "
                     "kg_stored_at = now() WHERE user_id = 'alice'")
        pending = {row["user_id"]: row["pending"] for row in conn.execute(
            load_sql("memory_pairs/users_with_pending_work"), pending_work_params())}
    assert pending.get("alice", 0) >= 3
    # Keying from several threads at once writes each key once.
    with database.connect() as conn:
        conn.execute("UPDATE pair_stages SET keyed_at = NULL WHERE user_id = 'alice'")
    threads = [threading.Thread(target=_dream_keys, args=(database, "alice")) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(_keys(database, "alice")) == 7


def test_keys_are_inspected_exported_imported_and_forgotten_with_their_pair(database):
    database.ensure_schema(HashEmbedder.spec)
    embedder = HashEmbedder()
    saved = save_validated_pairs(database, embedder, "carol", "default", _pairs([TALK, "Tell me a joke."]))
    _dream_keys(database, "carol")
    detail = read_pair("carol", str(saved.pair_ids[0]), database=database)
    assert detail["keyed"] and [k["text"] for k in detail["keys"] if k["kind"] == "statement"] == user_statements(TALK)
    # Every key is embedded but the "next month" event, which repeats a statement's sentence.
    unembedded = [k["text"] for k in detail["keys"] if not k["embedded"]]
    assert len(unembedded) == 1 and unembedded[0].startswith("I'm planning to buy a hybrid car next month. (")
    lines = list(export_lines("carol", database=database))
    dreams = [json.loads(line)["dream"] for line in lines[1:] if "dream" in json.loads(line)]
    assert [len(d["keys"]) for d in dreams] == [5, 0] and all(d["keyed"] for d in dreams)
    records = [(f"line {n}", json.loads(line)) for n, line in enumerate(lines, 1)]
    import_records(records, "dave", database=database, embedder=embedder)
    assert [(r["kind"], r["position"], r["key_text"], r["embedding"] is None) for r in _keys(database, "dave")] == \
        [(r["kind"], r["position"], r["key_text"], r["embedding"] is None) for r in _keys(database, "carol")]
    assert _dream_keys(database, "dave").pairs == 0  # imported as keyed: no stage redoes them
    # A key the database could not store is refused with its line and field named, and nothing is stored.
    bad = [records[0], (records[1][0], {**records[1][1], "dream": {**records[1][1]["dream"],
                                                                  "keys": [{"kind": "rumour", "position": 0,
                                                                            "text": "x"}]}})]
    bad[0] = (bad[0][0], {"export": {**bad[0][1]["export"], "pairs": 1, "subjects": 0}})
    with pytest.raises(Exception, match="dream.keys"):
        import_records(bad, "erin", database=database, embedder=embedder)
    assert not _keys(database, "erin")
    forget_pairs("carol", [str(saved.pair_ids[0])], database=database)
    assert not _keys(database, "carol") and len(_keys(database, "dave")) == 5


def test_recall_draws_a_pair_by_its_key_and_ranks_it_by_key_match(database):
    database.ensure_schema(HashEmbedder.spec)
    build_user(database, "frank", pairs=60, subjects=4, seed=3)
    target = save_validated_pairs(database, HashEmbedder(), "frank", "default", _pairs([TALK], day=30)).pair_ids[0]
    _dream_keys(database, "frank")
    statement = user_statements(TALK)[1]
    weights = SignalWeights(tuple(1.0 if name == "key_match" else 0.0 for name in SIGNAL_NAMES), 1.0, "keys")
    with database.connect() as conn:
        def pool(key_pool_size):
            return composite_rows(conn, user_id="frank", kg_id="default", query_embedding=text_vector(statement),
                                  query_text="zzz", weights=weights, pool_size=3, lexical_pool_size=0,
                                  key_pool_size=key_pool_size, reference_time=EPOCH + timedelta(days=70))
        found = {str(row["id"]): row for row in pool(5)}
        assert str(target) not in {str(row["id"]) for row in pool(0)}  # the pair's own vectors miss it
        row = found[str(target)]
        assert row["in_key_pool"] and row["key_match"] == pytest.approx(1.0, abs=1e-6)
        assert next(iter(found)) == str(target)  # key_match ranks it first
        # key_match is each candidate's best key cosine (0 without keys), as the reference states it.
        keys = {}
        for key in _keys(database, "frank"):
            if key["embedding"] is not None:  # a key without a vector of its own matches through its statement
                keys.setdefault(key["pair_id"], []).append(key["embedding"])
        query = text_vector(statement)
        for pair_id, candidate in found.items():
            expected = max((float(np.dot(query, k) / np.linalg.norm(k)) for k in keys.get(pair_id, [])), default=0.0)
            assert candidate["key_match"] == pytest.approx(max(expected, 0.0), abs=1e-5)
        # A later question (as_of before the pair) never reaches it through its keys.
        early = composite_rows(conn, user_id="frank", kg_id="default", query_embedding=query, query_text="zzz",
                               weights=weights, pool_size=3, lexical_pool_size=0, key_pool_size=5,
                               as_of=EPOCH + timedelta(days=20), reference_time=EPOCH + timedelta(days=20))
        assert str(target) not in {str(r["id"]) for r in early}
    assert datetime.now(UTC) > EPOCH


def test_keys_written_before_the_shared_vector_rule_lose_the_repeated_events_vector(database):
    database.ensure_schema(HashEmbedder.spec)
    save_validated_pairs(database, HashEmbedder(), "gina", "default", _pairs([TALK]))
    _dream_keys(database, "gina")
    before = {(r["kind"], r["position"]): r["embedding"] is None for r in _keys(database, "gina")}
    (migration,) = [m for m in load_migrations() if m.name == "event_keys_share_statement_vectors"]
    with database.connect() as conn:  # as an older keying stage wrote them: every key with a vector
        conn.execute("UPDATE memory_keys SET embedding = %s WHERE user_id = 'gina' AND embedding IS NULL",
                     (text_vector("old"),))
        assert all(r["embedding"] is not None for r in _keys(database, "gina"))
        conn.execute(migration.template)
    assert {(r["kind"], r["position"]): r["embedding"] is None for r in _keys(database, "gina")} == before
    assert sum(before.values()) == 1
