"""Token-budget consolidation passes on real Postgres: each mutation, refusals, rollback, decay, the
offline provider, restore, the token counter and its sensor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreaming_dagster.consolidation import apply as apply_module
from dreaming_dagster.consolidation.consolidators import OfflineConsolidator, Proposal
from dreaming_dagster.consolidation.passes import (
    DREAM_SESSION,
    PassFailedError,
    PassPolicy,
    RestoreError,
    restore_subject,
    run_pass,
)
from dreaming_dagster.consolidation.rules import DecayPolicy, decayed
from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.records import MemoryPair
from tests.conftest import reference_sql, run_concurrently
from tests.retrieval_fixtures import HashEmbedder, text_vector

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = PassPolicy(backfill_on_first_run=False)


class Scripted:
    """A provider that proposes what the test says (and records what it was shown)."""

    provider = "scripted"

    def __init__(self, *batches: list[dict], summary: str = "scripted pass"):
        self.batches, self.summary, self.seen = list(batches), summary, []

    def propose(self, pass_input):
        self.seen.append(pass_input)
        return Proposal(mutations=self.batches.pop(0) if self.batches else [], summary=self.summary)


def save(database, user, n, start=0, session="s1", words=60):
    pairs = [MemoryPair(session_id=session, user_message=f"{user} message {i} " + "word " * words,
                        assistant_message=f"reply {i}", occurred_at=T0 + timedelta(minutes=i), turn_index=i)
             for i in range(start, start + n)]
    return save_validated_pairs(database, HashEmbedder(), user, "default", pairs)


def subject(database, user, name, *, pairs=(), subject_type="other", description="", **fields):
    with database.connect() as conn:
        sid = str(conn.execute(reference_sql("insert_subject"), {
            "user_id": user, "kg_id": "default", "subject_text": name, "description_text": description,
            "subject_type": subject_type, "embedding": text_vector(name), "seen_at": T0}).fetchone()["id"])
        for pair_id in pairs:
            conn.execute(load_sql("pipeline/insert_links"), {"pair_ids": [pair_id], "subject_ids": [sid],
                                                          "user_id": user, "kg_id": "default"})
        if fields:
            assignments = ", ".join(f"{k} = %({k})s" for k in fields)
            conn.execute(f"UPDATE subjects SET {assignments} WHERE id = %(id)s", fields | {"id": sid})
    return sid


def row(database, sid):
    with database.connect() as conn:
        found = conn.execute("SELECT *, (SELECT count(*) FROM subject_memory_pair_links l WHERE l.subject_id = s.id)"
                             " AS links FROM subjects s WHERE id = %s", (sid,)).fetchone()
    return dict(found)


def state(database, user="alice"):
    with database.connect() as conn:
        return dict(conn.execute("SELECT * FROM dreaming_state WHERE user_id = %s", (user,)).fetchone() or {})


@pytest.fixture
def graph(database):
    database.ensure_schema(HashEmbedder.spec)
    ids = save(database, "alice", 6).pair_ids
    bob_pairs = save(database, "bob", 2).pair_ids
    return {
        "pairs": ids,
        "avery": subject(database, "alice", "Avery", pairs=ids[:2], subject_type="person", description="sister",
                         created_at=T0 + timedelta(days=3), last_seen_at=T0 + timedelta(days=5), reinforcement_count=2),
        "averys": subject(database, "alice", "Avery's", pairs=ids[2:4], subject_type="person",
                          description="lands Friday", created_at=T0, last_seen_at=T0 + timedelta(days=9),
                          reinforcement_count=3),
        "project": subject(database, "alice", "Avery Felts Project", pairs=ids[4:5], subject_type="project"),
        "boots": subject(database, "alice", "Hiking Boots", pairs=ids[5:6],
                         description="Merrell Moab, bought for the Alps | trail shoes were too soft"),
        "junk": subject(database, "alice", "lives with"),
        "pinned": subject(database, "alice", "Pinned Thing", pinned=True),
        "core": subject(database, "alice", "Core Memory", importance=0.9),
        "bob": subject(database, "bob", "Avery", pairs=bob_pairs),
    }


def test_merge_does_the_arithmetic_repoints_links_and_archives_the_source(database, graph):
    script = Scripted([{"op": "merge_subjects", "sources": [graph["averys"]], "target": graph["avery"],
                        "reason": "same person"}])
    report = run_pass(database, HashEmbedder(), script, "alice", policy=POLICY)
    assert report.status == "applied" and report.count("applied") == 1
    target, source = row(database, graph["avery"]), row(database, graph["averys"])
    assert target["created_at"] == T0 and target["last_seen_at"] == T0 + timedelta(days=9)
    assert target["reinforcement_count"] == 5 and target["links"] == 4
    assert target["description_text"] == "sister | lands Friday"
    assert source["archived_at"] is not None and str(source["merged_into"]) == graph["avery"]
    assert source["links"] == 2  # kept, for a restore
    assert "Avery's → **Avery**" in report.diff_markdown()


def test_rename_describe_archive_supersede_and_create(database, graph):
    script = Scripted([
        {"op": "rename_subject", "subject": graph["boots"], "name": "Merrell Moab Boots"},
        {"op": "update_description", "subject": graph["boots"], "description": "Bought in May for the Alps."},
        {"op": "archive_subject", "subject": graph["junk"], "reason": "a sentence fragment"},
        {"op": "create_subject", "name": "Alps Trip", "type": "event", "description": "July"},
        {"op": "supersede_subject", "old": graph["project"], "new": graph["avery"], "reason": "project ended"},
    ])
    report = run_pass(database, HashEmbedder(), script, "alice", policy=POLICY)
    assert report.count("applied") == 5, report.diff_markdown()
    boots = row(database, graph["boots"])
    assert boots["subject_text"] == "Merrell Moab Boots" and boots["description_text"] == "Bought in May for the Alps."
    assert list(boots["embedding"].to_numpy()) == pytest.approx(list(text_vector("Merrell Moab Boots")), abs=1e-6)
    junk, old = row(database, graph["junk"]), row(database, graph["project"])
    assert junk["archived_at"] and junk["archive_reason"] == "a sentence fragment"
    assert old["archived_at"] and str(old["superseded_by"]) == graph["avery"]
    with database.connect() as conn:
        created = conn.execute("SELECT * FROM subjects WHERE subject_text = 'Alps Trip'").fetchone()
        audit = conn.execute("SELECT * FROM dreaming_passes WHERE user_id = 'alice'").fetchone()
    assert created["user_id"] == "alice" and created["subject_type"] == "event"
    assert audit["applied"] == 5 and len(audit["mutations"]) == 5 and audit["summary"] == "scripted pass"


def test_invalid_and_cross_user_mutations_are_refused_without_blocking_the_rest(database, graph):
    before_bob = row(database, graph["bob"])
    script = Scripted([
        {"op": "merge_subjects", "sources": [graph["bob"]], "target": graph["avery"]},  # another user's id
        {"op": "archive_subject", "subject": graph["bob"], "reason": "x"},
        {"op": "archive_subject", "subject": graph["pinned"], "reason": "x"},
        {"op": "archive_subject", "subject": graph["core"], "reason": "x"},  # protected: importance 0.9
        {"op": "rename_subject", "subject": graph["pinned"], "name": "Other"},
        {"op": "merge_subjects", "sources": [graph["project"]], "target": graph["avery"]},  # drops Felts, Project
        {"op": "rename_subject", "subject": graph["boots"], "name": "Avery"},  # name taken
        {"op": "archive_subject", "subject": "00000000-0000-0000-0000-000000000000", "reason": "x"},
        {"op": "explode_subject", "subject": graph["boots"]},  # not an op
        {"op": "archive_subject", "subject": graph["junk"]},  # no reason
        {"op": "rename_subject", "subject": graph["boots"], "name": "Douro River Cruise"},  # not in its text
        {"op": "create_subject", "name": "Tagus Bridge", "type": "place"},  # in no subject's text
        {"op": "archive_subject", "subject": graph["junk"], "reason": "fragment"},  # the one valid mutation
    ])
    report = run_pass(database, HashEmbedder(), script, "alice", policy=POLICY)
    assert report.count("applied") == 1 and report.skipped == 12
    reasons = " ".join(o.reason for o in report.outcomes if o.status == "skipped")
    assert "'Douro River Cruise' is not grounded in 'Hiking Boots'" in reasons
    assert "'Tagus Bridge' is not grounded in any subject's name or descriptions" in reasons
    assert "unknown subject id" in reasons and "pinned" in reasons and "protected" in reasons
    assert "would drop ['felts', 'project']" in reasons and "belongs to another live subject" in reasons
    assert row(database, graph["bob"]) == before_bob
    assert row(database, graph["pinned"])["archived_at"] is None and row(database, graph["core"])["archived_at"] is None
    assert row(database, graph["junk"])["archived_at"] is not None


def test_a_database_error_rolls_the_whole_pass_back(database, graph, monkeypatch):
    save(database, "alice", 3, start=100)
    tokens_before = state(database)["tokens_since_last_pass"]
    calls = []
    real = apply_module.apply_one

    def flaky(conn, outcome, scope, embeddings):
        calls.append(outcome)
        if len(calls) == 2:
            conn.execute("SELECT 1 / 0")  # a real database error, mid-pass
        real(conn, outcome, scope, embeddings)

    monkeypatch.setattr(apply_module, "apply_one", flaky)
    script = Scripted([{"op": "archive_subject", "subject": graph["junk"], "reason": "x"},
                       {"op": "rename_subject", "subject": graph["boots"], "name": "Trail Shoes"}])
    with pytest.raises(PassFailedError):
        run_pass(database, HashEmbedder(), script, "alice", policy=POLICY)
    assert row(database, graph["junk"])["archived_at"] is None  # the first mutation was rolled back too
    assert row(database, graph["boots"])["subject_text"] == "Hiking Boots"
    assert state(database)["tokens_since_last_pass"] == tokens_before and state(database)["last_pass_id"] is None
    with database.connect() as conn:
        audit = conn.execute("SELECT status, failed, error FROM dreaming_passes").fetchall()
        dreams = conn.execute("SELECT count(*) AS n FROM memory_pairs WHERE session_id = %s", (DREAM_SESSION,)).fetchone()
    assert [a["status"] for a in audit] == ["failed"] and audit[0]["failed"] == 2 and "division" in audit[0]["error"]
    assert dreams["n"] == 0


def test_the_offline_provider_merges_name_variants_and_keeps_distinct_subjects(database, graph):
    bold = subject(database, "alice", "**Avery**", subject_type="person", pairs=graph["pairs"][5:6])
    report = run_pass(database, HashEmbedder(), OfflineConsolidator(), "alice", mode="compact", policy=POLICY)
    avery = row(database, graph["avery"])
    assert avery["archived_at"] is None and avery["subject_text"] == "Avery"
    for source in (graph["averys"], bold):
        assert str(row(database, source)["merged_into"]) == graph["avery"]
    assert row(database, graph["project"])["archived_at"] is None  # "Avery Felts Project" stays apart
    assert row(database, graph["junk"])["archive_reason"].startswith("junk")
    assert row(database, graph["core"])["archived_at"] is None and row(database, graph["bob"])["archived_at"] is None
    assert report.mode == "compact" and "Avery" in report.summary


def test_the_offline_pass_cleans_a_noisy_graph(database, graph):
    """What a noisy extractor leaves (greetings, generic words, clause pieces, plural variants) goes in
    one compact pass: archived restorably with the reason, or merged; real subjects stay."""
    pairs = graph["pairs"]
    noise = {name: subject(database, "alice", name, pairs=pairs[i:i + 1]) for i, name in enumerate(
        ["Wow", "Yep", "Great List", "Bowl Is Gorgeous", "Heard Great Things", "Countryside Just Recently"])}
    dog = subject(database, "alice", "Dog", pairs=pairs[:2])
    dogs = subject(database, "alice", "Dogs", pairs=pairs[2:3])
    kept = {name: subject(database, "alice", name, pairs=pairs[3:4])
            for name in ("Back Pain", "Lisbon", "Road Trip", "Dachau")}
    report = run_pass(database, HashEmbedder(), OfflineConsolidator(), "alice", mode="compact", policy=POLICY)
    for name, sid in noise.items():
        archived = row(database, sid)
        assert archived["archived_at"] is not None and archived["archive_reason"].startswith("junk"), name
    assert "generic" in row(database, noise["Wow"])["archive_reason"]
    assert "clause piece" in row(database, noise["Bowl Is Gorgeous"])["archive_reason"]
    assert str(row(database, dogs)["merged_into"]) == dog and row(database, dog)["links"] == 3
    assert all(row(database, sid)["archived_at"] is None for sid in kept.values())
    assert row(database, graph["boots"])["archived_at"] is None
    assert restore_subject(database, "alice", "default", noise["Wow"])["subject_text"] == "Wow"  # restorable
    assert report.status == "applied"


def test_a_name_merges_into_the_one_longer_name_of_its_type_it_shares_conversations_with(database, graph):
    pairs = graph["pairs"]
    rachel = subject(database, "alice", "Rachel", subject_type="person", pairs=pairs[0:2])
    rachel_green = subject(database, "alice", "Rachel Green", subject_type="person", pairs=pairs[1:3])
    golden_gate = subject(database, "alice", "Golden Gate", subject_type="place", pairs=pairs[3:4])
    park = subject(database, "alice", "Golden Gate Park", subject_type="place", pairs=pairs[4:5])  # no shared pair
    bread = subject(database, "alice", "Bread", subject_type="topic", pairs=pairs[0:1])
    dough = subject(database, "alice", "Bread Dough", subject_type="topic", pairs=pairs[0:1])  # topics: apart
    priya = subject(database, "alice", "Priya", subject_type="person", pairs=pairs[5:6])
    shah = subject(database, "alice", "Priya Shah", subject_type="person", pairs=pairs[5:6])
    patel = subject(database, "alice", "Priya Patel", subject_type="person", pairs=pairs[5:6])  # ambiguous
    report = run_pass(database, HashEmbedder(), OfflineConsolidator(), "alice", mode="compact", policy=POLICY)
    assert str(row(database, rachel)["merged_into"]) == rachel_green
    assert row(database, rachel_green)["links"] == 3 and row(database, rachel_green)["subject_text"] == "Rachel Green"
    for apart in (golden_gate, park, bread, dough, priya, shah, patel):
        assert row(database, apart)["merged_into"] is None and row(database, apart)["archived_at"] is None
    assert "Rachel → Rachel Green" in report.summary


def test_archived_subjects_restore_with_their_links(database, graph):
    run_pass(database, HashEmbedder(), Scripted([{"op": "archive_subject", "subject": graph["boots"], "reason": "x"}]),
             "alice", policy=POLICY)
    assert row(database, graph["boots"])["archived_at"] is not None
    restored = restore_subject(database, "alice", "default", graph["boots"])
    back = row(database, graph["boots"])
    assert restored["subject_text"] == "Hiking Boots" and back["archived_at"] is None and back["links"] == 1
    with pytest.raises(RestoreError):
        restore_subject(database, "alice", "default", graph["boots"])  # not archived any more
    with pytest.raises(RestoreError):
        restore_subject(database, "bob", "default", graph["boots"])  # not bob's


def test_unchanged_input_is_skipped_and_the_dreamer_remembers(database, graph):
    first = Scripted([], summary="I merged nothing; Avery appears twice, watch it.")
    assert run_pass(database, HashEmbedder(), first, "alice", policy=POLICY).status == "applied"
    again = Scripted([])
    assert run_pass(database, HashEmbedder(), again, "alice", policy=POLICY).status == "unchanged"
    assert again.seen == []  # the provider was not even asked
    forced = Scripted([])
    assert run_pass(database, HashEmbedder(), forced, "alice", force=True, policy=POLICY).status == "applied"
    assert any("Avery appears twice" in d for d in forced.seen[0].previous_dreams)
    assert "Avery appears twice" in forced.seen[0].render()


def test_the_counter_counts_concurrent_saves_once_and_a_pass_consumes_only_what_it_saw(database, graph):
    base = state(database)["tokens_since_last_pass"]
    starts = iter(range(1000, 2000, 100))
    results = run_concurrently(lambda: save(database, "alice", 5, start=next(starts)), 4)
    assert state(database)["tokens_since_last_pass"] == base + sum(r.tokens for r in results) > base
    seen = state(database)["tokens_since_last_pass"]
    assert save(database, "alice", 5, start=1000).inserted == 0  # the same pairs again: nothing new counted
    assert state(database)["tokens_since_last_pass"] == seen

    class SavesDuringThePass(Scripted):
        def propose(self, pass_input):
            self.late = save(database, "alice", 2, start=90_000)  # arrives while the pass reasons
            return super().propose(pass_input)

    provider = SavesDuringThePass([])
    report = run_pass(database, HashEmbedder(), provider, "alice", policy=POLICY)
    assert report.tokens_consumed == seen
    assert state(database)["tokens_since_last_pass"] == provider.late.tokens > 0  # still counted


def test_decay_sql_matches_the_rule(database, graph):
    policy = PassPolicy(backfill_on_first_run=False, decay=DecayPolicy(30, 45, 0.1))
    now = T0 + timedelta(days=120)
    before = row(database, graph["boots"])
    run_pass(database, HashEmbedder(), Scripted([]), "alice", policy=policy, now=now)
    expected, _ = decayed(before["importance"], before["last_seen_at"], None, now, policy.decay)
    assert row(database, graph["boots"])["importance"] == pytest.approx(expected, rel=1e-5)
    assert row(database, graph["pinned"])["importance"] == pytest.approx(expected, rel=1e-5)  # decay is not archive


@settings(max_examples=200, deadline=None)
@given(importance=st.floats(0.11, 1.0), seen_days=st.floats(0, 100),
       gaps=st.lists(st.floats(0.01, 40), min_size=1, max_size=12))
def test_decay_is_the_same_whatever_the_pass_schedule(importance, seen_days, gaps):
    policy = DecayPolicy(30, 45, 0.1)
    last_seen = T0 + timedelta(days=seen_days)
    now, value, through = T0, importance, None
    for gap in gaps:
        now = now + timedelta(days=gap)
        value, through = decayed(value, last_seen, through, now, policy)
    once, _ = decayed(importance, last_seen, None, now, policy)
    assert value == pytest.approx(once, rel=1e-9, abs=1e-12)
    assert value >= policy.floor


def test_the_sensor_fires_once_per_crossing(database, database_url, graph, monkeypatch):
    from dreaming_dagster.definitions import definitions_for
    from dreaming_dagster.defs.consolidation.sensors import token_budget_sensor
    from dreaming_dagster.defs.layout import Layout
    from dreaming_dagster.defs.resources import DreamingDatabaseResource, DreamingPolicyResource

    # The threshold comes from the policy resource (what the launchpad or code sets), not the environment.
    monkeypatch.setenv("DREAMING_DREAM_TOKEN_THRESHOLD", "999999999")
    resources = {"dreaming_db": DreamingDatabaseResource(database_url=database_url),
                 "dreaming_policy": DreamingPolicyResource(dream_token_threshold=3000)}
    with dg.instance_for_test() as instance:
        def evaluate():
            with dg.build_sensor_context(instance=instance, definitions=definitions_for(Layout()),
                                         resources=resources) as context:
                return token_budget_sensor(context)

        assert isinstance(evaluate(), dg.SkipReason)  # under the threshold
        starts = iter(range(5000, 6000, 100))
        run_concurrently(lambda: save(database, "alice", 10, start=next(starts)), 4)  # crosses it, concurrently
        first, second = evaluate(), evaluate()
        assert [r.partition_key for r in first.run_requests] == ["alice"]  # bob is under the threshold
        assert [r.run_key for r in second.run_requests] == [r.run_key for r in first.run_requests]
        assert first.dynamic_partitions_requests  # alice becomes a users partition
        run_pass(database, HashEmbedder(), Scripted([]), "alice", policy=POLICY)
        assert isinstance(evaluate(), dg.SkipReason)  # the pass consumed the crossing


def test_the_openai_provider_reads_its_directive_file_and_parses_tolerantly(database, graph, openai_stub, tmp_path):
    import json

    from dreaming_dagster.consolidation.consolidators import OpenAIConsolidator
    from dreaming_dagster.llm.client import JSONChatClient

    directive = tmp_path / "dream.md"
    directive.write_text("Consolidate carefully. Deployment-specific rules go here.")
    nulls = {k: None for k in ("sources", "target", "subject", "name", "description", "type", "old", "new")}
    reply = {"mutations": [nulls | {"op": "merge_subjects", "sources": [graph["averys"]], "target": graph["avery"],
                                    "reason": "possessive"},
                           nulls | {"op": "archive_subject", "subject": graph["junk"], "reason": "fragment"}],
             "summary": "Merged Avery's into Avery; archived a fragment."}
    openai_stub.chat_script["dream-model"] = [("reply", "<think>two Averys</think>Here you go:\n```json\n"
                                                        + json.dumps(reply) + "\n```")]
    client = JSONChatClient(model="dream-model", base_url=openai_stub.base_url, api_key="k", attempts_per_model=1)
    report = run_pass(database, HashEmbedder(), OpenAIConsolidator(client, directive), "alice", policy=POLICY)
    assert report.provider == "openai" and report.count("applied") == 2
    assert report.summary == "Merged Avery's into Avery; archived a fragment."
    (call,) = openai_stub.chat_calls("dream-model")
    assert call["messages"][0]["content"] == directive.read_text()
    assert graph["avery"] in call["messages"][1]["content"] and graph["bob"] not in call["messages"][1]["content"]
    assert str(row(database, graph["averys"])["merged_into"]) == graph["avery"]


def test_the_dream_consolidation_asset_shows_the_diff(database, database_url, graph):
    from dreaming_dagster.defs.consolidation.assets import dream_consolidation
    from dreaming_dagster.defs.resources import (
        DreamingDatabaseResource,
        DreamingPolicyResource,
        EmbedderResource,
        LLMResource,
    )

    subject(database, "alice", "**Avery**", subject_type="person")

    class Resource(EmbedderResource):
        def embedder(self):
            return HashEmbedder()

    resources = {"dreaming_db": DreamingDatabaseResource(database_url=database_url), "embedder": Resource(),
                 "llm": LLMResource(provider="offline"), "dreaming_policy": DreamingPolicyResource()}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("users", ["alice"])
        result = dg.materialize([dream_consolidation], partition_key="alice", instance=instance, resources=resources)
    assert result.success
    metadata = {k: v.value for k, v in result.asset_materializations_for_node("dream_consolidation")[0].metadata.items()}
    assert metadata["status"] == "applied" and metadata["applied"] >= 2 and metadata["provider"] == "offline"
    assert "### Merged" in metadata["diff"] and "**Avery**" in metadata["diff"] and "### Archived" in metadata["diff"]
