"""Streaming readers for the two input formats. Pure: they yield records or rejections, never write.

- JSONL: one pair per line (``session_id, user_message, assistant_message, occurred_at`` and optional
  ``turn_index``, ``metadata``).
- LongMemEval (oracle, ``_s``, ``_m``): a JSON array of questions, each with ``haystack_sessions`` (lists of
  ``{role, content, has_answer}`` turns), ``haystack_session_ids`` and ``haystack_dates``. The array is
  streamed with ijson, so the ~260 MB ``_s`` split never sits in memory whole.
"""

from __future__ import annotations

import codecs
import gzip
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dreaming_dagster.storage.records import InvalidInputError, Rejection, parse_timestamp

DATASET_VARIABLE = "DREAMING_LONGMEMEVAL_PATH"
_SHARED_ORACLE = Path("..") / "shared" / "data" / "longmemeval" / "longmemeval_oracle.json"
_SHARED_S_TRAIN = _SHARED_ORACLE.with_name("longmemeval_s_train.json.gz")
_SHARED_LOCOMO = Path("..") / "shared" / "data" / "locomo" / "locomo_train5.json"
_SHARED_REALMEM = Path("..") / "shared" / "data" / "realmem"


@dataclass(frozen=True)
class LineRecord:
    """A raw record read from a file, with where it came from (for error messages)."""

    where: str
    raw: Any


class RepeatedKeyError(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict:
    """One JSON object; a key twice in it is refused (json's default keeps the last value silently, so a
    record could mean two things), as the HTTP API and MCP refuse it."""
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise RepeatedKeyError(key)
        seen[key] = value
    return seen


def read_jsonl(path: Path) -> Iterator[LineRecord | Rejection]:
    """Yield each non-blank line as a record, or a :class:`Rejection` for a line that is not UTF-8 or not
    JSON (malformed, a key twice in one object, an integer too long to read, nesting too deep). A UTF-8
    byte-order mark is skipped."""
    with path.open("rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            where = f"line {number}"
            if number == 1 and raw_line.startswith(codecs.BOM_UTF8):
                raw_line = raw_line[len(codecs.BOM_UTF8):]
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Rejection(record=where, field="encoding",
                                reason=f"not UTF-8: byte 0x{raw_line[exc.start]:02x} at column {exc.start + 1}")
                continue
            if not line.strip():
                continue
            try:
                yield LineRecord(where=where, raw=json.loads(line, object_pairs_hook=_object_without_repeats))
            except RepeatedKeyError as exc:
                yield Rejection(record=where, field=exc.key, reason=f"the key {exc.key!r} appears twice in one object")
            except json.JSONDecodeError as exc:
                yield Rejection(record=where, field="json", reason=f"malformed JSON: {exc.msg} at column {exc.colno}")
            except ValueError as exc:  # an integer of more than 4,300 digits
                yield Rejection(record=where, field="json", reason=f"unreadable JSON: {exc}")
            except RecursionError:
                yield Rejection(record=where, field="json", reason="JSON nested too deeply to read")


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


def iter_longmemeval_questions(path: Path) -> Iterator[Any]:
    """Stream the question records of a LongMemEval-format file (gzip-compressed when it ends in ``.gz``).

    Raises :class:`InvalidInputError` (field ``file``) when the top level is not a JSON array, or when the
    file ends early or stops being JSON; the questions before that point have been yielded.
    """
    import ijson

    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as handle:
        head = handle.read(4096).lstrip(codecs.BOM_UTF8).lstrip()
        if not head.startswith(b"["):
            raise InvalidInputError("file", f"{path.name}: the top level must be a JSON array of questions")
        handle.seek(0)
        if handle.read(len(codecs.BOM_UTF8)) != codecs.BOM_UTF8:
            handle.seek(0)
        count = 0
        try:
            # use_float: answers and numbers come back as int/float rather than Decimal.
            for question in ijson.items(handle, "item", use_float=True):
                count += 1
                yield question
        except (ijson.JSONError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise InvalidInputError("file", f"{path.name}: unreadable after question {count}: "
                                    f"{type(exc).__name__}: {str(exc)[:200]}") from None


def read_longmemeval(path: Path, limit_questions: int | None = None) -> Iterator[LineRecord | Rejection]:
    """Every pair record of a LongMemEval-format file; a file that breaks off or is not an array ends the
    stream with a :class:`Rejection` for the file (so ``--strict`` stores nothing of it)."""
    questions = iter_longmemeval_questions(path)
    if limit_questions is not None:
        questions = itertools.islice(questions, limit_questions)
    try:
        yield from longmemeval_session_records(questions)
    except InvalidInputError as exc:
        yield Rejection(record="file", field=exc.field, reason=exc.reason)


def longmemeval_session_records(questions: Iterable[Any]) -> Iterator[LineRecord | Rejection]:
    """Yield one pair record per exchange of every distinct session, in the order met.

    A session shared by several questions is emitted once. ``metadata`` keeps LongMemEval's ``has_answer``
    per pair (relevance labels for evaluation); which sessions answer which question stays in the file.
    A question or session of the wrong shape is a :class:`Rejection`, never an exception.
    """
    seen_sessions: set[str] = set()
    for number, question in enumerate(questions, start=1):
        if not isinstance(question, dict):
            yield Rejection(record=f"question {number}", field="question",
                            reason=f"must be an object, got {type(question).__name__}")
            continue
        question_id = question.get("question_id", f"#{number}")
        sessions = question.get("haystack_sessions") or []
        session_ids = question.get("haystack_session_ids") or []
        dates = question.get("haystack_dates") or []
        if not all(isinstance(v, list) for v in (sessions, session_ids, dates)) or not (
                len(sessions) == len(session_ids) == len(dates)):
            yield Rejection(record=f"question {question_id}", field="haystack_sessions",
                            reason="haystack_sessions, haystack_session_ids and haystack_dates must be lists of "
                            "the same length")
            continue
        for session_id, date, turns in zip(session_ids, dates, sessions, strict=True):
            where = f"question {question_id} session {str(session_id)[:80]}"
            if not isinstance(session_id, str) or not isinstance(turns, list) or not all(
                    isinstance(turn, dict) for turn in turns):
                yield Rejection(record=where, field="haystack_sessions",
                                reason="a session needs a string id and a list of {role, content} turns")
                continue
            if session_id in seen_sessions:
                continue
            seen_sessions.add(session_id)
            try:
                occurred_at = parse_timestamp(date, "haystack_dates")
            except InvalidInputError as exc:
                yield Rejection(record=where, field=exc.field, reason=exc.reason)
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


def default_dataset_path() -> Path:
    """DREAMING_LONGMEMEVAL_PATH (the settings' ``longmemeval_path``), else the shared oracle file."""
    from dreaming_dagster.config.settings import DreamingSettings
    from dreaming_dagster.dagster_env import project_root

    explicit = DreamingSettings().longmemeval_path
    if explicit:
        return explicit

    return (project_root() / _SHARED_ORACLE).resolve()


def default_haystacks_path() -> Path:
    """The shared `_S` haystacks of the ranker's training questions (each question's own ~50 sessions)."""
    from dreaming_dagster.dagster_env import project_root

    return (project_root() / _SHARED_S_TRAIN).resolve()


def default_locomo_path() -> Path:
    """The shared LoCoMo conversations (people chatting; the ranker's third distribution)."""
    from dreaming_dagster.dagster_env import project_root

    return (project_root() / _SHARED_LOCOMO).resolve()


def default_realmem_path() -> Path:
    """The shared RealMem personas (a companion's mid-conversation queries; the ranker's fourth distribution)."""
    from dreaming_dagster.dagster_env import project_root

    return (project_root() / _SHARED_REALMEM).resolve()
