"""Validation of incoming pairs: pure functions, no database."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from dreaming_dagster.storage.records import (
    MAX_MESSAGE_CHARS,
    InvalidInputError,
    parse_pair,
    parse_timestamp,
    validate_identifier,
    validate_new_identifier,
)
from tests.conftest import pair


@pytest.mark.parametrize("user_id", ["alice", "a.b-c_d@example.com", "x" * 128, "0"])
def test_valid_user_ids(user_id):
    assert validate_identifier(user_id, "user_id") == user_id


@pytest.mark.parametrize("user_id", ["", "x" * 129, "alice smith", "bob/../eve", "ümlaut", "a;drop", None, 42])
def test_invalid_user_ids_name_the_field(user_id):
    with pytest.raises(InvalidInputError) as info:
        validate_identifier(user_id, "user_id")
    assert info.value.field == "user_id"
    assert "user_id" in str(info.value)


@pytest.mark.parametrize("user_id", [".", ".."])
def test_a_saved_id_is_never_a_dot_segment_but_a_stored_one_stays_readable(user_id):
    with pytest.raises(InvalidInputError) as info:
        validate_new_identifier(user_id, "user_id")
    assert info.value.field == "user_id" and "segment" in info.value.reason
    assert validate_identifier(user_id, "user_id") == user_id  # reads and forgets still take it
    assert validate_new_identifier("...", "user_id") == "..."  # not a dot segment


@pytest.mark.parametrize("session_id", ["..", ".", "../../victim-x", "chat/./42", "a/..", "%2e%2E", ".%2e/x",
                                        "chat/", "/chat", "a//b"])
def test_session_ids_a_url_path_cannot_carry_are_refused(session_id):
    with pytest.raises(InvalidInputError) as info:
        parse_pair(pair(0) | {"session_id": session_id}, record=3)
    assert info.value.field == "session_id" and info.value.record == 3


@pytest.mark.parametrize("session_id", ["chat/42", "...", "a..b", "v1.2", ".hidden", "x?y#z"])
def test_session_ids_with_dots_and_slashes_that_paths_carry_are_kept(session_id):
    assert parse_pair(pair(0) | {"session_id": session_id}).session_id == session_id


def test_timestamps():
    assert parse_timestamp("2023/04/10 (Mon) 17:50") == datetime(2023, 4, 10, 17, 50, tzinfo=UTC)
    assert parse_timestamp("2024-01-02T03:04:05Z") == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    offset = parse_timestamp("2024-01-02T03:04:05+02:00")
    assert offset.utcoffset() == timedelta(hours=2)
    assert parse_timestamp("2024-01-02 03:04").tzinfo is UTC  # naive means UTC
    aware = datetime(2024, 1, 2, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_timestamp(aware) is aware


@pytest.mark.parametrize("value", ["yesterday", "2024-13-45", "2023/04/10 (Mon) 25:99", 1700000000, None, ""])
def test_bad_timestamps_name_occurred_at(value):
    with pytest.raises(InvalidInputError) as info:
        parse_timestamp(value)
    assert info.value.field == "occurred_at"


@pytest.mark.parametrize(("overrides", "field"), [
    ({"user_message": "", "assistant_message": "  "}, "user_message"),
    ({"user_message": None, "assistant_message": None}, "user_message"),
    ({"user_message": "x" * (MAX_MESSAGE_CHARS + 1)}, "user_message"),
    ({"assistant_message": "y" * (MAX_MESSAGE_CHARS + 1)}, "assistant_message"),
    ({"assistant_message": "nul\x00byte"}, "assistant_message"),
    ({"user_message": 12}, "user_message"),
    ({"occurred_at": "not a date"}, "occurred_at"),
    ({"occurred_at": None}, "occurred_at"),
    ({"session_id": ""}, "session_id"),
    ({"session_id": None}, "session_id"),
    ({"turn_index": -1}, "turn_index"),
    ({"turn_index": 2**31}, "turn_index"),
    ({"turn_index": True}, "turn_index"),
    ({"metadata": ["not", "a", "dict"]}, "metadata"),
    ({"metadata": {"when": datetime.now()}}, "metadata"),
    ({"asistant_message": "typo"}, "asistant_message"),
])
def test_bad_records_name_record_and_field(overrides, field):
    with pytest.raises(InvalidInputError) as info:
        parse_pair(pair(1, **overrides), record=7)
    assert info.value.field == field
    assert str(info.value).startswith(f"record 7: field '{field}'")


def test_message_at_the_limit_is_accepted_and_one_side_may_be_empty():
    parsed = parse_pair(pair(1, user_message="x" * MAX_MESSAGE_CHARS, assistant_message=""))
    assert len(parsed.user_message) == MAX_MESSAGE_CHARS
    assert parsed.assistant_message == ""


def test_content_hash_identifies_the_exchange():
    first = parse_pair(pair(1))
    assert parse_pair(pair(1)).content_hash == first.content_hash
    # The same instant written in another zone is the same exchange.
    assert parse_pair(pair(1, occurred_at="2024-03-02T12:00:00+02:00")).content_hash == first.content_hash
    for change in ({"session_id": "s2"}, {"turn_index": 2}, {"user_message": "other"},
                   {"assistant_message": "other"}, {"occurred_at": "2024-03-02T10:00:01Z"}):
        assert parse_pair(pair(1, **change)).content_hash != first.content_hash, change
