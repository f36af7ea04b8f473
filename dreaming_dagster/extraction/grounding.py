"""Is what a model named actually in the text it read? Pure functions.

Small models answer with valid JSON about things the text never mentions (asked about Lisbon, a 270M model
named "the Tagus Bridge over the Douro"). A name is *grounded* in a text when at least half of its content
words (stop words aside) occur in it, and at least one of those found is not a generic word
(``generic_subjects.txt``: "plan", "trip"), so "Douro Trip" is not grounded by "trip" alone. Words match
by a light stem (plural, -ing, -ed, a final e, a doubled consonant: "hiking" finds "hike", "pies" finds
"pie") or as a prefix of at least five letters ("Japan" finds "Japanese"). Half, not all, because models
add a head noun the text leaves implicit ("Golden Gate Park" for "the Golden Gate").

Time expressions are grounded when they occur verbatim (case and spacing aside): the prompt asks for them
copied as written, and an invented one would date the pair wrongly.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from dreaming_dagster.extraction.entities import generic_subjects
from dreaming_dagster.extraction.schema import Extraction

_WORD = re.compile(r"\w+")
MIN_PREFIX = 5


@cache
def stop_words() -> frozenset[str]:
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text or "").casefold())


def stem(word: str) -> str:
    """A light English stem; both sides of a comparison go through it, so it only has to be consistent."""
    for suffix, replacement in (("ies", "y"), ("ing", ""), ("es", ""), ("ed", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: len(word) - len(suffix)] + replacement
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1].isalpha():
        word = word[:-1]  # running → runn → run
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]  # hike / hiking → hik
    return word


@dataclass(frozen=True)
class TextWords:
    """The stems of a text, to check any number of names against it."""

    stems: frozenset[str]
    flat: str  # the text lower-cased with single spaces, for verbatim checks

    @classmethod
    def of(cls, *texts: str) -> TextWords:
        joined = " ".join(t for t in texts if t)
        return cls(frozenset(stem(w) for w in _words(joined)), " ".join(_words(joined)))

    def has(self, word: str) -> bool:
        root = stem(word)
        if root in self.stems:
            return True
        if len(root) < MIN_PREFIX:
            return False
        return any(len(s) >= MIN_PREFIX and (s.startswith(root) or root.startswith(s)) for s in self.stems)

    def holds_verbatim(self, phrase: str) -> bool:
        words = " ".join(_words(phrase))
        return bool(words) and f" {words} " in f" {self.flat} "


def content_words(name: str) -> list[str]:
    words = _words(name)
    content = [w for w in words if w not in stop_words()]
    return content or words


def is_grounded(name: str, text: TextWords) -> bool:
    content = content_words(name)
    if not content:
        return False
    found = [w for w in content if text.has(w)]
    generic = generic_subjects()
    specific = [w for w in content if w not in generic]
    return 2 * len(found) >= len(content) and (not specific or any(w not in generic for w in found))


def grounded_names(names: Iterable[str], text: TextWords) -> tuple[list[str], list[str]]:
    """(grounded, not grounded), each in the given order."""
    kept, dropped = [], []
    for name in names:
        (kept if is_grounded(name, text) else dropped).append(name)
    return kept, dropped


def grounded_extraction(extraction: Extraction, user_message: str,
                        assistant_message: str) -> tuple[Extraction, list[str]]:
    """``extraction`` keeping what the pair's text grounds, and what was dropped (for the log and the bench):
    subjects grounded in either turn, facts in the user's turn (they are the user's statements), times
    verbatim in either turn."""
    pair, user = TextWords.of(user_message, assistant_message), TextWords.of(user_message)
    subjects = [s for s in extraction.subjects if is_grounded(s.name, pair)]
    facts = [f for f in extraction.facts if is_grounded(f, user)]
    times = [t for t in extraction.times if pair.holds_verbatim(t)]
    dropped = ([f"subject {s.name!r}" for s in extraction.subjects if s not in subjects]
               + [f"fact {f!r}" for f in extraction.facts if f not in facts]
               + [f"time {t!r}" for t in extraction.times if t not in times])
    return extraction.model_copy(update={"subjects": subjects, "facts": facts, "times": times}), dropped
