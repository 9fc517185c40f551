"""OpenAI-compatible HTTP provider: raw answers, structured output where the server allows, bounded retries.

The pipeline repairs and validates by itself, so this provider never parses or re-asks: it returns the
raw text of every answer (a tool call's ``arguments`` string in tools mode). The request shapes are built
here, not by ``instructor``: contracts are JSON Schema files, not pydantic models, and the only parts of
instructor that would apply (its modes and request builders) assume a response model to parse into and
retries to re-ask with, both of which this product does itself (the validator, the one repair). Four
dict shapes are smaller than a stand-in model per schema. Retries are ours: bounded, recorded per try,
and they honour ``Retry-After``.

The calls go out as the ``openai`` client would send them (same URL, bearer key, JSON body, timeout; an
error body is read the way it reads one), on aiohttp (``extractor.providers.transport``), without the
client's per-call option models, header builders and retry machinery, and without httpx: at 64 calls in
flight those were most of the run process's CPU, and its event loop is what every call in flight waits on.
One session per provider keeps a connection alive for every call in flight.

Servers differ in what they accept (docs/model-servers.md lists them): with ``--response-format auto`` a server that
answers a mode with "unsupported" (400 or 422 naming it, or a 5xx whose body names the request field, as
llama-cpp-python's server does) gets the next mode, and the first accepted one is kept for the provider's
lifetime, i.e. the run. ``max_tokens`` becomes ``max_completion_tokens`` once a server asks for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from extractor.generate import (
    MAX_RETRY_AFTER_S,
    GenerationRequest,
    GenerationResult,
    ProviderError,
    RateLimited,
    TimedOut,
    TransportAttempt,
    bounded_pause,
)
from extractor.providers.settings import ProviderSettings, ResponseFormat
from extractor.providers.transport import AnswerMalformed, ConnectFailed, Progress, Session, TransportError
from extractor.redact import redact_text

log = logging.getLogger(__name__)

# ``auto`` tries these in order: the strongest structure a server enforces first, plain JSON-by-prompt last.
AUTO_ORDER = (ResponseFormat.json_schema, ResponseFormat.tools, ResponseFormat.json_object, ResponseFormat.plain)
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
NO_KEY_PLACEHOLDER = "not-needed"  # local servers ignore the key; a bearer header is sent all the same
DEFAULT_BASE_URL = "https://api.openai.com/v1"
# What a 400/422 says when it rejects a mode; a 5xx must name the request field itself (``_FIELDS``).
_REJECTION_WORDS = {
    ResponseFormat.json_schema: re.compile(r"response_format|json_schema|json_object|structured output"),
    ResponseFormat.json_object: re.compile(r"response_format|json_object|json mode"),
    ResponseFormat.tools: re.compile(r"\btool(s|_choice|_calls?)?\b|function.call"),
}
_FIELDS = {
    ResponseFormat.json_schema: re.compile(r"response_format"),
    ResponseFormat.json_object: re.compile(r"response_format"),
    ResponseFormat.tools: re.compile(r"\btools\b|tool_choice"),
}
MAX_TOKEN_COUNT = 100_000_000
"""The most tokens a server may report for one call (a hundred times the largest context offered today): more
is taken as this, so a hostile count can neither overflow the run log's integer columns (their sums over a
document's attempts included) nor pass as anything but an enormous cost."""
MAX_NAME_CHARS = 200
"""How much of the model name and the finish reason a server sends is kept."""
_UNSUPPORTED = re.compile(r"unsupported|not supported|unrecognized|unknown|not permitted|extra (input|field)")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


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
        asked_wait: str | None = None,
        body: str = "",
        unreachable: bool = False,
        answering: bool = False,
    ) -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail
        self.retryable = retryable
        self.status = status
        self.param = param
        self.retry_after = retry_after  # seconds, within MAX_RETRY_AFTER_S (``retry_after_s``)
        self.asked_wait = asked_wait  # the Retry-After header as sent (cut short), for the cause
        self.body = body  # the raw error body, lower-cased: servers put the field name in different places
        self.unreachable = unreachable  # no connection could be made (not: the server answered wrong)
        self.answering = answering  # timed out while the answer's body was still arriving

    def rejects(self, mode: ResponseFormat) -> bool:
        """The server says it lacks ``mode``: a 400/422 about it, or a 5xx naming its request field."""
        if mode not in _FIELDS or self.status is None:
            return False
        if self.param is not None and _FIELDS[mode].search(self.param):
            return self.status in (400, 422) or self.status >= 500
        if self.status in (400, 422):
            return bool(_REJECTION_WORDS[mode].search(self.body))
        return self.status >= 500 and bool(_FIELDS[mode].search(self.body))

    @property
    def wants_max_completion_tokens(self) -> bool:
        """A 400/422 refusing ``max_tokens`` (newer OpenAI models): ``max_completion_tokens`` will do."""
        if self.status not in (400, 422):
            return False
        if "max_completion_tokens" in self.body:
            return True
        names_it = self.param == "max_tokens" or "max_tokens" in self.body
        return names_it and bool(_UNSUPPORTED.search(self.body))


@dataclass(frozen=True)
class _Answer:
    text: str
    model: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None = None


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
        on_timeout: TimedOut | None = None,
    ) -> None:
        self._base_url_from = "given" if base_url else "OPENAI_BASE_URL" if os.environ.get("OPENAI_BASE_URL") else None
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
        self._on_timeout = on_timeout
        self._secret = api_key
        _log_from_environment()
        self._http = Session(base_url or DEFAULT_BASE_URL,
                             {"Authorization": f"Bearer {api_key}", "Accept": "application/json",
                              "Content-Type": "application/json", **_account_headers()},
                             connections=self._settings.connections, timeout_s=self._settings.timeout_s,
                             max_body_bytes=self._settings.max_body_bytes)
        self.base_url = self._http.base_url
        chosen = ResponseFormat(self._settings.response_format)
        self._modes = AUTO_ORDER if chosen is ResponseFormat.auto else (chosen,)
        self._mode_index = 0  # only ever moves forward: a mode a server rejected is not tried again
        self._token_field = "max_tokens"

    def __repr__(self) -> str:
        return f"OpenAICompatProvider(model={self.model!r}, base_url={self.base_url!r}, mode={self.mode!r})"

    @property
    def mode(self) -> str:
        """The structured-output mode the next call starts with."""
        return self._modes[self._mode_index].value

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        settings = self._settings
        started = time.monotonic()
        transport: list[TransportAttempt] = []
        mode_index = self._mode_index
        retries = 0
        timeout_s = settings.timeout_s
        budget_deadline: float | None = None
        while True:
            mode = self._modes[mode_index]
            token_field = self._token_field
            began = time.monotonic()
            try:
                answer = await self._try(request, mode, token_field, timeout_s)
            except _Failure as failure:
                latency = _ms_since(began)
                number = len(transport) + 1
                if failure.status == 429 and self._on_rate_limit is not None:  # the run pauses no longer than a call may
                    self._on_rate_limit(None if failure.retry_after is None else
                                        min(failure.retry_after, settings.retry_budget_s))
                if failure.outcome == "timeout" and self._on_timeout is not None:
                    self._on_timeout()
                detail = self._redact(failure.detail)
                if token_field == "max_tokens" and request.max_tokens is not None and failure.wants_max_completion_tokens:
                    self._token_field = "max_completion_tokens"
                    detail = f"max_tokens rejected ({detail}); sending max_completion_tokens"
                    log.info("%s: %s", self.base_url, detail)
                    transport.append(TransportAttempt(number, failure.outcome, latency, detail=detail))
                    continue
                if failure.rejects(mode):
                    if mode_index + 1 == len(self._modes):
                        transport.append(TransportAttempt(number, failure.outcome, latency, detail=detail))
                        raise ProviderError(self._rejected_cause(mode, failure), transport) from None
                    mode_index += 1
                    self._mode_index = max(self._mode_index, mode_index)
                    detail = f"{mode} rejected ({detail}); falling back to {self._modes[mode_index]}"
                    log.info("%s: %s", self.base_url, detail)
                    transport.append(TransportAttempt(number, failure.outcome, latency, detail=detail))
                    continue
                if budget_deadline is None:
                    budget_deadline = time.monotonic() + settings.retry_budget_s
                wait = self._wait(failure, retries + 1)
                left = budget_deadline - time.monotonic()
                remaining = left - wait
                can_retry = failure.retryable and retries < settings.max_transport_retries
                if can_retry and remaining > 0:
                    transport.append(TransportAttempt(number, failure.outcome, latency, wait_s=wait, detail=detail))
                    log.info("%s: %s, retrying in %.1f s", self.base_url, failure.outcome, wait)
                    await asyncio.sleep(wait)
                    retries += 1
                    timeout_s = min(settings.timeout_s, remaining)
                    continue
                transport.append(TransportAttempt(number, failure.outcome, latency, detail=detail))
                raise ProviderError(self._cause(failure, len(transport), budget_spent=can_retry, left_s=left,
                                                capped=request.max_tokens is not None), transport) from None
            transport.append(TransportAttempt(len(transport) + 1, "ok", _ms_since(began)))
            text = answer.text
            if self._secret != NO_KEY_PLACEHOLDER and len(self._secret) >= 8 and self._secret in text:
                # a server (or an injected document) made the model repeat the key: the run log must not keep it
                text = text.replace(self._secret, "***")
                transport[-1] = TransportAttempt(len(transport), "ok", transport[-1].latency_ms,
                                                 detail="the API key appeared in the answer and was replaced by ***")
            return GenerationResult(
                text=text,
                mode=mode.value,
                model=answer.model or self.model,
                latency_ms=_ms_since(started),
                prompt_tokens=answer.prompt_tokens,
                completion_tokens=answer.completion_tokens,
                cached_tokens=answer.cached_tokens,
                finish_reason=answer.finish_reason,
                transport=transport,
            )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _try(self, request: GenerationRequest, mode: ResponseFormat, token_field: str,
                   timeout_s: float) -> _Answer:
        """One HTTP try; every way it can fail becomes a ``_Failure``."""
        body = request_body(self.model, request, mode, token_field)
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        progress = Progress()
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._http.post("chat/completions", content, progress)
        except TimeoutError:
            raise _Failure("timeout", progress.describe(timeout_s), retryable=True,
                           answering=progress.status is not None) from None
        except AnswerMalformed as err:  # retryable: a proxy or gateway may garble one answer, not the next
            raise _Failure("protocol_error", str(err), retryable=True) from None
        except TransportError as err:
            raise _Failure("connection_error", str(err), retryable=True,
                           unreachable=isinstance(err, ConnectFailed)) from None
        if not response.is_success:
            raise _status_failure(response.status, response.text, response.headers)
        tool = body["tool_choice"]["function"]["name"] if mode is ResponseFormat.tools else None
        return _parse_completion(response.status, response.body, tool=tool)

    def _wait(self, failure: _Failure, retry: int) -> float:
        """Seconds before retry number ``retry``: the server's Retry-After (within ``MAX_RETRY_AFTER_S``), else
        capped exponential + jitter. A call whose retry budget has less left than this ends at once."""
        if failure.retry_after is not None:
            return failure.retry_after
        ceiling = min(self._settings.backoff_max_s, self._settings.backoff_base_s * 2.0 ** (retry - 1))
        return ceiling * random.uniform(0.5, 1.0)

    def _cause(self, failure: _Failure, attempts: int, *, budget_spent: bool, left_s: float, capped: bool) -> str:
        """The one line a person reads in the run log and the ERROR route: what happened and what to try.

        ``capped``: the request set max_tokens. Without it a small model may write until its context is full
        (the bundled model over llama-cpp-python's server does), which no timeout fits.
        """
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        detail = self._redact(failure.detail)
        if failure.outcome == "timeout" and failure.answering:
            cause = f"timeout after {self._settings.timeout_s:g} s ({tries}) reading the answer from {self.base_url}: {detail}"
        elif failure.outcome == "timeout":
            cause = (f"timeout after {self._settings.timeout_s:g} s ({tries}) waiting for {self.base_url}: a slow "
                     "server needs a longer --timeout or a lower --concurrency")
            if not capped:
                cause += " (no --max-tokens was set: a model that never stops needs one)"
        elif failure.status == 401:
            cause = f"HTTP 401 from {self.base_url}: the API key was rejected ({detail})"
        elif failure.status is not None:
            after = f" after {tries}" if failure.retryable else ""
            cause = f"HTTP {failure.status} from {self.base_url}{after}: {detail}"
        elif failure.unreachable:
            cause = f"connection error to {self.base_url} after {tries}: {detail} ({self._where()})"
        elif failure.outcome == "connection_error":
            cause = f"broken answer from {self.base_url} after {tries}: {detail}"
        elif failure.outcome == "protocol_error":
            cause = f"malformed HTTP answer from {self.base_url} after {tries}: {detail}"
        else:
            cause = f"unusable response body from {self.base_url} after {tries}: {detail}"
        budget = f"retry budget of {self._settings.retry_budget_s:g} s exhausted"
        if budget_spent and failure.asked_wait is not None:  # the server's own value, so a person sees what it asked
            asked = self._redact(failure.asked_wait)[:40]
            counted = (f", counted as the {MAX_RETRY_AFTER_S:g} s ceiling," if failure.retry_after == MAX_RETRY_AFTER_S
                       and asked != f"{MAX_RETRY_AFTER_S:g}" else "")
            left = f"{max(0.0, left_s):.1f}".removesuffix(".0")
            cause += f" (Retry-After: {asked}{counted} is more than the {left} s left: {budget})"
        elif budget_spent:
            cause += f" ({budget})"
        return cause

    def _where(self) -> str:
        """What to check when the base URL cannot be reached, by where the URL came from."""
        if self._base_url_from is None:
            return ("the OpenAI API's own address, as neither --base-url nor OPENAI_BASE_URL was set: is this machine "
                    "online, or does it need HTTPS_PROXY?")
        if self._base_url_from == "OPENAI_BASE_URL":
            return "is a server running at that address? it comes from OPENAI_BASE_URL"
        return "is a server running at that address?"

    def _rejected_cause(self, mode: ResponseFormat, failure: _Failure) -> str:
        """An explicitly chosen mode the server lacks: say so, and how to let the run choose instead."""
        return (f"{self.base_url} does not support --response-format {mode} (HTTP {failure.status}: "
                f"{self._redact(failure.detail)}); use --response-format auto to fall back to a mode it accepts")

    def _redact(self, text: str) -> str:
        """Servers and HTTP libraries may echo credentials; nothing we record or raise may contain them."""
        return redact_text(" ".join(text.split()), secrets=(self._secret,))[:500]


def request_body(model: str, request: GenerationRequest, mode: ResponseFormat, token_field: str) -> dict[str, Any]:
    """The chat completion request body for ``mode``; the contract's schema is sent exactly as written."""
    body: dict[str, Any] = {"model": model, "messages": request.messages_for(mode.value),
                            "temperature": request.temperature}
    if request.max_tokens is not None:
        body[token_field] = request.max_tokens
    name = _NAME_CHARS.sub("_", request.schema_name)[:64] or "answer"  # OpenAI's rule for schema/function names
    if mode is ResponseFormat.json_schema:
        # strict off: strict mode rejects schemas with open objects or optional fields; the validator enforces
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": name, "schema": request.schema, "strict": False}}
    elif mode is ResponseFormat.tools:
        function = {"name": name, "description": f"Submit the {name} as this function's arguments.",
                    "parameters": request.schema}
        body["tools"] = [{"type": "function", "function": function}]
        body["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif mode is ResponseFormat.json_object:
        body["response_format"] = {"type": "json_object"}  # the prompt already shows the schema
    return body


def _log_from_environment() -> None:
    """``OPENAI_LOG=debug`` (or ``info``) logs every HTTP call to stderr, as it does for the ``openai`` client.

    Request headers are never logged (the key is in one); what this module logs is redacted.
    """
    level = {"debug": logging.DEBUG, "info": logging.INFO}.get(os.environ.get("OPENAI_LOG", "").strip().lower())
    if level is None:
        return
    logging.basicConfig(format="[%(asctime)s - %(name)s:%(lineno)d - %(levelname)s] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S")
    for name in ("extractor.providers.transport", __name__):
        logging.getLogger(name).setLevel(level)


def _account_headers() -> dict[str, str]:
    """The organisation and project headers the ``openai`` client sends when its variables are set."""
    names = {"OPENAI_ORG_ID": "OpenAI-Organization", "OPENAI_PROJECT_ID": "OpenAI-Project"}
    return {header: value for variable, header in names.items() if (value := os.environ.get(variable))}


def _status_failure(status: int, text: str, headers: Mapping[str, str]) -> _Failure:
    """An HTTP error, read as the ``openai`` client reads one: the ``error`` object of a JSON body (its
    ``message`` and ``param``), else the body itself."""
    stripped = text.strip()
    try:
        parsed: Any = json.loads(stripped)
        summary = f"Error code: {status} - {parsed}"
    except ValueError:
        parsed, summary = stripped, stripped or f"Error code: {status}"
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    message = error.get("message") if isinstance(error, dict) else error
    param = error.get("param") if isinstance(error, dict) else None
    if not (isinstance(message, str) and message):
        # No "message" field (FastAPI-style {"detail": [...]} bodies): the raw body is the only place that says
        # what the server objected to.
        raw = text[:500]
        message = summary if raw in summary else f"{summary} - {raw}"
    return _Failure(
        f"http_{status}",
        message,
        retryable=status in RETRYABLE_STATUS,
        status=status,
        param=param if isinstance(param, str) else None,
        retry_after=retry_after_s(headers.get("retry-after")),
        asked_wait=headers.get("retry-after"),
        body=text[:4000].lower(),
    )


def _parse_completion(status: int, body: bytes, *, tool: str | None = None) -> _Answer:
    """The raw answer of a 2xx body; the answer text itself is never judged here.

    Only a body that is not a chat completion at all (empty, not JSON, no ``choices[0].message``) is a
    transport failure; empty or non-JSON *content* is returned as text for the validator to route. When
    the request offered the function ``tool``, its call's ``arguments`` string is the answer (a server
    that answered in prose instead gets its content routed like any other unusable answer).
    """
    if not body.strip():
        raise _Failure("empty_body", f"HTTP {status} with an empty body", retryable=True)
    try:
        data = json.loads(body)
    except ValueError:
        raise _Failure("garbled_body", f"HTTP {status} body is not JSON: {body[:120]!r}", retryable=True) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict) or not isinstance(message := choice.get("message"), dict):
        raise _Failure("garbled_body", f"HTTP {status} body has no choices[0].message: {body[:120]!r}",
                       retryable=True)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    content = message.get("content")
    if tool is not None and (arguments := _tool_arguments(message, tool)) is not None:
        content = arguments
    model = data.get("model")
    finish_reason = choice.get("finish_reason")
    return _Answer(
        text=content if isinstance(content, str) else "",
        model=model[:MAX_NAME_CHARS] if isinstance(model, str) and model else None,
        finish_reason=finish_reason[:MAX_NAME_CHARS] if isinstance(finish_reason, str) else None,
        prompt_tokens=(prompt := _token_count(usage.get("prompt_tokens"))),
        completion_tokens=_token_count(usage.get("completion_tokens")),
        cached_tokens=_cached(details.get("cached_tokens"), prompt) if isinstance(details := usage.get(
            "prompt_tokens_details"), dict) else None,
    )


def _tool_arguments(message: dict[str, Any], tool: str) -> str | None:
    """The ``arguments`` of the call to ``tool`` (else of the first call), exactly as sent.

    A server that sends them as a JSON object rather than the specified string gets it re-serialised:
    the only text there is.
    """
    calls = [call.get("function") for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    functions = [function for function in calls if isinstance(function, dict)]
    function = next((f for f in functions if f.get("name") == tool), functions[0] if functions else None)
    arguments = function.get("arguments") if function is not None else None
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict | list):
        return json.dumps(arguments, ensure_ascii=False)
    return None


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` value (seconds, or an HTTP date) as the seconds to wait, within ``MAX_RETRY_AFTER_S``;
    None when there is none. A value that is negative, not finite, over the ceiling or unreadable counts as
    the ceiling (a server that asked for a pause gets one, never longer); a date already past is 0."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = _seconds_until(value)
    return bounded_pause(seconds)


def _seconds_until(value: str) -> float:
    """Seconds from now to an HTTP date (0 once it has passed); NaN when ``value`` is no date."""
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return math.nan
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _token_count(value: Any) -> int | None:
    """A token count the server reports, within ``[0, MAX_TOKEN_COUNT]``; None when it is not a count (missing,
    negative, not an integer): a visible gap, never a made-up zero."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    return min(value, MAX_TOKEN_COUNT)


def _cached(value: Any, prompt: int | None) -> int | None:
    """Cached prompt tokens: a count, and never more than the prompt's when that is known (they are part of it)."""
    cached = _token_count(value)
    return cached if cached is None or prompt is None else min(cached, prompt)


def _ms_since(began: float) -> float:
    return round((time.monotonic() - began) * 1000, 1)
