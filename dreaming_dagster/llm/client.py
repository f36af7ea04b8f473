"""A JSON-answering chat client for any OpenAI-compatible endpoint.

Structured output first (``response_format`` json_schema); a server that rejects it (HTTP 400) is asked
with ``json_object`` from then on. Every reply goes through tolerant parsing and pydantic validation.
Failures (HTTP errors, timeouts, unparseable or invalid replies) are retried with exponential backoff,
then the same number of times with the fallback model, then raised as :class:`LLMCallError`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from dreaming_dagster.llm.parsing import LLMOutputError, extract_json_object

logger = logging.getLogger(__name__)
ModelT = TypeVar("ModelT", bound=BaseModel)


class LLMCallError(RuntimeError):
    """Every attempt, with every model, failed; the message says why the last one did."""


class JSONChatClient:
    def __init__(self, *, model: str, base_url: str | None, api_key: str | None,
                 fallback_model: str | None = None, temperature: float = 0.2, max_tokens: int = 800,
                 attempts_per_model: int = 3, backoff_s: float = 1.0, timeout_s: float = 60.0):
        import openai

        self.model, self.fallback_model = model, fallback_model
        self.temperature, self.max_tokens = temperature, max_tokens
        self.attempts_per_model, self.backoff_s = attempts_per_model, backoff_s
        # Retries are ours (with the fallback model in the loop), so the client's are off.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s,
                                     max_retries=0)
        self._json_schema_supported = True
        self._lock = threading.Lock()
        self.calls_by_model: dict[str, int] = {}

    def _create(self, model: str, messages: list[dict], schema_name: str, schema: dict):
        import openai

        with self._lock:
            self.calls_by_model[model] = self.calls_by_model.get(model, 0) + 1
            use_schema = self._json_schema_supported
        common = {"model": model, "messages": messages, "temperature": self.temperature,
                  "max_tokens": self.max_tokens}
        if use_schema:
            try:
                return self._client.chat.completions.create(**common, response_format={
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "schema": schema, "strict": True}})
            except openai.BadRequestError as exc:
                logger.info("endpoint rejected json_schema output (%s); using json_object from now on", exc)
                with self._lock:
                    self._json_schema_supported = False
        return self._client.chat.completions.create(**common, response_format={"type": "json_object"})

    def ask(self, messages: list[dict], answer_model: type[ModelT], schema_name: str, schema: dict) -> ModelT:
        last_error: Exception | None = None
        models = [self.model] + ([self.fallback_model] if self.fallback_model else [])
        for model in models:
            for attempt in range(self.attempts_per_model):
                try:
                    response = self._create(model, messages, schema_name, schema)
                    content = response.choices[0].message.content or ""
                    return answer_model.model_validate(extract_json_object(content))
                except (LLMOutputError, ValidationError) as exc:
                    last_error = exc
                except Exception as exc:  # the openai package's HTTP, timeout and connection errors
                    last_error = exc
                logger.info("LLM call %s attempt %d failed: %s", model, attempt + 1, last_error)
                if attempt + 1 < self.attempts_per_model:
                    time.sleep(self.backoff_s * 2**attempt)
        raise LLMCallError(f"{len(models)} model(s) × {self.attempts_per_model} attempts failed; last: "
                           f"{type(last_error).__name__}: {str(last_error)[:300]}")
