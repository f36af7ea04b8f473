"""Tolerant extraction of the JSON object in an LLM reply. Pure functions.

Models wrap JSON in reasoning blocks (``<think>…</think>``), prose ("Here is the JSON:"), markdown
fences, and sometimes put raw newlines or tabs inside strings. We take the outermost JSON object that
parses, clean what Postgres cannot store (NUL, lone surrogates) and leave validation to pydantic.
Truncated JSON is an error, never guessed at.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dreaming_dagster.storage.storable import clean_json

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_THINK = re.compile(r"<think>.*", re.DOTALL | re.IGNORECASE)


class LLMOutputError(ValueError):
    """The reply holds no usable JSON object."""


def strip_reasoning(text: str) -> str:
    text = _THINK_BLOCK.sub("", text)
    # A reply cut off inside its reasoning has no answer after it.
    return _UNCLOSED_THINK.sub("", text)


def _object_spans(text: str):
    """Yield (start, end) of each balanced top-level {...} span, respecting strings and escapes."""
    depth, start, in_string, escaped = 0, None, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"' and depth > 0:
            in_string = True
        elif char == "{":
            if depth == 0:
                start = index
            depth += 1
        elif char == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                yield start, index + 1


def extract_json_object(text: str) -> dict[str, Any]:
    """The first complete top-level JSON object in ``text`` that parses, as a dict."""
    if not isinstance(text, str) or not text.strip():
        raise LLMOutputError("empty reply")
    cleaned = strip_reasoning(text)
    for start, end in _object_spans(cleaned):
        candidate = cleaned[start:end]
        try:
            # strict=False accepts raw control characters (newlines, tabs) inside strings.
            value = json.loads(candidate, strict=False)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            # A model's stray NUL or lone surrogate must not fail the database write of a whole batch.
            return clean_json(value)
    if "{" in cleaned:
        raise LLMOutputError("reply has an opening '{' but no complete JSON object (truncated?)")
    raise LLMOutputError("reply contains no JSON object")
