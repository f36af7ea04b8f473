"""Streaming readers: JSONL lines and LongMemEval sessions."""

import json

import pytest

from dreaming_dagster.ingest.readers import (
    LineRecord,
    iter_longmemeval_questions,
    longmemeval_session_records,
    read_jsonl,
    session_pairs,
    sessions_in_date_order,
)
from dreaming_dagster.storage.records import Rejection
from tests.conftest import ORACLE


def turn(role, content, has_answer=False):
    return {"role": role, "content": content, "has_answer": has_answer}


def test_session_pairs_keep_every_turn():
    turns = [turn("assistant", "greeting"), turn("user", "q1"), turn("assistant", "a1", has_answer=True),
             turn("user", "q2"), turn("user", "q3"), turn("assistant", "a3"), turn("user", "dangling")]
    assert list(session_pairs(turns)) == [
        (0, "", "greeting", False), (1, "q1", "a1", True), (2, "q2", "", False), (3, "q3", "a3", False),
        (4, "dangling", "", False)]


def test_has_answer_on_the_user_turn_marks_the_pair():
    assert list(session_pairs([turn("user", "q", True), turn("assistant", "a")])) == [(0, "q", "a", True)]


def test_jsonl_malformed_lines_become_rejections(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"a": 1}\n\n{not json\n{"b": 2}\n', encoding="utf-8")
    items = list(read_jsonl(path))
    assert [type(item) for item in items] == [LineRecord, Rejection, LineRecord]
    assert items[0].where == "line 1" and items[2].where == "line 4"
    assert items[1].record == "line 3" and items[1].field == "json"


def test_longmemeval_streaming_dedupes_sessions_and_keeps_labels(tmp_path):
    question = {
        "question_id": "q1", "haystack_session_ids": ["s1", "s2"],
        "haystack_dates": ["2023/05/01 (Mon) 10:00", "2023/04/01 (Sat) 09:00"],
        "haystack_sessions": [[turn("user", "u1"), turn("assistant", "a1", True)],
                              [turn("user", "u2"), turn("assistant", "a2")]],
        "answer_session_ids": ["s1"],
    }
    again = dict(question, question_id="q2")  # shares both sessions
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([question, again]), encoding="utf-8")
    records = list(longmemeval_session_records(iter_longmemeval_questions(path)))
    assert [r.raw["session_id"] for r in records] == ["s1", "s2"]
    assert records[0].raw["metadata"] == {"source": "longmemeval", "has_answer": True}
    assert records[1].raw["metadata"]["has_answer"] is False
    ordered = list(longmemeval_session_records(sessions_in_date_order([question])))
    assert [r.raw["session_id"] for r in ordered] == ["s2", "s1"]


def test_longmemeval_mismatched_lengths_are_rejected(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"question_id": "q", "haystack_session_ids": ["s1"], "haystack_dates": [],
                                 "haystack_sessions": [[]]}]), encoding="utf-8")
    (item,) = longmemeval_session_records(iter_longmemeval_questions(path))
    assert isinstance(item, Rejection) and item.field == "haystack_sessions"


@pytest.mark.skipif(not ORACLE.is_file(), reason="shared LongMemEval oracle file not present")
def test_oracle_file_reads_completely():
    questions = list(iter_longmemeval_questions(ORACLE))
    assert len(questions) == 500
    records = list(longmemeval_session_records(questions))
    assert not [r for r in records if isinstance(r, Rejection)]
    # Every session is read once, and every evidence turn in the file reaches a pair marked has_answer.
    sessions = {sid: turns for q in questions for sid, turns in zip(q["haystack_session_ids"], q["haystack_sessions"],
                                                                   strict=True)}
    assert {r.raw["session_id"] for r in records} == set(sessions)
    with_evidence = {sid for sid, turns in sessions.items() if any(t.get("has_answer") for t in turns)}
    assert {r.raw["session_id"] for r in records if r.raw["metadata"]["has_answer"]} == with_evidence
    # No turn is dropped: each session's pairs hold all of its turns' text, in order.
    for sid in list(sessions)[:50]:
        pairs = sorted((r.raw for r in records if r.raw["session_id"] == sid), key=lambda p: p["turn_index"])
        text = [part for p in pairs for part in (p["user_message"], p["assistant_message"]) if part]
        assert text == [t["content"] for t in sessions[sid] if t["content"]]
