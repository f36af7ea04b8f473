"""Inspection: what a user's memory holds, read the way a user or an operator asks for it.

``list_pairs`` pages through the user's pairs (oldest first, by session and time range; a cursor resumes
after the last pair of a page), ``read_pair`` gives one pair with its subjects and dated events,
``list_subjects`` the user's subjects most linked first (or those whose name contains a text), and
``read_subject`` one subject with its pairs. Every read is scoped by user and graph (tenant): another
user's or tenant's id reads as not found.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import datetime

from dreaming_dagster.memory import ready_database
from dreaming_dagster.sql import load_sql
from dreaming_dagster.storage.database import Database
from dreaming_dagster.storage.records import (
    MAX_SESSION_ID_CHARS,
    InvalidInputError,
    checked_text,
    parse_timestamp,
    validate_identifier,
)

MAX_PAGE = 500
MAX_OFFSET = 2**31 - 1
MAX_SEARCH_CHARS = 200


@dataclass
class PairPage:
    pairs: list[dict]
    next_cursor: str | None  # pass it back as ``cursor`` for the next page; None: this was the last

    def as_dict(self) -> dict:
        return {"pairs": [jsonable(p) for p in self.pairs], "next_cursor": self.next_cursor}


def list_pairs(user_id: str, kg_id: str = "default", *, session_id: str | None = None, since=None, until=None,
               limit: int = 50, cursor: str | None = None, database: Database | None = None) -> PairPage:
    """A page of the user's pairs, oldest first; ``since``/``until`` bound ``occurred_at`` (ISO 8601 or a
    datetime; ``until`` excluded)."""
    params = _scope(user_id, kg_id) | {
        "session_id": None if session_id is None else checked_text(
            session_id, "session_id", max_chars=MAX_SESSION_ID_CHARS, if_blank="must be a non-empty string or None"),
        "limit": _limit(limit),
        "since": parse_timestamp(since, "since") if since is not None else None,
        "until": parse_timestamp(until, "until") if until is not None else None}
    params["after_time"], params["after_id"] = _read_cursor(cursor)
    with _database(database).connect(vectors=False) as conn:
        rows = conn.execute(load_sql("inspect/list_pairs"), params).fetchall()
    last = rows[-1] if len(rows) == params["limit"] else None
    return PairPage(pairs=[dict(r) for r in rows], next_cursor=_cursor(last) if last else None)


def read_pair(user_id: str, pair_id: str, kg_id: str = "default", *, database: Database | None = None) -> dict | None:
    """One pair of the user with its subjects, dated events and index keys, or None."""
    params = _scope(user_id, kg_id) | {"pair_id": _uuid(pair_id, "pair_id")}
    with _database(database).connect(vectors=False) as conn:
        row = conn.execute(load_sql("inspect/pair"), params).fetchone()
        if row is None:
            return None
        return dict(row) | {
            "subjects": [dict(r) for r in conn.execute(load_sql("inspect/pair_subjects"), params)],
            "times": [dict(r) for r in conn.execute(load_sql("inspect/pair_times"), params)],
            "keys": [dict(r) for r in conn.execute(load_sql("inspect/pair_keys"), params)]}


def list_subjects(user_id: str, kg_id: str = "default", *, search: str | None = None, limit: int = 50,
                  offset: int = 0, include_archived: bool = False, database: Database | None = None) -> list[dict]:
    """The user's subjects, most linked first; ``search``: only names containing it (case-insensitive)."""
    if search is not None:
        checked_text(search, "search", max_chars=MAX_SEARCH_CHARS, if_blank="must be a non-empty string")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise InvalidInputError("offset", f"must be an integer from 0 to {MAX_OFFSET}")
    params = _scope(user_id, kg_id) | {"search": search.strip() if search else None, "limit": _limit(limit),
                                       "offset": offset, "include_archived": bool(include_archived)}
    with _database(database).connect(vectors=False) as conn:
        return [dict(r) for r in conn.execute(load_sql("inspect/list_subjects"), params)]


def subjects_cursor(offset: int) -> str:
    """A cursor for the subjects from ``offset`` on (a listing that pages by cursor rather than offset: MCP)."""
    return base64.urlsafe_b64encode(f"subjects|{offset}".encode()).decode()


def read_subjects_cursor(cursor: str | None) -> int:
    """The offset a :func:`subjects_cursor` stands for (0 for None)."""
    if cursor is None:
        return 0
    try:
        kind, _, offset = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        if kind == "subjects" and offset.isdigit() and int(offset) <= MAX_OFFSET:
            return int(offset)
    except (ValueError, UnicodeError, AttributeError):
        pass
    raise InvalidInputError("cursor", "is not a cursor this listing of subjects returned")


def read_subject(user_id: str, subject_id: str, kg_id: str = "default", *, pair_limit: int = 50,
                 database: Database | None = None) -> dict | None:
    """One subject of the user with its most recent ``pair_limit`` pairs, or None."""
    params = _scope(user_id, kg_id) | {"subject_id": _uuid(subject_id, "subject_id"), "limit": _limit(pair_limit)}
    with _database(database).connect(vectors=False) as conn:
        row = conn.execute(load_sql("inspect/subject"), params).fetchone()
        if row is None:
            return None
        return dict(row) | {"linked_pairs": [dict(r) for r in conn.execute(load_sql("inspect/subject_pairs"), params)]}


def pair_owner(pair_id: str, kg_id: str, *, database: Database | None = None) -> str | None:
    """The user holding ``pair_id`` in the graph ``kg_id`` (a tenant's), or None."""
    params = {"pair_id": _uuid(pair_id, "pair_id"), "kg_id": validate_identifier(kg_id, "kg_id")}
    with _database(database).connect(vectors=False) as conn:
        row = conn.execute(load_sql("inspect/pair_owner"), params).fetchone()
    return row["user_id"] if row else None


def jsonable(value):
    """Rows as JSON: datetimes and dates in ISO 8601, nested lists and dicts alike."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


# ------------------------------------------------------------------------------------------------ internals
def _scope(user_id: str, kg_id: str) -> dict:
    return {"user_id": validate_identifier(user_id, "user_id"), "kg_id": validate_identifier(kg_id, "kg_id")}


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError("limit", f"must be an integer from 1 to {MAX_PAGE}")
    return limit


def _uuid(value: str, name: str) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidInputError(name, f"is not an id (a UUID): {str(value)[:60]!r}") from None


def _cursor(row: dict) -> str:
    return base64.urlsafe_b64encode(f"{row['occurred_at'].isoformat()}|{row['pair_id']}".encode()).decode()


def _read_cursor(cursor: str | None) -> tuple[datetime | None, str | None]:
    if cursor is None:
        return None, None
    try:
        moment, _, pair_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(moment), str(uuid.UUID(pair_id))
    except (ValueError, UnicodeError, AttributeError):
        raise InvalidInputError("cursor", "is not a cursor this listing returned") from None


def _database(database: Database | None) -> Database:
    return ready_database(database)
