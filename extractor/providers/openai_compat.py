"""OpenAI-compatible HTTP provider: raw answers, structured output where the server allows, bounded retries.

The pipeline repairs and validates by itself, so this provider never parses or re-asks: it returns the
raw text of every answer. ``instructor`` builds the structured-output request parameters (its
``JSON_SCHEMA`` mode), fed a stand-in model whose JSON Schema *is* the contract file, so the schema sent
is exactly ``request.schema``. The ``openai`` client's own retries are off; ours are bounded, recorded
per try, and honour ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import instructor
import openai
from instructor.processing import handle_response_model
from pydantic import BaseModel

from extractor.generate import GenerationRequest, GenerationResult, ProviderError, RateLimited, TransportAttempt
from extractor.providers import ProviderSettings
from extractor.redact import redact_text

log = logging.getLogger(__name__)

# Tried in order; the first mode the server accepts is kept for the provider's lifetime.
MODES = ("json_schema", "json_object", "plain")
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
NO_KEY_PLACEHOLDER = "not-needed"  # local servers ignore the key, but the client insists on one
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured output")


class _Failure(Exception):
    """One failed try, classified: what to record and whether another try could help."""

    def __init__(
        self,
        outcome: str,
        detail: str,
        *,
        retryable: bool,
        status: int | None = None,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail
        self.retryable = retryable
        self.status = status
        self.param = param
        self.retry_after = retry_after

    @property
    def rejects_response_format(self) -> bool:
        """A 400 about structured output: the server lacks it, so a simpler mode may still work."""
        text = self.detail.lower()
        return self.status == 400 and (self.param == "response_format" or any(w in text for w in _FORMAT_WORDS))


@dataclass(frozen=True)
class _Answer:
    text: str
    model: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None


class OpenAICompatProvider:
    """``openai:<model>`` against any OpenAI-compatible base URL."""

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ProviderSettings | None = None,
        on_rate_limit: RateLimited | None = None,
    ) -> None:
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if base_url is None:
                raise ValueError(
                    "openai:<model> needs OPENAI_API_KEY, or OPENAI_BASE_URL for a server that needs no key"
                )
            api_key = NO_KEY_PLACEHOLDER
        self.model = model
        self._settings = settings or ProviderSettings()
        self._on_rate_limit = on_rate_limit
        self._secret = api_key
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=self._settings.timeout_s, max_retries=0
        )
        self.base_url = _without_userinfo(str(self._client.base_url).rstrip("/"))
        self._mode_index = 0
        self._formats: dict[tuple[str, int], tuple[dict[str, Any], dict[str, Any]]] = {}

    def __repr__(self) -> str:
        return f"OpenAICompatProvider(model={self.model!r}, base_url={self.base_url!r}, mode={self.mode!r})"

    @property
    def mode(self) -> str:
        """The structured-output mode the next call starts with."""
        return MODES[self._mode_index]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        settings = self._settings
        started = time.monotonic()
        transport: list[TransportAttempt] = []
        mode_index = self._mode_index
        retries = 0
        timeout_s = settings.timeout_s
        budget_deadline: float | None = None
        while True:
            mode = MODES[mode_index]
            began = time.monotonic()
            try:
                answer = await self._try(request, mode, timeout_s)
            except _Failure as failure:
                latency = _ms_since(began)
                number = len(transport) + 1
                if failure.status == 429 and self._on_rate_limit is not None:
                    self._on_rate_limit(failure.retry_after)
                detail = self._redact(failure.detail)
                if failure.rejects_response_format and mode_index + 1 < len(MODES):
                    mode_index += 1
                    self._mode_index = max(self._mode_index, mode_index)
                    detail = f"{mode} rejected ({detail}); falling back to {MODES[mode_index]}"
                    log.info("%s: %s", self.base_url, detail)
                    transport.append(TransportAttempt(number, failure.outcome, latency, detail=detail))
                    continue
                if budget_deadline is None:
                    budget_deadline = time.monotonic() + settings.retry_budget_s
                wait = self._wait(failure, retries + 1)
                remaining = budget_deadline - time.monotonic() - wait
                can_retry = failure.retryable and retries < settings.max_transport_retries
                if can_retry and remaining > 0:
                    transport.append(TransportAttempt(number, failure.outcome, latency, wait_s=wait, detail=detail))
                    log.info("%s: %s, retrying in %.1f s", self.base_url, failure.outcome, wait)
                    await asyncio.sleep(wait)
                    retries += 1
                    timeout_s = min(settings.timeout_s, remaining)
                    continue
                transport.append(TransportAttempt(number, failure.outcome, latency, detail=detail))
                raise ProviderError(self._cause(failure, len(transport), budget_spent=can_retry), transport) from None
            transport.append(TransportAttempt(len(transport) + 1, "ok", _ms_since(began)))
            text = answer.text
            if self._secret != NO_KEY_PLACEHOLDER and len(self._secret) >= 8 and self._secret in text:
                # a server (or an injected document) made the model repeat the key: the run log must not keep it
                text = text.replace(self._secret, "***")
                transport[-1] = TransportAttempt(len(transport), "ok", transport[-1].latency_ms,
                                                 detail="the API key appeared in the answer and was replaced by ***")
            return GenerationResult(
                text=text,
                mode=mode,
                model=answer.model or self.model,
                latency_ms=_ms_since(started),
                prompt_tokens=answer.prompt_tokens,
                completion_tokens=answer.completion_tokens,
                finish_reason=answer.finish_reason,
                transport=transport,
            )

    async def aclose(self) -> None:
        await self._client.close()

    async def _try(self, request: GenerationRequest, mode: str, timeout_s: float) -> _Answer:
        """One HTTP try; every way it can fail becomes a ``_Failure``."""
        kwargs = self._create_kwargs(request, mode)  # outside the deadline: instructor's first use is slow
        try:
            async with asyncio.timeout(timeout_s):
                # The client's documented raw request: the body goes out as built (the typed create() walks
                # every message and the whole schema through its type annotations, milliseconds a call).
                body = await self._client.post("/chat/completions", cast_to=str, body=kwargs)
        except (TimeoutError, openai.APITimeoutError):
            raise _Failure("timeout", f"no answer within {timeout_s:g} s", retryable=True) from None
        except openai.APIConnectionError as err:
            raise _Failure("connection_error", _describe(err.__cause__ or err), retryable=True) from None
        except openai.APIStatusError as err:
            raise _status_failure(err) from None
        return _parse_completion(body.encode("utf-8"))

    def _create_kwargs(self, request: GenerationRequest, mode: str) -> dict[str, Any]:
        """The chat completion request body; the json_schema mode is instructor's, with our schema."""
        kwargs: dict[str, Any] = {"model": self.model, "messages": request.messages, "temperature": request.temperature}
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if mode == "json_schema":
            kwargs["response_format"] = self._schema_format(request.schema_name, request.schema)
        elif mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}  # the prompt already shows the schema
        return kwargs

    def _schema_format(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        """instructor's json_schema ``response_format`` for this schema, built once per schema object."""
        cached = self._formats.get((name, id(schema)))
        if cached is not None and cached[0] is schema:
            return cached[1]
        _, built = handle_response_model(_schema_model(name, schema), mode=instructor.Mode.JSON_SCHEMA)
        response_format = built["response_format"]
        response_format["json_schema"]["strict"] = False  # the validator enforces; servers vary
        self._formats[(name, id(schema))] = (schema, response_format)  # holding the schema keeps its id unique
        return response_format

    def _wait(self, failure: _Failure, retry: int) -> float:
        """Seconds before retry number ``retry``: the server's Retry-After, else capped exponential + jitter."""
        if failure.retry_after is not None:
            return failure.retry_after
        ceiling = min(self._settings.backoff_max_s, self._settings.backoff_base_s * 2.0 ** (retry - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def _cause(self, failure: _Failure, attempts: int, *, budget_spent: bool) -> str:
        """The one line a person reads in the run log and the ERROR route."""
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        detail = self._redact(failure.detail)
        if failure.outcome == "timeout":
            cause = f"timeout after {self._settings.timeout_s:g} s ({tries})"
        elif failure.status == 401:
            cause = f"HTTP 401 from {self.base_url}: the API key was rejected ({detail})"
        elif failure.status is not None:
            after = f" after {tries}" if failure.retryable else ""
            cause = f"HTTP {failure.status} from {self.base_url}{after}: {detail}"
        elif failure.outcome == "connection_error":
            cause = f"connection error to {self.base_url} after {tries}: {detail}"
        else:
            cause = f"unusable response body from {self.base_url} after {tries}: {detail}"
        if budget_spent:
            cause += f" (retry budget of {self._settings.retry_budget_s:g} s exhausted)"
        return cause

    def _redact(self, text: str) -> str:
        """Servers and HTTP libraries may echo credentials; nothing we record or raise may contain them."""
        return redact_text(" ".join(text.split()), secrets=(self._secret,))[:500]


def _schema_model(name: str, schema: dict[str, Any]) -> type[BaseModel]:
    """A stand-in pydantic model whose JSON Schema is exactly the contract file (instructor reads it from here)."""

    def model_json_schema(cls: type[BaseModel], *args: Any, **kwargs: Any) -> dict[str, Any]:
        return schema

    return type(name, (BaseModel,), {"__module__": __name__, "model_json_schema": classmethod(model_json_schema)})


def _status_failure(err: openai.APIStatusError) -> _Failure:
    status = err.status_code
    body = err.body
    message = body.get("message") if isinstance(body, dict) else body
    param = body.get("param") if isinstance(body, dict) else None
    return _Failure(
        f"http_{status}",
        message if isinstance(message, str) and message else err.message,
        retryable=status in RETRYABLE_STATUS,
        status=status,
        param=param if isinstance(param, str) else None,
        retry_after=_retry_after(err.response.headers),
    )


def _parse_completion(body: bytes) -> _Answer:
    """The raw answer of an HTTP-200 body; the answer text itself is never judged here.

    Only a body that is not a chat completion at all (empty, not JSON, no ``choices[0].message``) is a
    transport failure; empty or non-JSON *content* is returned as text for the validator to route.
    """
    if not body.strip():
        raise _Failure("empty_body", "HTTP 200 with an empty body", retryable=True)
    try:
        data = json.loads(body)
    except ValueError:
        raise _Failure("garbled_body", f"HTTP 200 body is not JSON: {body[:120]!r}", retryable=True) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict) or not isinstance(message := choice.get("message"), dict):
        raise _Failure("garbled_body", f"HTTP 200 body has no choices[0].message: {body[:120]!r}", retryable=True)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    content = message.get("content")
    model = data.get("model")
    finish_reason = choice.get("finish_reason")
    return _Answer(
        text=content if isinstance(content, str) else "",
        model=model if isinstance(model, str) and model else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds, given as a number or as an HTTP date; None when absent or unreadable."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _describe(err: BaseException) -> str:
    """The error's type plus the first message down its cause chain (a reset often has none at the top)."""
    reason = err
    while not str(reason) and (inner := reason.__cause__ or reason.__context__) is not None:
        reason = inner
    return f"{type(err).__name__}: {reason}" if str(reason) else type(err).__name__


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ms_since(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 1)


def _without_userinfo(url: str) -> str:
    """Base URLs may carry ``user:password@``; shown URLs must not."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
