"""What model calls cost: a price table per model, in US dollars per million tokens (docs/design.md#cost).

Built-in entries cover the common OpenAI models, each with the date its price was read from OpenAI's price
page; a JSON file named by ``EXTRACT_PRICES`` adds entries or overrides them::

    {"gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.60, "as_of": "2025-08-01",
                     "source": "our contract"},
     "local": {"input": 0, "output": 0}}

A call's cost is (prompt tokens - cached) x input + cached x cached input + completion tokens x output, with the
tokens the server reported (a cached price missing: cached tokens cost the input price). A model without an
entry has an **unknown** cost, never zero; so has a call whose server reported no tokens. Model names are
looked up as given, then without a trailing release date (``gpt-4o-mini-2024-07-18`` -> ``gpt-4o-mini``), then
without a provider prefix (``openai:gpt-4o``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from extractor.errors import InputError

PRICES_ENV = "EXTRACT_PRICES"
PER_TOKENS = 1_000_000
OPENAI_PRICES = "https://openai.com/api/pricing/"


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, and where the numbers come from."""

    model: str
    input: float
    output: float
    cached_input: float | None = None
    as_of: str = ""
    source: str = OPENAI_PRICES

    def cost(self, prompt_tokens: int, cached_tokens: int | None, completion_tokens: int) -> float:
        cached = min(cached_tokens or 0, prompt_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return ((prompt_tokens - cached) * self.input + cached * cached_rate + completion_tokens * self.output) / PER_TOKENS

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "input": self.input, "cached_input": self.cached_input, "output": self.output,
                "per": "1M tokens, USD", "as_of": self.as_of, "source": self.source}


def _openai(model: str, input: float, cached: float | None, output: float, as_of: str) -> Price:
    return Price(model, input, output, cached, as_of, OPENAI_PRICES)


BUILT_IN: dict[str, Price] = {price.model: price for price in (
    _openai("gpt-4o", 2.50, 1.25, 10.00, "2024-10-01"),
    _openai("gpt-4o-mini", 0.15, 0.075, 0.60, "2024-10-01"),
    _openai("gpt-4.1", 2.00, 0.50, 8.00, "2025-04-14"),
    _openai("gpt-4.1-mini", 0.40, 0.10, 1.60, "2025-04-14"),
    _openai("gpt-4.1-nano", 0.10, 0.025, 0.40, "2025-04-14"),
    _openai("o3", 2.00, 0.50, 8.00, "2025-06-10"),
    _openai("o4-mini", 1.10, 0.275, 4.40, "2025-04-16"),
    _openai("o3-mini", 1.10, 0.55, 4.40, "2025-01-31"),
    _openai("o1", 15.00, 7.50, 60.00, "2024-12-17"),
    _openai("gpt-5", 1.25, 0.125, 10.00, "2025-08-07"),
    _openai("gpt-5-mini", 0.25, 0.025, 2.00, "2025-08-07"),
    _openai("gpt-5-nano", 0.05, 0.005, 0.40, "2025-08-07"),
    _openai("gpt-4-turbo", 10.00, None, 30.00, "2024-04-09"),
    _openai("gpt-3.5-turbo", 0.50, None, 1.50, "2024-01-25"),
)}
"""Prices read from OpenAI's price page on the dates given; override any of them with ``EXTRACT_PRICES``."""

_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


@cache
def _file_prices(path: str) -> dict[str, Price]:
    """Entries of a price file; refused with one line naming the file and the entry."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(path, f"cannot read the price file named by {PRICES_ENV} ({error.strerror or error})") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise InputError(path, f"the price file named by {PRICES_ENV} is not JSON ({error})") from None
    if not isinstance(data, dict):
        raise InputError(path, "a price file is a JSON object: {\"model\": {\"input\": USD per 1M tokens, ...}}")
    prices = {}
    for model, entry in data.items():
        if not isinstance(entry, dict):
            raise InputError(path, f"{model}: an entry is an object with input, output (and cached_input)")
        numbers = {}
        for key in ("input", "output", "cached_input"):
            value = entry.get(key)
            if value is None and key == "cached_input":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InputError(path, f"{model}: {key} must be a number >= 0 (US dollars per million tokens)")
            numbers[key] = float(value)
        prices[model] = Price(model, numbers["input"], numbers["output"], numbers.get("cached_input"),
                              str(entry.get("as_of", "")), str(entry.get("source", path)))
    return prices


def table() -> dict[str, Price]:
    """The prices in force: the built-in ones, with ``EXTRACT_PRICES`` entries over them."""
    path = os.environ.get(PRICES_ENV)
    return BUILT_IN | (_file_prices(path) if path else {})


def price_for(model: str | None, prices: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model`` (as given, without a release date, without a provider prefix), or None: unknown."""
    if not model:
        return None
    prices = table() if prices is None else prices
    name = model.split(":", 1)[1] if ":" in model else model
    for candidate in (model, name, _DATED.sub("", name)):
        if candidate in prices:
            return prices[candidate]
    return None


@dataclass
class Spend:
    """Tokens and cost of a set of calls; ``unknown`` counts calls whose cost is not known (no price, or no
    token counts reported), so a partial sum is never shown as the whole."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    unknown: int = 0
    unpriced: frozenset[str] = frozenset()

    def add(self, model: str | None, prompt: int | None, cached: int | None, completion: int | None,
            prices: Mapping[str, Price] | None = None, calls: int = 1) -> None:
        self.calls += calls
        self.prompt_tokens += prompt or 0
        self.cached_tokens += cached or 0
        self.completion_tokens += completion or 0
        price = price_for(model, prices)
        if price is None:
            self.unknown += calls
            self.unpriced = self.unpriced | {model or "?"}
        elif prompt is None or completion is None:
            self.unknown += calls
        else:
            self.cost += price.cost(prompt, cached, completion)

    def add_row(self, model: str | None, calls: int, prompt: int, cached: int, completion: int, untold: int,
                prices: Mapping[str, Price] | None = None) -> None:
        """Summed calls of one model (``extractor.store.queries.spend``); ``untold``: answered without token counts."""
        if calls:
            self.add(model, prompt, cached, completion, prices, calls=calls)
        if untold:
            self.calls += untold
            self.unknown += untold

    @property
    def known(self) -> float | None:
        """The cost, or None when any call's cost is unknown."""
        return None if self.unknown else self.cost

    def per(self, count: int) -> float | None:
        known = self.known
        return None if known is None or count <= 0 else known / count

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": self.known,
                "calls_of_unknown_cost": self.unknown, "models_without_price": sorted(self.unpriced)}


def dollars(value: float | None) -> str:
    """``$0.0123``, or ``unknown``: a missing price is never shown as zero."""
    if value is None:
        return "unknown"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def spend_by_key(rows: Iterable[tuple[Any, ...]], key: Callable[[tuple[Any, ...]], Any],
                 fallback: Mapping[str, str] | None = None) -> dict[Any, Spend]:
    """``Spend`` per ``key(row)`` of spend rows ``(run_id, document_run_id, model, calls, prompt, cached, completion,
    untold)``; a call without a model is priced as its run's model (``fallback``: run id -> model)."""
    prices = table()
    found: dict[Any, Spend] = {}
    for row in rows:
        run_id, _document_run_id, model, calls, prompt, cached, completion, untold = row
        found.setdefault(key(row), Spend()).add_row(model or (fallback or {}).get(run_id), calls, prompt, cached,
                                                    completion, untold, prices)
    return found
