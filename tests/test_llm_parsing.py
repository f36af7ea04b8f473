"""Tolerant parsing of LLM replies and validation of extraction output (pure)."""

import pytest
from pydantic import ValidationError

from dreaming_dagster.extraction.normalize import normalize_subject_name
from dreaming_dagster.extraction.schema import Extraction
from dreaming_dagster.llm.parsing import LLMOutputError, extract_json_object

PAYLOAD = '{"summary": "s", "subjects": [{"name": "Lisbon", "description": "trip {June}", "type": "place"}]}'


@pytest.mark.parametrize("reply", [
    PAYLOAD,
    f"Sure! Here is the JSON you asked for:\n{PAYLOAD}\nLet me know if you need more.",
    f"```json\n{PAYLOAD}\n```",
    f"<think>The user mentions {{Lisbon}}; I should output JSON.</think>\n{PAYLOAD}",
    f"<THINK>multi\nline</THINK>{PAYLOAD}",
    f"{{not json}} then {PAYLOAD}",
])
def test_json_is_found_around_prose_think_blocks_and_fences(reply):
    assert extract_json_object(reply)["subjects"][0]["name"] == "Lisbon"


def test_raw_control_characters_inside_strings_are_accepted():
    reply = '{"summary": "line one\nline two\twith a tab", "subjects": []}'
    assert extract_json_object(reply)["summary"] == "line one\nline two\twith a tab"


@pytest.mark.parametrize(("reply", "message"), [
    ('{"summary": "cut off', "truncated"),
    ("no json here at all", "no JSON object"),
    ("<think>still thinking when the tokens ran out {", "no JSON object"),
    ("", "empty"),
])
def test_unusable_replies_raise(reply, message):
    with pytest.raises(LLMOutputError, match=message):
        extract_json_object(reply)


def test_more_than_five_subjects_keeps_the_first_five():
    subjects = [{"name": f"Subject {i}", "description": "", "type": "topic"} for i in range(7)]
    extraction = Extraction.model_validate({"summary": "s", "subjects": subjects})
    assert [s.name for s in extraction.subjects] == [f"Subject {i}" for i in range(5)]


def test_lenient_fields_and_duplicates():
    extraction = Extraction.model_validate({"summary": None, "subjects": [
        {"name": "**Avery**", "description": None, "type": "Wizard"},
        {"name": "avery's", "description": "again", "type": "person"}]})
    assert extraction.summary == ""
    assert [(s.name, s.type, s.description) for s in extraction.subjects] == [("Avery", "other", "")]
    assert Extraction.model_validate({"summary": "chitchat", "subjects": []}).subjects == []


@pytest.mark.parametrize("payload", [
    {"summary": "s", "subjects": "Lisbon"},
    {"summary": "s", "subjects": [{"description": "no name"}]},
    {"summary": "s", "subjects": [{"name": 42}]},
    {"summary": "s", "subjects": [{"name": "***"}]},
    {"summary": ["not", "text"], "subjects": []},
])
def test_wrong_types_are_rejected(payload):
    with pytest.raises(ValidationError):
        Extraction.model_validate(payload)


@pytest.mark.parametrize(("raw", "canonical"), [
    ("Avery", "Avery"), ("Avery's", "Avery"), ("**Avery**", "Avery"), ("avery", "Avery"),
    ("  Avery\n", "Avery"), ("Avery’s", "Avery"), ("- Avery", "Avery"), ("`Avery`", "Avery"),
    ("Avery Felts Project", "Avery Felts Project"), ("NASA", "NASA"), ("iPhone", "iPhone"),
    ("machine   learning", "Machine Learning"), ("[Lisbon](https://example.com)", "Lisbon"),
])
def test_names_are_normalized_so_they_dedupe(raw, canonical):
    assert normalize_subject_name(raw) == canonical
