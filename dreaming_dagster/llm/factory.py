"""Build the extraction and refinement providers from settings."""

from __future__ import annotations

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.extraction.providers import (
    Extractor,
    KeyphraseExtractor,
    OfflineExtractor,
    OpenAIExtractor,
)
from dreaming_dagster.llm.client import JSONChatClient
from dreaming_dagster.pipeline.refinement import OfflineRefiner, OpenAIRefiner, Refiner


def chat_client(settings: DreamingSettings, max_tokens: int = 800) -> JSONChatClient:
    if not settings.llm_model:
        raise ValueError("the openai LLM provider needs DREAMING_LLM_MODEL")
    return JSONChatClient(model=settings.llm_model, base_url=settings.llm_base_url, api_key=settings.llm_api_key,
                          fallback_model=settings.llm_fallback_model, max_tokens=max_tokens,
                          attempts_per_model=settings.llm_attempts_per_model,
                          backoff_s=settings.llm_backoff_seconds, timeout_s=settings.llm_timeout_seconds)


def extractor_from_settings(settings: DreamingSettings) -> Extractor:
    if settings.resolved_llm_provider == "openai":
        return OpenAIExtractor(chat_client(settings), max_in_flight=5)
    if settings.llm_offline_extractor == "keyphrases":
        return KeyphraseExtractor()
    return OfflineExtractor(processes=settings.llm_offline_processes)


def refiner_from_settings(settings: DreamingSettings) -> Refiner:
    if settings.resolved_llm_provider == "openai":
        return OpenAIRefiner(chat_client(settings), max_in_flight=15)
    return OfflineRefiner()
