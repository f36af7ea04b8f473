"""RealMem personas as LongMemEval-format queries (training/realmem.py): dates, labels, the split, bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dreaming_dagster.storage.records import InvalidInputError
from dreaming_dagster.training import realmem
from dreaming_dagster.training.longmemeval import iter_questions


def turn(speaker, content, **extra):
    return {"speaker": speaker, "content": content, "is_query": False, "query_id": None, **extra}


def persona_record():
    """Three sessions, the first two on one day; the third asks a query using one point that names its turn
    and one that does not."""
    first = {"session_identifier": "S1", "session_uuid": "aaa", "current_time": "2026-01-05 (Monday)",
             "dialogue_turns": [turn("User", "I started swimming on Tuesdays."), turn("Assistant", "Nice!"),
                                turn("User", "And my sister moved to Lyon."), turn("Assistant", "Big change.")],
             "extracted_memory": [{"session_uuid": "aaa", "content": "Sister lives in Lyon", "source_turn": 3,
                                   "source_content_snapshot": "And my sister moved to Lyon."}]}
    filler = {"session_identifier": "Enhanced:S2", "session_uuid": "bbb", "current_time": "2026-01-05 (Monday)",
              "dialogue_turns": [turn("User", "What is a heron?"), turn("Assistant", "A bird.")],
              "extracted_memory": []}
    schedule = {"session_identifier": "S3", "session_uuid": "ccc", "current_time": "2026-01-06 (Tuesday)",
                "dialogue_turns": [turn("User", "Plan my week."), turn("Assistant", "Done.")],
                "extracted_memory": [{"session_uuid": "ccc", "content": {"slot": "Tuesday swim"},
                                      "source_turn": -1, "source_content_snapshot": "Plan my week."}]}
    asking = {"session_identifier": "S4", "session_uuid": "ddd", "current_time": "2026-01-09 (Friday)",
              "dialogue_turns": [
                  turn("User", "Hi again."), turn("Assistant", "Hello."),
                  turn("User", "So I'm visiting her next month…", is_query=True, query_id="Q-0001",
                       category_name="Dynamic Updating"),
                  turn("Assistant", "Enjoy Lyon!", memory_session_uuids=["aaa", "ccc"], memory_used=[
                      {"session_uuid": "aaa", "content": "Sister lives in Lyon"},
                      {"session_uuid": "ccc", "content": {"slot": "Tuesday swim"}}])],
              "extracted_memory": []}
    return {"_metadata": {"person_name": "Lin_Wanyu"}, "dialogues": [first, filler, schedule, asking]}


def test_a_query_is_asked_as_of_its_session_and_labels_the_turns_its_reply_used(tmp_path):
    (tmp_path / f"Lin_Wanyu{realmem.FILE_SUFFIX}").write_text(json.dumps(persona_record()))
    out = tmp_path / "converted.json"
    assert realmem.write_longmemeval_format(tmp_path, out) == 1
    [(raw, question)] = list(iter_questions(out))
    assert question.question_id == "Lin_Wanyu:Q-0001" and question.longmemeval_type == "realmem-updating"
    assert question.ranker_type == "knowledge-update" and realmem.part_of(question.question_id) == "test"
    # Sessions of one day keep their order, 20 minutes apart; the query is asked as its session starts.
    assert raw["haystack_dates"] == ["2026-01-05T08:00:00", "2026-01-05T08:20:00", "2026-01-06T08:00:00",
                                     "2026-01-09T08:00:00"]
    assert question.question_date == datetime(2026, 1, 9, 8, tzinfo=UTC)
    # The first query of a persona carries every session (saved once); labels: turn 3 of "aaa" (the
    # second pair), and every pair of "ccc", whose point names no turn.
    sessions = dict(zip(raw["haystack_session_ids"], raw["haystack_sessions"], strict=True))
    assert [t["has_answer"] for t in sessions["Lin_Wanyu:aaa"]] == [False, False, True, False]
    assert all(t["has_answer"] for t in sessions["Lin_Wanyu:ccc"])
    assert not any(t["has_answer"] for t in sessions["Lin_Wanyu:bbb"] + sessions["Lin_Wanyu:ddd"])
    assert len(question.relevant) == 2 and question.evidence_sessions == ("Lin_Wanyu:aaa", "Lin_Wanyu:ccc")


def test_later_queries_carry_only_their_evidence_sessions(tmp_path):
    record = persona_record()
    second = json.loads(json.dumps(record["dialogues"][3]))
    second["session_uuid"], second["current_time"] = "eee", "2026-01-10 (Saturday)"
    second["dialogue_turns"][2]["query_id"] = "Q-0002"
    record["dialogues"].append(second)
    (tmp_path / f"Liam_O_Connor{realmem.FILE_SUFFIX}").write_text(json.dumps(record))
    out = tmp_path / "converted.json"
    assert realmem.write_longmemeval_format(tmp_path, out) == 2
    first, later = (raw for raw, _ in iter_questions(out))
    assert len(first["haystack_session_ids"]) == 5
    assert later["haystack_session_ids"] == ["Liam_O_Connor:aaa", "Liam_O_Connor:ccc"]
    assert realmem.part_of(later["question_id"]) == "dev"


def test_bad_input_names_the_field(tmp_path):
    with pytest.raises(InvalidInputError, match="dataset_path"):
        realmem.persona_files(tmp_path)
    record = persona_record()
    record["dialogues"][0]["current_time"] = "sometime"
    (tmp_path / f"Lin_Wanyu{realmem.FILE_SUFFIX}").write_text(json.dumps(record))
    with pytest.raises(InvalidInputError, match=r"dialogues\[0\]\.current_time"):
        realmem.write_longmemeval_format(tmp_path, tmp_path / "out.json")
    (tmp_path / f"Lin_Wanyu{realmem.FILE_SUFFIX}").write_text("[1, 2")
    with pytest.raises(InvalidInputError, match="not JSON"):
        realmem.write_longmemeval_format(tmp_path, tmp_path / "out.json")
