"""The offline extractor (spaCy entities and noun phrases): subjects a person would recognise, never
greetings, fragments or generic words, deterministic in any batch order and from a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dreaming_dagster.extraction.entities import (
    Candidate,
    english_pipeline,
    is_generic,
    parsing,
    reply_head,
    salient,
    salient_in_memory,
    singular,
)
from dreaming_dagster.extraction.extractors import OfflineExtractor
from dreaming_dagster.extraction.schema import MAX_SUBJECTS, SUBJECT_TYPES
from tests.conftest import ORACLE, PROJECT_ROOT

EXAMPLES = [
    ("I took my dog Max to Golden Gate Park with my sister Rachel last Saturday.",
     "That sounds lovely! Golden Gate Park is a great place for dogs."),
    ("I'm planning a road trip to the mountains in June and need a checklist for my bike.",
     "Here are some things to pack for a bike trip."),
    ("Melanie: Wow, that bowl is gorgeous! Yep, gonna continue with pottery.", "Thanks Melanie!"),
    ("Hey! Thanks, great list. Any other ideas?", "Sure, here are more ideas."),
    ("I work at NovaTech on the billing API, and my manager Priya wants a migration plan by Friday.",
     "Good luck with the migration."),
    ("", "Paris is the capital of France."),
    ("ok", ""),
]


def names(extraction) -> list[str]:
    return [subject.name for subject in extraction.subjects]


def test_entities_and_noun_phrases_become_typed_subjects():
    extractor = OfflineExtractor()
    park, trip, pottery, filler, work, reply_only, tiny = extractor.extract_many(EXAMPLES)
    by_name = {s.name: s.type for s in park.subjects}
    assert by_name.get("Max") == "person"
    assert by_name.get("Rachel") in ("person", "entity")  # a proper name the small model may not label
    assert by_name.get("Golden Gate Park") == "place"  # the determiner cut, the entity typed from its label
    assert "Road Trip" in names(trip) and "Mountain" in names(trip)  # the lemma: "the mountains" → "Mountain"
    assert "June" not in names(trip)  # a date is a fact about a subject, not one
    assert "NovaTech" in names(work) and "Priya" in names(work)
    assert "Paris" in names(reply_only) or "France" in names(reply_only)  # no user turn: the reply is read
    assert names(filler) == [] and names(tiny) == []  # greetings, thanks and "great list" say nothing
    assert not any(is_generic(name) or name in ("Wow", "Yep", "Bowl Is Gorgeous") for name in names(pottery))
    for extraction in (park, trip, pottery, filler, work, reply_only, tiny):
        assert len(extraction.subjects) <= 3 <= MAX_SUBJECTS
        assert all(s.type in SUBJECT_TYPES and s.description for s in extraction.subjects)
        assert all(not is_generic(s.name) for s in extraction.subjects)


@pytest.mark.slow  # starts processes or loads the model
def test_the_same_pair_gives_the_same_subjects_alone_in_any_batch_and_from_a_fresh_process():
    extractor = OfflineExtractor()
    together = [e.model_dump() for e in extractor.extract_many(EXAMPLES)]
    alone = [extractor.extract_many([pair])[0].model_dump() for pair in EXAMPLES]
    reversed_batch = [e.model_dump() for e in extractor.extract_many(EXAMPLES[::-1])][::-1]
    assert together == alone == reversed_batch
    assert [extractor.extract(*pair).model_dump() for pair in EXAMPLES] == together  # called repeatedly
    code = ("import json, sys; from dreaming_dagster.extraction.extractors import OfflineExtractor; "
            "pairs = json.load(sys.stdin); "
            "print(json.dumps([e.model_dump() for e in OfflineExtractor().extract_many(pairs)]))")
    fresh = subprocess.run([sys.executable, "-c", code], input=json.dumps(EXAMPLES), capture_output=True,
                           text=True, check=True, cwd=PROJECT_ROOT)
    assert json.loads(fresh.stdout) == together


@pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present")
@pytest.mark.slow  # starts processes or loads the model
def test_worker_processes_read_as_one_process_are_kept_and_replaced_when_one_dies():
    import os
    import pickle
    import signal
    import time

    from dreaming_dagster.ingest.readers import iter_longmemeval_questions

    oracle = []
    for question in list(iter_longmemeval_questions(ORACLE))[:20]:
        for session in question["haystack_sessions"]:
            oracle += [(a["content"], b["content"]) for a, b in zip(session[::2], session[1::2], strict=False)]
    oracle = oracle[:OfflineExtractor.PARALLEL_MIN_PAIRS + 10]
    assert len(oracle) > OfflineExtractor.PARALLEL_MIN_PAIRS  # large enough to use the workers
    pairs = [(f"My friend number {n} moved to Lisbon with Dana.", "Lisbon is lovely in spring.")
             for n in range(OfflineExtractor.PARALLEL_MIN_PAIRS)]
    extractor = OfflineExtractor(processes=2)
    expected = [e.model_dump() for e in OfflineExtractor().extract_many(pairs)]
    try:
        # The workers give what one process gives, on real conversations.
        one = [e.model_dump() for e in OfflineExtractor(processes=1).extract_many(oracle)]
        assert [e.model_dump() for e in extractor.extract_many(oracle)] == one
        subjects = [s["name"] for e in one for s in e["subjects"]]
        assert subjects and not any(is_generic(name) for name in subjects)
        first = set(extractor._workers._processes)
        # Kept: the same workers read the next batches.
        assert [e.model_dump() for e in extractor.extract_many(pairs)] == expected
        assert len(first) == 2 and [e.model_dump() for e in extractor.extract_many(pairs)] == expected
        assert set(extractor._workers._processes) == first  # the same workers read the second batch
        os.kill(next(iter(first)), signal.SIGKILL)  # a worker dies between batches
        time.sleep(0.5)
        assert [e.model_dump() for e in extractor.extract_many(pairs)] == expected  # read here instead
        assert [e.model_dump() for e in extractor.extract_many(pairs)] == expected  # and new workers next time
        assert extractor._workers is not None and not set(extractor._workers._processes) & first
        copy = pickle.loads(pickle.dumps(extractor))  # the settings travel, the pool does not
        assert (copy.processes, copy.max_subjects, copy._workers) == (2, 3, None)
    finally:
        workers = list(extractor._workers._processes.values()) if extractor._workers else []
        extractor.close()
    assert extractor._workers is None and all(not worker.is_alive() for worker in workers)


@pytest.mark.slow  # starts processes or loads the model
def test_the_workers_start_and_read_while_other_threads_parse():
    """The workers are spawned: one started while another thread of this process is inside a parse (holding
    spaCy's locks, entities.parsing) inherits none of them, and reads while this process goes on parsing."""
    import threading

    pairs = [(f"My friend number {n} moved to Lisbon with Dana.", "Lisbon is lovely in spring.")
             for n in range(OfflineExtractor.PARALLEL_MIN_PAIRS)]
    expected = [e.model_dump() for e in OfflineExtractor().extract_many(pairs)]

    def read_in_workers(extractor: OfflineExtractor, read: list) -> threading.Thread:
        reading = threading.Thread(target=lambda: read.append(extractor.extract_many(pairs)), daemon=True)
        reading.start()
        return reading

    stop, parses = threading.Event(), []

    def parse_until_stopped():  # another user's sync in this process, parsing pair after pair
        one = OfflineExtractor()
        while not stop.is_set():
            parses.append(one.extract_many(pairs[:4]))

    waiting, busy = OfflineExtractor(processes=2), OfflineExtractor(processes=2)
    other_sync = threading.Thread(target=parse_until_stopped, daemon=True)
    try:
        read_then: list = []
        with parsing():  # a parse in progress in this process: the spawned workers do not wait for it
            reading = read_in_workers(waiting, read_then)
            reading.join(timeout=120)
            assert not reading.is_alive(), "the worker processes never answered"
        assert [e.model_dump() for e in read_then[0]] == expected
        other_sync.start()
        while not parses:  # parsing in this process, pair after pair, when the workers start
            other_sync.join(timeout=0.05)
        read_meanwhile: list = []
        reading = read_in_workers(busy, read_meanwhile)
        reading.join(timeout=120)
        assert not reading.is_alive(), "the worker processes never answered"
        assert [e.model_dump() for e in read_meanwhile[0]] == expected
    finally:
        stop.set()
        other_sync.join(timeout=60)
        waiting.close()
        busy.close()


def candidate(name: str, kind: str = "topic", score: float = 1.0, position: float = 0.0) -> Candidate:
    return Candidate(name=name, type=kind, sentence=f"about {name}", score=score, first_position=position)


def test_within_a_users_memory_recurring_names_come_first_and_a_pair_adds_one_new_topic_at_most():
    pair = [candidate("Stand Mixer", score=1.3), candidate("Bread", score=1.2),
            candidate("Pizza Stone", score=1.0, position=0.5), candidate("Priya", "person", 2.0, 0.9)]
    assert [c.name for c in salient(pair, 3)] == ["Priya", "Stand Mixer", "Bread"]  # the pair alone
    (chosen,) = salient_in_memory([pair], {"pizza stone": False}, 3)
    # The held topic first; a new name is kept; of the two new topics only the more salient one.
    assert [c.name for c in chosen] == ["Pizza Stone", "Priya", "Stand Mixer"]
    (chosen,) = salient_in_memory([pair], {"priya": True}, 3)  # a hub: kept last, only when room is left
    assert [c.name for c in chosen] == ["Stand Mixer", "Priya"]
    (chosen,) = salient_in_memory([pair], {}, 3)
    assert [c.name for c in chosen] == ["Priya", "Stand Mixer"]
    # Two pairs of one batch naming the same topic: it recurs, so both keep it.
    first, second = salient_in_memory([pair, [candidate("Bread"), candidate("Oven", score=1.5)]], {}, 3)
    assert "Bread" in [c.name for c in first] and [c.name for c in second] == ["Bread", "Oven"]
    assert salient_in_memory([[]], {}, 3) == [[]]


def test_the_extractor_asks_the_users_memory_about_its_candidates_only():
    asked = []

    def memory(names):
        asked.append(list(names))
        return {"pizza stone": False}

    pair = ("Yesterday I used my stand mixer, a baking steel and the pizza stone for bread dough.", "Nice.")
    (alone,) = OfflineExtractor().extract_many([pair])
    (within,) = OfflineExtractor().extract_many([pair], memory=memory)
    assert "Pizza Stone" not in names(alone)[:1] and names(within)[0] == "Pizza Stone"
    assert len(asked) == 1 and "pizza stone" in asked[0] and asked[0] == sorted(set(asked[0]))
    assert all(name == name.lower() for name in asked[0])


def test_bad_settings_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="processes"):
        OfflineExtractor(processes=0)


def test_helpers():
    assert singular("dogs", "dog") == "dog" and singular("berries", "berry") == "berry"
    assert singular("media", "medium") == "media" and singular("data", "datum") == "data"
    assert reply_head("First one. Second one! Third?", 2) == "First one. Second one!"
    assert reply_head("anything", 0) == ""
    assert is_generic("Great List") and is_generic("wow") and is_generic("Recipe Ideas") is False


def test_one_entity_pass_over_both_turns_annotates_as_two_separate_passes():
    """In process, the entity recogniser reads the user turns and the reply heads in one call; every token's
    tag, dependency and entity must be what the two separate pipeline calls (the worker processes' way) give."""
    from dreaming_dagster.ingest.readers import (
        LineRecord,
        iter_longmemeval_questions,
        longmemeval_session_records,
    )

    records = [r.raw for r in longmemeval_session_records(iter_longmemeval_questions(ORACLE))
               if isinstance(r, LineRecord)][:60]
    extractor = OfflineExtractor()
    texts = [extractor._texts(r["user_message"], r["assistant_message"]) for r in records] + [("", ""), ("Hi", "")]
    users, replies = [u for u, _ in texts], [r for _, r in texts]

    def annotations(docs):
        return [[(t.text, t.tag_, t.pos_, t.dep_, t.head.i, t.ent_iob_, t.ent_type_) for t in doc] for doc in docs]

    nlp = english_pipeline()
    together_users, together_replies = extractor._parse_in_process(users, replies)
    assert annotations(together_users) == annotations(nlp.pipe(users))
    entities_alone = nlp.pipe(replies, disable=[name for name in nlp.pipe_names if name != "ner"])
    assert [[(e.text, e.label_) for e in d.ents] for d in together_replies] == \
        [[(e.text, e.label_) for e in d.ents] for d in entities_alone]
    assert sum(len(d.ents) for d in together_users + together_replies) > 30  # the sample has entities to compare
