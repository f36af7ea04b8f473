"""Forgetting, proven: a canary saved, dreamed, consolidated and recalled is gone from every table (a data-only
pg_dump) and from every recall process after an erasure or a pair's deletion; other users and tenants are
untouched; a forget racing a sync is serialised; a kill -9 mid-erase leaves nothing or a re-runnable state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import dreaming_dagster as dd
from dreaming_dagster.consolidation.consolidators import OfflineConsolidator
from dreaming_dagster.consolidation.passes import PassPolicy, run_pass
from dreaming_dagster.embeddings import _CACHES
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.memory.forgetting import erase_user, forget_pairs, forget_session, word_patterns
from dreaming_dagster.pipeline import graph_reports
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.storage import embedded, user_graphs
from dreaming_dagster.storage.records import DREAM_SESSION, InvalidInputError
from tests.conftest import PROJECT_ROOT, run_concurrently

CANARY = "Zorblaxian"  # a word no pipeline, model or test writes except where the canary pairs put it

LIFE = [
    ("I love baking sourdough bread on Sundays with my sister Rachel.", "A Sunday bake sounds lovely."),
    ("We drove to Yosemite with my brother Marcus last spring.", "Half Dome must have been stunning."),
    ("My dog Max chewed through another pair of running shoes.", "Beagles do love shoes."),
    ("I started a pottery class at Clay Studio downtown.", "Wheel throwing takes patience."),
    ("Our book club is reading Middlemarch this month.", "A long but rewarding novel."),
    ("I switched my commute to cycling along the river path.", "Cycling is great exercise."),
    ("My grandmother turns ninety next week; we are planning a garden party.", "Ninety is a milestone."),
    ("I finally fixed the leaking kitchen faucet myself.", "Plumbing victories feel great."),
    ("Priya and I are training for a half marathon in October.", "Build the long runs slowly."),
    ("I adopted a tabby kitten named Pickles from the shelter.", "Pickles is a perfect name."),
    ("My team at work moved to a four-day week.", "Many teams report better focus."),
    ("We repainted the nursery a soft sage green.", "Sage is calming for a nursery."),
]


def exchanges(user_tag: str, canary_at: tuple[int, ...] = ()) -> list[dict]:
    """Twelve different pairs over three sessions; those at ``canary_at`` tell of the canary cousin."""
    records = []
    for n in range(12):
        said, reply = LIFE[n % len(LIFE)]
        if n in canary_at:
            said, reply = (f"My cousin {CANARY} Quibbleworth moved to Lisbon and opened {CANARY} Bakery ({n}).",
                           f"{CANARY} Bakery in Lisbon sounds wonderful.")
        records.append({"session_id": f"{user_tag}-s{n // 4}", "turn_index": n % 4, "user_message": f"{said} ({n})",
                        "assistant_message": reply, "occurred_at": f"2026-0{1 + n // 4}-1{n % 4}T10:00:00Z"})
    return records


def dreamed(database, embedder, user_id: str, records: list[dict], kg_id: str = "default") -> list[str]:
    saved = save_pairs(user_id, records, kg_id, database=database, embedder=embedder)
    sync_user(user_id, database=database, embedder=embedder, extractor=OfflineExtractor(), refiner=OfflineRefiner(),
              kg_id=kg_id)
    return saved.pair_ids


def rankings(recaller: Recaller, user_id: str, kg_id: str = "default") -> list[list[str]]:
    """The pairs each question recalls, its query not remembered: a remembered query moves the user's profile
    and so the ranker's weights, which can swap two close pairs when the rankings are repeated."""
    questions = ["who bakes bread with me?", "where did we drive?", "what did the dog chew?", "which book?",
                 "how do I commute?", f"where is {CANARY} now?"]
    return [[m.pair_id for m in recaller.recall(user_id, q, 10, kg_id=kg_id, remember_query=False).memories]
            for q in questions]


def cached_texts() -> set[str]:
    return {text for cache in list(_CACHES.values()) for text in cache._vectors}


def test_an_erased_users_canary_is_in_no_table_and_no_recall_process(database, database_url, local_embedder):
    victim, bystander = f"victim-{uuid.uuid4().hex[:8]}", "bystander"
    dreamed(database, local_embedder, victim, exchanges("v", canary_at=(1, 5, 9)))
    dreamed(database, local_embedder, bystander, exchanges("b"))
    run_pass(database, local_embedder, OfflineConsolidator(), victim, mode="compact",
             policy=PassPolicy(backfill_on_first_run=False))
    # Two recall processes' worth of caches, both holding the canary's postings.
    serving, other = Recaller(database, local_embedder), Recaller(database, local_embedder)
    for recaller in (serving, other):
        found = recaller.recall(victim, f"{CANARY} bakery", 3).memories
        assert CANARY in found[0].user_message and recaller.lexical_postings.holds_user(victim)
    assert any(CANARY in text for text in cached_texts())  # subject names the merge stage embedded
    assert CANARY in embedded.data_dump(database_url) and victim in embedded.data_dump(database_url)
    before, graph_before = rankings(serving, bystander), graph_reports.graph_signature(database, bystander)
    # The user first forgets one pair and a session (forget_log names them meanwhile), then everything.
    kept = [p for p in dd.list_pairs(victim, database=database, limit=50).pairs if p["session_id"] == "v-s0"]
    assert forget_pairs(victim, [kept[0]["pair_id"]], database=database).pairs == 1
    assert forget_session(victim, "v-s2", database=database).pairs >= 4  # and a summary naming the cousin
    assert victim in embedded.data_dump(database_url)
    left = len(dd.list_pairs(victim, database=database, limit=50).pairs)

    erased = erase_user(victim, database=database)

    assert erased.pairs == left >= 6 and erased.subjects_deleted > 0 and erased.kg_ids == ["default"]
    dump = embedded.data_dump(database_url)
    assert CANARY.lower() not in dump.lower() and victim not in dump
    assert not any(CANARY in text for text in cached_texts())
    assert rankings(serving, bystander) == before and graph_reports.graph_signature(database, bystander) == graph_before
    other.recall(bystander, "sourdough bread", 3)  # the other process's next recall drops what it held
    assert not serving.lexical_postings.holds_user(victim) and not other.lexical_postings.holds_user(victim)
    assert serving.recall(victim, f"{CANARY} bakery", 3).memories == []
    assert graph_reports.memory_count_drift(database) == []
    again = erase_user(victim, database=database)  # idempotent
    assert again.pairs == 0 and again.kg_ids == []
    for recaller in (serving, other):
        recaller.close()


def test_a_forgotten_pairs_canary_is_gone_and_the_rest_still_recalled(database, database_url, local_embedder):
    ids = dreamed(database, local_embedder, "alice", exchanges("a", canary_at=(5,)))
    run_pass(database, local_embedder, OfflineConsolidator(), "alice", mode="compact",
             policy=PassPolicy(backfill_on_first_run=False))
    recaller = Recaller(database, local_embedder)
    assert CANARY in recaller.recall("alice", f"{CANARY} bakery Lisbon", 3).memories[0].user_message
    before = rankings(recaller, "alice")

    result = forget_pairs("alice", [ids[5]], database=database)

    assert result.pairs == 1 and result.pair_ids == [ids[5]] and result.missing == []
    assert result.subjects_deleted >= 1  # the cousin and the bakery had no other pair
    dump = embedded.data_dump(database_url)
    assert CANARY.lower() not in dump.lower()
    # The same process, right after: its held postings are re-read (versions moved); the pair never comes back.
    after = rankings(recaller, "alice")
    assert all(ids[5] not in ranked and len(ranked) == 10 for ranked in after)
    assert [ranked[0] for ranked in after[:5]] == [ranked[0] for ranked in before[:5]]  # the rest still found
    kept = [p for p in dd.list_pairs("alice", database=database, limit=50).pairs if p["session_id"] != DREAM_SESSION]
    assert len(kept) == 11
    health = graph_reports.graph_health(database, "alice")
    assert health["orphan_pairs"] == 0 and health["duplicate_links"] == 0 and graph_reports.memory_count_drift(database) == []
    recaller.close()


class Scripted:
    """A consolidation provider that proposes what the test says."""

    provider = "scripted"

    def __init__(self, mutations: list[dict], summary: str):
        self.mutations, self.summary = mutations, summary

    def propose(self, pass_input):
        from dreaming_dagster.consolidation.consolidators import Proposal

        return Proposal(mutations=self.mutations, summary=self.summary)


def test_what_a_pass_wrote_from_forgotten_text_is_undone_and_what_it_wrote_before_it_stays(database, database_url,
                                                                                          local_embedder):
    """A pass reads the canary pair (its summary, and Rachel, whom it also names) and writes the canary's word
    into Rachel's description and name, into Marcus's (no link to that pair) and into a new subject; forgetting
    the pair undoes all of it and forgets the pass's dream pair. A pass that never read the forgotten pair keeps
    what it wrote."""
    dreamed(database, local_embedder, "alice", exchanges("a"))
    (canary,) = dreamed(database, local_embedder, "alice", [
        {"session_id": "a-s8", "user_message": f"My sister Rachel is friends with {CANARY} Quibbleworth now.",
         "assistant_message": "A new friend!", "occurred_at": "2026-05-01T10:00:00Z"}])
    names = {s["name"]: s["subject_id"] for s in dd.list_subjects("alice", limit=500, database=database)}
    rachel, marcus = names["Rachel"], names["Marcus"]
    given = dd.read_subject("alice", marcus, database=database)["description"]
    report = run_pass(database, local_embedder, Scripted([
        {"op": "update_description", "subject": rachel, "description": f"Sister of the user; friends with {CANARY}."},
        {"op": "rename_subject", "subject": rachel, "name": f"Rachel {CANARY}"},
        {"op": "update_description", "subject": marcus, "description": f"The brother; a trip with {CANARY}."},
        {"op": "rename_subject", "subject": marcus, "name": f"Trip With {CANARY}"},
        {"op": "create_subject", "name": f"{CANARY} Family", "type": "other", "description": "a family"},
    ], summary=f"Linked Rachel to the {CANARY} family."), "alice", policy=PassPolicy(backfill_on_first_run=False))
    assert report.count("applied") == 5, report.diff_markdown()
    later = dreamed(database, local_embedder, "alice", [
        {"session_id": "a-s9", "user_message": "Priya brought her new puppy Biscuit to the park.",
         "assistant_message": "Puppies love parks.", "occurred_at": "2026-06-01T10:00:00Z"}])
    # The later pair came after the pass: forgetting it leaves what the pass wrote.
    assert forget_pairs("alice", later, database=database).pairs == 1
    assert CANARY in dd.read_subject("alice", marcus, database=database)["description"]

    result = forget_pairs("alice", [canary], database=database, embedder=local_embedder)

    assert result.pairs == 2  # the canary pair and the pass's dream pair, which retold it
    assert CANARY.lower() not in embedded.data_dump(database_url).lower()
    assert dd.read_subject("alice", rachel, database=database)["name"] == "Rachel"  # linked to it, renamed by the pass
    restored = dd.read_subject("alice", marcus, database=database)
    assert restored["name"] == "Marcus" and restored["description"] == given
    with database.connect() as conn:
        vector = conn.execute("SELECT embedding FROM subjects WHERE id = %s", (marcus,)).fetchone()["embedding"]
    assert list(vector.to_numpy()) == pytest.approx(list(local_embedder.embed(["Marcus"])[0]), abs=1e-5)
    assert not [s for s in dd.list_subjects("alice", limit=500, include_archived=True, database=database)
                if CANARY in s["name"]]
    health = graph_reports.graph_health(database, "alice")
    assert health["orphan_pairs"] == 0 and graph_reports.memory_count_drift(database) == []


def test_a_user_who_forgot_everything_piecemeal_is_named_nowhere_after_erasure(database, database_url,
                                                                               local_embedder):
    """Every pair already forgotten (no graph left to erase): the erasure still scrubs the audit trail's rows
    that name the user, in every tenant (the operator's erasure) or in one (a tenant's)."""
    for kg in ("acme", "globex"):
        dreamed(database, local_embedder, "piecemeal", exchanges("p")[:4], kg_id=kg)
        assert forget_session("piecemeal", "p-s0", kg, database=database).pairs == 4
    assert "piecemeal" in embedded.data_dump(database_url)
    assert erase_user("piecemeal", "acme", database=database).pairs == 0
    assert user_graphs.user_kgs(database, "piecemeal") == []
    with database.connect() as conn:
        named = conn.execute("SELECT kg_id FROM forget_log WHERE user_id = 'piecemeal'").fetchall()
    assert [row["kg_id"] for row in named] == ["globex"]  # a tenant's erasure leaves the other tenant's audit
    erase_user("piecemeal", database=database)
    assert "piecemeal" not in embedded.data_dump(database_url)


def test_a_short_subject_name_inside_other_words_forgets_no_unrelated_summary(database, local_embedder):
    """A deleted subject "Pea" does not forget a dream summary that says "speak" (nor redact its pass): names
    match as whole words."""
    ids = save_pairs("alice", [
        {"session_id": "s1", "user_message": "I planted Pea seeds in the garden today.", "assistant_message": "Nice.",
         "occurred_at": "2026-01-01T10:00:00Z"},
        {"session_id": "s1", "user_message": "My friend Ana will speak at eBay next week.", "assistant_message": "Wow.",
         "occurred_at": "2026-01-02T10:00:00Z"}], database=database, embedder=local_embedder).pair_ids
    with database.connect() as conn:
        pea = conn.execute("INSERT INTO subjects (user_id, kg_id, subject_text, subject_type, description_text) "
                           "VALUES ('alice', 'default', 'Pea', 'thing', 'Pea') RETURNING id").fetchone()["id"]
        conn.execute("INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id) "
                     "VALUES (%s, %s, 'alice', 'default')", (pea, ids[0]))
    summaries = save_pairs("alice", [
        {"session_id": DREAM_SESSION, "user_message": "Dream summary: Ana will speak at a conference.",
         "assistant_message": "Noted.", "occurred_at": "2026-01-03T10:00:00Z"},
        {"session_id": DREAM_SESSION, "user_message": "Dream summary: the pea seeds went in.",
         "assistant_message": "Noted.", "occurred_at": "2026-01-03T11:00:00Z"}],
        database=database, embedder=local_embedder).pair_ids
    with database.connect() as conn:
        for n, summary in enumerate(("Ana will speak at eBay", "Pea seeds noted")):
            conn.execute("INSERT INTO dreaming_passes (user_id, kg_id, mode, provider, status, started_at, summary) "
                         "VALUES ('alice', 'default', 'compact', 'offline', 'applied', now() + %s * interval '1 s', %s)",
                         (n, summary))

    result = forget_pairs("alice", [ids[0]], database=database)

    assert result.subjects_deleted == 1 and result.pairs == 2  # the pair and the summary naming Pea
    assert set(result.pair_ids) == {ids[0], summaries[1]}
    left = {p["user_message"] for p in dd.list_pairs("alice", database=database, limit=50).pairs}
    assert "Dream summary: Ana will speak at a conference." in left
    with database.connect() as conn:
        passes = [row["summary"] for row in conn.execute(
            "SELECT summary FROM dreaming_passes WHERE user_id = 'alice' ORDER BY started_at")]
    assert passes[0] == "Ana will speak at eBay" and passes[1].startswith("[redacted")
    # A name full of pattern characters is matched as written, never read as a pattern.
    with database.connect() as conn:
        matches = [conn.execute("SELECT lower(%s) ~ ANY (%s::text[]) AS hit", (text, word_patterns(["C++ (v2.0)"])))
                   .fetchone()["hit"] for text in ("I use C++ (v2.0) daily", "I use C++ (v2x0) daily", "cc++ (v2.0)")]
    assert matches == [True, False, False]


def test_a_name_takes_the_plural_english_gives_it_and_no_other_word(database, local_embedder):
    """-es only after s, x, z, ch, sh and o: "Tim" is not in "times", nor "Hop" in "hopes"."""
    cases = {"Tim": (["Tim called", "tims", "Tim's dog"], ["three times", "timely"]),
             "Rob": (["Rob's car", "two robs"], ["new robes"]),
             "Kit": (["a kit", "kits"], ["flying kites"]),
             "Hop": (["one hop", "hops"], ["my hopes"]),
             "Box": (["boxes", "box"], ["boxers"]),
             "Church": (["the churches", "church"], ["churchesque"]),
             "Potato": (["potatoes", "potatos"], ["potatoey"]),
             "Bus": (["buses", "bus"], ["busy"])}
    database.ensure_schema(local_embedder.spec)
    with database.connect() as conn:
        for name, (said, not_said) in cases.items():
            hits = {text: conn.execute("SELECT lower(%s) ~ ANY (%s::text[]) AS hit",
                                       (text, word_patterns([name]))).fetchone()["hit"] for text in said + not_said}
            assert hits == {**dict.fromkeys(said, True), **dict.fromkeys(not_said, False)}, name


def test_a_deleted_subjects_inflected_mentions_are_forgotten_too(database, local_embedder):
    """Names are stored singular ("my two dogs" → "Dog"): a summary or an audit that says "dogs", "Dog's" or
    "Adidas sneakers" names the deleted subject and goes with it; "hotdogs" does not."""
    ids = save_pairs("alice", [
        {"session_id": "s1", "user_message": f"My two dogs chewed my Adidas sneakers ({n}).",
         "assistant_message": "Oh no.", "occurred_at": f"2026-01-0{n + 1}T10:00:00Z"} for n in range(2)],
        database=database, embedder=local_embedder).pair_ids
    with database.connect() as conn:
        for name in ("Dog", "Adidas Sneaker", "Berry"):
            subject = conn.execute("INSERT INTO subjects (user_id, kg_id, subject_text, subject_type, description_text) "
                                   "VALUES ('alice', 'default', %s, 'thing', %s) RETURNING id", (name, name)
                                   ).fetchone()["id"]
            conn.execute("INSERT INTO subject_memory_pair_links (subject_id, pair_id, user_id, kg_id) "
                         "VALUES (%s, %s, 'alice', 'default')", (subject, ids[0]))
    said = ["Dream summary: the dogs love the park.", "Dream summary: new adidas sneakers, again.",
            "Dream summary: picked berries.", "Dream summary: the Dog's vet visit.", "Dream summary: hotdogs."]
    summaries = save_pairs("alice", [
        {"session_id": DREAM_SESSION, "user_message": text, "assistant_message": "Noted.",
         "occurred_at": f"2026-01-1{n}T10:00:00Z"} for n, text in enumerate(said)],
        database=database, embedder=local_embedder).pair_ids
    audits = ["Merged Dogs into Pet", "Renamed Adidas Sneakers", "dogs' walk", "ate hotdogs", "Raspberry jam"]
    with database.connect() as conn:
        for n, summary in enumerate(audits):
            conn.execute("INSERT INTO dreaming_passes (user_id, kg_id, mode, provider, status, started_at, summary) "
                         "VALUES ('alice', 'default', 'compact', 'offline', 'applied', now() + %s * interval '1 s', %s)",
                         (n, summary))

    result = forget_pairs("alice", [ids[0]], database=database)

    assert result.subjects_deleted == 3
    assert set(result.pair_ids) == {ids[0], *summaries[:4]}  # every inflection; "hotdogs" is another word
    with database.connect() as conn:
        passes = [row["summary"] for row in conn.execute(
            "SELECT summary FROM dreaming_passes WHERE user_id = 'alice' ORDER BY started_at")]
    assert [p.startswith("[redacted") for p in passes] == [True, True, True, False, False]


def test_forget_a_session_and_what_is_refused(database, local_embedder):
    ids = dreamed(database, local_embedder, "alice", exchanges("a"))
    gone = forget_session("alice", "a-s1", database=database)
    assert gone.pairs == 4 and set(gone.pair_ids) == set(ids[4:8])
    assert {p["session_id"] for p in dd.list_pairs("alice", database=database).pairs} == {"a-s0", "a-s2"}
    again = forget_pairs("alice", [ids[4], ids[0]], database=database)  # one already gone
    assert again.pairs == 1 and again.missing == [ids[4]]
    for call, field in ((lambda: forget_pairs("alice", ["not-a-uuid"], database=database), "pair_ids[0]"),
                        (lambda: forget_pairs("alice", [], database=database), "pair_ids"),
                        (lambda: forget_pairs("alice", "abc", database=database), "pair_ids"),
                        (lambda: forget_session("alice", " ", database=database), "session_id"),
                        (lambda: erase_user("bad id", database=database), "user_id"),
                        (lambda: erase_user("alice", "bad kg!", database=database), "kg_id")):
        with pytest.raises(InvalidInputError) as error:
            call()
        assert error.value.field == field
    assert len(dd.list_pairs("alice", database=database).pairs) == 7  # nothing lost to the refused calls


def test_a_tenant_erasing_alice_leaves_another_tenants_alice(database, local_embedder):
    acme = dreamed(database, local_embedder, "alice", exchanges("a", canary_at=(2,)), kg_id="acme")
    dreamed(database, local_embedder, "alice", exchanges("g", canary_at=(2,)), kg_id="globex")
    globex_graph = {row for row in graph_reports.graph_signature(database, "alice")}
    # A tenant cannot forget another tenant's pair by its id: it is simply not found there.
    assert forget_pairs("alice", [acme[0]], "globex", database=database).missing == [acme[0]]
    erase_user("alice", "acme", database=database)
    left = dd.list_pairs("alice", "globex", database=database, limit=50).pairs
    assert len(left) == 12 and dd.list_pairs("alice", "acme", database=database).pairs == []
    assert graph_reports.graph_signature(database, "alice") <= globex_graph and graph_reports.graph_signature(database, "alice")
    assert user_graphs.user_kgs(database, "alice") == ["globex"]


def test_forgets_from_threads_and_a_fresh_process(database, database_url, local_embedder):
    ids = dreamed(database, local_embedder, "alice", exchanges("a"))
    chunks = iter([ids[0:3], ids[3:6], ids[6:9]])
    lock = threading.Lock()

    def forget_next():
        with lock:
            chunk = next(chunks)
        return forget_pairs("alice", chunk, database=database).pairs

    assert sum(run_concurrently(forget_next, 3)) == 9
    code = ("import json, dreaming_dagster as dd; "
            f"print(json.dumps(dd.forget_pairs('alice', ['{ids[9]}']).as_dict()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120,
                         env={**os.environ, "DREAMING_DATABASE_URL": database_url}, check=True).stdout
    assert '"pairs": 1' in out
    assert len(dd.list_pairs("alice", database=database).pairs) == 2 and graph_reports.memory_count_drift(database) == []


def test_a_forget_waits_for_the_graph_lock_and_a_racing_sync_leaves_a_consistent_graph(database, local_embedder):
    old = dreamed(database, local_embedder, "alice", exchanges("a", canary_at=(0, 1, 2, 3)))
    # Held lock: the forget waits for it (the sync that holds it finishes first).
    done = threading.Event()
    with user_graphs.user_graph_lock(database, "alice", "default"):
        worker = threading.Thread(target=lambda: (forget_pairs("alice", old[:2], database=database), done.set()))
        worker.start()
        assert not done.wait(0.5)
    worker.join(timeout=60)
    assert done.is_set()
    # A forget of dreamed pairs racing a sync of new pairs about the same cousin, both orders, several times.
    dreamed_before = old[2:4]  # each round forgets pairs the round before dreamed
    for round_ in range(3):
        fresh = save_pairs("alice", [dict(r, session_id=f"race-{round_}") for r in exchanges("r", canary_at=(0, 1))[:4]],
                           database=database, embedder=local_embedder).pair_ids
        threads = [threading.Thread(target=lambda: sync_user("alice", database=database, embedder=local_embedder,
                                                             extractor=OfflineExtractor(), refiner=OfflineRefiner())),
                   threading.Thread(target=lambda t=dreamed_before: forget_pairs("alice", t, database=database))]
        for thread in (threads if round_ % 2 else threads[::-1]):
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        dreamed_before = fresh[:2]
        sync_user("alice", database=database, embedder=local_embedder, extractor=OfflineExtractor(),
                  refiner=OfflineRefiner())
        health = graph_reports.graph_health(database, "alice")
        assert health["orphan_pairs"] == 0 and health["duplicate_links"] == 0 and health["duplicate_subjects"] == 0
        assert graph_reports.memory_count_drift(database) == []
        with database.connect() as conn:
            # No subject survives without a pair (no resurrection), and each counts its real links.
            assert conn.execute("SELECT count(*) AS n FROM subjects s WHERE s.user_id = 'alice' AND "
                                "s.link_count <> (SELECT count(*) FROM subject_memory_pair_links l "
                                "WHERE l.subject_id = s.id)").fetchone()["n"] == 0
            assert conn.execute("SELECT count(*) AS n FROM subjects WHERE user_id = 'alice' AND link_count = 0 "
                                "AND archived_at IS NULL").fetchone()["n"] == 0


def test_a_kill_9_mid_erase_leaves_everything_and_a_rerun_erases(database, database_url, local_embedder):
    dreamed(database, local_embedder, "victim", exchanges("v", canary_at=(3,)))
    before = embedded.data_dump(database_url)
    script = ("import os, dreaming_dagster as dd; dd.erase_user('victim')")
    with database.connect() as watcher, database.connect() as blocker, blocker.transaction():
        # Holding one of the victim's pairs makes the erasure block half-way: its word index and subjects deleted
        # in its open transaction, its pairs' delete waiting.
        blocker.execute("SELECT id FROM memory_pairs WHERE user_id = 'victim' LIMIT 1 FOR UPDATE")
        process = subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT_ROOT,
                                   env={**os.environ, "DREAMING_DATABASE_URL": database_url},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # Another connection: a transaction reads pg_stat_activity once.
            waiting = watcher.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                      "AND query LIKE '%%DELETE FROM memory_pairs%%'").fetchone()["n"]
            if waiting:
                break
            time.sleep(0.1)
        assert waiting, "the erasure never reached its pairs' delete"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    time.sleep(0.5)  # the killed client's backend notices and rolls back
    assert _rows(embedded.data_dump(database_url)) == _rows(before)  # nothing was deleted
    erase_user("victim", database=database)
    dump = embedded.data_dump(database_url)
    assert "victim" not in dump and CANARY.lower() not in dump.lower()


def _rows(dump: str) -> list[str]:
    """A dump's data lines, without the lines that change by themselves (sequence positions, forget_log)."""
    return sorted(line for line in dump.splitlines() if line and not line.startswith(("SELECT pg_catalog", "--")))
