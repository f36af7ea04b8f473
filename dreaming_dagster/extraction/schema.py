"""What an extractor returns, validated with pydantic (lenient where it is safe to be)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from dreaming_dagster.extraction.normalize import canonical_name
from dreaming_dagster.llm.schemas import strict_schema

logger = logging.getLogger(__name__)

MAX_SUBJECTS = 5
MAX_TIMES = 10
MAX_FACTS = 5
MAX_FACT_CHARS = 300
# The kinds of subject extraction names (docs/dreaming.md); unknown kinds become "other".
SUBJECT_TYPES = ("person", "place", "organization", "project", "product", "event", "activity",
                 "preference", "topic", "entity", "other")


# Models send null for "nothing to say"; it means the empty string.
TextOrNull = Annotated[str, BeforeValidator(lambda value: "" if value is None else value)]


def _kept_texts(value: Any, *, max_chars: int, max_count: int) -> Any:
    """A list of texts as a model sent it, each with its white space collapsed, without blank, overlong or
    repeated entries, the first ``max_count`` kept (anything but a list is left for pydantic to refuse)."""
    if value is None:
        return []
    if not isinstance(value, list):
        return value
    kept: list[str] = []
    for item in value:
        text = " ".join(item.split()) if isinstance(item, str) else ""
        if 0 < len(text) <= max_chars and text not in kept:
            kept.append(text)
    return kept[:max_count]


class ExtractedSubject(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="2-5 word canonical name")
    description: TextOrNull = Field(default="", max_length=2000, description="what the pair says about it")
    type: str = Field(default="other", json_schema_extra={"enum": list(SUBJECT_TYPES)})

    _canonical_name = field_validator("name", mode="after")(lambda value: canonical_name(value))

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: Any) -> str:
        text = str(value or "other").strip().lower()
        return text if text in SUBJECT_TYPES else "other"


class Extraction(BaseModel):
    summary: TextOrNull = Field(default="", max_length=2000)
    # More than five are cut to the first five (below) before this bound is checked.
    subjects: list[ExtractedSubject] = Field(default_factory=list, max_length=MAX_SUBJECTS)

    # The user's own time expressions, as written; the dating grammar resolves them against the pair's time.
    times: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=list,
                                                                              max_length=MAX_TIMES)

    # What the user states about themselves, one short sentence each: stored as the pair's "fact" keys
    # (extraction/keys.py), found by recall as the offline statements are.
    facts: list[Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS)]] = Field(default_factory=list,
                                                                                         max_length=MAX_FACTS)

    # Blank, overlong or repeated entries are dropped, not the pair: a time or a fact is an aid, never a
    # reason to fail.
    _time_expressions = field_validator("times", mode="before")(
        lambda value: _kept_texts(value, max_chars=200, max_count=MAX_TIMES))
    _facts = field_validator("facts", mode="before")(
        lambda value: _kept_texts(value, max_chars=MAX_FACT_CHARS, max_count=MAX_FACTS))

    @field_validator("subjects", mode="before")
    @classmethod
    def _at_most_five(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, list) and len(value) > MAX_SUBJECTS:
            # Models sometimes overshoot; keep their first (most salient) five rather than fail the pair.
            logger.info("extraction returned %d subjects; keeping the first %d", len(value), MAX_SUBJECTS)
            return value[:MAX_SUBJECTS]
        return value

    @field_validator("subjects", mode="after")
    @classmethod
    def _unique_names(cls, subjects: list[ExtractedSubject]) -> list[ExtractedSubject]:
        seen, unique = set(), []
        for subject in subjects:
            if subject.name.lower() not in seen:
                seen.add(subject.name.lower())
                unique.append(subject)
        return unique

    def as_json(self) -> list[dict]:
        return [subject.model_dump() for subject in self.subjects]


def json_schema() -> dict:
    """The JSON schema sent as ``response_format``, derived from :class:`Extraction`."""
    return strict_schema(Extraction)
