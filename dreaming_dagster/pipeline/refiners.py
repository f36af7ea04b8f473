"""Refinement providers: turn a " | " junk-drawer description into a 2–5 word name and a 1–3 sentence
narrative. ``openai`` asks the LLM (15 calls in flight); ``offline`` synthesises deterministically."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field, field_validator

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.extraction.grounding import TextWords, is_grounded
from dreaming_dagster.extraction.normalize import canonical_name
from dreaming_dagster.llm.client import JSONChatClient, call_each, chat_client
from dreaming_dagster.llm.schemas import strict_schema
from dreaming_dagster.pipeline.merging import description_fragments
from dreaming_dagster.prompts import load_prompt

logger = logging.getLogger(__name__)
MAX_NAME_WORDS = 5


class Refinement(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    narrative: str = Field(min_length=1, max_length=2000)

    _short_canonical_name = field_validator("name", mode="after")(lambda value: canonical_name(value, MAX_NAME_WORDS))

    @field_validator("narrative", mode="before")
    @classmethod
    def _no_separator(cls, value: Any) -> Any:
        # A narrative must not look like a junk drawer again, or it would be refined forever.
        return str(value).replace(" | ", "; ") if value is not None else value


class Refiner(Protocol):
    provider: str

    def refine_many(self, subjects: Sequence[tuple[str, str, str]]) -> list[Refinement | Exception]:
        """One result per (name, description, said): ``said`` is what the subject's pairs say, the only
        evidence a new name may rest on (descriptions are a model's own words)."""
        ...


def _sentence(text: str, limit: int = 220) -> str:
    text = re.sub(r"\s+", " ", text).strip()[:limit].rstrip(" ,;:")
    return text if text.endswith((".", "!", "?")) else f"{text}."


class OfflineRefiner:
    """Deterministic synthesis: the canonical name, and a narrative of the first and latest mentions."""

    provider = "offline"

    def refine(self, name: str, description: str, said: str = "") -> Refinement:
        fragments = description_fragments(description)
        if len(fragments) <= 1:
            narrative = _sentence(fragments[0] if fragments else name)
        elif len(fragments) == 2:
            narrative = f"{_sentence(fragments[0])} Later: {_sentence(fragments[1])}"
        else:
            narrative = (f"Came up in {len(fragments)} conversations. First: {_sentence(fragments[0])} "
                         f"Most recently: {_sentence(fragments[-1])}")
        return Refinement(name=name, narrative=narrative)

    def refine_many(self, subjects: Sequence[tuple[str, str, str]]) -> list[Refinement | Exception]:
        return call_each(self.refine, subjects, max_in_flight=1)


def refinement_schema() -> dict:
    return strict_schema(Refinement)


class OpenAIRefiner:
    provider = "openai"

    def __init__(self, client: JSONChatClient, max_in_flight: int = 15):
        self.client, self.max_in_flight = client, max_in_flight

    def refine(self, name: str, description: str, said: str) -> Refinement:
        messages = [{"role": "system", "content": load_prompt("refinement")},
                    {"role": "user", "content": f"Current name: {name}\nDescriptions: {description[:12000]}"}]
        refined = self.client.ask(messages, Refinement, "subject_refinement", refinement_schema())
        if not is_grounded(refined.name, TextWords.of(name, said)):
            # A new name its pairs do not say is the model's invention, even when its own descriptions
            # repeat it (a small model described "Biscuit" as "Biscuzzle"): the subject keeps its name.
            logger.info("refinement renamed %r to %r, which its pairs do not say; keeping %r",
                        name, refined.name, name)
            refined = refined.model_copy(update={"name": name})  # as stored: a longer name is not cut
        return refined

    def refine_many(self, subjects: Sequence[tuple[str, str, str]]) -> list[Refinement | Exception]:
        return call_each(self.refine, subjects, self.max_in_flight)


def refiner_from_settings(settings: DreamingSettings) -> Refiner:
    """The refiner the settings name: an LLM's when DREAMING_LLM_MODEL is set, else the offline one."""
    if settings.resolved_llm_provider == "openai":
        return OpenAIRefiner(chat_client(settings), max_in_flight=15)
    return OfflineRefiner()
