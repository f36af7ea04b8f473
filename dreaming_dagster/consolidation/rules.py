"""Pure rules of consolidation: protection, what a merge may not lose, junk, and importance decay."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from dreaming_dagster.extraction.entities import is_generic
from dreaming_dagster.extraction.normalize import normalize_subject_name

# Subjects whose names are proper nouns: every capitalised word of their name is identity.
PROPER_NOUN_TYPES = frozenset({"person", "place", "organization", "project", "product", "event", "entity"})
STOP_WORDS = frozenset("""a an the and or but if of to in on at by for with from as is are was were be been it its
this that these those i me my we our you your he she they them his her their there here what which who whom
how when where why not no yes so too very just also than then about into over under again more most some any
all each both few other such only own same can will would should could may might must do does did done have has
had having get got thing things stuff lol lmao ok okay""".split())  # noqa: SIM905 (a word list reads better)
_FRAGMENT_END = frozenset({"with", "and", "or", "the", "a", "an", "of", "to", "for", "from", "in", "on", "at", "by"})
_MARKDOWN_ARTIFACT = re.compile(r"(\*\*|__|`|^#+|^\s*[-*]\s|\[|\]|^\W+:|:\s*$)")
_NUMBER = re.compile(r"\d")


@dataclass(frozen=True)
class Protection:
    importance: float = 0.8
    reinforcement: int = 5


def is_protected(subject: dict, protection: Protection = Protection()) -> bool:
    """Pinned subjects, and those important or reinforced enough, never leave the live graph by archive."""
    return bool(subject.get("pinned")) or float(subject.get("importance", 0)) >= protection.importance or int(
        subject.get("reinforcement_count", 0)) >= protection.reinforcement


def distinctive_tokens(name: str, subject_type: str) -> set[str]:
    """What identifies a subject and must survive a merge: numbers, acronyms and inner capitals always;
    every capitalised word when the subject's type says its name is a proper noun."""
    tokens = set()
    for word in normalize_subject_name(name).split():
        letters = [c for c in word if c.isalpha()]
        acronym = len(letters) > 1 and all(c.isupper() for c in letters)
        inner_capital = any(c.isupper() for c in word[1:]) and not acronym
        if _NUMBER.search(word) or acronym or inner_capital or (
                subject_type in PROPER_NOUN_TYPES and word[:1].isupper() and word.casefold() not in STOP_WORDS):
            tokens.add(word.casefold())
    return tokens


def merge_drops_identity(target_name: str, sources: list[tuple[str, str]]) -> set[str]:
    """The distinctive tokens of ``sources`` ((name, type) pairs) that the target's name lacks; a merge
    that would drop any is refused ("iPhone 14" into "iPhone 15", "Avery Felts Project" into "Avery")."""
    kept = {word.casefold() for word in normalize_subject_name(target_name).split()}
    missing = set()
    for name, subject_type in sources:
        missing |= distinctive_tokens(name, subject_type) - kept
    return missing


def junk_reason(name: str) -> str | None:
    """Why a subject name is junk (nothing left after normalization, only stop-words, a sentence fragment,
    a markdown artifact), or None."""
    normalized = normalize_subject_name(name)
    words = [w.casefold() for w in normalized.split()]
    if len(normalized.replace(" ", "")) <= 1:
        return "nothing meaningful left after normalization"
    if all(w in STOP_WORDS for w in words):
        return "only stop-words"
    if is_generic(normalized):
        return "a generic word or phrase (extraction/generic_subjects.txt)"
    if words[-1] in _FRAGMENT_END or words[0] in {"and", "or", "but", "with", "of"}:
        return "a sentence fragment"
    if _MARKDOWN_ARTIFACT.search(name.strip()) and normalized.casefold() != name.strip().casefold() and (
            len(normalized) < 3 or ":" in name):
        return "a markdown artifact"
    return None


def variant_key(name: str) -> str:
    """What names that differ only in case, possessive or a regular plural share: "Dogs", "dog's" and
    "Dog" → "dog"; "Hiking Boots" and "hiking boot" → "hiking boot". Only for grouping, never shown."""
    words = normalize_subject_name(name).casefold().split()
    return " ".join(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")) else w
                    for w in words)


# Types whose names are names (a person, a place): "Rachel" inside "Rachel Green" is the same one when
# both are named in the same conversations. Topics are not: "Bread" inside "Bread Dough" is another thing.
NAMED_TYPES = frozenset({"person", "place", "organization", "product", "event", "entity"})


def contained_name_merges(subjects: list[dict]) -> list[tuple[dict, dict]]:
    """(shorter, longer) merges a rule can prove: the shorter name's words stand in the longer name, in order
    ("Rachel" in "Rachel Green", "Golden Gate" in "Golden Gate Park"), both of one named type, sharing at
    least one pair (``pair_ids``), and exactly one longer name qualifies (two candidates — "Rachel Green",
    "Rachel Adams" — mean the short name is ambiguous, so nothing merges). A longer name that is itself
    merged into a still longer one is no target (no chains in one pass)."""
    def words(subject: dict) -> tuple[str, ...]:
        return tuple(normalize_subject_name(subject["subject_text"]).casefold().split())

    def inside(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
        return len(short) < len(long) and any(long[i:i + len(short)] == short for i in range(len(long) - len(short) + 1))

    named = [s for s in subjects if s.get("subject_type") in NAMED_TYPES and words(s)]
    by_word: dict[str, list[dict]] = {}
    for subject in named:
        for word in set(words(subject)):
            by_word.setdefault(word, []).append(subject)
    proposals = []
    for short in named:
        short_words, short_pairs = words(short), set(short.get("pair_ids") or ())
        containers = [long for long in by_word.get(short_words[0], ())
                      if long["subject_type"] == short["subject_type"] and inside(short_words, words(long))]
        if len(containers) == 1 and short_pairs & set(containers[0].get("pair_ids") or ()):
            proposals.append((short, containers[0]))
    sources = {short["id"] for short, _ in proposals}
    return sorted([(short, long) for short, long in proposals if long["id"] not in sources],
                  key=lambda pair: (pair[1]["id"], pair[0]["id"]))


@dataclass(frozen=True)
class DecayPolicy:
    grace_days: float = 30.0
    half_life_days: float = 45.0
    floor: float = 0.10


def decayed(importance: float, last_seen_at: datetime, decayed_through: datetime | None, now: datetime,
            policy: DecayPolicy = DecayPolicy()) -> tuple[float, datetime | None]:
    """Importance after decaying up to ``now``, and the new ``decayed_through``.

    Decay runs only over time not yet decayed that lies past the grace period since the subject was last
    seen: [max(last_seen + grace, decayed_through), now]. Multiplicative decay composes
    (0.5^(a/T)·0.5^(b/T) = 0.5^((a+b)/T)), so the curve is the same whether passes run hourly or weekly.
    Importance at or below the floor is left alone; decay never takes it under the floor.
    """
    if policy.half_life_days <= 0 or importance <= policy.floor:
        return importance, decayed_through
    start = last_seen_at + timedelta(days=policy.grace_days)
    if decayed_through is not None and decayed_through > start:
        start = decayed_through
    if start >= now:
        return importance, decayed_through
    elapsed_days = (now - start).total_seconds() / 86400.0
    half_lives = min(elapsed_days / policy.half_life_days, 1000.0)  # as decay.sql: no float underflow
    return max(policy.floor, importance * math.pow(0.5, half_lives)), now
