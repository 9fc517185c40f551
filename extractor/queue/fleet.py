"""What the workers of one broker share through its Redis: the rate limit of each model server
(``extractor.queue.limiter``) and the budget of each batch (``SharedBudget``).

A batch's ``max_cost`` is one budget however many workers spend from it: a hash in Redis (``extract:budget:<batch
id>``: the limit, the dollars charged, the dollars reserved by calls under way, and why it stopped), changed only
by Lua scripts, which Redis runs atomically. Every call reserves its most expensive case there before it is sent
and settles its real cost after (``extractor.engine.budget``), so the fleet together never passes the budget but
by a server that bills past the output limit it was sent; the first worker to find the budget spent marks it
stopped, and each worker then ends the batch's remaining documents INTERRUPTED without reading them (a rerun with
a new budget resumes). The hash expires ``BUDGET_TTL_S`` after its last use.

Redis being unreachable while spending fails the call's document (ERROR, a rerun retries it): a budget that cannot
be checked is not spent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from extractor.engine import AdaptiveLimit
from extractor.engine.budget import Ask, Budget, Reservation, Taken
from extractor.queue.limiter import SharedLimit, limit_prefix
from extractor.queue.runner import Alone, Fleet
from extractor.queue.settings import BatchSettings

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from extractor.prices import Price

log = logging.getLogger(__name__)

BUDGET_TTL_S = 7 * 24 * 3600
"""A batch's budget is forgotten this long after it was last used (a rerun is a new batch with its own)."""

_TAKE = """
local key = KEYS[1]
redis.call('HSETNX', key, 'limit', ARGV[5])
redis.call('EXPIRE', key, ARGV[6])
local limit = tonumber(redis.call('HGET', key, 'limit'))
local charged = tonumber(redis.call('HGET', key, 'charged') or '0')
local reserved = tonumber(redis.call('HGET', key, 'reserved') or '0')
local stopped = redis.call('HGET', key, 'stopped') or ''
local largest = tonumber(redis.call('HGET', key, 'largest:' .. ARGV[7]) or '0')
local prompt_cost, rate, prompt, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local need = prompt
if largest > 0 then need = largest end
need = math.max(1, math.min(most, need))
if stopped ~= '' then return {0, need, tostring(charged), tostring(reserved), stopped} end
local left = limit - charged - reserved - prompt_cost
local granted = most
if rate > 0 then granted = math.min(most, math.floor(left / rate + 1e-9)) end
if left < -1e-9 or granted < need then return {0, need, tostring(charged), tostring(reserved), ''} end
local now = redis.call('HINCRBYFLOAT', key, 'reserved', prompt_cost + granted * rate)
return {granted, need, tostring(charged), now, ''}
"""
_SETTLE = """
redis.call('HINCRBYFLOAT', KEYS[1], 'reserved', -tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[1], ARGV[3])
local field = 'largest:' .. ARGV[4]
if tonumber(ARGV[5]) > tonumber(redis.call('HGET', KEYS[1], field) or '0') then
  redis.call('HSET', KEYS[1], field, ARGV[5])
end
return redis.call('HINCRBYFLOAT', KEYS[1], 'charged', ARGV[2])
"""
_STOP = """
redis.call('HSETNX', KEYS[1], 'stopped', ARGV[1])
return redis.call('HGET', KEYS[1], 'stopped')
"""


class SharedBudget(Budget):
    """A batch's budget in Redis, shared by every worker converting its documents (see the module docstring)."""

    def __init__(self, client: Redis, batch_id: str, limit: float, prices: Mapping[str, Price]) -> None:
        super().__init__(limit, prices, lambda reason: log.warning("batch %s stopped: %s", batch_id, reason))
        self.client = client
        self.key = f"extract:budget:{batch_id}"

    async def _take(self, ask: Ask) -> Taken:
        granted, need, charged, reserved, stopped = await self.client.eval(  # type: ignore[misc]
            _TAKE, 1, self.key, repr(ask.prompt_cost), repr(ask.rate), ask.prompt_tokens, ask.most, repr(self.limit),
            BUDGET_TTL_S, ask.role)
        return Taken(int(granted), int(need), float(charged), float(reserved), _text(stopped))

    async def _settle(self, reservation: Reservation, cost: float, answer: int) -> float:
        return float(await self.client.eval(_SETTLE, 1, self.key, repr(reservation.cost), repr(cost),  # type: ignore[misc]
                                            BUDGET_TTL_S, reservation.role, answer))

    async def _stop(self, reason: str) -> str:
        found = _text(await self.client.eval(_STOP, 1, self.key, reason))  # type: ignore[misc]
        if found == reason:
            self.on_stop(reason)
        return found

    async def _settled(self, timeout: float) -> None:
        await asyncio.sleep(timeout)

    async def stopped(self) -> str:
        return _text(await self.client.hget(self.key, "stopped"))  # type: ignore[misc]


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


class BrokerFleet:
    """The workers of a Redis broker: shared rate limits and shared budgets, one connection pool per worker (made in
    the worker's event loop, on first use)."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._client: Redis | None = None

    @property
    def client(self) -> Redis:
        if self._client is None:
            from redis.asyncio import Redis

            self._client = Redis.from_url(self.broker_url, socket_timeout=5)
        return self._client

    def limit(self, concurrency: int, settings: BatchSettings) -> AdaptiveLimit:
        return SharedLimit(concurrency, self.client, limit_prefix(settings))

    def budget(self, batch_id: str, limit: float, prices: Mapping[str, Price]) -> Budget:
        return SharedBudget(self.client, batch_id, limit, prices)


def fleet_for(broker_url: str) -> Fleet:
    """The fleet of a worker on ``broker_url``: shared through its Redis; another broker's workers each alone
    (they throttle on what they see themselves, and a batch with ``max_cost`` is refused when submitted)."""
    if is_redis(broker_url):
        return BrokerFleet(broker_url)
    log.warning("429s and budgets are shared only through a Redis broker; %s workers each throttle alone",
                broker_url.split(":", 1)[0])
    return Alone()


def is_redis(broker_url: str) -> bool:
    return broker_url.startswith(("redis://", "rediss://", "unix://"))
