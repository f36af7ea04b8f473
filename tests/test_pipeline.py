"""The dreaming pipeline on real Postgres with the real local embedder and the offline providers."""

import os
import signal
import subprocess
import sys
import time

import pytest
from psycopg.types.json import Jsonb

from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
    sessions_in_date_order,
)
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import extracting, graph_reports, linking
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.storage.database import Database
from tests.conftest import ORACLE, PROJECT_ROOT, pair, run_concurrently

pytestmark = pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present")


def oracle_records(questions: int = 6, start: int = 0) -> list[dict]:
    chosen = list(iter_longmemeval_questions(ORACLE))[start:start + questions]
    return [r.raw for r in longmemeval_session_records(sessions_in_date_order(chosen)) if isinstance(r, LineRecord)]


def sync(database, embedder, user_id="alice"):
    return sync_user(user_id, database=database, embedder=embedder, extractor=OfflineExtractor(),
                     refiner=OfflineRefiner(), threshold=0.75)


def graph_signature(database: Database, user_id: str = "alice") -> set[tuple]:
    return graph_reports.graph_signature(database, user_id)


def assert_graph_is_clean(database: Database, user_id: str = "alice") -> None:
    health = graph_reports.graph_health(database, user_id)
    unfinished, duplicates = health["unfinished_pairs"], health["duplicate_subjects"]
    orphans, unlinked = health["orphan_pairs"], health["unlinked_subjects"]
    assert (unfinished, duplicates, orphans, unlinked) == (0, 0, 0, 0)


@pytest.fixture(scope="module")
def dreamed_slice(pg_admin_url, local_embedder) -> tuple[Database, object, set[tuple]]:
    """The 6-question oracle slice saved and dreamed in one uninterrupted sync, once for this module: the
    graph the kill, rebuild and idempotence tests must reproduce (their own databases start empty)."""
    from dreaming_dagster.storage import embedded

    database = Database(embedded.fresh_database_url(pg_admin_url, "slice"))
    save_pairs("alice", oracle_records(), database=database, embedder=local_embedder)
    return database, sync(database, local_embedder), graph_signature(database)


def test_sync_builds_a_clean_graph_and_is_idempotent(dreamed_slice, local_embedder):
    database, result, before = dreamed_slice
    assert result.extraction["pairs"] == len(oracle_records())
    assert result.merge["created"] > 0 and result.merge["merged"] > 0
    assert result.links["links"] >= result.merge["created"]
    assert result.refinement["refined"] > 0
    assert_graph_is_clean(database)
    graph = graph_reports.graph_stats(database, "alice")
    assert graph["key_subjects"] == graph["subjects"] > 0
    with database.connect() as conn:
        assert conn.execute("SELECT count(*) AS n FROM subjects WHERE description_text LIKE '%% | %%'"
                            ).fetchone()["n"] == 0  # every junk drawer was refined
    again = sync(database, local_embedder)  # changes nothing, so the shared graph stays as it was
    assert (again.extraction["pairs"], again.merge["pairs"], again.links["pairs"]) == (0, 0, 0)
    assert graph_signature(database) == before


def test_distinct_subjects_stay_apart_and_near_duplicates_merge(database, local_embedder):
    # The regression for the reference's acute nightmare: with the sort/threshold inverted, every one
    # of these would collapse into a single node.
    distinct = ["Lisbon", "Python Programming", "Marathon Training", "Sister Dana", "Sourdough Bread",
                "Tax Return", "Guitar Lessons", "Toyota Corolla"]
    save_pairs("alice", [pair(i, user_message=f"about {name}") for i, name in enumerate(distinct)],
               database=database, embedder=local_embedder, embed=False)
    with database.connect() as conn:
        for i, name in enumerate(distinct):
            conn.execute("UPDATE pair_stages s SET extracted_at = now(), extracted_subjects = %s::jsonb "
                         "FROM memory_pairs p WHERE p.id = s.pair_id AND p.turn_index = %s", (f'[{{"name": "{name}", "description": "d{i}", "type": "topic"}}]', i))
    stats = linking.merge_pending(database, local_embedder, "alice", "default")
    assert (stats.created, stats.merged) == (len(distinct), 0)
    save_pairs("alice", [pair(20, user_message="more marathon")], database=database, embedder=local_embedder)
    with database.connect() as conn:
        conn.execute("UPDATE pair_stages s SET extracted_at = now(), extracted_subjects = "
                     "'[{\"name\": \"Marathon Training Plan\", \"description\": \"week 3\", \"type\": \"activity\"}]'"
                     "::jsonb FROM memory_pairs p WHERE p.id = s.pair_id AND p.turn_index = 20")
    merged = linking.merge_pending(database, local_embedder, "alice", "default")
    assert (merged.created, merged.merged) == (0, 1)
    with database.connect() as conn:
        row = conn.execute("SELECT subject_text, description_text, reinforcement_count FROM subjects "
                           "WHERE subject_text LIKE 'Marathon%%'").fetchone()
    assert row == {"subject_text": "Marathon Training", "description_text": "d2 | week 3",
                   "reinforcement_count": 2}  # the first name wins; the description grows


def test_two_syncs_at_once_make_no_duplicates(database, local_embedder):
    save_pairs("alice", oracle_records(4), database=database, embedder=local_embedder)
    results = run_concurrently(lambda: sync(database, local_embedder), 2)
    assert_graph_is_clean(database)
    with database.connect() as conn:
        pairs = conn.execute("SELECT count(*) AS n FROM memory_pairs").fetchone()["n"]
    assert sum(r.extraction["pairs"] for r in results) == pairs  # each pair extracted exactly once


def test_the_janitor_relinks_stored_pairs_without_links(database, local_embedder):
    save_pairs("alice", oracle_records(2), database=database, embedder=local_embedder)
    sync(database, local_embedder)
    before = graph_signature(database)
    with database.connect() as conn:
        victim = conn.execute("SELECT pair_id FROM subject_memory_pair_links LIMIT 1").fetchone()["pair_id"]
        conn.execute("DELETE FROM subject_memory_pair_links WHERE pair_id = %s", (victim,))
    stats = linking.link_pending(database, local_embedder, "alice", "default")
    assert stats.janitor_reset == 1 and stats.links >= 1
    assert graph_signature(database) == before
    assert_graph_is_clean(database)


def test_one_users_sync_never_touches_another(database, local_embedder):
    save_pairs("alice", oracle_records(2), database=database, embedder=local_embedder)
    save_pairs("bob", oracle_records(2, start=10), database=database, embedder=local_embedder)
    sync(database, local_embedder, "alice")
    with database.connect() as conn:
        bob = conn.execute("SELECT count(*) FILTER (WHERE extracted_at IS NOT NULL) AS done, "
                           "(SELECT count(*) FROM subjects WHERE user_id = 'bob') AS subjects "
                           "FROM pair_stages WHERE user_id = 'bob'").fetchone()
        cross = conn.execute("SELECT count(*) AS n FROM subject_memory_pair_links l JOIN memory_pairs p "
                             "ON p.id = l.pair_id JOIN subjects s ON s.id = l.subject_id "
                             "WHERE p.user_id <> s.user_id OR l.user_id <> p.user_id").fetchone()["n"]
    assert bob == {"done": 0, "subjects": 0} and cross == 0


def test_a_rebuild_after_chunked_arrival_gives_the_graph_of_one_sync(database, local_embedder, dreamed_slice):
    records = oracle_records(6)
    for start in range(0, len(records), 25):  # arrives in chunks, dreamed after each
        save_pairs("alice", records[start:start + 25], database=database, embedder=local_embedder)
        sync(database, local_embedder)
    incremental = graph_signature(database)
    assert_graph_is_clean(database)
    # Salience reads the user's memory as it stood (extraction/entities.salient_in_memory), so pairs dreamed
    # as they arrive may keep other subjects than one sync of them all; every pair is linked either way.
    assert {pair for _, pairs in incremental for pair in pairs} == {pair for _, pairs in dreamed_slice[2]
                                                                      for pair in pairs}
    linking.clear_user_graph(database, "alice", "default")
    with database.connect() as conn:
        assert conn.execute("SELECT count(*) AS n FROM subjects").fetchone()["n"] == 0
    sync(database, local_embedder)
    assert graph_signature(database) == dreamed_slice[2]  # a rebuild is one sync of the same pairs
    assert_graph_is_clean(database)


def test_a_sync_killed_mid_way_completes_on_the_next_run(database_url, local_embedder, dreamed_slice):
    database = Database(database_url)
    save_pairs("alice", oracle_records(), database=database, embedder=local_embedder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMING_")}
    env.update(DREAMING_DATABASE_URL=database_url, DREAMING_LLM_PROVIDER="offline")
    process = subprocess.Popen([sys.executable, "-m", "dreaming_dagster.cli", "sync", "--user", "alice"],
                               env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, first_merged = time.monotonic() + 120, None
    with database.connect() as conn:
        while time.monotonic() < deadline:  # kill once some pairs are merged but not all are linked
            merged = conn.execute("SELECT count(subjects_merged_at) AS m, count(kg_stored_at) AS l, count(*) AS n "
                                  "FROM pair_stages").fetchone()
            if merged["m"] > 0 and merged["l"] < merged["n"]:
                break
            if merged["m"] > 0:  # the merge-to-link window can pass between two looks: then kill in what follows
                first_merged = first_merged or time.monotonic()
                if time.monotonic() - first_merged > 1:
                    break
            time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert merged["m"] > 0, "the sync never got to the merge stage"
    sync(database, local_embedder)
    assert_graph_is_clean(database)
    assert graph_signature(database) == dreamed_slice[2]  # the same data dreamed without interruption


def pair_subject_names(database: Database, user_id: str) -> list[tuple]:
    """Each pair (in order) with the names of the subjects its extracted subjects landed on."""
    with database.connect() as conn:
        names = {str(r["id"]): r["subject_text"] for r in conn.execute(
            "SELECT id, subject_text FROM subjects WHERE user_id = %s", (user_id,))}
        pairs = conn.execute("SELECT p.occurred_at, p.turn_index, p.user_message, s.extracted_subjects FROM memory_pairs p "
                             "JOIN pair_stages s ON s.pair_id = p.id "
                             "WHERE p.user_id = %s ORDER BY p.occurred_at, p.turn_index, p.user_message", (user_id,)).fetchall()
    return [(p["occurred_at"], p["turn_index"], p["user_message"],
             tuple((s["name"], names.get(s.get("subject_id"))) for s in p["extracted_subjects"] or []))
            for p in pairs]


def subject_rows(database: Database, user_id: str) -> list[tuple]:
    with database.connect() as conn:
        return sorted(tuple(r.values()) for r in conn.execute(
            "SELECT subject_text, description_text, subject_type, reinforcement_count, created_at, last_seen_at "
            "FROM subjects WHERE user_id = %s AND archived_at IS NULL", (user_id,)))


def test_the_set_based_merge_decides_as_the_one_at_a_time_merge(database, local_embedder):
    from tests.merge_reference import merge_one_at_a_time

    users = ("one-at-a-time", "set-based")
    far_away = local_embedder.embed(["a zebra grazing on the savanna"])[0]

    def arrive(records: list[dict]) -> None:
        for user in users:
            save_pairs(user, records, database=database, embedder=local_embedder, embed=False)
            extracting.extract_pending(database, OfflineExtractor(), user, "default")
            with database.connect() as conn, conn.transaction():
                # What plain extraction does not produce on its own: a name twice in one pair and a
                # near-variant beside it, a name whose live subject's embedding is far from the name (a
                # refined subject: only the exact-string guard catches it), and a retried pair that
                # already carries the id of a live subject.
                guarded = conn.execute(
                    "INSERT INTO subjects (user_id, kg_id, subject_text, description_text, embedding, created_at, "
                    "last_seen_at) VALUES (%s, 'default', %s, 'refined', %s, '2020-01-01', '2020-01-01') "
                    "RETURNING id",
                    (user, f"Tax Return {len(records)}", far_away)).fetchone()
                pending = conn.execute(
                    "SELECT p.id, s.extracted_subjects FROM memory_pairs p JOIN pair_stages s ON s.pair_id = p.id "
                    "WHERE p.user_id = %s AND s.subjects_merged_at IS NULL "
                    "AND jsonb_array_length(s.extracted_subjects) > 0 ORDER BY p.occurred_at, p.turn_index LIMIT 3", (user,)).fetchall()
                first, second, third = (p["extracted_subjects"] for p in pending)
                first += [dict(first[0]), {**first[0], "name": first[0]["name"] + "s", "description": "variant"}]
                second.append({"name": f"Tax Return {len(records)}", "description": "filed", "type": "topic"})
                third[0]["subject_id"] = str(guarded["id"])
                for p, subjects in zip(pending, (first, second, third), strict=True):
                    conn.execute("UPDATE pair_stages SET extracted_subjects = %s WHERE pair_id = %s",
                                 (Jsonb(subjects), p["id"]))

    arrive(oracle_records(4))
    assert pair_subject_names(database, users[0]) == pair_subject_names(database, users[1])  # same input
    reference = merge_one_at_a_time(database, local_embedder, users[0], "default", 0.75)
    set_based = linking.merge_pending(database, local_embedder, users[1], "default", threshold=0.75, batch_size=7)
    assert reference["created"] > 50 and reference["merged"] > 20 and reference["reused"] == 1
    assert (set_based.pairs, set_based.created, set_based.merged, set_based.reused) == (
        reference["pairs"], reference["created"], reference["merged"], reference["reused"])
    assert subject_rows(database, users[0]) == subject_rows(database, users[1])
    assert pair_subject_names(database, users[0]) == pair_subject_names(database, users[1])

    arrive(oracle_records(2, start=4))  # a second run merges into the subjects of the first
    reference = merge_one_at_a_time(database, local_embedder, users[0], "default", 0.75)
    set_based = linking.merge_pending(database, local_embedder, users[1], "default", threshold=0.75)
    assert reference["merged"] > 0
    assert (set_based.created, set_based.merged, set_based.reused) == (
        reference["created"], reference["merged"], reference["reused"])
    assert subject_rows(database, users[0]) == subject_rows(database, users[1])
    assert pair_subject_names(database, users[0]) == pair_subject_names(database, users[1])
