"""Validation of incoming memory pairs: pure functions, no database.

Every error names the record and the field, so a caller can fix its input without guessing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from dreaming_dagster.storage.storable import json_problem, text_problem

# The session the dream writes its consolidation summaries under (consolidation/passes.py).
DREAM_SESSION = "__dreaming__"
IDENTIFIER_PATTERN = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
MAX_MESSAGE_CHARS = 100_000
MAX_SESSION_ID_CHARS = 256
MAX_TURN_INDEX = 2**31 - 1  # Postgres integer
PAIR_FIELDS = frozenset(
    {"session_id", "user_message", "assistant_message", "occurred_at", "turn_index", "metadata"}
)
# LongMemEval writes dates as "2023/04/10 (Mon) 17:50".
_LONGMEMEVAL_DATE = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) \(\w{3}\) (\d{2}):(\d{2})$")


class InvalidInputError(ValueError):
    """Input that cannot be accepted; ``field`` names what is wrong."""

    def __init__(self, field_name: str, reason: str, record: int | str | None = None):
        self.field = field_name
        self.reason = reason
        self.record = record
        where = f"record {record}: " if record is not None else ""
        super().__init__(f"{where}field '{field_name}': {reason}")


@dataclass(frozen=True)
class Rejection:
    """A record that was not stored, and why."""

    record: int | str  # the index in the batch, or "line N" for files
    field: str
    reason: str

    def __str__(self) -> str:
        return f"record {self.record}: field '{self.field}': {self.reason}"


@dataclass(frozen=True)
class MemoryPair:
    """A validated exchange: a user message and the assistant's reply."""

    session_id: str
    user_message: str
    assistant_message: str
    occurred_at: datetime
    turn_index: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @cached_property  # a save reads it several times per pair (dedupe, lookup, insert, result)
    def content_hash(self) -> str:
        """Identity of the exchange: the same pair saved twice hashes the same."""
        key = json.dumps(
            [self.session_id, self.turn_index, self.occurred_at.astimezone(UTC).isoformat(),
             self.user_message, self.assistant_message],
            ensure_ascii=False,
        )
        return hashlib.sha256(key.encode("utf-8")).hexdigest()


def validate_identifier(value: object, field_name: str) -> str:
    """user_id and kg_id: 1–128 characters of ``[A-Za-z0-9_.@-]``."""
    if not isinstance(value, str):
        raise InvalidInputError(field_name, f"must be a string, got {type(value).__name__}")
    if not IDENTIFIER_PATTERN.fullmatch(value):
        raise InvalidInputError(field_name, f"{value[:40]!r} must be 1–128 characters of A-Z a-z 0-9 _ . @ -")
    return value


# Clients drop these path segments before sending (RFC 3986 dot-segment removal, also spelt %2e), and proxies
# merge the empty ones "//" makes: an id holding one would reach a different route than the one it names.
_DOT_SEGMENTS = frozenset({".", ".."})


def path_segment_problem(value: str) -> str | None:
    """Why a URL path cannot carry ``value`` faithfully (None: it can). Checked on every id a save writes."""
    for segment in value.split("/"):
        if segment.lower().replace("%2e", ".") in _DOT_SEGMENTS:
            return (f"{value[:40]!r} holds the path segment {segment!r}, which clients remove from URLs; "
                    "name it differently")
        if not segment and "/" in value:
            return f"{value[:40]!r} starts or ends with '/' or holds '//', which URLs do not carry faithfully"
    return None


def validate_new_identifier(value: object, field_name: str) -> str:
    """A user_id or kg_id that a save writes: :func:`validate_identifier`'s rule, and not "." or "..". Reads
    and forgets take :func:`validate_identifier`, so memory saved under such an id stays reachable."""
    value = validate_identifier(value, field_name)
    problem = path_segment_problem(value)
    if problem:
        raise InvalidInputError(field_name, problem)
    return value


def parse_timestamp(value: object, field_name: str = "occurred_at") -> datetime:
    """ISO 8601 (``Z`` allowed) or LongMemEval's ``2023/04/10 (Mon) 17:50``; naive times are UTC."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        match = _LONGMEMEVAL_DATE.match(text)
        try:
            if match:
                year, month, day, hour, minute = map(int, match.groups())
                parsed = datetime(year, month, day, hour, minute)
            else:
                parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError as exc:
            raise InvalidInputError(field_name, f"cannot parse timestamp {text[:60]!r}: {exc}") from None
    elif value is None or value == "":
        raise InvalidInputError(field_name, "is required (when the exchange happened, ISO 8601)")
    else:
        raise InvalidInputError(field_name, f"must be an ISO 8601 string, got {type(value).__name__}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        # Stored and hashed in UTC: an offset that moves the time past year 1 or 9999 cannot be.
        parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidInputError(field_name, f"{parsed.isoformat()} is outside the years 1–9999 in UTC") from None
    return parsed


def checked_text(value: object, field_name: str, *, max_chars: int, if_blank: str | None = None) -> str:
    """A string of at most ``max_chars`` that Postgres can store; with ``if_blank``, also not blank (the
    reason given when it is). Messages, session ids and queries all pass through here."""
    if not isinstance(value, str):
        raise InvalidInputError(field_name, f"must be a string, got {type(value).__name__}")
    if if_blank is not None and not value.strip():
        raise InvalidInputError(field_name, if_blank)
    if len(value) > max_chars:
        raise InvalidInputError(field_name, f"is {len(value):,} characters; the limit is {max_chars:,}")
    problem = text_problem(value)
    if problem:
        raise InvalidInputError(field_name, problem)
    return value


def _message(raw: Mapping[str, Any], name: str) -> str:
    value = raw.get(name)
    return "" if value is None else checked_text(value, name, max_chars=MAX_MESSAGE_CHARS)


def parse_pair(raw: object, record: int | str | None = None) -> MemoryPair:
    """Validate one incoming record (a mapping or a :class:`MemoryPair`)."""
    try:
        return _parse_pair(raw)
    except InvalidInputError as exc:
        raise InvalidInputError(exc.field, exc.reason, record) from None


def _parse_pair(raw: object) -> MemoryPair:
    if isinstance(raw, MemoryPair):
        raw = {"session_id": raw.session_id, "user_message": raw.user_message,
               "assistant_message": raw.assistant_message, "occurred_at": raw.occurred_at,
               "turn_index": raw.turn_index, "metadata": dict(raw.metadata)}
    if not isinstance(raw, Mapping):
        raise InvalidInputError("record", f"must be an object with pair fields, got {type(raw).__name__}")
    unknown = sorted(set(raw) - PAIR_FIELDS)
    if unknown:
        # Refuse rather than ignore: a typo such as "asistant_message" would otherwise store half a pair.
        raise InvalidInputError(unknown[0], f"unknown field (expected some of {', '.join(sorted(PAIR_FIELDS))})")

    session_id = raw.get("session_id")
    if not isinstance(session_id, str):
        raise InvalidInputError("session_id", "is required (a non-empty string)")
    checked_text(session_id, "session_id", max_chars=MAX_SESSION_ID_CHARS, if_blank="is required (a non-empty string)")
    problem = path_segment_problem(session_id)
    if problem:
        raise InvalidInputError("session_id", problem)

    user_message = _message(raw, "user_message")
    assistant_message = _message(raw, "assistant_message")
    if not user_message.strip() and not assistant_message.strip():
        raise InvalidInputError("user_message", "user_message and assistant_message are both empty")

    occurred_at = parse_timestamp(raw.get("occurred_at"))

    turn_index = raw.get("turn_index")
    if turn_index is not None and (isinstance(turn_index, bool) or not isinstance(turn_index, int)
                                   or not 0 <= turn_index <= MAX_TURN_INDEX):
        raise InvalidInputError("turn_index", f"must be an integer from 0 to {MAX_TURN_INDEX}")

    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidInputError("metadata", f"must be an object, got {type(metadata).__name__}")
    problem = json_problem(dict(metadata))
    if problem:
        raise InvalidInputError("metadata", problem)

    return MemoryPair(session_id=session_id, user_message=user_message, assistant_message=assistant_message,
                      occurred_at=occurred_at, turn_index=turn_index, metadata=dict(metadata))
