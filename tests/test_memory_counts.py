"""A graph's pair and live-subject counts kept by triggers (migration 0024) stay equal to a count of its rows
through every write — saves inline and deferred, a repeated save, one statement for many users, concurrent
savers, the merge stage's new subjects, consolidation's archive and restore, a deleted pair, a cleared graph —
and never move another user's; the profile refresh, the hub rule and recall read them (real Postgres)."""

from __future__ import annotations

import itertools

from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import graph_reports, linking
from dreaming_dagster.retrieval.profiles import refresh_profile
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from tests.conftest import bench_sql, pair, run_concurrently
from tests.test_subject_writes import EMBEDDER, NAMES, dream_and_link


def stored(database: Database, user_id: str) -> tuple[int, int] | None:
    with database.connect(vectors=False) as conn:
        row = conn.execute("SELECT pair_count, live_subject_count FROM memory_counts "
                           "WHERE user_id = %s AND kg_id = 'default'", (user_id,)).fetchone()
    return None if row is None else (row["pair_count"], row["live_subject_count"])


def subject_id(database: Database, user_id: str, name: str) -> str:
    with database.connect(vectors=False) as conn:
        return conn.execute("SELECT id FROM subjects WHERE user_id = %s AND subject_text = %s",
                            (user_id, name)).fetchone()["id"]


def test_the_counts_follow_every_write_and_stay_with_their_user(database):
    database.ensure_schema(EMBEDDER.spec)
    save_pairs("lea", [pair(n) for n in range(3)], database=database, embedder=EMBEDDER)
    save_pairs("kai", [pair(n, session="deferred") for n in range(4)], database=database, embedder=EMBEDDER,
               embed=False)
    save_pairs("kai", [pair(n, session="deferred") for n in range(6)], database=database, embedder=EMBEDDER)
    assert stored(database, "kai") == (6, 0) and stored(database, "lea") == (3, 0)  # the repeats add nothing
    kai_pairs = dream_and_link(database, "kai", [NAMES, NAMES[:2], [NAMES[3]]])
    assert stored(database, "kai") == (9, 4) and graph_reports.memory_count_drift(database) == []
    lea = stored(database, "lea")

    # Consolidation archives a subject and brings it back; archiving it twice counts once.
    hawaii = {"id": subject_id(database, "kai", "Hawaii trip"), "user_id": "kai", "kg_id": "default"}
    with database.connect() as conn:
        for _ in range(2):
            conn.execute(load_sql("dreaming/archive_subject"),
                         hawaii | {"reason": "decayed", "merged_into": None, "superseded_by": None})
        assert stored(database, "kai") == (9, 3)
        conn.execute(load_sql("dreaming/restore_subject"), hawaii)
        assert stored(database, "kai") == (9, 4)
        # A deleted pair (its links cascade) and one statement inserting for several users.
        conn.execute("DELETE FROM memory_pairs WHERE id = %s", (kai_pairs[0],))
        conn.execute(bench_sql("bulk_pairs_for_users"), {"users": 3})
    assert stored(database, "kai") == (8, 4) and graph_reports.memory_count_drift(database) == []

    linking.clear_user_graph(database, "kai", "default")
    assert stored(database, "kai") == (8, 0) and stored(database, "lea") == lea
    assert graph_reports.memory_count_drift(database) == [] and graph_reports.memory_count_drift(database, "kai") == []

    # The profile refresh copies them; recall of a user never dreamed reads them live.
    refresh_profile(database, "kai", "default")
    with database.connect() as conn:
        profile = conn.execute("SELECT memory_count, subject_count FROM recall_profiles WHERE user_id = 'kai'").fetchone()
        live = conn.execute(load_sql("retrieval/user_profile"), {
            "user_id": "lea", "kg_id": "default", "as_of": None, "session_id": None,
            "query": EMBEDDER.embed(["hawaii"])[0]}).fetchone()
    assert (profile["memory_count"], profile["subject_count"]) == (8, 0)
    assert (live["memory_count"], live["subject_count"]) == lea


def test_a_drifted_count_is_reported(database):
    """The drift check can fail: a count changed behind the triggers' back is found, for its user only."""
    database.ensure_schema(EMBEDDER.spec)
    save_pairs("mo", [pair(n) for n in range(2)], database=database, embedder=EMBEDDER)
    save_pairs("ned", [pair(n) for n in range(2)], database=database, embedder=EMBEDDER)
    with database.connect() as conn:
        conn.execute("UPDATE memory_counts SET pair_count = 5 WHERE user_id = 'mo'")
    drift = graph_reports.memory_count_drift(database)
    assert [(d["user_id"], d["pairs"], d["stored_pairs"]) for d in drift] == [("mo", 2, 5)]
    assert graph_reports.memory_count_drift(database, "ned") == []


def test_concurrent_savers_of_overlapping_batches_count_each_pair_once(database):
    database.ensure_schema(EMBEDDER.spec)
    records = [pair(n, session=f"c{n % 5}") for n in range(40)]
    seeds = itertools.count()

    def saver() -> int:
        start = 7 * next(seeds) % len(records)
        mine = records[start:] + records[:start]  # the same pairs, each saver in another order
        return save_pairs("zoe", mine, database=database, embedder=EMBEDDER, embed=False).inserted

    assert sum(run_concurrently(saver, 6)) == 40
    assert stored(database, "zoe") == (40, 0) and graph_reports.memory_count_drift(database) == []


def test_migration_0024_counts_what_was_stored_before_it(database_url, monkeypatch):
    from dreaming_dagster.storage import database as database_module
    from dreaming_dagster.storage.database import load_migrations

    every = load_migrations()
    monkeypatch.setattr(database_module, "load_migrations", lambda: [m for m in every if m.version < "0024"])
    old = Database(database_url)
    old.ensure_schema(EMBEDDER.spec)
    dream_and_link(old, "mo", [NAMES, NAMES[:3]])
    save_pairs("ned", [pair(n) for n in range(5)], database=old, embedder=EMBEDDER)
    with old.connect() as conn:
        conn.execute(load_sql("dreaming/archive_subject"), {
            "id": subject_id(old, "mo", "Lisbon hotels"), "user_id": "mo", "kg_id": "default", "reason": "decayed",
            "merged_into": None, "superseded_by": None})
    old.close()
    monkeypatch.setattr(database_module, "load_migrations", lambda: every)
    new = Database(database_url)
    new.ensure_schema(EMBEDDER.spec)
    assert stored(new, "mo") == (2, 3) and stored(new, "ned") == (5, 0)
    assert graph_reports.memory_count_drift(new) == []
    new.close()
