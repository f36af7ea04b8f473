"""Forgetting racing other work: an erasure that takes a graph's lock before a sync, a stage or a pass that
listed the graph leaves nothing of the user behind; a forget racing the indexing of deferred pairs neither
deadlocks nor leaves their words in the index."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

import dreaming_dagster as dd
from dreaming_dagster.consolidation.consolidators import OfflineConsolidator
from dreaming_dagster.consolidation.passes import PassPolicy, run_pass
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.memory.forgetting import erase_user, forget_session
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import STAGE_BY_ASSET, StageInputs, run_stage, sync_user
from dreaming_dagster.storage import embedded, user_graphs

LOCK_WAIT_S = 30


def waiting_for_locks(database, count: int) -> None:
    """Wait until ``count`` sessions wait for an advisory lock (the graph lock or the word index's)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while time.monotonic() < deadline:
        with database.connect(vectors=False) as conn:
            if conn.execute("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                            ).fetchone()["n"] >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"{count} session(s) never waited for an advisory lock")


def pairs_of(user_id: str, n: int = 4, *, tag: str = "s") -> list[dict]:
    return [{"session_id": f"{tag}{i // 2}", "user_message": f"My cousin {user_id} moved to Lisbon ({i}).",
             "assistant_message": "Lisbon is lovely.", "occurred_at": f"2026-01-0{i + 1}T10:00:00Z"}
            for i in range(n)]


def started(target) -> tuple[threading.Thread, list]:
    errors: list = []

    def run():
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - the test re-raises it
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def erased_before(database, user_id: str, work) -> None:
    """Hold the user's graph lock; queue an erasure, then ``work`` (which has listed the graph already);
    release: the erasure runs first, ``work`` after it on the erased graph."""
    with user_graphs.user_graph_lock(database, user_id, "default"):
        eraser, erase_errors = started(lambda: erase_user(user_id, database=database))
        waiting_for_locks(database, 1)
        worker, work_errors = started(work)
        waiting_for_locks(database, 2)
    for thread in (eraser, worker):
        thread.join(timeout=120)
    assert not erase_errors and not work_errors, erase_errors + work_errors


def test_a_sync_that_takes_the_lock_after_an_erasure_writes_nothing_naming_the_user(database, database_url,
                                                                                   local_embedder):
    user = f"racer-{uuid.uuid4().hex[:8]}"
    save_pairs(user, pairs_of(user), database=database, embedder=local_embedder)
    erased_before(database, user, lambda: sync_user(user, database=database, embedder=local_embedder,
                                                    extractor=OfflineExtractor(), refiner=OfflineRefiner()))
    assert user not in embedded.data_dump(database_url)


def test_a_stage_and_a_pass_after_an_erasure_write_nothing_naming_the_user(database, database_url,
                                                                          local_embedder):
    user = f"racer-{uuid.uuid4().hex[:8]}"
    save_pairs(user, pairs_of(user), database=database, embedder=local_embedder)
    sync_user(user, database=database, embedder=local_embedder, extractor=OfflineExtractor(),
              refiner=OfflineRefiner())
    # The last stage (it refreshes the recall profile), as a Dagster step runs it.
    inputs = StageInputs(database, user, embedder=local_embedder, refiner=OfflineRefiner())
    erased_before(database, user, lambda: run_stage(STAGE_BY_ASSET["refined_subjects"], inputs, ["default"], {}))
    assert user not in embedded.data_dump(database_url)

    save_pairs(user, pairs_of(user), database=database, embedder=local_embedder)
    sync_user(user, database=database, embedder=local_embedder, extractor=OfflineExtractor(),
              refiner=OfflineRefiner())
    reports = []
    erased_before(database, user, lambda: reports.append(run_pass(
        database, local_embedder, OfflineConsolidator(), user, mode="compact", force=True,
        policy=PassPolicy(backfill_on_first_run=False))))
    assert reports[0].status == "unchanged" and reports[0].pass_id is None
    assert user not in embedded.data_dump(database_url)


def lexemes(database, user_id: str) -> list[str]:
    with database.connect(vectors=False) as conn:
        return [row["lexeme"] for row in conn.execute(
            "SELECT lexeme FROM user_lexemes WHERE user_id = %s", (user_id,))]


def test_a_forget_waits_for_an_indexing_that_holds_the_word_lock_and_leaves_no_word(database, local_embedder):
    """A sync indexing deferred pairs holds the word index's lock while it adds their postings (which lock the
    pairs' rows): a forget must queue behind it, not take the rows first (the other order deadlocks), and the
    words it indexed go with the pairs."""
    records = [{"session_id": "gone", "user_message": f"the word quux{n}zzy is mine", "assistant_message": "ok",
                "occurred_at": "2026-01-01T10:00:00Z"} for n in range(3)]
    ids = save_pairs("alice", records, embed=False, database=database, embedder=local_embedder).pair_ids
    assert lexemes(database, "alice") == []  # deferred: not indexed yet
    with psycopg.connect(database.url, autocommit=False) as indexer:
        indexer.execute("SELECT pg_advisory_xact_lock(word_index_lock_class(), word_index_lock_bucket('alice', "
                        "'default'))")
        forgetter, errors = started(lambda: forget_session("alice", "gone", database=database))
        waiting_for_locks(database, 1)
        # The indexing goes on: its postings lock the pairs' rows (a key-share lock), which the forget must not
        # hold yet.
        indexer.execute("SET LOCAL lock_timeout = '5s'")
        indexer.execute("SELECT lexical_index_apply(%s::uuid[], 1)", (ids,))
        indexer.commit()
    forgetter.join(timeout=60)
    assert not errors, errors
    assert dd.list_pairs("alice", database=database).pairs == []
    assert [w for w in lexemes(database, "alice") if "quux" in w] == []


def test_forgetting_sessions_while_a_sync_indexes_deferred_pairs(database, embedder16):
    """The race as it happens: deferred pairs, each with a word of its own, a sync indexing them, and their
    sessions forgotten meanwhile; every forget answers, and no forgotten word stays in the index."""
    for attempt, delay in enumerate((0.05, 0.2, 0.4)):
        user = f"deferred-{attempt}"
        records = [{"session_id": f"s{n % 6}", "user_message": f"canary word qz{attempt}x{n}word here",
                    "assistant_message": "noted", "occurred_at": "2026-01-01T10:00:00Z"} for n in range(300)]
        save_pairs(user, records, embed=False, database=database, embedder=embedder16)
        syncer, sync_errors = started(lambda u=user: sync_user(u, database=database, embedder=embedder16,
                                                               extractor=OfflineExtractor(),
                                                               refiner=OfflineRefiner()))
        time.sleep(delay)
        for session in range(6):
            forget_session(user, f"s{session}", database=database)
        syncer.join(timeout=300)
        assert not sync_errors, sync_errors
        assert dd.list_pairs(user, database=database).pairs == []
        assert [w for w in lexemes(database, user) if w.startswith(f"qz{attempt}")] == []


@pytest.mark.parametrize("layout_buckets", [4, 0], ids=["hash buckets", "a partition a user"])
def test_users_erased_while_syncs_passes_and_dagster_runs_race_leave_no_byte_anywhere(cli_env, database_url,
                                                                                      pg_admin_url, layout_buckets):
    """The canary: four users erased (two by `erase_user`, two by `user_memory_job`) while their fast-path
    syncs, consolidation passes and Dagster's runs (of their bucket, or of their own partition) race the
    erasures, at least one erasure overlapping another piece of its user's work. Afterwards no line of a
    data-only dump of the memory database names them or their cousin, and none of Dagster's storage (Postgres,
    as the product runs it, the sensors' ticks recorded) names them; the bystanders' memory is whole and
    dreamed."""
    import json
    import os
    import subprocess
    import sys

    from dreaming_dagster.pipeline import buckets
    from dreaming_dagster.process_defaults import default_database
    from tests.conftest import PROJECT_ROOT

    buckets.write_layout(default_database(), layout_buckets)
    dagster_url = embedded.fresh_database_url(pg_admin_url, "dagster").replace("postgresql://", "postgresql+psycopg2://", 1)
    completed = subprocess.run([sys.executable, "-m", "tests.erasure_canary_scenario"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=900,
                               env={**os.environ, "CANARY_DAGSTER_STORAGE_URL": dagster_url,
                                    "DREAMING_DREAM_TOKEN_THRESHOLD": "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    seen = json.loads(completed.stdout)
    assert seen["errors"] == [] and seen["pairs_left_at_second_erasure"] == 0
    assert seen["overlapping_erasures"] >= 1, seen  # the race happened
    assert seen["bystander_pairs"] == {"bystander-a": 9, "bystander-b": 9}
    memory = embedded.data_dump(database_url)
    dagster = embedded.data_dump(dagster_url.replace("postgresql+psycopg2://", "postgresql://", 1))
    for victim in (f"canary-victim-{n}" for n in range(4)):
        assert victim not in memory and victim not in dagster, victim
    for cousin in ("Zorb0lax", "Zorb1lax", "Zorb2lax", "Zorb3lax"):
        assert cousin.lower() not in memory.lower() and cousin.lower() not in dagster.lower(), cousin
    assert "bystander-a" in memory and "Zorbalax" in memory  # the dump does hold what was not erased
