"""Fuzzing the edges with hypothesis: random records — text with NUL and lone surrogates, huge and
non-finite numbers, extreme dates and offsets, odd JSON — through save_pairs, the JSONL reader and
recall, on real Postgres. Nothing may raise but the documented errors, and whatever was stored must read
back (by SQL and through recall)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreaming_dagster.ingest.readers import LineRecord, read_jsonl
from dreaming_dagster.ingest.save import BatchRejectedError, save_pairs, save_validated_pairs
from dreaming_dagster.retrieval.recaller import Recaller
from dreaming_dagster.storage.records import InvalidInputError, Rejection, parse_pair
from tests.retrieval_fixtures import HashEmbedder

NASTY = ["\x00", "\ud800", "\udfff", "a\ud83d", "\ufeff", "\u202e", "\U0001f600", "'; DROP TABLE memory_pairs; --",
         "%(user_id)s", "{{ embedding_dimension }}", " ", "\n\t", "ß" * 3]
text = st.one_of(st.text(max_size=40), st.sampled_from(NASTY),
                 st.builds(lambda a, b, c: a + b + c, st.text(max_size=10), st.sampled_from(NASTY), st.text(max_size=10)))
offsets = st.builds(lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60 - 59, 23 * 60 + 59))
moments = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59), timezones=offsets),
    st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00", "1970-01-01", "2024/02/30 (Fri) 10:00",
                     "1984-06-01T12:00:00Z", "not a date", "", "2023/04/10 (Mon) 17:50"]))
# Huge integers are built from small draws: hypothesis cannot print a 4,400-digit choice while shrinking.
numbers = st.one_of(st.integers(), st.integers(0, 5).map(lambda n: 10**4400 + n),
                    st.floats(allow_nan=True, allow_infinity=True))
json_values = st.recursive(st.one_of(st.none(), st.booleans(), numbers, text),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(text, inner, max_size=3)), max_leaves=8)
records = st.fixed_dictionaries(
    {"session_id": st.one_of(text, st.just("s1"), st.integers())},
    optional={"user_message": st.one_of(text, st.just("I adopted a beagle named Max"), numbers),
              "assistant_message": st.one_of(text, st.just("Congratulations!")),
              "occurred_at": moments,
              "turn_index": st.one_of(st.integers(), st.booleans(), st.floats()),
              "metadata": st.one_of(st.dictionaries(text, json_values, max_size=4), json_values),
              "unexpected": text})
# DREAMING_FUZZ_EXAMPLES=2000 for a longer hunt than the suite's.
FUZZ = settings(max_examples=int(os.environ.get("DREAMING_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])


def stored_pairs(database, user_id: str) -> list[dict]:
    with database.connect() as conn:
        return conn.execute("SELECT id, session_id, user_message, assistant_message, occurred_at, metadata "
                            "FROM memory_pairs WHERE user_id = %s", (user_id,)).fetchall()


@pytest.fixture
def memory(database):
    database.ensure_schema(HashEmbedder.spec)
    return database


@FUZZ
@given(batch=st.lists(records, max_size=6), query=text, session=st.one_of(st.none(), text),
       as_of=st.one_of(st.none(), moments), strict=st.booleans())
def test_save_and_recall_raise_only_documented_errors(memory, batch, query, session, as_of, strict):
    inserted: list[str] = []
    try:
        result = save_pairs("fuzz", batch, database=memory, embedder=HashEmbedder(), strict=strict)
    except BatchRejectedError as error:
        assert strict and error.rejections
    else:
        assert result.inserted + result.duplicates + len(result.rejected) == len(batch)
        assert all(isinstance(r, Rejection) and r.field for r in result.rejected)
        inserted = result.pair_ids
    rows = stored_pairs(memory, "fuzz")  # everything stored reads back
    assert set(inserted) <= {str(r["id"]) for r in rows}
    recaller = Recaller(memory, HashEmbedder())
    try:
        recalled = recaller.recall("fuzz", query, k=5, session_id=session, as_of=as_of)
    except InvalidInputError as error:
        assert error.field in {"query", "session_id", "as_of"}
    else:
        assert len(recalled) <= min(5, len(rows))
        assert all(0 <= v <= 1 for m in recalled for v in m.signals.values())


def as_json_line(record: dict) -> bytes:
    try:
        return json.dumps(record, default=str).encode("utf-8", "surrogatepass")
    except ValueError:  # an integer too long to print: write one out by hand
        return b'{"session_id": "s", "user_message": ' + b"9" * 4400 + b"}"


lines = st.one_of(
    records.map(as_json_line),
    st.binary(max_size=60),
    st.sampled_from([b"[" * 5000 + b"]" * 5000, b'{"n": ' + b"7" * 5000 + b"}", b"\xef\xbb\xbf{}", b"\xff\xfe",
                     b'{"session_id": "s", "user_message": "x", "occurred_at": "2024-01-01", "metadata": {"v": NaN}}',
                     b"null", b"[]", b'"text"', b"{", b"   "]))


@FUZZ
@given(file_lines=st.lists(lines, max_size=8))
def test_the_jsonl_reader_turns_any_bytes_into_records_or_rejections(memory, tmp_path_factory, file_lines):
    path = tmp_path_factory.mktemp("fuzz") / "in.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in file_lines) + b"\n")
    pairs, labels = [], []
    for item in read_jsonl(path):
        assert isinstance(item, LineRecord | Rejection)
        if isinstance(item, LineRecord):
            try:
                pairs.append(parse_pair(item.raw, record=item.where))
                labels.append(item.where)
            except InvalidInputError as error:
                assert error.field
    result = save_validated_pairs(memory, HashEmbedder(), "reader", "default", pairs, embed=False, labels=labels)
    assert result.inserted + result.duplicates + len(result.rejected) == len(pairs)
    refused = {r.record for r in result.rejected}
    stored = {r["user_message"] for r in stored_pairs(memory, "reader")}
    assert {p.user_message for p, label in zip(pairs, labels, strict=True) if label not in refused} <= stored


def test_a_date_at_either_end_of_the_calendar_round_trips(memory):
    edge = [{"session_id": "s", "user_message": "first", "occurred_at": "0001-01-01T00:00:00Z"},
            {"session_id": "s", "user_message": "last", "occurred_at": "9999-12-31T23:59:59Z"}]
    assert save_pairs("edges", edge, database=memory, embedder=HashEmbedder()).inserted == 2
    stored = sorted(r["occurred_at"] for r in stored_pairs(memory, "edges"))
    assert stored == [datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)]
