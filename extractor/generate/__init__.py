"""The one small interface between the pipeline and any model.

The pipeline builds a ``GenerationRequest`` and awaits ``Provider.generate``; it never imports a provider.
Providers (``extractor.providers``) return the raw text exactly as the model produced it, whatever it
is, and raise ``ProviderError`` only when no answer could be obtained after bounded transport retries.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

from extractor.canonical import canonical_json, text_sha256


@dataclass(frozen=True)
class GenerationRequest:
    """Everything sent to a model; ``fingerprint`` hashes it so identical requests are recognisable."""

    messages: list[dict[str, str]]
    schema: dict[str, Any]
    schema_name: str
    temperature: float = 0.0
    max_tokens: int | None = None
    shared: tuple[str, ...] = field(default=(), compare=False, repr=False)
    """Texts of the messages that every request of the same prompt and contract repeats verbatim (system
    prompt, template text, the schema): the run log stores them once. Not sent, not part of the fingerprint."""
    schema_at: tuple[int, int, int] | None = None
    """Where the schema's text is in the messages (message index, start, end), so a mode that sends the schema
    in the request's structured-output field does not send it a second time in the prompt (``messages_for``)."""

    def to_json(self) -> dict[str, Any]:
        """The request as stored; messages are copied, the (large, read-only) schema is shared, not copied."""
        stored = {"messages": [dict(message) for message in self.messages], "schema": self.schema,
                  "schema_name": self.schema_name, "temperature": self.temperature, "max_tokens": self.max_tokens}
        return stored | ({"schema_at": list(self.schema_at)} if self.schema_at is not None else {})

    def messages_for(self, mode: str) -> list[dict[str, str]]:
        """The messages as sent in ``mode`` (``messages_as_sent``)."""
        return messages_as_sent(self.messages, self.schema_at, mode)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of ``to_json()`` as canonical JSON (sorted keys, no spaces); the schema is encoded once."""
        members = (f"{canonical_json(key)}:{_schema_json(value) if key == 'schema' else canonical_json(value)}"
                   for key, value in sorted(self.to_json().items()))
        return text_sha256(f"{{{','.join(members)}}}")


SCHEMA_CARRIED = "(the JSON Schema is sent as this request's structured-output schema)"
"""What the prompt says where the schema's text was, in a mode that carries the schema itself."""
CARRYING_MODES = frozenset({"json_schema", "tools", "grammar"})
"""Structured-output modes whose request field holds the schema (a response format, a function's parameters, a
local grammar): the prompt need not repeat it. ``json_object`` and ``plain`` have only the prompt."""


def messages_as_sent(messages: list[dict[str, str]], schema_at: Any, mode: str | None) -> list[dict[str, str]]:
    """``messages`` as a request in ``mode`` sends them: in a mode that carries the schema, its text in the prompt
    (``schema_at``: message index, start, end) is replaced by ``SCHEMA_CARRIED``; otherwise unchanged.
    Used by the providers to build the request and by ``extract show`` to print it exactly as sent."""
    if mode not in CARRYING_MODES or not schema_at:
        return messages
    index, start, end = schema_at
    content = messages[index]["content"]
    sent = [dict(message) for message in messages]
    sent[index]["content"] = content[:start] + SCHEMA_CARRIED + content[end:]
    return sent


_SCHEMA_JSON: dict[int, tuple[Any, str]] = {}


def _schema_json(schema: Any) -> str:
    """Canonical JSON of a schema, cached per schema object (contracts keep theirs for the process's life)."""
    cached = _SCHEMA_JSON.get(id(schema))
    if cached is None or cached[0] is not schema:
        if len(_SCHEMA_JSON) >= 64:
            _SCHEMA_JSON.clear()
        cached = _SCHEMA_JSON[id(schema)] = (schema, canonical_json(schema))
    return cached[1]


@dataclass(frozen=True)
class TransportAttempt:
    """One HTTP (or in-process) try; retries are recorded, never hidden."""

    number: int
    outcome: str  # "ok", "timeout", "http_429", "http_500", "connection_error", ...
    latency_ms: float
    wait_s: float = 0.0  # backoff slept after this try (Retry-After honoured)
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GenerationResult:
    """The model's raw answer plus what it cost; ``text`` may be empty, truncated or not JSON at all."""

    text: str
    mode: str  # how structure was requested: "json_schema", "tools", "json_object", "plain" or "grammar" (local)
    model: str
    latency_ms: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    cached_tokens: int | None = None
    """Prompt tokens the server read from its prompt cache (part of ``prompt_tokens``), as it reports them."""
    transport: list[TransportAttempt] = field(default_factory=list)


class ProviderError(Exception):
    """No answer after bounded retries (unreachable, timeouts, 429s or 5xx throughout); ``cause`` says which."""

    def __init__(self, cause: str, transport: list[TransportAttempt] | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.transport = transport or []


MAX_RETRY_AFTER_S = 60.0
"""The longest pause a server's ``Retry-After`` may ask of a call or of a run (the ``openai`` client's own
ceiling): a larger value, a negative or non-finite one, or one that cannot be read counts as this. A server
asking for a day (a gateway's daily quota) gets this, not a run stalled for a day (docs/model-servers.md)."""


def bounded_pause(seconds: float | None) -> float | None:
    """A pause a server asked for, within ``[0, MAX_RETRY_AFTER_S]`` (None stays None: no pause asked)."""
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return MAX_RETRY_AFTER_S
    return min(seconds, MAX_RETRY_AFTER_S)


class RateLimited(Protocol):
    """Providers call this on every 429 so the pipeline can lower its concurrency; ``retry_after_s`` is the pause
    the server asked for, within ``MAX_RETRY_AFTER_S`` and the call's retry budget."""

    def __call__(self, retry_after_s: float | None) -> None: ...


class TimedOut(Protocol):
    """Providers call this on every timed-out try: a server too slow for the calls in flight gets fewer."""

    def __call__(self) -> None: ...


@runtime_checkable
class Provider(Protocol):
    name: str  # "openai" or "local"
    model: str  # the model id as configured

    async def generate(self, request: GenerationRequest) -> GenerationResult: ...

    async def aclose(self) -> None: ...
