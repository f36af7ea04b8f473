"""Coverage for questions that gather: recall keeps the top k of "how many … in total" from collapsing
onto one session, and leaves every other question in the ranker's order."""

from __future__ import annotations

from datetime import timedelta

from dreaming_dagster.ingest.save import save_validated_pairs
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.storage.records import MemoryPair
from tests.retrieval_fixtures import EPOCH, HashEmbedder


def test_a_gathering_question_spreads_its_top_k_over_sessions(database):
    database.ensure_schema(HashEmbedder.spec)
    pairs = [MemoryPair(session_id=session, user_message=f"I went hiking on the ridge trail, hike {n}",
                        assistant_message="Sounds lovely.", occurred_at=EPOCH + timedelta(days=day, minutes=n),
                        turn_index=n)
             for n, (session, day) in enumerate([("trip", 1)] * 8 + [("spring", 20), ("autumn", 40), ("winter", 60)])]
    save_validated_pairs(database, HashEmbedder(), "gina", "default", pairs)
    spread, plain = (Recaller(database, HashEmbedder(), pool_size=20, lexical_pool_size=20, session_spread=n)
                     for n in (2, 0))
    try:
        for _ in range(3):  # every call alike
            gathered = spread.recall("gina", "How many times did I go hiking in total?", k=5)
            sessions = [m.session_id for m in gathered.memories]
            assert len(sessions) == 5 and sessions.count("trip") <= 2 and {"spring", "autumn", "winter"} <= set(sessions)
        unspread = plain.recall("gina", "How many times did I go hiking in total?", k=5)
        assert [m.pair_id for m in unspread.memories] != [m.pair_id for m in gathered.memories]
        # A question that does not gather keeps the ranker's order under either setting.
        asked = "Where did I go hiking?"
        assert [m.pair_id for m in spread.recall("gina", asked, k=5).memories] == \
            [m.pair_id for m in plain.recall("gina", asked, k=5).memories]
    finally:
        spread.close()
        plain.close()
