"""Subject writes that change neither a name nor a vector rewrite no index (migration 0022): the merge's
reinforcements are HOT updates, the refinement queue follows its predicate through every kind of write, the
centroid's age moves only with vectors and liveness, and the fast path's reads of the graph go through
indexes (real Postgres, the stages' own functions and statements)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import linking, merging, refining
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage import user_graphs
from dreaming_dagster.storage.database import Database
from tests.conftest import pair
from tests.retrieval_fixtures import HashEmbedder

EMBEDDER = HashEmbedder()
START = datetime(2026, 3, 1, tzinfo=UTC)
NAMES = ["Hawaii trip", "sourdough baking", "marathon training", "Lisbon hotels"]


def merge_pair(conn: psycopg.Connection, user_id: str, n: int, names: list[str]) -> merging.MergePlan:
    """Stage 3 for one pair whose extraction found ``names``, through the functions merge_pending runs."""
    pairs = [{"id": str(uuid.uuid4()), "occurred_at": START + timedelta(hours=n),
              "extracted_subjects": [{"name": name, "description": f"{name}, mentioned in pair {n}", "type": "topic"}
                                     for name in names]}]
    vectors = dict(zip(names, EMBEDDER.embed(names), strict=True))
    known = linking.read_batch_candidates(conn, pairs, vectors, user_id, "default", merging.DEFAULT_THRESHOLD)
    plan = merging.plan_batch_merge(pairs, known, lambda: str(uuid.uuid4()), merging.DEFAULT_THRESHOLD)
    linking.write_merge_plan(conn, plan, vectors, user_id, "default")
    return plan


def subject_updates(conn: psycopg.Connection) -> tuple[int, int]:
    """(updates, HOT updates) of subjects in the connection's current transaction."""
    row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
                       "WHERE relname = 'subjects'").fetchone()
    return row["n_tup_upd"], row["n_tup_hot_upd"]


def queue_matches_predicate(conn: psycopg.Connection) -> tuple[set, set]:
    queued = {r["subject_id"] for r in conn.execute("SELECT subject_id FROM subject_refinement_queue")}
    pending = {r["id"] for r in conn.execute(
        "SELECT id FROM subjects WHERE archived_at IS NULL AND description_text LIKE '% | %'")}
    return queued, pending


@pytest.fixture
def graph(database: Database) -> Database:
    database.ensure_schema(EMBEDDER.spec)
    return database


def test_reinforcing_known_subjects_rewrites_no_index(graph):
    """A pair merged into subjects the graph holds appends to their descriptions and moves last_seen_at and
    the reinforcement count. None of that is in an index, so every one of those updates is HOT (no new
    entry in the HNSW index or any other), and the subjects enter the refinement queue. The links'
    statement adds to their link counts and marks them key subjects in the same row versions (migration
    0025), HOT too."""
    saved = save_pairs("ana", [pair(n) for n in range(4)], database=graph, embedder=EMBEDDER)
    with graph.connect() as conn, conn.transaction():
        created = merge_pair(conn, "ana", 0, NAMES)
    assert created.created == len(NAMES)
    for n, pair_id in enumerate(saved.pair_ids[1:], start=1):
        with graph.connect() as conn, conn.transaction():
            plan = merge_pair(conn, "ana", n, NAMES)
            ids = sorted(plan.reinforced)
            conn.execute(load_sql("pipeline/insert_links"), {"pair_ids": [pair_id] * len(ids), "subject_ids": ids,
                                                             "user_id": "ana", "kg_id": "default"})
            updates, hot = subject_updates(conn)
            keys = conn.execute("SELECT count(*) FILTER (WHERE is_key_subject) AS n FROM subjects "
                                "WHERE user_id = 'ana'").fetchone()["n"]
        assert plan.merged == len(NAMES) and len(ids) == len(NAMES)
        # Four reinforcements and four link counts (migration 0023), the first time round with the four
        # subjects becoming key subjects in the same versions (0025).
        assert updates == 2 * len(NAMES) and hot == updates, (n, updates, hot)
        assert keys == len(NAMES)
    with graph.connect() as conn:
        queued, pending = queue_matches_predicate(conn)
        descriptions = [r["description_text"] for r in conn.execute(
            "SELECT description_text FROM subjects WHERE user_id = 'ana' ORDER BY subject_text")]
    assert queued == pending and len(queued) == len(NAMES)
    assert all(d.count(" | ") == 3 for d in descriptions)  # the merge did write: four mentions each


def test_a_new_vector_or_liveness_moves_the_centroid_age_and_nothing_else_does(graph):
    with graph.connect() as conn, conn.transaction():
        merge_pair(conn, "bea", 0, NAMES[:2])
    with graph.connect() as conn:
        def ages() -> dict[str, datetime]:
            return {r["subject_text"]: r["vector_changed_at"] for r in conn.execute(
                "SELECT subject_text, vector_changed_at FROM subjects WHERE user_id = 'bea'")}

        born = ages()
        merge_pair(conn, "bea", 1, NAMES[:2])  # reinforcement: description, last_seen_at, count
        conn.execute("UPDATE subjects SET hub_since = now(), importance = 0.5 WHERE user_id = 'bea'")
        assert ages() == born
        conn.execute("UPDATE subjects SET embedding = %s WHERE user_id = 'bea' AND subject_text = %s",
                     (EMBEDDER.embed(["Big Island trip"])[0], NAMES[0]))
        conn.execute("UPDATE subjects SET archived_at = now() WHERE user_id = 'bea' AND subject_text = %s", (NAMES[1],))
        now = ages()
    assert all(now[name] > born[name] for name in NAMES[:2])


def test_the_refinement_queue_follows_every_kind_of_subject_write(graph):
    """Inserted pending, reinforced, refined, archived, restored, renamed by a dream pass, deleted: after each
    statement the queue holds exactly the live subjects whose description holds " | "."""
    vector = EMBEDDER.embed(["x"])[0]
    with graph.connect() as conn:
        def check() -> None:
            queued, pending = queue_matches_predicate(conn)
            assert queued == pending

        conn.execute("INSERT INTO subjects (id, user_id, kg_id, subject_text, description_text, embedding) "
                     "SELECT gen_random_uuid(), 'cai', 'default', 'subject ' || n, "
                     "CASE WHEN n %% 2 = 0 THEN 'one | two' ELSE 'one' END, %s "
                     "FROM generate_series(1, 8) AS n", (vector,))
        check()
        conn.execute("UPDATE subjects SET description_text = description_text || ' | more' WHERE user_id = 'cai' "
                     "AND subject_text IN ('subject 1', 'subject 3')")
        check()
        conn.execute("UPDATE subjects SET description_text = 'a clean narrative' WHERE subject_text = 'subject 2'")
        check()
        conn.execute("UPDATE subjects SET archived_at = now() WHERE subject_text IN ('subject 4', 'subject 5')")
        check()
        conn.execute("UPDATE subjects SET archived_at = NULL WHERE subject_text = 'subject 4'")
        check()
        conn.execute("UPDATE subjects SET subject_text = 'renamed' WHERE subject_text = 'subject 6'")
        check()
        conn.execute("DELETE FROM subjects WHERE subject_text IN ('subject 8', 'subject 1')")
        check()
        assert len(queue_matches_predicate(conn)[0]) == 3  # subjects 3, 4 and the renamed 6


def test_stage_five_reads_the_queue_and_refines_what_it_lists(graph):
    with graph.connect() as conn, conn.transaction():
        merge_pair(conn, "dee", 0, NAMES)
        merge_pair(conn, "dee", 1, NAMES[:2])
    with graph.connect() as conn:
        batch = conn.execute(load_sql("pipeline/pending_refinement_batch"),
                             {"user_id": "dee", "kg_id": "default", "limit": 50, "skip_ids": []}).fetchall()
        other = conn.execute(load_sql("pipeline/pending_refinement_batch"),
                             {"user_id": "eve", "kg_id": "default", "limit": 50, "skip_ids": []}).fetchall()
    assert sorted(r["subject_text"] for r in batch) == sorted(NAMES[:2]) and other == []
    refined = refining.refine_pending(graph, OfflineRefiner(), EMBEDDER, "dee", "default")
    with graph.connect() as conn:
        queued, pending = queue_matches_predicate(conn)
    assert refined.refined == 2 and queued == pending == set()


# Names as refinement writes them (title case): the offline refiner keeps these.
TITLED = ["Hawaii Trip", "Sourdough Baking", "Marathon Training", "Lisbon Hotels"]


class RenamingRefiner(OfflineRefiner):
    """The offline refiner (which keeps a canonical name), except that it renames the first of TITLED."""

    def refine(self, name: str, description: str, said: str = ""):
        refined = super().refine(name, description, said)
        return refined.model_copy(update={"name": "Big Island trip"}) if name == TITLED[0] else refined


class CountingEmbedder(HashEmbedder):
    def __init__(self):
        self.asked: list[str] = []

    def embed(self, texts):
        self.asked.extend(texts)
        return super().embed(texts)


def test_refinement_embeds_only_new_names_and_a_kept_name_keeps_its_vector(graph):
    """A refined subject that keeps its name keeps its stored vector (no embedding asked for it), so its
    update changes no indexed column and is HOT; a renamed subject gets its new name's vector."""
    with graph.connect() as conn, conn.transaction():
        merge_pair(conn, "hal", 0, TITLED)
        merge_pair(conn, "hal", 1, TITLED)
    query = "SELECT subject_text, embedding, vector_changed_at FROM subjects WHERE user_id = 'hal'"
    with graph.connect() as conn:
        before = {r["subject_text"]: r for r in conn.execute(query)}
    embedder = CountingEmbedder()
    refined = refining.refine_pending(graph, RenamingRefiner(), embedder, "hal", "default")
    with graph.connect() as conn:
        after = {r["subject_text"]: r for r in conn.execute(query)}
    assert refined.refined == len(TITLED) and refined.renamed == 1
    assert embedder.asked == ["Big Island trip"]
    for name in TITLED[1:]:
        assert np.array_equal(after[name]["embedding"].to_numpy(), before[name]["embedding"].to_numpy())
        assert after[name]["vector_changed_at"] == before[name]["vector_changed_at"]
    assert np.allclose(after["Big Island trip"]["embedding"].to_numpy(), EMBEDDER.embed(["Big Island trip"])[0])
    assert after["Big Island trip"]["vector_changed_at"] > before[TITLED[0]]["vector_changed_at"]

    # The statement itself: a kept name (no vector sent) is a HOT update; a new name is not (it is indexed).
    with graph.connect() as conn, conn.transaction():
        ids = {r["subject_text"]: r["id"] for r in conn.execute("SELECT id, subject_text FROM subjects "
                                                                  "WHERE user_id = 'hal'")}
        for name, new_name, vector, hot in ((TITLED[1], TITLED[1], None, 1), (TITLED[2], "Marathon plans",
                                            EMBEDDER.embed(["Marathon plans"])[0], 0)):
            updates_before, hot_before = subject_updates(conn)
            conn.execute(load_sql("pipeline/apply_refinements"), {
                "user_id": "hal", "kg_id": "default", "ids": [ids[name]], "subject_texts": [new_name],
                "description_texts": [f"{new_name}: a narrative."], "embeddings": [vector]})
            updates, hot_updates = subject_updates(conn)
            assert (updates - updates_before, hot_updates - hot_before) == (1, hot), name


@pytest.mark.parametrize("model, index, condition", [
    ("pipeline/held_subject_names", "subjects_live_lower_name_idx", "lower(subject_text) = ANY"),
    ("pipeline/flag_hubs", "subjects_hubs_idx", "kg_id = 'default'"),
    ("retrieval/refresh_profile", "subjects_user_kg_vector_changed_idx", "vector_changed_at >"),
    ("pipeline/pending_refinement_batch", "subject_refinement_queue_user_kg_idx", "user_id = 'fay'"),
])
def test_the_fast_paths_reads_of_the_graph_can_use_their_indexes(graph, model, index, condition):
    """Each statement a new pair runs that used to read every subject of the user can be answered from its
    index, searched by what the pair needs (EXPLAIN with sequential scans priced out): an edit that loses
    the index, or reads all of the user's entries in it, fails here."""
    with graph.connect() as conn, conn.transaction():
        for n in range(3):
            merge_pair(conn, "fay", n, NAMES)
        # A user with a graph worth an index (a handful of rows is read whole whatever the SQL says).
        conn.execute("INSERT INTO subjects (id, user_id, kg_id, subject_text, description_text, embedding) "
                     "SELECT gen_random_uuid(), 'fay', 'default', 'topic ' || n, 'one', %s "
                     "FROM generate_series(1, 2000) AS n", (EMBEDDER.embed(["topic"])[0],))
        conn.execute("ANALYZE subjects")
        conn.execute("INSERT INTO recall_profiles (user_id, kg_id, memory_count, subject_count, centroid_at) "
                     "VALUES ('fay', 'default', 0, 0, now() - interval '1 day')")
        conn.execute("SET LOCAL enable_seqscan = off")
        params = {"user_id": "fay", "kg_id": "default", "names": ["hawaii trip", "rome"], "hub_share": 0.25,
                  "hub_min_pairs": 50, "subject_ids": [], "centroid_tolerance": 0.01, "limit": 50, "skip_ids": []}
        plan = [r["QUERY PLAN"] for r in conn.execute("EXPLAIN " + load_sql(model), params)]
    scans = [n for n, line in enumerate(plan) if f" using {index} on " in line or f"Index Scan on {index} " in line]
    assert scans, "\n".join(plan)
    searched = [plan[n + 1] for n in scans if "Index Cond:" in plan[n + 1]]
    assert any(condition in line for line in searched), "\n".join(plan)


def test_migration_0022_queues_what_was_pending_and_renews_the_centroids(database_url, monkeypatch):
    """A graph dreamed before 0022: its junk-drawer subjects are queued by the migration, and every
    profile's centroid is recomputed on its next refresh (rows from before read vector_changed_at as
    -infinity, so no centroid may be judged against them)."""
    from dreaming_dagster.retrieval.profiles import refresh_profile
    from dreaming_dagster.storage import database as database_module
    from dreaming_dagster.storage.database import load_migrations

    every = load_migrations()
    monkeypatch.setattr(database_module, "load_migrations", lambda: [m for m in every if m.version < "0022"])
    old = Database(database_url)
    old.ensure_schema(EMBEDDER.spec)
    with old.connect() as conn, conn.transaction():
        merge_pair(conn, "gus", 0, NAMES)
        merge_pair(conn, "gus", 1, NAMES[:3])
        conn.execute("INSERT INTO recall_profiles (user_id, kg_id, memory_count, subject_count, subject_centroid, "
                     "refreshed_at, centroid_at) VALUES ('gus', 'default', 2, 4, %s, now(), now())",
                     (EMBEDDER.embed(["old centroid"])[0],))
    old.close()
    monkeypatch.setattr(database_module, "load_migrations", lambda: every)
    new = Database(database_url)
    new.ensure_schema(EMBEDDER.spec)
    with new.connect() as conn:
        queued, pending = queue_matches_predicate(conn)
        assert len(pending) == 3 and queued == pending
        assert conn.execute("SELECT centroid_at FROM recall_profiles WHERE user_id = 'gus'").fetchone()["centroid_at"] is None
        assert conn.execute("SELECT count(*) FILTER (WHERE vector_changed_at = '-infinity') AS old, count(*) AS n "
                            "FROM subjects").fetchone() == {"old": 4, "n": 4}
    refresh_profile(new, "gus", "default")
    with new.connect() as conn:
        renewed = conn.execute("SELECT centroid_at, subject_centroid FROM recall_profiles WHERE user_id = 'gus'").fetchone()
    assert renewed["centroid_at"] is not None
    assert not np.allclose(renewed["subject_centroid"].to_numpy(), EMBEDDER.embed(["old centroid"])[0])
    new.close()


def test_a_users_graphs_are_listed_by_a_skip_scan(graph):
    """user_graphs.user_kgs lists exactly the user's graphs, in order, and never reads every pair: its plan descends
    an index once a graph (a SELECT DISTINCT read all of a 100,000-pair user's index entries, 203 ms)."""
    for user, graphs in (("ivy", ["work", "default", "Zed", "a-b"]), ("jon", ["home"])):
        for n, kg in enumerate(graphs * 3):
            save_pairs(user, [pair(n)], kg_id=kg, database=graph, embedder=EMBEDDER, embed=False)
    assert set(user_graphs.user_kgs(graph, "ivy")) == {"work", "default", "Zed", "a-b"}
    assert user_graphs.user_kgs(graph, "jon") == ["home"] and user_graphs.user_kgs(graph, "kim") == []
    with graph.connect() as conn:
        ordered = [r["kg_id"] for r in conn.execute(
            "SELECT DISTINCT kg_id FROM memory_pairs WHERE user_id = 'ivy' ORDER BY kg_id")]
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN (ANALYZE, COSTS OFF) " + load_sql("storage/user_kgs"), {"user_id": "ivy"}))
    assert user_graphs.user_kgs(graph, "ivy") == ordered  # the order of the database's collation, as before
    assert "Recursive Union" in plan and "Seq Scan on memory_pairs" not in plan, plan


def link_count_mismatches(conn: psycopg.Connection) -> list[dict]:
    """Subjects whose stored link count differs from their links (migration 0023)."""
    return conn.execute("SELECT s.id, s.link_count, count(l.pair_id) AS links FROM subjects s "
                        "LEFT JOIN subject_memory_pair_links l ON l.subject_id = s.id "
                        "GROUP BY s.id HAVING s.link_count <> count(l.pair_id)").fetchall()


def dream_and_link(database: Database, user_id: str, names_per_pair: list[list[str]]) -> list:
    """Save a pair per entry and merge and link it as stages 3 and 4 do; the saved pair ids."""
    saved = save_pairs(user_id, [pair(n) for n in range(len(names_per_pair))], database=database, embedder=EMBEDDER)
    for n, (pair_id, names) in enumerate(zip(saved.pair_ids, names_per_pair, strict=True)):
        with database.connect() as conn, conn.transaction():
            plan = merge_pair(conn, user_id, n, names)
            ids = [s["subject_id"] for _, subjects in plan.pair_subjects for s in subjects]
            conn.execute(load_sql("pipeline/insert_links"), {"pair_ids": [pair_id] * len(ids), "subject_ids": ids,
                                                             "user_id": user_id, "kg_id": "default"})
    return saved.pair_ids


def subject_rows(conn: psycopg.Connection, user_id: str) -> dict[str, dict]:
    return {r["subject_text"]: r for r in conn.execute(
        "SELECT id, subject_text, link_count, updated_at, vector_changed_at FROM subjects WHERE user_id = %s",
        (user_id,))}


def test_a_subjects_link_count_follows_every_write_of_its_links(graph):
    """subjects.link_count equals the subject's links through the link stage, a retried link statement,
    consolidation's copy of a merge's links, a deleted pair's cascade and a cleared graph; adding links
    moves neither updated_at (what consolidation reads as changed) nor the centroid's age; and one user's
    writes never change another's counts."""
    dream_and_link(graph, "lea", [NAMES[:2], NAMES[1:3]])
    kai_pairs = dream_and_link(graph, "kai", [NAMES, NAMES[:2], NAMES[1:3], [NAMES[0]], NAMES[2:]])
    with graph.connect() as conn:
        assert link_count_mismatches(conn) == []
        lea_before = subject_rows(conn, "lea")
        before = subject_rows(conn, "kai")
        assert {name: row["link_count"] for name, row in before.items()} == {
            "Hawaii trip": 3, "sourdough baking": 3, "marathon training": 3, "Lisbon hotels": 2}
        # A retried link statement adds nothing; a new link adds one, and the subject is otherwise untouched.
        hawaii = before["Hawaii trip"]["id"]
        for retry in (kai_pairs[:1], kai_pairs[:1] + kai_pairs[4:]):
            conn.execute(load_sql("pipeline/insert_links"), {"pair_ids": retry, "subject_ids": [hawaii] * len(retry),
                                                             "user_id": "kai", "kg_id": "default"})
        after = subject_rows(conn, "kai")
        assert after["Hawaii trip"]["link_count"] == 4 and link_count_mismatches(conn) == []
        assert all((after[n]["updated_at"], after[n]["vector_changed_at"]) ==
                   (before[n]["updated_at"], before[n]["vector_changed_at"]) for n in before)
        # Consolidation merging sourdough baking into Hawaii trip points its pairs at Hawaii too (one is new).
        conn.execute(load_sql("dreaming/copy_links"), {"target": hawaii, "sources": [before["sourdough baking"]["id"]],
                                                       "user_id": "kai", "kg_id": "default"})
        assert subject_rows(conn, "kai")["Hawaii trip"]["link_count"] == 5 and link_count_mismatches(conn) == []
        conn.execute("DELETE FROM memory_pairs WHERE id = %s", (kai_pairs[0],))
        assert {name: row["link_count"] for name, row in subject_rows(conn, "kai").items()} == {
            "Hawaii trip": 4, "sourdough baking": 2, "marathon training": 2, "Lisbon hotels": 1}
        assert link_count_mismatches(conn) == []
    linking.clear_user_graph(graph, "kai", "default")
    with graph.connect() as conn:
        assert subject_rows(conn, "kai") == {} and link_count_mismatches(conn) == []
        assert subject_rows(conn, "lea") == lea_before


def test_migration_0023_counts_the_links_stored_before_it(database_url, monkeypatch):
    """A graph linked before 0023 gets its counts from the migration, without moving updated_at."""
    from dreaming_dagster.storage import database as database_module
    from dreaming_dagster.storage.database import load_migrations

    every = load_migrations()
    monkeypatch.setattr(database_module, "load_migrations", lambda: [m for m in every if m.version < "0023"])
    old = Database(database_url)
    old.ensure_schema(EMBEDDER.spec)
    dream_and_link(old, "mo", [NAMES, NAMES[:3], NAMES[:1]])
    with old.connect() as conn:
        before = {r["id"]: r["updated_at"] for r in conn.execute("SELECT id, updated_at FROM subjects")}
    old.close()
    monkeypatch.setattr(database_module, "load_migrations", lambda: every)
    new = Database(database_url)
    new.ensure_schema(EMBEDDER.spec)
    with new.connect() as conn:
        assert link_count_mismatches(conn) == []
        assert sorted(r["link_count"] for r in subject_rows(conn, "mo").values()) == [1, 2, 2, 3]
        assert {r["id"]: r["updated_at"] for r in conn.execute("SELECT id, updated_at FROM subjects")} == before
    new.close()
