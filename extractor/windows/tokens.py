"""Counting tokens the way the model will, and the budgets a prompt and an answer must fit in.

A provider's own tokenizer is used where one is at hand: the GGUF vocabulary for a local model (llama.cpp's
``tokenize``, loaded without weights) and tiktoken for OpenAI models when it is installed *and* its encoding
file can be loaded (tiktoken downloads encodings on first use, so offline it cannot). Otherwise the count is
a conservative estimate: byte-level BPE tokens are at least one UTF-8 byte each, and for the languages we
read one token per two bytes over-counts (about 1.5 tokens per Hangul syllable, one per Cyrillic letter,
one per two ASCII characters), so a window planned on the estimate is never too long for the model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

ESTIMATE_BYTES_PER_TOKEN = 2.0
LIMITS_ENV = "EXTRACT_MODEL_LIMITS"
"""Path of a JSON file ``{"<model>": {"max_input_tokens": N, "max_output_tokens": M}}``: budgets per model."""


class TokenCounter(Protocol):
    """Counts the tokens of a text; ``name`` says which tokenizer (recorded with the run)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class EstimateCounter:
    """The conservative estimate (module docstring): ``ceil(utf8 bytes / 2)``."""

    name: str = "estimate:utf8-bytes/2"

    def count(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / ESTIMATE_BYTES_PER_TOKEN)


@dataclass(frozen=True)
class FunctionCounter:
    """A tokenizer given as a function returning the token list (tiktoken's ``encode``, llama.cpp's ``tokenize``)."""

    name: str
    encode: Callable[[str], Any]

    def count(self, text: str) -> int:
        return len(self.encode(text))


def tiktoken_counter(model: str) -> TokenCounter | None:
    """tiktoken's encoding for ``model``, or None when tiktoken is absent or cannot load the encoding."""
    try:
        import tiktoken  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        try:
            encoding = tiktoken.encoding_for_model(model)
        except KeyError:  # a model tiktoken does not know (a local server's alias): OpenAI's current encoding
            encoding = tiktoken.get_encoding("o200k_base")
    except Exception:  # noqa: BLE001 - the encoding file could not be fetched (offline): estimate instead
        return None
    return FunctionCounter(f"tiktoken:{encoding.name}", encoding.encode_ordinary)


def counter_for(provider: Any) -> TokenCounter:
    """The best counter for a provider: its own (``token_counter()``, local models), tiktoken for OpenAI, else the estimate."""
    own = getattr(provider, "token_counter", None)
    if callable(own):
        found = own()
        if found is not None:
            return found  # type: ignore[no-any-return]
    if getattr(provider, "name", "") == "openai":
        found = tiktoken_counter(str(getattr(provider, "model", "")))
        if found is not None:
            return found
    return EstimateCounter()


@dataclass(frozen=True)
class Budget:
    """Tokens a request may hold (``max_input``) and its answer may take (``max_output``)."""

    max_input: int
    max_output: int

    def __post_init__(self) -> None:
        if self.max_input < 1 or self.max_output < 1:
            raise ValueError(f"token budgets must be positive, got input {self.max_input}, output {self.max_output}")


OPENAI_DEFAULT = Budget(128_000, 16_384)
"""gpt-4o and gpt-4o-mini; a model with other limits is configured in ``EXTRACT_MODEL_LIMITS``."""


def default_budget(provider: Any) -> Budget:
    """The provider's budget: a local model shares its context (``n_ctx``) between prompt and answer, half each;
    an OpenAI-compatible model gets ``OPENAI_DEFAULT``."""
    n_ctx = getattr(provider, "n_ctx", None)
    if isinstance(n_ctx, int):
        return Budget(n_ctx // 2, n_ctx // 2)
    return OPENAI_DEFAULT


def configured_budget(model: str, path: str | None = None) -> dict[str, int]:
    """The budgets ``EXTRACT_MODEL_LIMITS`` (or ``path``) sets for ``model``; ``InputError`` names the file and the
    key at fault (``extractor.configfile.ModelLimitsFile``: its size, its models and each budget bounded)."""
    where = path or os.environ.get(LIMITS_ENV)
    if not where:
        return {}
    from extractor.configfile import ModelLimitsFile, read_json

    entry = read_json(where, ModelLimitsFile, "model limits file").root.get(model)
    return {} if entry is None else entry.model_dump(exclude_none=True)


def budget_for(provider: Any, max_input: int | None = None, max_output: int | None = None) -> Budget:
    """What a run uses: the options given, else the model's configured limits, else the provider's default."""
    base = default_budget(provider)
    configured = configured_budget(str(getattr(provider, "model", "")))
    return Budget(max_input or configured.get("max_input_tokens", base.max_input),
                  max_output or configured.get("max_output_tokens", base.max_output))
