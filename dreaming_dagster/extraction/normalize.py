"""Canonical subject names, so the same subject written differently dedupes. Pure functions.

"**Avery**", "Avery's", "avery" and " Avery  " all become "Avery"; "Avery Felts Project" stays itself.
The result is what the exact-string guard (unique md5 index) compares, so it must be deterministic.
"""

from __future__ import annotations

import re
import unicodedata

_MARKDOWN = re.compile(r"[*_`#>~]+|\[([^\]]*)\]\([^)]*\)")
_LEADING_BULLET = re.compile(r"^\s*(?:[-+•·]|\d+[.)])\s+")
_POSSESSIVE = re.compile(r"(?<=\w)['’]s?$")
_EDGE_PUNCTUATION = re.compile(r"^[\s\"'“”‘’.,;:!?()\[\]{}]+|[\s\"'“”‘’.,;:!?()\[\]{}]+$")
_WHITESPACE = re.compile(r"\s+")
MAX_NAME_CHARS = 120


def _canonical_word(word: str) -> str:
    letters = [c for c in word if c.isalpha()]
    if 1 < len(letters) <= 4 and all(c.isupper() for c in letters):
        return word  # an acronym: AI, NASA, NYC
    if any(c.isupper() for c in word[1:]) and not all(c.isupper() for c in letters):
        return word  # internal capitals carry meaning: iPhone, McDonald, PyTorch
    return word[:1].upper() + word[1:].lower()


def normalize_subject_name(name: str) -> str:
    """The canonical form of a subject name ("" when nothing meaningful is left)."""
    text = unicodedata.normalize("NFKC", name or "")
    text = _MARKDOWN.sub(lambda m: m.group(1) or "", text)
    text = _LEADING_BULLET.sub("", text)
    text = _WHITESPACE.sub(" ", text).strip()
    text = _EDGE_PUNCTUATION.sub("", text)
    words = [_POSSESSIVE.sub("", word) for word in text.split(" ")]
    text = " ".join(_canonical_word(word) for word in words if word)
    return text[:MAX_NAME_CHARS].strip()


def canonical_name(value: str, max_words: int | None = None) -> str:
    """A model's subject name as stored: normalized, at most ``max_words`` words; an empty result is an
    error (the pydantic validators of extraction and refinement answers both call this)."""
    words = normalize_subject_name(value).split(" ")
    name = " ".join(words[:max_words] if max_words else words).strip()
    if not name:
        raise ValueError(f"subject name {value!r} has no content")
    return name
