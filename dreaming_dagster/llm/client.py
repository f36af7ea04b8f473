"""A JSON-answering chat client for any OpenAI-compatible endpoint.

Structured output first (``response_format`` json_schema); a server that refuses it — whatever the status
and the message (OpenAI-style servers answer 400, llama.cpp's server 500) — twice in a row, and answers the
same request as ``json_object`` with the schema, is asked with ``json_object`` from then on; a transient
error (it does not fail twice) or an outage (json_object fails too) decides nothing. A reply cut at the
token limit (``finish_reason`` "length") is asked again once with twice the limit and never parsed half.
Every reply goes through tolerant parsing and pydantic validation.

Failure policy (tenacity):
- Each HTTP call has a *total* deadline (``timeout_s``): connecting, waiting for the answer and reading
  it, together. A server that trickles a byte at a time or never answers costs at most that long
  (:class:`DeadlineTransport`); the openai package's timeout alone is per read.
- Transient failures are retried with exponential backoff, honouring ``Retry-After``: rate limits (429),
  server errors (5xx), 408/409, timeouts, connection errors, and replies that do not parse or validate.
- Anything else (400, 401, 403, 404, 422 …) is not retried: the same request would fail the same way. The
  fallback model, if any, gets its own attempts; then :class:`LLMCallError` is raised.
- When every attempt failed for transient reasons the error is :class:`ProviderUnavailableError`, so a
  caller working through a batch can stop calling a provider that is down (see the extraction stage).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from dreaming_dagster.config.settings import DreamingSettings
from dreaming_dagster.llm.parsing import LLMOutputError, extract_json_object

try:  # openai ≥ 3 speaks httpx2 (the same API as httpx under another name); older releases httpx
    import httpx2 as http
except ImportError:  # pragma: no cover - depends on the installed openai release
    import httpx as http

logger = logging.getLogger(__name__)
ModelT = TypeVar("ModelT", bound=BaseModel)
ResultT = TypeVar("ResultT")
RETRYABLE_STATUS = frozenset({408, 409, 429})
# A refused json_schema request with one of these failed for another reason (auth, rate, unknown model, a
# server loading or overloaded: llama.cpp answers 503 while it loads its model).
NOT_ABOUT_THE_FORMAT = frozenset({401, 403, 404, 408, 409, 429, 502, 503, 504})
# After a probe an outage left undecided, refusals are retried as errors this long before one probes again.
PROBE_COOLDOWN_S = 30.0
MAX_RETRY_AFTER_SECONDS = 120.0


class LLMCallError(RuntimeError):
    """Every attempt, with every model, failed; the message says why the last one did."""


class ProviderUnavailableError(LLMCallError):
    """Every attempt failed for a transient reason (timeouts, connection errors, 429, 5xx): the provider
    looks down, rather than this one request being bad."""


class CallSkippedError(RuntimeError):
    """Not attempted: the provider was found unavailable earlier in the same batch."""


# ------------------------------------------------------------------------------------- total deadline
class DeadlineTransport(http.BaseTransport):
    """Wraps a transport so each request, body included, ends within ``deadline_s``.

    Every phase before the answer (connect, write, wait for headers) is bounded by the time left; while
    the body is read, a timer shuts the socket down at the deadline, which wakes a blocked read.
    """

    def __init__(self, deadline_s: float, inner: http.BaseTransport | None = None):
        self.deadline_s, self.inner = deadline_s, inner or http.HTTPTransport()

    def handle_request(self, request):
        deadline = time.monotonic() + self.deadline_s
        phases = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {phase: min(phases.get(phase) or self.deadline_s, self.deadline_s)
                                         for phase in ("connect", "read", "write", "pool")}
        response = self.inner.handle_request(request)
        return http.Response(status_code=response.status_code, headers=response.headers,
                             stream=_DeadlineStream(response, request, deadline, self.deadline_s),
                             extensions=response.extensions)

    def close(self) -> None:
        self.inner.close()


class _DeadlineStream(http.SyncByteStream):
    def __init__(self, response, request, deadline: float, deadline_s: float):
        self.response, self.request, self.deadline, self.deadline_s = response, request, deadline, deadline_s
        self.expired = False

    def _expire(self) -> None:
        self.expired = True
        stream = self.response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: the read has ended anyway
                sock.shutdown(socket.SHUT_RDWR)

    def _timeout(self):
        return http.ReadTimeout(f"no complete answer within the {self.deadline_s:g} s deadline", request=self.request)

    def __iter__(self):
        timer = threading.Timer(max(self.deadline - time.monotonic(), 0.0), self._expire)
        timer.daemon = True
        timer.start()
        try:
            for chunk in self.response.stream:
                if self.expired or time.monotonic() > self.deadline:
                    raise self._timeout()
                yield chunk
        except http.TransportError:
            if self.expired:
                raise self._timeout() from None
            raise
        finally:
            timer.cancel()

    def close(self) -> None:
        self.response.close()


# ------------------------------------------------------------------------------------------ retry policy
def is_transient(error: BaseException) -> bool:
    """Worth another attempt with the same model: the same request may well succeed."""
    import openai

    if isinstance(error, LLMOutputError | ValidationError | openai.APIConnectionError):
        return True  # unparseable output; timeouts and connection errors (APITimeoutError included)
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRYABLE_STATUS or error.status_code >= 500
    return False


def _provider_side(error: BaseException) -> bool:
    """A failure of the provider rather than of this request's answer."""
    return is_transient(error) and not isinstance(error, LLMOutputError | ValidationError)


def retry_after_seconds(error: BaseException | None) -> float | None:
    """The wait a 429/503 asks for (``Retry-After``: seconds or an HTTP date; ``retry-after-ms``)."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    if headers.get("retry-after-ms"):
        try:
            return max(float(headers["retry-after-ms"]) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class _Endpoint:
    """One OpenAI-compatible server as this client has found it: whether it takes json_schema output."""

    def __init__(self, base_url: str | None, api_key: str | None, timeout_s: float):
        import openai

        # Retries are ours (tenacity, with the fallback model after them), so the SDK's are off; the
        # transport enforces the total deadline per call.
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0,
            http_client=http.Client(transport=DeadlineTransport(timeout_s), timeout=timeout_s))
        self.json_schema_supported = True
        self.probing: threading.Event | None = None  # set when the probe under way has its answer
        self.next_probe_at = 0.0  # after an undecided probe (an outage), refusals wait this long to probe again


class JSONChatClient:
    """``fallback_base_url``/``fallback_api_key``: where the fallback model is served, when not at the
    primary's endpoint (a local server behind a hosted model, say); each endpoint's format is found apart."""

    def __init__(self, *, model: str, base_url: str | None, api_key: str | None,
                 fallback_model: str | None = None, fallback_base_url: str | None = None,
                 fallback_api_key: str | None = None, temperature: float = 0.2, max_tokens: int = 800,
                 attempts_per_model: int = 3, backoff_s: float = 1.0, timeout_s: float = 60.0):
        self.model, self.fallback_model = model, fallback_model
        self.temperature, self.max_tokens = temperature, max_tokens
        self.attempts_per_model, self.backoff_s, self.timeout_s = attempts_per_model, backoff_s, timeout_s
        primary = _Endpoint(base_url, api_key, timeout_s)
        # (model, endpoint) in the order they are tried: a fallback may be the same model name elsewhere.
        self._targets = [(model, primary)]
        if fallback_model:
            apart = fallback_base_url is not None or fallback_api_key is not None
            self._targets.append((fallback_model, _Endpoint(fallback_base_url or base_url, fallback_api_key or api_key,
                                                            timeout_s) if apart else primary))
        self._lock = threading.Lock()
        self.calls_by_model: dict[str, int] = {}

    def output_formats(self) -> list[tuple[str, str]]:
        """Each model, in the order tried, with the structured output its endpoint is asked for now."""
        return [(model, "json_schema" if endpoint.json_schema_supported else "json_object")
                for model, endpoint in self._targets]

    def _create(self, model: str, endpoint: _Endpoint, messages: list[dict], schema_name: str, schema: dict,
                max_tokens: int):
        import openai

        with self._lock:
            self.calls_by_model[model] = self.calls_by_model.get(model, 0) + 1
            use_schema = endpoint.json_schema_supported
        common = {"model": model, "messages": messages, "temperature": self.temperature, "max_tokens": max_tokens}
        # json_object with the schema beside it: servers that take it (llama.cpp's) constrain the output to it.
        as_object = {"type": "json_object", "schema": schema}
        if use_schema:
            try:
                return self._schema_call(endpoint, common, schema_name, schema)
            except openai.APIStatusError as refused:
                if refused.status_code in NOT_ABOUT_THE_FORMAT:
                    raise
                with self._lock:  # one probe at a time an endpoint; the others wait for its answer
                    running, probe = endpoint.probing, False
                    if running is None and endpoint.json_schema_supported and time.monotonic() >= endpoint.next_probe_at:
                        endpoint.probing = running = threading.Event()
                        probe = True
                if not probe:
                    if running is not None:
                        running.wait(self.timeout_s)
                    if endpoint.json_schema_supported:
                        raise
                    return endpoint.client.chat.completions.create(**common, response_format=as_object)
                try:
                    return self._probe_format(endpoint, common, schema_name, schema, as_object, refused)
                finally:
                    with self._lock:
                        endpoint.probing = None
                    running.set()
        return endpoint.client.chat.completions.create(**common, response_format=as_object)

    @staticmethod
    def _schema_call(endpoint: _Endpoint, common: dict, schema_name: str, schema: dict):
        return endpoint.client.chat.completions.create(**common, response_format={
            "type": "json_schema", "json_schema": {"name": schema_name, "schema": schema, "strict": True}})

    def _probe_format(self, endpoint: _Endpoint, common: dict, schema_name: str, schema: dict, as_object: dict,
                      refused: Exception):
        """Decide whether a json_schema request failed because the server refuses the format: only if it fails
        again, and the same request as json_object answers. A transient error does not fail twice in a row
        (the second answer is returned and json_schema kept); an outage fails json_object too, which decides
        nothing (its error counts as any other, and a later refusal probes again after PROBE_COOLDOWN_S)."""
        import openai

        try:
            try:
                return self._schema_call(endpoint, common, schema_name, schema)
            except openai.APIStatusError as again:
                if again.status_code in NOT_ABOUT_THE_FORMAT:
                    raise
                refused = again
            response = endpoint.client.chat.completions.create(**common, response_format=as_object)
        except Exception:
            with self._lock:
                endpoint.next_probe_at = time.monotonic() + PROBE_COOLDOWN_S
            raise
        logger.info("endpoint refused json_schema output twice (HTTP %s: %s) and answered json_object; using "
                    "json_object from now on", getattr(refused, "status_code", "?"), str(refused)[:200])
        with self._lock:
            endpoint.json_schema_supported = False
        return response

    def _wait(self, state: RetryCallState) -> float:
        """Retry-After when the server names a wait (capped), else exponential backoff."""
        asked = retry_after_seconds(state.outcome.exception() if state.outcome else None)
        if asked is not None:
            return min(asked, MAX_RETRY_AFTER_SECONDS)
        return self.backoff_s * 2 ** (state.attempt_number - 1)

    def _log_retry(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        logger.info("LLM call attempt %d failed (%s: %s); retrying", state.attempt_number,
                    type(error).__name__, str(error)[:200])

    def _ask_model(self, model: str, endpoint: _Endpoint, messages: list[dict], answer_model: type[ModelT],
                   schema_name: str, schema: dict) -> ModelT:
        def attempt() -> ModelT:
            response = self._create(model, endpoint, messages, schema_name, schema, self.max_tokens)
            if response.choices[0].finish_reason == "length":  # cut mid-answer: once more with room to finish
                logger.info("LLM reply cut at %d tokens; asking again with %d", self.max_tokens, 2 * self.max_tokens)
                response = self._create(model, endpoint, messages, schema_name, schema, 2 * self.max_tokens)
                if response.choices[0].finish_reason == "length":
                    raise LLMOutputError(f"the reply was cut at the token limit ({2 * self.max_tokens} tokens)")
            content = response.choices[0].message.content or ""
            return answer_model.model_validate(extract_json_object(content))

        retrying = Retrying(stop=stop_after_attempt(self.attempts_per_model), wait=self._wait,
                            retry=retry_if_exception(is_transient), before_sleep=self._log_retry, reraise=True)
        return retrying(attempt)

    def ask(self, messages: list[dict], answer_model: type[ModelT], schema_name: str, schema: dict) -> ModelT:
        errors: list[BaseException] = []
        for model, endpoint in self._targets:
            try:
                return self._ask_model(model, endpoint, messages, answer_model, schema_name, schema)
            except Exception as exc:  # the last attempt's error; the next model gets its own attempts
                logger.info("LLM model %s failed: %s: %s", model, type(exc).__name__, str(exc)[:200])
                errors.append(exc)
        last = errors[-1]
        error_type = ProviderUnavailableError if all(_provider_side(e) for e in errors) else LLMCallError
        raise error_type(f"{len(self._targets)} model(s) × up to {self.attempts_per_model} attempts failed; last: "
                         f"{type(last).__name__}: {str(last)[:300]}") from last


def call_each(call: Callable[..., ResultT], items: Sequence[tuple], max_in_flight: int) -> list[ResultT | Exception]:
    """``call(*item)`` for every item, ``max_in_flight`` at a time; one result or error per item, in order
    (every provider's ``extract_many`` / ``refine_many``).

    One item's failure never blocks the others. But once a call fails with
    :class:`ProviderUnavailableError` the provider is down, and the items not yet started are not sent
    (each gets :class:`CallSkippedError`): a batch during an outage costs one call's retries, not a
    hundred's, and the caller keeps those items' attempts for later.
    """
    outage = threading.Event()

    def run(item: tuple) -> ResultT | Exception:
        if outage.is_set():
            return CallSkippedError("not sent: the provider was unavailable earlier in this batch")
        try:
            return call(*item)
        except ProviderUnavailableError as exc:
            outage.set()
            return exc
        except Exception as exc:  # kept per item
            return exc

    if max_in_flight <= 1:  # the offline providers: no threads for in-process work
        return [run(item) for item in items]
    with ThreadPoolExecutor(max_workers=max_in_flight) as pool:
        return list(pool.map(run, items))


def chat_client(settings: DreamingSettings, max_tokens: int = 800) -> JSONChatClient:
    """The client the settings name (DREAMING_LLM_MODEL, its endpoint, fallback and retry policy)."""
    if not settings.llm_model:
        raise ValueError("the openai LLM provider needs DREAMING_LLM_MODEL")
    return JSONChatClient(model=settings.llm_model, base_url=settings.llm_base_url, api_key=settings.llm_api_key,
                          fallback_model=settings.llm_fallback_model, fallback_base_url=settings.llm_fallback_base_url,
                          fallback_api_key=settings.llm_fallback_api_key, max_tokens=max_tokens,
                          attempts_per_model=settings.llm_attempts_per_model,
                          backoff_s=settings.llm_backoff_seconds, timeout_s=settings.llm_timeout_seconds)
