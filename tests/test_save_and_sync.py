"""save_and_sync: saving and dreaming in one call — the same graph as save_pairs then sync_user, on real
Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

import dreaming_dagster as dd
from dreaming_dagster.extraction.extractors import OfflineExtractor, OpenAIExtractor
from dreaming_dagster.ingest.save import BatchRejectedError, save_pairs
from dreaming_dagster.llm.client import JSONChatClient
from dreaming_dagster.pipeline import graph_reports
from dreaming_dagster.pipeline.refiners import OfflineRefiner
from dreaming_dagster.pipeline.sync import save_and_sync, sync_user
from dreaming_dagster.storage.records import InvalidInputError
from tests.conftest import PROJECT_ROOT, pair, run_concurrently

EXCHANGES = [
    ("We're driving to Yosemite with my brother Marcus next weekend.", "Yosemite in spring is lovely. Marcus will enjoy Half Dome."),
    ("My sourdough starter died again, I think my kitchen is too cold.", "A cold kitchen slows a starter; try the oven with the light on."),
    ("Rachel and I signed up for a pottery class at Clay Studio.", "Clay Studio has a good wheel-throwing course."),
    ("I can't decide between Lisbon and Porto for our anniversary.", "Lisbon has more nightlife; Porto has the Douro valley."),
]


def exchange(n: int, session: str = "s1", **overrides) -> dict:
    user, reply = EXCHANGES[n % len(EXCHANGES)]
    return pair(n, session, user_message=f"{user} ({n})", assistant_message=reply, **overrides)


def test_one_call_dreams_the_same_graph_as_two_calls(database, local_embedder):
    extractor = OfflineExtractor()
    for n in range(3):  # saved one exchange at a time, as an agent does between turns
        save_pairs("two-calls", [exchange(n)], database=database, embedder=local_embedder)
        two = sync_user("two-calls", database=database, embedder=local_embedder, extractor=OfflineExtractor(),
                        refiner=OfflineRefiner())
        one = save_and_sync("one-call", [exchange(n)], database=database, embedder=local_embedder,
                            extractor=extractor, refiner=OfflineRefiner())
        assert one.saved.inserted == 1
        assert one.synced.extraction["pairs"] == two.extraction["pairs"] == 1
        assert one.synced.links["links"] == two.links["links"] > 0
        assert graph_reports.graph_signature(database, "one-call") == graph_reports.graph_signature(database, "two-calls")
    # The pairs are stored as save_pairs stores them, and nothing of one user leaks into the other.
    assert graph_reports.graph_stats(database, "one-call") == graph_reports.graph_stats(database, "two-calls")


def test_a_batch_a_retry_and_older_pending_pairs(database, local_embedder):
    save_pairs("alice", [exchange(0)], database=database, embedder=local_embedder)  # pending, never synced
    extractor = OfflineExtractor()
    result = save_and_sync("alice", [exchange(1), exchange(2)], database=database, embedder=local_embedder,
                           extractor=extractor, refiner=OfflineRefiner())
    # The two new pairs and the older pending one are dreamed in the same sync.
    assert (result.saved.inserted, result.synced.extraction["pairs"]) == (2, 3)
    signature = graph_reports.graph_signature(database, "alice")
    again = save_and_sync("alice", [exchange(1), exchange(2)], database=database, embedder=local_embedder,
                          extractor=extractor, refiner=OfflineRefiner())
    # A retry stores nothing and leaves the graph as it was.
    assert (again.saved.inserted, again.saved.duplicates) == (0, 2)
    assert again.synced.extraction.get("pairs", 0) == 0 and graph_reports.graph_signature(database, "alice") == signature


def test_bad_input_names_the_field_and_stores_nothing_for_it(database, local_embedder):
    database.ensure_schema(local_embedder.spec)
    with pytest.raises(InvalidInputError, match="user_id"):
        save_and_sync("bad user!", [exchange(0)], database=database, embedder=local_embedder)
    with pytest.raises(InvalidInputError, match="kg_id"):
        save_and_sync("alice", [exchange(0)], "bad kg!", database=database, embedder=local_embedder)
    with pytest.raises(BatchRejectedError, match="occurred_at"):
        save_and_sync("alice", [exchange(0), {**exchange(1), "occurred_at": "not a date"}], strict=True,
                      database=database, embedder=local_embedder, extractor=OfflineExtractor(),
                      refiner=OfflineRefiner())
    assert graph_reports.graph_stats(database, "alice")["pairs"] == 0
    # Not strict: the valid record is saved and dreamed, the other comes back naming its field.
    result = save_and_sync("alice", [exchange(0), {**exchange(1), "occurred_at": "not a date"}],
                           database=database, embedder=local_embedder, extractor=OfflineExtractor(),
                           refiner=OfflineRefiner())
    assert result.saved.inserted == 1 and [r.field for r in result.saved.rejected] == ["occurred_at"]
    assert result.synced.extraction["pairs"] == 1 and graph_reports.graph_stats(database, "alice")["pairs"] == 1


def test_from_threads_each_user_gets_its_own_graph(database, local_embedder):
    users = iter(range(4))
    lock = threading.Lock()

    def one_user():
        with lock:
            user = f"user-{next(users)}"
        for n in range(2):
            result = save_and_sync(user, [exchange(n, session=user)], database=database, embedder=local_embedder,
                                   extractor=OfflineExtractor(), refiner=OfflineRefiner())
            assert result.saved.inserted == 1 and result.synced.extraction["pairs"] == 1
        return user

    for user in run_concurrently(one_user, 4):
        stats = graph_reports.graph_stats(database, user)
        assert stats["pairs"] == 2 and stats["subjects"] > 0
        assert graph_reports.graph_health(database, user)["unfinished_pairs"] == 0


def test_an_llm_extractor_is_called_once_a_pair(database, local_embedder, openai_stub):
    openai_stub.default_chat_reply = lambda body: json.dumps({"summary": "a trip", "subjects": [
        {"name": "Yosemite Trip", "description": "A trip to Yosemite", "type": "event"}]})

    def llm():
        return OpenAIExtractor(JSONChatClient(model="main-model", base_url=openai_stub.base_url, api_key="k",
                                              attempts_per_model=1))

    # Two Yosemite exchanges, so the subject is grounded in both.
    result = save_and_sync("alice", [exchange(0), exchange(4)], database=database, embedder=local_embedder,
                           extractor=llm(), refiner=OfflineRefiner())
    assert result.synced.extraction["pairs"] == 2
    assert len(openai_stub.chat_calls("main-model")) == 2
    ((_, linked_pairs),) = graph_reports.graph_signature(database, "alice")  # one subject, linked to both pairs
    assert len(linked_pairs) == 2


def test_from_a_fresh_process_with_the_embedded_defaults(cli_env, database_url):
    code = ("import dreaming_dagster as dd, json\n"
            "rs = [dd.save_and_sync('alice', [{'session_id': 's', 'user_message': f'We hike Mount Tam with Priya {n}',"
            " 'assistant_message': 'Mount Tam has great views.', 'occurred_at': '2024-05-0%dT10:00:00Z' % (n + 1)}])"
            " for n in range(2)]\n"
            "print(json.dumps([[r.saved.inserted, r.synced.extraction['pairs']] for r in rs]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[1, 1], [1, 1]]


def test_the_package_exports_it():
    assert "save_and_sync" in dd.__all__ and callable(dd.save_and_sync)
