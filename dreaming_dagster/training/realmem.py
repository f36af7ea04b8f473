"""RealMem (a user and an assistant over ~200 sessions) as LongMemEval-format questions, so one loader builds
every memory.

Each persona is one user's memory. A query is a user's turn in a later conversation; it is asked as of the
start of its own session (its ``question_date``; pools draw only pairs that happened before it), so neither
the query nor anything after it can be found. Sessions are dated by their day, in file order within a day
(several share one), :data:`SESSION_GAP` apart from 08:00.

Evidence is the memory points the assistant's reply used (``memory_used``). A point that names its turn
(``source_turn`` ≥ 1) makes that turn's pair relevant; a point that does not (0 or −1) makes every pair of
its session relevant. The query's evidence sessions (``memory_session_uuids``) give session-level recall.
The split is by persona, never by query.

The first query of a persona carries every session of the persona (saved once); the later ones carry only
their evidence sessions, for their labels — the file stays the size of the personas, not of the queries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dreaming_dagster.storage.records import InvalidInputError

CATEGORIES = {"Dynamic Incremental": "realmem-incremental", "Dynamic Updating": "realmem-updating",
              "Implicit Preference": "realmem-preference", "Temporal-reasoning": "realmem-temporal"}
SPLIT = {"Adeleke_Okonjo": "train", "Ethan_Hunt": "train", "Kenta_Tanaka": "train", "Kim_Ji_young": "train",
         "Liam_O_Connor": "dev", "Lin_Wanyu": "test"}
FILE_SUFFIX = "_dialogues_256k.json"
SESSION_GAP = timedelta(minutes=20)  # up to 35 sessions share a day; 20 minutes apart stay within it
_DAY = re.compile(r"(\d{4}-\d{2}-\d{2})")


def persona_of(question_id: str) -> str:
    """"Lin_Wanyu:Q-0007" → "Lin_Wanyu"."""
    return question_id.split(":", 1)[0]


def part_of(question_id: str) -> str | None:
    return SPLIT.get(persona_of(question_id))


def persona_files(directory: Path) -> list[Path]:
    """The persona files of a RealMem directory, by persona name."""
    files = sorted(Path(directory).glob(f"*{FILE_SUFFIX}"))
    if not files:
        raise InvalidInputError("dataset_path", f"{directory} holds no *{FILE_SUFFIX} persona file")
    return files


def _session_times(sessions: list[dict[str, Any]]) -> list[datetime]:
    times, per_day = [], {}
    for number, session in enumerate(sessions):
        match = _DAY.match(str(session.get("current_time", "")))
        if not match:
            raise InvalidInputError(f"dialogues[{number}].current_time",
                                    f"cannot read a date from {str(session.get('current_time'))[:40]!r}")
        day = datetime.fromisoformat(match.group(1)).replace(hour=8)
        position = per_day.get(day, 0)
        per_day[day] = position + 1
        times.append(day + position * SESSION_GAP)
    return times


def _point_key(session_uuid: str, content: Any) -> tuple[str, str]:
    # A few points' content is an object, not a string: compare them by canonical JSON.
    return session_uuid, content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def _turns(session: dict[str, Any], evidence_turns: set[int] | None) -> list[dict[str, Any]]:
    """A session's turns in LongMemEval's shape; ``evidence_turns`` (0-based; None: every turn) carry has_answer."""
    return [{"role": "user" if turn.get("speaker") == "User" else "assistant", "content": str(turn.get("content", "")),
             "has_answer": evidence_turns is None or index in evidence_turns}
            for index, turn in enumerate(session.get("dialogue_turns") or [])]


def as_longmemeval(persona: str, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One persona's queries as LongMemEval-format records (the first carries every session)."""
    sessions = record.get("dialogues")
    if not isinstance(sessions, list) or not sessions:
        raise InvalidInputError("dialogues", f"{persona} has no sessions")
    times = _session_times(sessions)
    uuids = [str(session["session_uuid"]) for session in sessions]
    index_of = {uuid: number for number, uuid in enumerate(uuids)}
    points = {_point_key(str(point["session_uuid"]), point.get("content")): point
              for session in sessions for point in session.get("extracted_memory") or []}
    first = True
    for number, session in enumerate(sessions):
        turns = session.get("dialogue_turns") or []
        for position, turn in enumerate(turns):
            if not turn.get("is_query"):
                continue
            reply = turns[position + 1] if position + 1 < len(turns) else {}
            evidence: dict[str, set[int] | None] = {}
            for used in reply.get("memory_used") or []:
                point = points.get(_point_key(str(used.get("session_uuid")), used.get("content")))
                uuid = str(used.get("session_uuid"))
                if uuid not in index_of:
                    continue
                source_turn = int(point.get("source_turn", 0)) if point else 0
                if source_turn >= 1 and evidence.get(uuid, set()) is not None:
                    evidence.setdefault(uuid, set()).add(source_turn - 1)
                else:
                    evidence[uuid] = None  # the point's turn is unknown: every pair of its session
            for uuid in reply.get("memory_session_uuids") or []:
                if str(uuid) in index_of:
                    evidence.setdefault(str(uuid), None)
            if not evidence:
                continue
            category = CATEGORIES.get(str(turn.get("category_name")), "realmem-incremental")
            shown = range(len(sessions)) if first else sorted(index_of[uuid] for uuid in evidence)
            first = False
            yield {"question_id": f"{persona}:{turn.get('query_id') or f'{number}-{position}'}",
                   "question_type": category, "question": str(turn.get("content", "")), "answer": "",
                   "question_date": times[number].isoformat(),
                   "haystack_session_ids": [f"{persona}:{uuids[i]}" for i in shown],
                   "haystack_dates": [times[i].isoformat() for i in shown],
                   "haystack_sessions": [_turns(sessions[i], evidence[uuids[i]]) if uuids[i] in evidence
                                         else _turns(sessions[i], set()) for i in shown],
                   "answer_session_ids": sorted(f"{persona}:{uuid}" for uuid in evidence)}


def write_longmemeval_format(directory: Path, out: Path) -> int:
    """Convert a RealMem directory's persona files to one LongMemEval-format file; the query count."""
    questions = []
    for path in persona_files(directory):
        persona = path.name.removesuffix(FILE_SUFFIX)
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise InvalidInputError("file", f"{path.name} is not JSON: {error}") from None
        if not isinstance(record, dict):
            raise InvalidInputError("file", f"{path.name}: the top level must be an object with 'dialogues'")
        questions += as_longmemeval(persona, record)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(questions))
    return len(questions)
