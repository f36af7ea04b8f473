"""Index keys a pair gets besides its own two vectors: what the user states about themselves, and the dated
events already found in the user's turn.

A long user turn holds many sentences and its one vector averages them all; "I usually take the 7:15
train" or "my sister Rachel …" is one sentence of it. Written as keys of their own (each its own row, vector
and words, pointing to the pair: migration 0030), such sentences are found by a question about them alone
(LongMemEval's fact-augmented key expansion). Offline and deterministic: spaCy's tokenizer, sentencizer and
token patterns (no statistical model), the same on every run.

- ``statement``: a sentence of the user's turn where the user speaks of themselves — a preference
  ("I prefer…", "I love…"), a habit ("I usually…"), a possession ("I have…", "I bought…"), a relation ("my
  sister Rachel…"), a plan ("I'm planning to…"), a favourite ("my favorite…");
- ``event``: the sentence around a time the dating stage resolved, with the day it resolved to
  ("I cleaned my white sneakers last Saturday (20 May 2023)");
- ``fact``: with an LLM extractor, what the model read the user stating about themselves (its ``facts``,
  extraction/schema.py), written by the extraction stage (pipeline/extracting.py).

An event whose sentence is also one of the pair's statements has no vector of its own
(:func:`has_own_vector`): recall finds keys by vector only, and the statement's vector already finds that
sentence; the day in brackets is ranked by time_fit, not by the vector. The event row keeps its words.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from dreaming_dagster.dates.ranges import TimeRange

MAX_STATEMENTS = 5
MAX_EVENTS = 3
MAX_KEY_CHARS = 300
KINDS = ("statement", "event", "fact")

HABIT_ADVERBS = ["usually", "always", "often", "normally", "typically", "generally", "sometimes", "never",
                 "really", "also", "still", "just", "recently", "actually", "definitely", "mostly", "rarely"]
SELF_VERBS = ["prefer", "love", "like", "enjoy", "hate", "dislike", "want", "need", "have", "own", "bought",
              "got", "use", "play", "work", "live", "started", "finished", "joined", "visited", "went", "go",
              "tried", "made", "plan", "planned", "decided", "spent", "took", "take", "watch", "watched", "read",
              "collect", "volunteer", "volunteered", "attended", "attend", "adopted", "graduated", "moved",
              "learned", "learn", "cook", "bake", "run", "ran", "drive", "drove", "wear", "listen", "listened",
              "prefer", "favor", "favour", "adore", "can't", "cannot", "don't", "didn't"]
PLAN_WORDS = ["planning", "going", "thinking", "hoping", "trying", "looking", "considering", "starting",
              "learning", "working", "saving", "training", "getting"]
RELATIONS = ["sister", "brother", "mom", "mother", "dad", "father", "wife", "husband", "partner", "son",
             "daughter", "friend", "friends", "boyfriend", "girlfriend", "cousin", "aunt", "uncle", "grandma",
             "grandmother", "grandpa", "grandfather", "niece", "nephew", "boss", "colleague", "coworker",
             "roommate", "neighbor", "neighbour", "dog", "cat", "kids", "children", "family", "parents",
             "fiancé", "fiance", "fiancée", "fiancee", "team", "manager", "mentor", "best"]
FAVOURITES = ["favorite", "favourite", "go-to", "usual", "own", "new", "old", "current", "first", "last"]


@dataclass(frozen=True)
class Key:
    kind: str  # one of KINDS
    position: int  # its order among the pair's keys of that kind
    text: str


@functools.cache
def _statement_finder():
    import spacy
    from spacy.matcher import Matcher

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    matcher = Matcher(nlp.vocab)
    first_person = {"LOWER": {"IN": ["i", "we"]}}
    adverbs = {"LOWER": {"IN": HABIT_ADVERBS}, "OP": "*"}
    matcher.add("self", [
        [first_person, adverbs, {"LOWER": {"IN": SELF_VERBS}}],
        [first_person, {"LOWER": {"IN": ["'m", "am", "'ve", "have", "was", "'ll", "will", "'d", "would"]}}, adverbs,
         {"LOWER": {"IN": [*PLAN_WORDS, "been", "got", "just", "a", "an", "into", "really", "always"]}}],
        [{"LOWER": {"IN": ["my", "our"]}}, {"LOWER": {"IN": [*RELATIONS, *FAVOURITES]}}],
    ])
    return nlp, matcher


def _clean(text: str) -> str:
    return " ".join(text.split())[:MAX_KEY_CHARS]


def statement_sentences(user_message: str) -> list[tuple[int, int, str]]:
    """The sentences of the user's turn in which the user speaks of themselves, as (first character, end
    character, key text): at most MAX_STATEMENTS, in order, each text once."""
    if not user_message or not user_message.strip():
        return []
    nlp, matcher = _statement_finder()
    doc = nlp(user_message)
    found: dict[str, tuple[int, int, str]] = {}
    # The patterns are matched over the whole text once; a match's sentence is its first token's.
    for start in sorted({doc[start].sent.start for _, start, _ in matcher(doc)}):
        sentence = doc[start].sent
        text = _clean(sentence.text)
        if text and text not in found:
            found[text] = (sentence.start_char, sentence.end_char, text)
            if len(found) == MAX_STATEMENTS:
                break
    return list(found.values())


def user_statements(user_message: str) -> list[str]:
    """The key texts of :func:`statement_sentences`."""
    return [text for _, _, text in statement_sentences(user_message)]


def _sentence_around(text: str, start: int) -> str:
    """The sentence of ``text`` holding character ``start`` (split at . ! ? and line breaks)."""
    left = max(text.rfind(mark, 0, start) for mark in (". ", "! ", "? ", "\n"))
    ends = [i for mark in (". ", "! ", "? ", "\n") if (i := text.find(mark, start)) >= 0]
    return text[left + 1 if left >= 0 else 0:(min(ends) + 1) if ends else len(text)]


def event_keys(user_message: str, mentions: Sequence[tuple[int, TimeRange]]) -> list[str]:
    """For each resolved time of the user's turn (character offset, range), its sentence and the day(s) it
    resolved to; at most MAX_EVENTS, each once."""
    found: list[str] = []
    for start, resolved in sorted(mentions, key=lambda item: item[0]):
        sentence = _clean(_sentence_around(user_message, start))
        text = _clean(f"{sentence} ({resolved.label()})") if sentence else ""
        if text and text not in found:
            found.append(text)
            if len(found) == MAX_EVENTS:
                break
    return found


def has_own_vector(key: Key, keys: Sequence[Key]) -> bool:
    """Whether ``key`` (one of a pair's ``keys``) is embedded: every key but an event repeating a statement's
    sentence."""
    return not (key.kind == "event"
                and any(other.kind == "statement" and key.text.startswith(other.text + " (") for other in keys))


def pair_keys(user_message: str, mentions: Sequence[tuple[int, TimeRange]] = ()) -> list[Key]:
    """Every key of a pair, statements first."""
    return ([Key("statement", i, text) for i, text in enumerate(user_statements(user_message))]
            + [Key("event", i, text) for i, text in enumerate(event_keys(user_message, mentions))])
