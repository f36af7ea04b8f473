"""Extraction providers: ``openai`` (any OpenAI-compatible chat endpoint) and ``offline`` (YAKE).

Why YAKE for offline: it is an unsupervised statistical keyphrase extractor (Campos et al., 2020) that
needs no model, corpus or download, is deterministic, and runs at ~180 pairs/s on one core here (`make bench-stages`). spaCy's
named-entity models are not on PyPI; KeyBERT would run the embedding model a second time; RAKE via NLTK
needs a stop-word download. YAKE keeps proper nouns ("Shell gas station") and multi-word terms
("miles per gallon") well; a small filter drops conversational filler ("makes sense", "thanks").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Protocol

from dreaming_dagster.extraction.schema import ExtractedSubject, Extraction, json_schema
from dreaming_dagster.llm.client import JSONChatClient, call_each
from dreaming_dagster.prompts import load_prompt

MAX_PROMPT_CHARS_PER_TURN = 12_000


class Extractor(Protocol):
    provider: str

    def extract_many(self, pairs: Sequence[tuple[str, str]]) -> list[Extraction | Exception]:
        """One result per (user_message, assistant_message): an Extraction, or the error it raised."""
        ...


# ---------------------------------------------------------------------------------------------- offline
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# Words that make a phrase filler when every word of it is one of these.
_FILLER = frozenset(["a", "an", "the", "i", "me", "my", "we", "our", "you", "your", "it", "its", "this", "that", "these", "those", "is", "are", "was", "were", "be", "been", "am", "do", "does", "did", "have", "has", "had", "will", "would", "can", "could", "should", "may", "might", "must", "shall", "just", "also", "really", "actually", "definitely", "yes", "yeah", "yup", "ok", "okay", "sure", "thanks", "thank", "great", "good", "nice", "cool", "awesome", "fine", "right", "well", "hey", "hi", "hello", "please", "sense", "makes", "make", "made", "think", "thinking", "thought", "idea", "ideas", "tip", "tips", "recommendation", "recommendations", "suggestion", "suggestions", "help", "question", "questions", "answer", "time", "way", "lot", "lots", "thing", "things", "something", "anything", "everything", "kind", "sort", "bit", "know", "want", "need", "get", "got", "going", "go", "look", "looking", "let", "lets", "sounds", "sound", "like", "interesting", "helpful", "information", "info", "question", "specific", "specifically", "different", "several", "many", "much", "more", "some", "any", "one", "ones", "first", "new", "old", "best", "better", "start", "started", "try", "trying", "check", "happy", "glad", "excited", "worried", "bit", "concerned", "back", "today", "tomorrow", "yesterday", "days", "weeks", "months", "years", "morning", "evening", "night"])


def _first_sentence(text: str, limit: int = 200) -> str:
    for sentence in _SENTENCE.split(text.strip()):
        if sentence.strip():
            return sentence.strip()[:limit]
    return ""


# A keyphrase holding one of these is usually a clause fragment ("found a local"), not a subject.
_FUNCTION_WORDS = frozenset(["a", "an", "the", "and", "or", "but", "to", "on", "at", "in", "into", "with", "from", "for", "by", "as", "about", "if", "than", "so"])


def _is_filler(phrase: str) -> bool:
    words = re.findall(r"[A-Za-z0-9']+", phrase)
    lowered = [word.lower() for word in words]
    if not words or all(word in _FILLER or len(word) < 3 for word in lowered):
        return True
    if any(word in _FUNCTION_WORDS for word in lowered):
        return True
    # Led by a lowercase verb form: "keeping track", "redeeming points", "added …".
    return words[0].islower() and (lowered[0].endswith("ing") or lowered[0].endswith("ed"))


def _overlaps(phrase: str, kept: list[str]) -> bool:
    lowered = phrase.lower()
    return any(lowered in other.lower() or other.lower() in lowered for other in kept)


@cache
def _yake(max_ngram: int, top: int):
    import yake

    return yake.KeywordExtractor(lan="en", n=max_ngram, top=top, dedupLim=0.7)


class OfflineExtractor:
    """Deterministic, network-free extraction: YAKE keyphrases of the user's turn."""

    provider = "offline"

    def __init__(self, max_subjects: int = 3, max_score: float = 0.3):
        self.max_subjects, self.max_score = max_subjects, max_score

    def extract(self, user_message: str, assistant_message: str) -> Extraction:
        # Durable facts about the user come from what the user said; the reply is the fallback.
        text = (user_message.strip() or assistant_message.strip())[:4000]
        kept: list[str] = []
        for phrase, score in _yake(3, 12).extract_keywords(text) if text else []:
            if score > self.max_score or _is_filler(phrase) or _overlaps(phrase, kept):
                continue
            kept.append(phrase)
            if len(kept) == self.max_subjects:
                break
        sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
        subjects = []
        for phrase in kept:
            context = next((s for s in sentences if phrase.lower() in s.lower()), "")
            proper = any(word[:1].isupper() for word in phrase.split()) and not context.startswith(phrase)
            subjects.append({"name": phrase, "description": context[:240],
                             "type": "entity" if proper else "topic"})
        return Extraction.model_validate({"summary": _first_sentence(user_message or assistant_message),
                                          "subjects": subjects})

    def extract_many(self, pairs: Sequence[tuple[str, str]]) -> list[Extraction | Exception]:
        return call_each(self.extract, pairs, max_in_flight=1)


# ----------------------------------------------------------------------------------------------- openai
class OpenAIExtractor:
    """Structured extraction through an OpenAI-compatible chat endpoint, up to ``max_in_flight`` calls."""

    provider = "openai"

    def __init__(self, client: JSONChatClient, max_in_flight: int = 5):
        self.client, self.max_in_flight = client, max_in_flight

    def extract(self, user_message: str, assistant_message: str) -> Extraction:
        exchange = (f"User: {user_message[:MAX_PROMPT_CHARS_PER_TURN]}\n\n"
                    f"Assistant: {assistant_message[:MAX_PROMPT_CHARS_PER_TURN]}")
        messages = [{"role": "system", "content": load_prompt("extraction")},
                    {"role": "user", "content": exchange}]
        return self.client.ask(messages, Extraction, "pair_extraction", json_schema())

    def extract_many(self, pairs: Sequence[tuple[str, str]]) -> list[Extraction | Exception]:
        return call_each(self.extract, pairs, self.max_in_flight)


__all__ = ["ExtractedSubject", "Extraction", "Extractor", "OfflineExtractor", "OpenAIExtractor"]
