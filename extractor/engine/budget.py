"""``--max-cost``: a budget no call can pass unless its server bills past the output limit it was sent with.

Before a call is sent it reserves its most expensive case: its prompt tokens at the input price plus the output
limit it is sent with at the output price. That limit is the run's (``--max-tokens``, else the model's output
budget), lowered to what the rest of the budget pays for; a call whose expected answer (the largest answer of its
model so far, or as many tokens as its prompt before any answer: this product's answers restate the document) the
rest cannot pay for is not sent: the run stops cleanly, its unfinished documents INTERRUPTED, and a rerun
resumes. While other calls hold reservations, a call that does not fit waits for them to settle (at most
``patience`` seconds: a reservation a dead worker left behind) before it stops the run. After the call the
reservation is settled with what the server reported (the reservation itself when it reported no tokens).

The one way past the budget (docs/design.md#cost): a server that ignores the output limit and bills more. The
run stops at that answer, naming the overspend; calls already under way at that moment finish and may do the same.

``Budget`` holds the arithmetic; where the numbers live is its subclass's: ``LocalBudget`` in this process (a run
of ``extract run``), ``extractor.queue.budget.SharedBudget`` in the broker for every worker of a queued batch.
"""

from __future__ import annotations

import asyncio
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from extractor.engine.stop import Interrupted
from extractor.generate import GenerationResult, Provider

if TYPE_CHECKING:
    from extractor.prices import Price

GENERATE, JUDGE = "generate", "judge"
_CALL = {GENERATE: "call", JUDGE: "judge call"}
SETTLE_POLL_S = 0.2
"""How often a call waiting for others' reservations looks again (a shared budget; a local one is told)."""
EPSILON = 1e-9
"""Dollars below which two sums are equal (float sums of many small costs)."""


class Reservation(NamedTuple):
    """What one call holds of the budget: its role's price, the dollars reserved and the output limit sent."""

    role: str
    cost: float
    max_output: int


class Taken(NamedTuple):
    """The budget after a try to reserve: the output limit granted (0: none), the answer tokens the call needed,
    what is spent and reserved, and why the budget stopped (``""``: it has not)."""

    max_output: int
    need: int
    charged: float
    reserved: float
    stopped: str


class Ask(NamedTuple):
    """One call's request for a reservation: its role, its prompt's cost, the output price per token, its prompt's
    tokens and the most output tokens it may be sent with."""

    role: str
    prompt_cost: float
    rate: float
    prompt_tokens: int
    most: int

    def need(self, largest_answer: int) -> int:
        """The answer tokens the call needs: the largest answer of its role so far, else as many as its prompt."""
        return max(1, min(self.most, largest_answer or self.prompt_tokens))


class Budget(ABC):
    """The budget of one run or queued batch, with the prices of its roles (``generate``, and ``judge`` for a
    judged run); ``on_stop`` is told once, with the reason, when the budget stops."""

    def __init__(self, limit: float, prices: Mapping[str, Price], on_stop: Callable[[str], None], *,
                 patience: float = 600.0) -> None:
        self.limit = limit
        self.prices = dict(prices)
        self.on_stop = on_stop
        self.patience = patience

    async def reserve(self, prompt_tokens: int, max_output: int, role: str = GENERATE) -> Reservation:
        """Reserve the call's most expensive case: the output limit to send it with comes back. ``Interrupted``
        (with the reason) when the rest of the budget cannot pay for its expected answer, or it has stopped."""
        price = self.prices[role]
        prompt_cost = price.cost(prompt_tokens, 0, 0)
        rate = price.output / 1_000_000
        deadline = time.monotonic() + self.patience
        while True:
            taken = await self._take(Ask(role, prompt_cost, rate, prompt_tokens, max_output))
            if taken.max_output:
                return Reservation(role, prompt_cost + taken.max_output * rate, taken.max_output)
            if taken.stopped:
                raise Interrupted(taken.stopped)
            if taken.reserved > EPSILON and time.monotonic() < deadline:
                await self._settled(SETTLE_POLL_S)  # others' calls may cost less than they hold: look again
                continue
            held = f", ${taken.reserved:.4f} held by calls that never settled" if taken.reserved > EPSILON else ""
            reason = (f"--max-cost ${self.limit:g} reached: ${taken.charged:.4f} spent{held}; the next "
                      f"{_CALL[role]} needs ${prompt_cost + taken.need * rate:.4f} ({prompt_tokens} prompt tokens and "
                      f"{taken.need} answer tokens at {price.model}'s price)")
            raise Interrupted(await self._stop(reason))

    async def settle(self, reservation: Reservation, result: GenerationResult) -> None:
        """Charge what the server reported for the call; a bill past the reservation stops the budget, naming it."""
        price = self.prices[reservation.role]
        if result.prompt_tokens is None or result.completion_tokens is None:
            await self._settle(reservation, reservation.cost, 0)  # the server did not say: the reservation is all
            return
        answer = result.completion_tokens
        cost = price.cost(result.prompt_tokens, result.cached_tokens, answer)
        charged = await self._settle(reservation, cost, answer)
        if cost > reservation.cost + EPSILON:
            await self._stop(f"--max-cost ${self.limit:g}: the server billed {answer} answer tokens for a "
                             f"{_CALL[reservation.role]} sent with an output limit of {reservation.max_output}, "
                             f"${cost:.4f} against ${reservation.cost:.4f} reserved (an overspend of "
                             f"${cost - reservation.cost:.4f}); ${charged:.4f} spent, the run stopped")

    async def release(self, reservation: Reservation) -> None:
        """A call that was not made (or whose answer never came): its reservation is free again."""
        await self._settle(reservation, 0.0, 0)

    @abstractmethod
    async def _take(self, ask: Ask) -> Taken:
        """Atomically: unless stopped, grant ``min(most, what is left after prompt_cost / rate)`` output tokens if
        that is at least the answer the call needs (``need``), and reserve their cost."""

    @abstractmethod
    async def _settle(self, reservation: Reservation, cost: float, answer: int) -> float:
        """Atomically: free the reservation, charge ``cost``, remember an answer of ``answer`` tokens of its role;
        the dollars charged in all."""

    @abstractmethod
    async def _stop(self, reason: str) -> str:
        """Mark the budget stopped with ``reason`` unless it already was, tell ``on_stop``; the reason in force."""

    @abstractmethod
    async def _settled(self, timeout: float) -> None:
        """Wait until a reservation may have been settled or freed, at most ``timeout`` seconds."""

    @abstractmethod
    async def stopped(self) -> str:
        """Why the budget stopped (``""``: it has not)."""


class LocalBudget(Budget):
    """A budget kept in this process: ``extract run`` without a queue."""

    def __init__(self, limit: float, prices: Mapping[str, Price], on_stop: Callable[[str], None]) -> None:
        super().__init__(limit, prices, on_stop)
        self.charged = 0.0
        self.reserved = 0.0
        self.reason = ""
        self.largest_answer: dict[str, int] = {}
        self._changed = asyncio.Event()

    async def _take(self, ask: Ask) -> Taken:
        need = ask.need(self.largest_answer.get(ask.role, 0))
        if not self.reason:
            left = self.limit - self.charged - self.reserved - ask.prompt_cost
            granted = ask.most if ask.rate <= 0 else min(ask.most, math.floor(left / ask.rate + EPSILON)) if left >= 0 else 0
            if left >= -EPSILON and granted >= need:
                self.reserved += ask.prompt_cost + granted * ask.rate
                return Taken(granted, need, self.charged, self.reserved, "")
        return Taken(0, need, self.charged, self.reserved, self.reason)

    async def _settle(self, reservation: Reservation, cost: float, answer: int) -> float:
        self.reserved = max(0.0, self.reserved - reservation.cost)
        self.charged += cost
        self.largest_answer[reservation.role] = max(self.largest_answer.get(reservation.role, 0), answer)
        self._changed.set()
        return self.charged

    async def _stop(self, reason: str) -> str:
        if not self.reason:
            self.reason = reason
            self.on_stop(reason)
        return self.reason

    async def _settled(self, timeout: float) -> None:
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass

    async def stopped(self) -> str:
        return self.reason


def prices_for(provider: Provider, judge: Provider | None) -> dict[str, Price]:
    """The prices of a run's roles; ``ValueError`` names a model whose price is unknown. A model running in this
    process costs nothing (``extractor.prices``)."""
    prices = {GENERATE: _price_of(provider, "")}
    if judge is not None:
        prices[JUDGE] = _price_of(judge, "the judge's model ")
    return prices


def _price_of(provider: Provider, whose: str) -> Price:
    from extractor.prices import IN_PROCESS_PROVIDER, Price, price_for

    if provider.name == IN_PROCESS_PROVIDER:
        return Price(provider.model, 0.0, 0.0, source="runs in this process")
    price = price_for(provider.model)
    if price is None:
        raise ValueError(f"--max-cost needs the price of {whose}{provider.model}: no built-in entry, none in "
                         "EXTRACT_PRICES")
    return price
