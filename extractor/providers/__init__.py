"""Model providers behind ``extractor.generate.Provider``, chosen by a provider string.

``openai:<model>`` talks to any OpenAI-compatible HTTP server (OpenAI, vLLM, Ollama, llama.cpp server,
LM Studio); ``local:<path.gguf>`` runs a GGUF file in process with llama-cpp-python; plain ``local`` runs
the bundled demonstration model. Provider modules are imported only when chosen, so the local extra
(llama-cpp-python) is never needed for HTTP use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from extractor.generate import Provider, RateLimited

ACCEPTED_FORMS = "openai:<model>, local:<path.gguf> or local (the bundled demo model)"


@dataclass(frozen=True)
class ProviderSettings:
    """Bounds on one ``generate`` call, so a dead or throttling server cannot stall a run forever."""

    timeout_s: float = 120.0  # per HTTP try
    max_transport_retries: int = 3  # retries after the first try (timeouts, resets, 429, 5xx, garbled bodies)
    retry_budget_s: float = 300.0  # total seconds of backoff + retries per call
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    n_ctx: int = 8192  # context window of local models


def from_string(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    settings: ProviderSettings | None = None,
    on_rate_limit: RateLimited | None = None,
) -> Provider:
    """Build the provider a provider string names; ``ValueError`` (one line) for anything else.

    ``base_url``/``api_key`` default to ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` (openai only).
    """
    settings = settings or ProviderSettings()
    kind, colon, rest = spec.strip().partition(":")
    rest = rest.strip()
    if kind == "openai" and rest:
        from extractor.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(
            rest, base_url=base_url, api_key=api_key, settings=settings, on_rate_limit=on_rate_limit
        )
    if kind == "local" and (rest or not colon):
        from extractor.providers.local import LocalProvider

        return LocalProvider(Path(rest).expanduser() if rest else None, settings=settings)
    raise ValueError(f"unknown provider {spec!r}: use {ACCEPTED_FORMS}")
