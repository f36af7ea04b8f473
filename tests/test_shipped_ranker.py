"""The ranker shipped in the package: the file the committed evaluation scored, what a fresh install ranks
with, and a generic reply never outranking the user's own statement of the fact asked about."""

from __future__ import annotations

import hashlib
import json

import pytest

from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import sync_user
from dreaming_dagster.retrieval.ranker import NO_MODEL, SHIPPED_RANKER, load_ranker
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.retrieval.signals import LEX_WEIGHT
from tests.conftest import PROJECT_ROOT, pair

RESULT = PROJECT_ROOT / "bench" / "results" / "longmemeval.json"
MANAGER = "My manager Priya wants me to migrate the billing service to Postgres by March."
# A week of small talk: short user turns answered by replies that fit any question a little.
SMALL_TALK = [
    ("I finally finished the puzzle my sister gave me.", "That must have taken a while!"),
    ("Made pancakes this morning.", "Sounds delicious! What did you put on them?"),
    ("Long day today.", "I'm sorry to hear that. Do you want to talk about it?"),
    ("Went for a run by the river.", "That sounds refreshing! How far did you go?"),
    ("My cat knocked over a plant again.", "Oh no! Cats can be so mischievous."),
    ("Watched a documentary about octopuses.", "Octopuses are fascinating creatures!"),
    ("I think it's going to rain tomorrow.", "Good to know, maybe take an umbrella."),
    ("Tried a new coffee shop downtown.", "How was it? Would you go back?"),
    ("Cleaned out the garage finally.", "That must feel great to have done!"),
    ("I'm reading a mystery novel.", "Mysteries are so gripping. Who is your favourite character so far?"),
    ("Spent the evening gardening.", "Gardening can be so relaxing."),
    ("Called my parents tonight.", "That's lovely. How are they doing?"),
]


def test_the_shipped_model_is_the_file_the_committed_evaluation_scored():
    shipped = json.loads(RESULT.read_text())["shipped_model"]
    assert hashlib.sha256(SHIPPED_RANKER.read_bytes()).hexdigest() == shipped["sha256"]
    ranker = load_ranker(SHIPPED_RANKER)
    assert ranker.version == shipped["version"] and ranker.embedding_model == shipped["embedding_model"]
    # recall's order without a usable model is the fusion weight the same run chose on dev
    assert json.loads(RESULT.read_text())["training"]["fallback"]["chosen_lex_weight"] == LEX_WEIGHT


@pytest.fixture
def chatty_memory(database, local_embedder):
    pairs = [pair(n, "week", user_message=user, assistant_message=reply, occurred_at=f"2024-03-{n + 1:02d}T18:00:00Z")
             for n, (user, reply) in enumerate(SMALL_TALK)]
    pairs.append(pair(len(pairs), "work", user_message=MANAGER, assistant_message="That's a big project! Good luck.",
                      occurred_at="2024-03-20T09:00:00Z"))
    save_pairs("alice", pairs, database=database, embedder=local_embedder)
    sync_user("alice", database=database, embedder=local_embedder, extractor=OfflineExtractor(),
              refiner=OfflineRefiner())
    return database


@pytest.mark.parametrize("shipped", [True, False], ids=["shipped model", "no usable model"])
def test_a_generic_reply_does_not_outrank_the_users_own_statement(chatty_memory, local_embedder, shipped):
    recaller = Recaller(chatty_memory, local_embedder, shipped_ranker=SHIPPED_RANKER if shipped else None)
    try:
        for question in ("who is my manager?", "What is my manager's name?"):
            result = recaller.recall("alice", question, k=5, as_of="2024-03-25T00:00:00Z")
            assert result.memories[0].user_message == MANAGER, [m.user_message for m in result]
            assert (result.weights == NO_MODEL) != shipped
            if shipped:
                assert result.weights.model == f"{load_ranker(SHIPPED_RANKER).version} ({SHIPPED_RANKER.name})"
    finally:
        recaller.close()
