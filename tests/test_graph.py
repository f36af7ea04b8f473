"""A graph that stays clean: hubs (a speaker's name on every turn) are found on every path, flagged, kept
browsable and shown; the graph checks run after the fast path; the CLI shows the graph's shape."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from dreaming_dagster.cli import main
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.hubs import HubRule
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import extracting, graph_reports, linking, refining
from dreaming_dagster.pipeline.sync import sync_user
from tests.conftest import reference_sql

PLACES = ["Lisbon", "Kyoto", "Denver", "Oslo", "Nairobi", "Lima", "Austin", "Porto", "Hanoi", "Quebec"]
THINGS = ["pottery class", "sourdough bread", "marathon training", "guitar lessons", "tax return",
          "garden tomatoes", "road trip", "piano recital", "camping gear", "yoga retreat", "book club",
          "car insurance"]


def chat_log(turns: int = 60) -> list[dict]:
    """A two-person chat log as such logs are saved: every turn starts with the speaker's name."""
    records = []
    for i in range(turns):
        place, thing = PLACES[i % len(PLACES)], THINGS[(i * 7) % len(THINGS)]
        records.append({"session_id": f"day-{i // 10}", "turn_index": i % 10,
                        "occurred_at": f"2026-03-{1 + i // 10:02d}T10:{i % 60:02d}:00Z",
                        "user_message": f"Melanie: Wow! I just got back from {place}, and next week is my {thing}.",
                        "assistant_message": f"Caroline: That sounds great, Melanie! Tell me about {place}."})
    return records


def test_a_speakers_name_on_every_turn_is_flagged_as_a_hub_on_the_fast_path(database, embedder16):
    save_pairs("mel", chat_log(), database=database, embedder=embedder16)
    result = sync_user("mel", database=database, embedder=embedder16, report=True)
    (report,) = result.graph
    assert report["pairs"] == 60 and report["hubs"] >= 1
    assert report["largest_subject"] == "Melanie" and report["largest_is_hub"]
    assert report["generic_subjects"] == 0  # no "Wow", no "Great"
    top = {row["subject_text"]: row for row in graph_reports.top_subjects(database, "mel", limit=50)}
    assert top["Melanie"]["hub"] and not top["Lisbon"]["hub"]  # flagged and still browsable
    # Over half of the pairs: the mega-node alarm of the Dagster check, raised by the fast path as well.
    assert any("Melanie" in warning and "mega-node" in warning for warning in result.warnings)
    # The rule decides both ways: under a looser rule the flag goes, and it comes back.
    assert [c["subject_text"] for c in linking.flag_hubs(database, "mel", "default", HubRule(share=1.0))] == ["Melanie"]
    assert not graph_reports.top_subjects(database, "mel", limit=1)[0]["hub"]
    changes = linking.flag_hubs(database, "mel", "default", HubRule())
    assert {c["subject_text"] for c in changes if c["is_hub"]} >= {"Melanie"}
    assert linking.flag_hubs(database, "mel", "default", HubRule()) == []  # nothing changes twice


def test_the_fast_path_flags_and_unflags_hubs_from_what_it_linked(database, embedder16):
    log = chat_log()
    for start in range(0, 60, 20):  # the pairs arrive as a conversation goes, each chunk synced at once
        save_pairs("mel", log[start:start + 20], database=database, embedder=embedder16)
        result = sync_user("mel", database=database, embedder=embedder16)
    assert result.graph == [] and "Melanie" in result.links["new_hubs"]  # no whole-graph report asked for
    assert any(w.startswith("'Melanie' is now a hub") for w in result.warnings)
    # 200 pairs about other things: Melanie's share of the pairs falls under the rule. The fast path re-checks
    # the current hubs, so the flag goes without the whole graph being read.
    others = [{"session_id": "repairs", "turn_index": i, "occurred_at": f"2026-04-01T10:{i % 60:02d}:{i // 60:02d}Z",
               "user_message": f"I fixed bicycle number {i} in the garage today.", "assistant_message": "Nice work."}
              for i in range(200)]
    save_pairs("mel", others, database=database, embedder=embedder16)
    result = sync_user("mel", database=database, embedder=embedder16)
    top = {row["subject_text"]: row for row in graph_reports.top_subjects(database, "mel", limit=50)}
    assert result.links["hubs_changed"] >= 1 and not top["Melanie"]["hub"]
    # What the fast path decided is what the whole-graph rule decides: nothing left to change.
    assert linking.flag_hubs(database, "mel", "default", HubRule()) == []


def test_a_changed_hub_rule_reflags_on_the_next_run_without_new_pairs(database, embedder16, clean_env):
    from dreaming_dagster.process_defaults import reset_defaults

    save_pairs("mel", chat_log(), database=database, embedder=embedder16)
    assert sync_user("mel", database=database, embedder=embedder16, report=True).graph[0]["hubs"] >= 1
    clean_env.setenv("DREAMING_GRAPH_HUB_SHARE", "1.0")  # nothing can be a hub any more
    reset_defaults()
    again = sync_user("mel", database=database, embedder=embedder16, report=True)
    assert again.extraction.get("pairs", 0) == 0 and again.graph[0]["hubs"] == 0
    assert again.links["hubs_changed"] >= 1


def test_no_hub_below_the_minimum_number_of_pairs(database, embedder16):
    save_pairs("few", chat_log(20), database=database, embedder=embedder16)
    (report,) = sync_user("few", database=database, embedder=embedder16, report=True).graph
    assert report["hubs"] == 0 and report["largest_share"] == 1.0  # every pair, but 20 pairs prove nothing


def test_the_cli_shows_the_graph_and_its_hubs(cli_env, database, embedder16):
    save_pairs("mel", chat_log(), database=database, embedder=embedder16)
    synced = CliRunner().invoke(main, ["sync", "--user", "mel"])
    assert synced.exit_code == 0, synced.output
    assert re.search(r"over 60 pairs, [1-9]\d* hub\(s\)", synced.output)
    assert "warning: default: 'Melanie' links" in synced.output  # the graph checks ran after the fast path
    stats = CliRunner().invoke(main, ["stats", "--user", "mel"])
    assert stats.exit_code == 0, stats.output
    assert "graph of mel" in stats.output and "top subjects of mel" in stats.output
    assert re.search(r"Melanie\s.*\bhub\b", stats.output)  # the largest subject, marked a hub


def test_graph_candidates_reach_pairs_the_vectors_and_words_missed(database, embedder16):
    from dreaming_dagster.retrieval.ranker import COSINE_ONLY
    from dreaming_dagster.retrieval.recaller import GraphSide, composite_rows

    for user in ("mel", "other"):  # the same subjects in another user's graph must never be drawn
        save_pairs(user, chat_log(), database=database, embedder=embedder16)
        sync_user(user, database=database, embedder=embedder16)
    query = "What did I say about Kyoto?"
    vector = embedder16.embed([query])[0]

    def pool(graph: GraphSide, **kwargs) -> list[dict]:
        with database.connect() as conn:
            return composite_rows(conn, user_id="mel", kg_id="default", query_embedding=vector, query_text=query,
                                  weights=COSINE_ONLY, pool_size=3, lexical_pool_size=3, graph=graph, **kwargs)

    without, with_graph = pool(GraphSide(pool_size=0)), pool(GraphSide(pool_size=8, subjects=3))
    drawn = [r for r in with_graph if r["in_graph_pool"]]
    assert not any(r["in_graph_pool"] for r in without) and 0 < len(drawn) <= 8
    assert {r["id"] for r in without} <= {r["id"] for r in with_graph}  # added to, never replacing
    assert not any(r["in_vector_pool"] or r["in_lexical_pool"] for r in drawn)  # only what the others missed
    with database.connect() as conn:
        owners = {row["user_id"] for row in conn.execute(
            "SELECT DISTINCT user_id FROM memory_pairs WHERE id = ANY(%s)", ([r["id"] for r in drawn],))}
        via_hub_only = conn.execute(load_hub_only_pairs(), ([r["id"] for r in drawn],)).fetchone()["n"]
    assert owners == {"mel"} and via_hub_only == 0  # never another user's pair, never through the hub alone
    assert all(0 <= r[name] <= 1 for r in with_graph for name in ("cos", "lex", "subj_sem", "neighbor_density"))
    # A graph candidate's BM25 is computed exactly, as for a pair the vector side draws.
    with database.connect() as conn:
        everything = {r["id"]: r["bm25"] for r in composite_rows(
            conn, user_id="mel", kg_id="default", query_embedding=vector, query_text=query, weights=COSINE_ONLY,
            pool_size=60, lexical_pool_size=0)}
    assert [r["bm25"] for r in drawn] == pytest.approx([everything[r["id"]] for r in drawn])
    # as_of holds for the graph side too.
    early = pool(GraphSide(pool_size=8, subjects=3), as_of=datetime(2026, 3, 3, tzinfo=UTC))
    assert all(r["occurred_at"] < datetime(2026, 3, 3, tzinfo=UTC) for r in early)


def load_hub_only_pairs() -> str:
    """Pairs (of the given ids) whose only live subjects are hubs."""
    return ("SELECT count(*) AS n FROM unnest(%s::uuid[]) AS ids (id) WHERE NOT EXISTS ("
            "SELECT 1 FROM subject_memory_pair_links l JOIN subjects s ON s.id = l.subject_id "
            "WHERE l.pair_id = ids.id AND s.hub_since IS NULL AND s.archived_at IS NULL)")


def test_extraction_reads_the_users_own_memory_for_recurring_names(database, embedder16):
    def one(user: str, text: str, minute: int) -> None:
        save_pairs(user, [{"session_id": "s", "occurred_at": f"2026-03-01T10:{minute:02d}:00Z",
                           "user_message": text, "assistant_message": "Nice."}], database=database,
                   embedder=embedder16)

    one("ann", "I bought a pizza stone for my oven.", 0)
    one("bob", "My stand mixer broke while I was kneading bread.", 0)
    sync_user("ann", database=database, embedder=embedder16)
    sync_user("bob", database=database, embedder=embedder16)
    asked = ["pizza stone", "stand mixer", "bread", "melanie"]
    assert extracting.held_subject_names(database, "ann", "default", asked) == {"pizza stone": False}
    assert extracting.held_subject_names(database, "bob", "default", asked) == {"stand mixer": False}  # its own only
    # Extracted and not merged yet (an earlier batch of a backlog) counts as held too.
    one("ann", "We went to the Louvre in Paris.", 1)
    extracting.extract_pending(database, OfflineExtractor(), "ann", "default")
    assert extracting.held_subject_names(database, "ann", "default", ["louvre", "paris"]) == {
        "louvre": False, "paris": False}
    # A new pair naming several topics keeps the one ann's memory holds first.
    one("ann", "Yesterday I used my stand mixer, a baking steel and the pizza stone for bread dough.", 2)
    sync_user("ann", database=database, embedder=embedder16)
    with database.connect(vectors=False) as conn:
        (latest,) = conn.execute("SELECT s.extracted_subjects FROM memory_pairs p JOIN pair_stages s ON s.pair_id = p.id "
                                 "WHERE p.user_id = 'ann' ORDER BY p.occurred_at DESC LIMIT 1").fetchall()
    assert latest["extracted_subjects"][0]["name"] == "Pizza Stone"
    # A hub of the user's graph is held as a hub.
    save_pairs("mel", chat_log(), database=database, embedder=embedder16)
    sync_user("mel", database=database, embedder=embedder16)
    assert extracting.held_subject_names(database, "mel", "default", asked) == {"melanie": True}


def test_a_refinement_batch_keeps_taken_names_and_fails_only_the_refused_subject(database, embedder16):
    import numpy as np

    from dreaming_dagster.pipeline.refiners import Refinement

    database.ensure_schema(embedder16.spec)
    names = ["Lisbon", "Trip A", "Trip B", "Trip C", "Trip D", "Trip E"]
    ids = {}
    with database.connect() as conn:
        for name in names:
            ids[name] = str(conn.execute(reference_sql("insert_subject"), {
                "user_id": "ann", "kg_id": "default", "subject_text": name,
                "description_text": "Lisbon" if name == "Lisbon" else f"{name} first | {name} later",
                "subject_type": "topic", "embedding": embedder16.embed([name])[0], "seen_at": "2026-01-01"}
            ).fetchone()["id"])

    proposals = {"Trip A": "Lisbon",  # held by another live subject: not taken
                 "Trip B": "Portugal", "Trip C": "Portugal",  # proposed twice in the batch: the first takes it
                 "Trip D": "Bad\x00Name",  # a value Postgres refuses: this subject alone fails
                 "Trip E": "Sintra"}

    class Proposing:
        provider = "stub"

        def refine_many(self, subjects):
            return [Refinement.model_construct(name=proposals[name], narrative=f"All about {name}.")
                    for name, *_ in subjects]

    stats = refining.refine_pending(database, Proposing(), embedder16, "ann", "default")
    with database.connect() as conn:
        rows = {str(r["id"]): r for r in conn.execute(
            "SELECT id, subject_text, description_text, embedding FROM subjects WHERE user_id = 'ann'")}
    named = {name: rows[i]["subject_text"] for name, i in ids.items()}
    assert sorted([named.pop("Trip B"), named.pop("Trip C")]) in (["Portugal", "Trip C"], ["Portugal", "Trip B"])
    assert named == {"Lisbon": "Lisbon", "Trip A": "Trip A", "Trip D": "Trip D", "Trip E": "Sintra"}
    assert rows[ids["Trip A"]]["description_text"] == "All about Trip A."  # the narrative is taken
    assert np.allclose(rows[ids["Trip A"]]["embedding"].to_numpy(), embedder16.embed(["Trip A"])[0])  # its own name's vector
    assert np.allclose(rows[ids["Trip E"]]["embedding"].to_numpy(), embedder16.embed(["Sintra"])[0])
    assert rows[ids["Trip D"]]["description_text"] == "Trip D first | Trip D later"  # untouched, retried later
    assert (stats.refined, stats.renamed, stats.name_kept_on_conflict, stats.failures) == (4, 2, 2, 1)


def test_a_bad_kg_id_is_refused_before_any_stage_runs(database, embedder16):
    from dreaming_dagster.storage.records import InvalidInputError

    save_pairs("mel", chat_log(3), database=database, embedder=embedder16, embed=False)
    with pytest.raises(InvalidInputError) as refused:
        sync_user("mel", database=database, embedder=embedder16, kg_id="not a graph!")
    assert refused.value.field == "kg_id"
    with database.connect() as conn:  # nothing was embedded or extracted on the way to the refusal
        assert conn.execute("SELECT count(*) AS n FROM memory_pairs p JOIN pair_stages s ON s.pair_id = p.id "
                            "WHERE p.user_id = 'mel' AND p.embedding IS NULL AND s.extracted_at IS NULL").fetchone()["n"] == 3
