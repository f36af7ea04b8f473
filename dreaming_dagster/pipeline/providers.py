"""The extractor and refiner the settings name: an LLM's when DREAMING_LLM_MODEL is set, else the offline ones."""

from __future__ import annotations

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.extraction.providers import (
    Extractor,
    OfflineExtractor,
    OpenAIExtractor,
)
from dreaming_dagster.llm.client import chat_client
from dreaming_dagster.pipeline.refinement import OfflineRefiner, OpenAIRefiner, Refiner


def extractor_from_settings(settings: DreamingSettings) -> Extractor:
    if settings.resolved_llm_provider == "openai":
        return OpenAIExtractor(chat_client(settings), max_in_flight=5)
    return OfflineExtractor(processes=settings.llm_offline_processes)


def refiner_from_settings(settings: DreamingSettings) -> Refiner:
    if settings.resolved_llm_provider == "openai":
        return OpenAIRefiner(chat_client(settings), max_in_flight=15)
    return OfflineRefiner()
