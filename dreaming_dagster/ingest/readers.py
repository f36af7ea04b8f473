"""Streaming readers for the two input formats. Pure: they yield records or rejections, never write.

- JSONL: one pair per line (``session_id, user_message, assistant_message, occurred_at`` and optional
  ``turn_index``, ``metadata``).
- LongMemEval (oracle, ``_s``, ``_m``): a JSON array of questions, each with ``haystack_sessions`` (lists of
  ``{role, content, has_answer}`` turns), ``haystack_session_ids`` and ``haystack_dates``. The array is
  streamed with ijson, so the ~260 MB ``_s`` split never sits in memory whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dreaming_dagster.ingest.records import InvalidInputError, Rejection, parse_timestamp


@dataclass(frozen=True)
class LineRecord:
    """A raw record read from a file, with where it came from (for error messages)."""

    where: str
    raw: Any


def read_jsonl(path: Path) -> Iterator[LineRecord | Rejection]:
    """Yield each non-blank line as a record, or a :class:`Rejection` for malformed JSON."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield LineRecord(where=f"line {number}", raw=json.loads(line))
            except json.JSONDecodeError as exc:
                yield Rejection(record=f"line {number}", field="json", reason=f"malformed JSON: {exc.msg} "
                                f"at column {exc.colno}")


def session_pairs(turns: Sequence[dict[str, Any]]) -> Iterator[tuple[int, str, str, bool]]:
    """Turn a session's turns into (turn_index, user_message, assistant_message, has_answer) pairs.

    A user turn followed by an assistant turn is one pair; a user turn without a reply and an assistant
    turn without a preceding user turn each form a pair with the other side empty, so no turn is dropped.
    ``has_answer`` is true when either turn carries LongMemEval's evidence flag.
    """
    index = 0
    pending_user: dict[str, Any] | None = None
    for turn in turns:
        role = turn.get("role")
        if role == "user":
            if pending_user is not None:
                yield index, pending_user.get("content") or "", "", bool(pending_user.get("has_answer"))
                index += 1
            pending_user = turn
        elif role == "assistant":
            user_turn = pending_user or {}
            yield (index, user_turn.get("content") or "", turn.get("content") or "",
                   bool(user_turn.get("has_answer")) or bool(turn.get("has_answer")))
            index += 1
            pending_user = None
    if pending_user is not None:
        yield index, pending_user.get("content") or "", "", bool(pending_user.get("has_answer"))


def iter_longmemeval_questions(path: Path) -> Iterator[dict[str, Any]]:
    """Stream the question records of a LongMemEval-format file."""
    import ijson

    with path.open("rb") as handle:
        # use_float: answers and numbers come back as int/float rather than Decimal.
        yield from ijson.items(handle, "item", use_float=True)


def longmemeval_session_records(questions: Iterable[dict[str, Any]]) -> Iterator[LineRecord | Rejection]:
    """Yield one pair record per exchange of every distinct session, in the order met.

    A session shared by several questions is emitted once. ``metadata`` keeps LongMemEval's ``has_answer``
    per pair (relevance labels for evaluation); which sessions answer which question stays in the file.
    """
    seen_sessions: set[str] = set()
    for question in questions:
        question_id = question.get("question_id", "?")
        sessions = question.get("haystack_sessions") or []
        session_ids = question.get("haystack_session_ids") or []
        dates = question.get("haystack_dates") or []
        if not (len(sessions) == len(session_ids) == len(dates)):
            yield Rejection(record=f"question {question_id}", field="haystack_sessions",
                            reason="haystack_sessions, haystack_session_ids and haystack_dates differ in length")
            continue
        for session_id, date, turns in zip(session_ids, dates, sessions, strict=True):
            if session_id in seen_sessions:
                continue
            seen_sessions.add(session_id)
            try:
                occurred_at = parse_timestamp(date, "haystack_dates")
            except InvalidInputError as exc:
                yield Rejection(record=f"question {question_id} session {session_id}", field=exc.field,
                                reason=exc.reason)
                continue
            for turn_index, user_message, assistant_message, has_answer in session_pairs(turns):
                metadata = {"source": "longmemeval", "has_answer": has_answer}
                yield LineRecord(
                    where=f"session {session_id} pair {turn_index}",
                    raw={"session_id": session_id, "turn_index": turn_index, "user_message": user_message,
                         "assistant_message": assistant_message, "occurred_at": occurred_at,
                         "metadata": metadata},
                )


def sessions_in_date_order(questions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Questions re-packed so their sessions come out oldest first (for a realistic memory timeline)."""
    entries = []
    for question in questions:
        for session_id, date, turns in zip(question.get("haystack_session_ids") or [],
                                           question.get("haystack_dates") or [],
                                           question.get("haystack_sessions") or [], strict=False):
            entries.append((parse_timestamp(date, "haystack_dates"), session_id, date, turns,
                            question.get("question_id")))
    entries.sort(key=lambda entry: (entry[0], entry[1]))
    return [{"question_id": question_id, "haystack_session_ids": [session_id], "haystack_dates": [date],
             "haystack_sessions": [turns]}
            for _, session_id, date, turns, question_id in entries]
