"""Stages reading a backlog's next batch ahead (pipeline/stages.BatchesReadAhead): the extraction's worker
processes analyse batch k+1 while batch k is chosen and written, the merge embeds batch k+1's names while
batch k is merged — with the same results as batch by batch, failures recorded once, and nothing read
ahead for an extractor that does not ask for it."""

from __future__ import annotations

import threading

import pytest

from dreaming_dagster.extraction.providers import KeyphraseExtractor, OfflineExtractor
from dreaming_dagster.extraction.read_ahead import ExtractionReadAhead
from dreaming_dagster.ingest.save import save_pairs
from dreaming_dagster.pipeline import stages
from tests.conftest import ORACLE
from tests.test_pipeline import oracle_records

pytestmark = pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present")

BATCH = 16  # pairs a batch: the oracle slice makes three, the last one short


class WatchedExtractor(OfflineExtractor):
    """The offline extractor with two worker processes (from batches of 8 pairs), recording which thread
    analysed each batch and, when each batch is chosen, whether the next batch's analysis had started."""

    PARALLEL_MIN_PAIRS = 8

    def __init__(self, fail_on: str | None = None):
        super().__init__(processes=2)
        self.fail_on = fail_on
        self.analysed: list[tuple[str, str]] = []  # (first user message, thread)
        self.next_started_when_chosen: list[bool] = []
        self._changed = threading.Condition()

    def analyse(self, pairs):
        found = super().analyse(pairs)
        with self._changed:
            self.analysed.append((pairs[0][0], threading.current_thread().name))
            self._changed.notify_all()
        # a pair the parser cannot read, for the failure test
        return [ValueError("unreadable") if self.fail_on and self.fail_on in user else f
                for (user, _), f in zip(pairs, found, strict=True)]

    def extract_many(self, pairs, memory=None, analysed=None):
        chosen = len(self.next_started_when_chosen)
        with self._changed:  # batch k's choice: is batch k+1 (if any) analysed or being analysed?
            self.next_started_when_chosen.append(self._changed.wait_for(
                lambda: len(self.analysed) >= chosen + 2 or len(pairs) < BATCH, timeout=30))
        return super().extract_many(pairs, memory=memory, analysed=analysed)


def extracted(database, user: str) -> list[tuple]:
    with database.connect() as conn:
        rows = conn.execute(
            "SELECT p.user_message, s.summary, s.extracted_subjects, s.attempts, s.extracted_at IS NOT NULL AS done "
            "FROM memory_pairs p JOIN pair_stages s ON s.pair_id = p.id WHERE p.user_id = %s "
            "ORDER BY p.occurred_at, p.turn_index, p.id", (user,)).fetchall()
    return [(r["user_message"], r["summary"], r["extracted_subjects"], r["attempts"], r["done"]) for r in rows]


@pytest.fixture
def backlog(database, local_embedder) -> list[dict]:
    records = oracle_records(3)
    # several batches, the last one short but still large enough to go to the workers
    assert len(records) > 2 * BATCH and len(records) % BATCH >= WatchedExtractor.PARALLEL_MIN_PAIRS
    for user in ("ahead", "in-turn"):
        save_pairs(user, records, database=database, embedder=local_embedder, embed=False)
    return records


def test_the_next_batch_is_analysed_ahead_with_the_same_extractions(database, backlog):
    ahead = WatchedExtractor()
    try:
        stats = stages.extract_pending(database, ahead, "ahead", "default", batch_size=BATCH)
    finally:
        ahead.close()
    in_turn = stages.extract_pending(database, OfflineExtractor(), "in-turn", "default", batch_size=BATCH)
    batches = -(-len(backlog) // BATCH)
    assert (stats.pairs, stats.failures) == (in_turn.pairs, in_turn.failures) == (len(backlog), 0)
    assert stats.subjects == in_turn.subjects > 0
    assert extracted(database, "ahead") == extracted(database, "in-turn")  # the same results, pair by pair
    # Every batch analysed once, on the stage's analysis threads; each one's successor had started
    # before it was chosen.
    assert len(ahead.analysed) == batches
    assert all(thread.startswith("stage-read-ahead") for _, thread in ahead.analysed)
    assert [user for user, _ in ahead.analysed] == [backlog[k * BATCH]["user_message"] for k in range(batches)]
    assert ahead.next_started_when_chosen == [True] * batches


def test_a_pair_that_fails_in_a_batch_read_ahead_is_recorded_once(database, backlog):
    failing = backlog[BATCH + 3]["user_message"]  # in the second batch, read ahead of the first
    extractor = WatchedExtractor(fail_on=failing)
    try:
        stats = stages.extract_pending(database, extractor, "ahead", "default", batch_size=BATCH)
        again = stages.extract_pending(database, extractor, "ahead", "default", batch_size=BATCH)
    finally:
        extractor.close()
    assert (stats.pairs, stats.failures) == (len(backlog) - 1, 1) and "unreadable" in stats.last_error
    assert (again.pairs, again.failures) == (0, 1)  # the next run tries it again, once
    rows = {user: (attempts, done) for user, _, _, attempts, done in extracted(database, "ahead")}
    assert rows.pop(failing) == (2, False)
    assert set(rows.values()) == {(1, True)}  # every other pair extracted at its first attempt


def test_nothing_is_read_ahead_for_an_extractor_that_does_not_ask(database, backlog):
    one_process = OfflineExtractor()
    assert not one_process.analyses_ahead(BATCH)
    assert not OfflineExtractor(processes=2).analyses_ahead(OfflineExtractor.PARALLEL_MIN_PAIRS - 1)
    assert not hasattr(KeyphraseExtractor(), "analyses_ahead")
    threads = set()
    real_analyse = one_process.analyse

    def analyse(pairs):
        threads.add(threading.current_thread().name)
        return real_analyse(pairs)

    one_process.analyse = analyse
    stats = stages.extract_pending(database, one_process, "ahead", "default", batch_size=BATCH)
    assert stats.pairs == len(backlog) and threads == {threading.main_thread().name}


def test_a_fast_path_read_ahead_over_a_backlog_gives_the_same_extractions(database, backlog):
    """The fast path's wrapper (extraction/read_ahead.py) as the stage's extractor, over a backlog of full
    batches: the stage reads them ahead through the wrapper, which finishes its own pair from its read."""
    extractor = WatchedExtractor()
    try:
        with ExtractionReadAhead(extractor) as wrapper:
            own = backlog[0]
            assert wrapper.start([(own["user_message"], own["assistant_message"])])
            stats = stages.extract_pending(database, wrapper, "ahead", "default", batch_size=BATCH)
            assert (wrapper.read_ahead, wrapper.read_in_stage) == (1, 0)
    finally:
        extractor.close()
    in_turn = stages.extract_pending(database, OfflineExtractor(), "in-turn", "default", batch_size=BATCH)
    assert stats.pairs == in_turn.pairs == len(backlog)
    assert extracted(database, "ahead") == extracted(database, "in-turn")


class ThreadRecordingEmbedder:
    """An embedder recording which thread embedded each call's texts."""

    def __init__(self, embedder):
        self.embedder, self.spec, self.calls = embedder, embedder.spec, []

    def embed(self, texts):
        self.calls.append((threading.current_thread().name, len(texts)))
        return self.embedder.embed(texts)


def test_the_merge_embeds_the_next_batchs_names_ahead_with_the_same_graph(database, local_embedder, backlog):
    for user in ("ahead", "in-turn"):
        stages.extract_pending(database, OfflineExtractor(), user, "default")
    recording = ThreadRecordingEmbedder(local_embedder)
    ahead = stages.merge_pending(database, recording, "ahead", "default", threshold=0.75, batch_size=BATCH)
    at_once = stages.merge_pending(database, local_embedder, "in-turn", "default", threshold=0.75, batch_size=1000)
    assert (ahead.pairs, ahead.created, ahead.merged) == (at_once.pairs, at_once.created, at_once.merged)
    assert ahead.pairs == len(backlog) and ahead.merged > 0
    # three batches, each one's names embedded on a read-ahead thread (the first beside the second)
    assert len(recording.calls) == 3 and all(t.startswith("stage-read-ahead") for t, _ in recording.calls)
    for user in ("ahead", "in-turn"):
        stages.link_pending(database, local_embedder, user, "default")
    assert stages.graph_signature(database, "ahead") == stages.graph_signature(database, "in-turn")
