"""Secrets out of everything that is stored, printed or raised: the one redaction helper.

The run log keeps commands and configurations; providers keep server messages. Both may carry an API key
(``--api-key X``, ``Authorization: Bearer ...``, ``user:password@`` in a URL, an ``sk-...`` key a server
echoes back), so both pass text through here before it leaves memory. Only the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
MIN_SECRET_CHARS = 4
"""Known secret values shorter than this are not masked: they would blank out ordinary words."""

SECRET_KEY = re.compile(r"(^|[_-])(api_?key|key|token|secret|password|passwd|authorization)$", re.IGNORECASE)
"""A mapping key whose value is a secret (``api_key``, ``openai-token``, ``password``, ...)."""

_BEARER = re.compile(r"(?i)bearer\s+\S+")
_SECRET_FLAG = re.compile(
    r"(--?(?:[\w-]*[-_])?(?:api-?key|key|token|secret|password|passwd))(=|\s+)(\S+)", re.IGNORECASE
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+@")  # the user may be empty: redis://:password@host
_API_KEY_LITERAL = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secret values and without anything that looks like a credential."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, MASK)
    text = _BEARER.sub(f"Bearer {MASK}", text)
    text = _SECRET_FLAG.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
    return _API_KEY_LITERAL.sub(f"sk-{MASK}", text)


def redact_config(value: Any) -> Any:
    """A configuration as it may be stored: values under secret-like keys masked, strings redacted."""
    if isinstance(value, Mapping):
        return {
            str(key): MASK if SECRET_KEY.search(str(key)) and item else redact_config(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_config(item) for item in value]
    return redact_text(value) if isinstance(value, str) else value
