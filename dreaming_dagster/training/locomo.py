"""LoCoMo (two people chatting over months) as LongMemEval-format questions, so one loader builds every memory.

Each conversation is one user's memory. Two consecutive turns of a session form a pair — the first as
``user_message``, the reply as ``assistant_message`` — each prefixed with its speaker's name, a shared
photo's caption appended, dated by its session. A pair is relevant to a question when it holds one of the
question's evidence dialog ids. Adversarial questions (category 5: no answer in the conversation) are left
out. The split is by conversation, never by question, so no tested question shares a memory with training.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dreaming_dagster.storage.records import InvalidInputError

CATEGORIES = {1: "locomo-multi-hop", 2: "locomo-temporal", 3: "locomo-open-domain", 4: "locomo-single-hop"}
SPLIT = {"conv-26": "train", "conv-41": "train", "conv-42": "train", "conv-30": "dev", "conv-43": "test"}
SESSION_DATE = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_SESSION_KEY = re.compile(r"session_(\d+)")


def conversation_of(question_id: str) -> str:
    """"conv-26:017" → "conv-26"."""
    return question_id.split(":", 1)[0]


def part_of(question_id: str) -> str | None:
    return SPLIT.get(conversation_of(question_id))


def _turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def _sessions(conversation: dict[str, Any]) -> list[tuple[int, datetime, list[dict[str, Any]]]]:
    sessions = []
    for key, turns in conversation.items():
        match = _SESSION_KEY.fullmatch(key)
        if not match or not turns:
            continue
        raw_date = conversation.get(f"{key}_date_time")
        try:
            when = datetime.strptime(str(raw_date).strip(), SESSION_DATE)
        except ValueError:
            raise InvalidInputError(f"{key}_date_time", f"cannot parse {str(raw_date)[:40]!r} as "
                                    "'1:56 pm on 8 May, 2023'") from None
        sessions.append((int(match.group(1)), when, turns))
    return sorted(sessions, key=lambda session: session[0])


def _evidence_ids(evidence: list[Any]) -> set[str]:
    # A few entries hold several ids in one string ("D8:6; D9:17").
    return {part for entry in evidence for part in re.split(r"[;,\s]+", str(entry)) if part}


def as_longmemeval(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One LoCoMo conversation's answerable questions as LongMemEval-format records over the whole conversation."""
    conversation_id = str(record["sample_id"])
    sessions = _sessions(record["conversation"])
    if not sessions:
        raise InvalidInputError("conversation", f"{conversation_id} has no sessions")
    asked_at = max(when for _, when, _ in sessions) + timedelta(days=1)
    for number, qa in enumerate(record.get("qa") or [], 1):
        category = CATEGORIES.get(qa.get("category"))
        evidence = _evidence_ids(qa.get("evidence") or [])
        if category is None or not evidence:
            continue
        haystack = []
        for _, _, turns in sessions:
            # Alternating roles make session_pairs pair each turn with the next: (0, 1), (2, 3), …
            haystack.append([{"role": "user" if index % 2 == 0 else "assistant", "content": _turn_text(turn),
                              "has_answer": turn.get("dia_id") in evidence} for index, turn in enumerate(turns)])
        yield {"question_id": f"{conversation_id}:{number:03d}", "question_type": category,
               "question": str(qa["question"]), "answer": str(qa.get("answer", "")),
               "question_date": asked_at.isoformat(),
               "haystack_session_ids": [f"{conversation_id}:session_{n}" for n, _, _ in sessions],
               "haystack_dates": [when.isoformat() for _, when, _ in sessions],
               "haystack_sessions": haystack,
               "answer_session_ids": sorted({f"{conversation_id}:session_{e.split(':')[0][1:]}" for e in evidence})}


def write_longmemeval_format(locomo_path: Path, out: Path) -> int:
    """Convert a LoCoMo file to a LongMemEval-format file (conversation by conversation); the question count."""
    records = json.loads(Path(locomo_path).read_text())
    if not isinstance(records, list):
        raise InvalidInputError("file", f"{Path(locomo_path).name}: the top level must be a list of conversations")
    questions = [question for record in records for question in as_longmemeval(record)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(questions))
    return len(questions)
