"""What Postgres (and the UTF-8 encoder in front of it) can hold. Pure functions.

Postgres ``text`` and ``jsonb`` cannot store the NUL character (U+0000), ``jsonb`` cannot store NaN or
Infinity, and a lone surrogate (U+D800–U+DFFF, which Python strings may carry from ``surrogateescape`` or
a bad ``\\ud800`` JSON escape) cannot be encoded as UTF-8 at all. Input from users is checked here and
*rejected* with the reason (its owner must fix it); output from models (LLM replies) is *cleaned* here
(NUL dropped, a lone surrogate replaced by U+FFFD), because a model's stray byte must not block a user.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
# Metadata is a small bag of facts about a pair; the limits keep one record from costing a statement
# (Postgres parses jsonb recursively: a 100,000-deep array exhausts its stack).
MAX_JSON_DEPTH = 32
MAX_METADATA_BYTES = 64 * 1024


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as Postgres text, or None."""
    if "\x00" in text:
        return f"contains a NUL character (U+0000) at position {text.index(chr(0))}, which Postgres text cannot store"
    match = _SURROGATE.search(text)
    if match:
        return (f"contains a lone surrogate (U+{ord(match.group()):04X}) at position {match.start()}, "
                "which is not valid Unicode")
    return None


def clean_text(text: str) -> str:
    """``text`` made storable: NUL characters removed, lone surrogates replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    return _SURROGATE.sub(REPLACEMENT, text)


def clean_json(value: Any) -> Any:
    """A JSON value with every string (keys included) cleaned by :func:`clean_text`, and non-finite floats
    replaced by None, so ``jsonb`` accepts it."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(key)): clean_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_METADATA_BYTES) -> str | None:
    """Why ``value`` cannot be stored as ``jsonb`` within the limits, or None."""
    problem = _walk(value, 0, max_depth)
    if problem:
        return problem
    try:
        size = len(json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:  # ValueError: an integer too long to print (over 4,300 digits)
        return f"must be JSON-serialisable: {exc}"
    if size > max_bytes:
        return f"is {size:,} bytes as JSON; the limit is {max_bytes:,}"
    return None


def _walk(value: Any, depth: int, max_depth: int) -> str | None:
    """Depth, key types, finite numbers and storable strings, iteratively bounded by ``max_depth``."""
    if depth > max_depth:
        return f"is nested deeper than {max_depth} levels"
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"holds {value!r}, which JSON cannot represent"
    if isinstance(value, int):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has a {type(key).__name__} key {key!r}; keys must be strings"
            problem = text_problem(key)
            if problem:
                return f"key {key[:40]!r} {problem}"
            problem = _walk(item, depth + 1, max_depth)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple):
        for item in value:
            problem = _walk(item, depth + 1, max_depth)
            if problem:
                return problem
        return None
    return f"holds a {type(value).__name__}, which is not a JSON value"
