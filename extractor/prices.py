"""What model calls cost: a price table per model, in US dollars per million tokens (docs/design.md#cost).

Built-in entries cover the common OpenAI models, each with where its price was checked and the date the
source gives (``BUILT_IN``); tests/test_cost.py holds every one to pydantic's maintained table, the
``genai-prices`` package, which works offline. It is not read at run time: importing it (pydantic, an HTTP
client, a 1.6 MB data module) took a few hundred ms, which every command that shows a cost (``extract runs``,
``stats``, ``show``) would pay, and its tiered prices (above 200,000 prompt tokens) cannot be applied to the
per-model sums those commands add up. A JSON file named by ``EXTRACT_PRICES`` adds entries or overrides them,
read again whenever it changes (``extractor.configfile.PriceFile`` is its shape)::

    {"gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.60, "as_of": "2025-08-01",
                     "source": "our contract"},
     "local": {"input": 0, "output": 0}}

A call's cost is (prompt tokens - cached) x input + cached x cached input + completion tokens x output, with the
tokens the server reported (a cached price missing: cached tokens cost the input price). A model without an
entry has an **unknown** cost, never zero; so has a call whose server reported no tokens. Model names are
looked up as given, then without a trailing release date (``gpt-4o-mini-2024-07-18`` -> ``gpt-4o-mini``), then
without a provider prefix (``openai:gpt-4o``). A model that ran in the process itself (``--model local``, a
local judge: ``RunModels``) costs no API money: its calls are counted as such, not priced and not unknown.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from extractor.errors import InputError

PRICES_ENV = "EXTRACT_PRICES"
IN_PROCESS_PROVIDER = "local"
"""The provider name (``extractor.providers.local``) of a model that runs in this process: no API price."""
PER_TOKENS = 1_000_000
OPENAI_PRICES = "https://openai.com/api/pricing/"
CHECKED_PRICES = "https://github.com/pydantic/genai-prices/blob/main/prices/providers/openai.yml"
OPENAI_MODELS = "https://developers.openai.com/api/docs/models/"


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


def _openai(model: str, input: float, cached: float | None, output: float, as_of: str,
            source: str = CHECKED_PRICES) -> Price:
    return Price(model, input, output, cached, as_of, source)


BUILT_IN: dict[str, Price] = {price.model: price for price in (
    _openai("gpt-4o", 2.50, 1.25, 10.00, "2025-07-04"),
    _openai("gpt-4o-mini", 0.15, 0.075, 0.60, "2025-07-04"),
    _openai("gpt-4.1", 2.00, 0.50, 8.00, "2025-07-04"),
    _openai("gpt-4.1-mini", 0.40, 0.10, 1.60, "2025-07-04"),
    _openai("gpt-4.1-nano", 0.10, 0.025, 0.40, "2025-07-04"),
    _openai("o3", 2.00, 0.50, 8.00, "2025-07-12"),  # the price from 2025-06-10 (it was 10/2.50/40 before)
    _openai("o4-mini", 1.10, 0.275, 4.40, "2025-07-04"),
    _openai("o3-mini", 1.10, 0.55, 4.40, "2025-07-04"),
    _openai("o1", 15.00, 7.50, 60.00, "2025-07-04"),
    _openai("gpt-5", 1.25, 0.125, 10.00, "2025-11-13"),
    _openai("gpt-5-mini", 0.25, 0.025, 2.00, "2025-11-13"),
    _openai("gpt-5-nano", 0.05, 0.005, 0.40, "2025-11-13", f"{OPENAI_MODELS}gpt-5-nano; {CHECKED_PRICES}"),
    _openai("gpt-4-turbo", 10.00, None, 30.00, "2025-07-04", f"{OPENAI_MODELS}gpt-4-turbo; {CHECKED_PRICES}"),
    _openai("gpt-3.5-turbo", 0.50, None, 1.50, "2025-07-04"),
)}
"""OpenAI's list prices (standard tier, USD per 1M tokens). Every number was checked on 2026-12-03 against the
maintained table ``CHECKED_PRICES`` (which cites OpenAI's pricing pages; ``as_of`` is the date it says the
price was last checked there), and where OpenAI's own model page was at hand, against that too. An entry
that could not be checked is left out (its cost is then unknown, never guessed). Override any of them with
``EXTRACT_PRICES``."""

_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def _file_prices(path: str) -> dict[str, Price]:
    """Entries of a price file, read again whenever the file changes (a long-running ``extract serve`` or worker
    prices with the file as it is now). Validated by ``extractor.configfile.PriceFile``; a bad file is refused
    with one line naming the file and the key.

    The entries of a file as validated are kept in the user's cache (``~/.cache/extractor/prices``, by the
    sha256 of the file's bytes), so a command that only reads the run log does not load pydantic to price it
    while the file has not changed."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_PRICE_FILE_BYTES + 1)
    except OSError as error:
        raise InputError(path, f"cannot read the price file named by {PRICES_ENV} ({error.strerror or error})") from None
    digest = hashlib.sha256(data).hexdigest()
    kept = _READ.get((path, digest))
    if kept is not None:
        return kept
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "extractor" / "prices" / f"{digest}.json"
    entries = _cached_entries(cache)
    if entries is None:
        from extractor.configfile import PriceFile, parse_json

        if len(data) > MAX_PRICE_FILE_BYTES:
            raise InputError(path, f"the price file is over {MAX_PRICE_FILE_BYTES // 1024 // 1024} MiB")
        entries = {model: entry.model_dump() for model, entry in parse_json(path, data, PriceFile, "price file").root.items()}
        _keep(cache, entries)
    prices = {model: Price(model, entry["input"], entry["output"], entry["cached_input"], entry["as_of"],
                           entry["source"] or path) for model, entry in entries.items()}
    _READ[(path, digest)] = prices
    return prices


MAX_PRICE_FILE_BYTES = 16 * 1024 * 1024
_READ: dict[tuple[str, str], dict[str, Price]] = {}
"""Price files read by this process, by path and the sha256 of their bytes."""


def _cached_entries(cache: Path) -> dict[str, dict[str, Any]] | None:
    """The validated entries kept for a file with these bytes, or None (absent or unreadable: the file is then
    validated again)."""
    try:
        kept = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and all(isinstance(entry, dict) for entry in kept.values()) else None


def _keep(cache: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Write the validated entries to the cache, atomically; a cache that cannot be written only means the next
    process validates the file again."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache.with_name(f".{cache.name}.{os.getpid()}")
        temporary.write_text(json.dumps(entries), encoding="utf-8")
        os.replace(temporary, cache)
    except OSError:
        return


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


class RunModels(NamedTuple):
    """How a run's calls are priced: ``model`` for a call recorded without one; ``in_process``, the names of the
    models that ran in the process (the generator's, the judge's): they cost no API money."""

    model: str | None
    in_process: frozenset[str] = frozenset()

    @classmethod
    def of(cls, provider: str | None, model: str | None, judge_model: str | None = None) -> RunModels:
        """From what a run records: its provider's name and model, and its judge as ``<provider>:<model>``."""
        local = {model} if provider == IN_PROCESS_PROVIDER and model else set()
        judge_provider, _, judge_name = (judge_model or "").partition(":")
        if judge_provider == IN_PROCESS_PROVIDER and judge_name:
            local.add(judge_name)
        return cls(model, frozenset(local))

    @classmethod
    def of_run(cls, run: Any) -> RunModels:
        """Of a stored run (``extractor.store.RunInfo``)."""
        return cls.of(run.provider, run.model, run.judge_model)


@dataclass
class Spend:
    """Tokens and cost of a set of calls; ``unknown`` counts calls whose cost is not known (no price, or no
    token counts reported), so a partial sum is never shown as the whole; ``in_process`` counts calls of a model
    that ran in the process (no API money: they add nothing to ``cost`` and are not unknown)."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    unknown: int = 0
    unpriced: frozenset[str] = frozenset()
    in_process: int = 0

    def add(self, model: str | None, prompt: int | None, cached: int | None, completion: int | None,
            prices: Mapping[str, Price] | None = None, calls: int = 1, *, local: bool = False) -> None:
        self.calls += calls
        self.prompt_tokens += prompt or 0
        self.cached_tokens += cached or 0
        self.completion_tokens += completion or 0
        if local:
            self.in_process += calls
            return
        price = price_for(model, prices)
        if price is None:
            self.unknown += calls
            self.unpriced = self.unpriced | {model or "?"}
        elif prompt is None or completion is None:
            self.unknown += calls
        else:
            self.cost += price.cost(prompt, cached, completion)

    def add_row(self, model: str | None, calls: int, prompt: int, cached: int, completion: int, untold: int,
                prices: Mapping[str, Price] | None = None, *, local: bool = False) -> None:
        """Summed calls of one model (``extractor.store.queries.spend``); ``untold``: answered without token counts
        (unknown, unless the model ran in the process: then they cost nothing either)."""
        if calls:
            self.add(model, prompt, cached, completion, prices, calls=calls, local=local)
        if untold:
            self.calls += untold
            if local:
                self.in_process += untold
            else:
                self.unknown += untold

    @property
    def all_in_process(self) -> bool:
        """Every call was a model running in the process: there is no API price to show."""
        return bool(self.calls) and self.in_process == self.calls

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
                "calls_of_unknown_cost": self.unknown, "models_without_price": sorted(self.unpriced),
                "calls_in_process": self.in_process}


def dollars(value: float | None) -> str:
    """``$0.0123``, or ``unknown``: a missing price is never shown as zero."""
    if value is None:
        return "unknown"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def spend_by_key(rows: Iterable[tuple[Any, ...]], key: Callable[[tuple[Any, ...]], Any],
                 runs: Mapping[str, RunModels] | None = None) -> dict[Any, Spend]:
    """``Spend`` per ``key(row)`` of spend rows ``(run_id, document_run_id, model, calls, prompt, cached, completion,
    untold)``; a call without a model is priced as its run's model, and a model that ran in its run's process
    costs nothing (``runs``: run id -> ``RunModels``)."""
    prices = table()
    found: dict[Any, Spend] = {}
    for row in rows:
        run_id, _document_run_id, model, calls, prompt, cached, completion, untold = row
        models = (runs or {}).get(run_id, RunModels(None))
        model = model or models.model
        found.setdefault(key(row), Spend()).add_row(model, calls, prompt, cached, completion, untold, prices,
                                                    local=model in models.in_process)
    return found


def spend_text(spend: Spend, documents: int | None = None) -> str:
    """One phrase for people: ``$0.0123 ($0.0041 per document)``, ``local model, no API price``, or why the cost is
    unknown; a missing price is never shown as zero, nor a model running in the process as unpriced."""
    if spend.all_in_process:
        return "local model, no API price"
    if spend.known is None:
        why = (f"no price for {', '.join(sorted(spend.unpriced))} (EXTRACT_PRICES)" if spend.unpriced
               else f"{spend.unknown} call(s) without token counts")
        return f"unknown ({why})"
    per = None if documents is None else spend.per(documents)
    local = f"; {spend.in_process} local-model call(s) at no API price" if spend.in_process else ""
    return dollars(spend.known) + (f" ({dollars(per)} per document{local})" if per is not None
                                   else f" ({local[2:]})" if local else "")
