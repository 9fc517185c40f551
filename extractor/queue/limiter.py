"""A 429 seen by one worker slows every worker: the adaptive limit shared through Redis.

Each worker keeps its own ``AdaptiveLimit`` (calls in flight, halved on a 429 or a timeout, grown back on
successes). ``SharedLimit`` also publishes every 429 to Redis (a counter, and the latest ``Retry-After``
deadline) and, before a call starts, reads both at most every ``SYNC_S``: a 429 another worker saw halves
this worker's limit too, and nobody starts a call before a deadline the server asked for. The keys are per
model server (model and endpoint name, or base URL), so workers of another model are not slowed.

The shared pause obeys the provider's ceiling (``MAX_RETRY_AFTER_S``): the deadline key expires by itself one
second after the pause it holds, and a deadline read back further away than the ceiling (or not a number) is
taken as at most the ceiling, so no value in Redis can stall the workers longer.

Redis being unreachable never fails a document: the worker then throttles on what it sees itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

from extractor.engine import AdaptiveLimit
from extractor.generate import MAX_RETRY_AFTER_S, bounded_pause
from extractor.queue.settings import BatchSettings

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

SYNC_S = 0.2
"""How stale a worker's view of the others' 429s may be; one Redis round trip per this many seconds at most."""
FOLLOW_AT_MOST = 4
"""A burst of others' 429s halves the limit at most this many times per look (it reaches 1 quickly anyway)."""
_RAISE_DEADLINE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tonumber(ARGV[1]) > current or redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return redis.call('INCR', KEYS[2])
"""
"""Raise the shared deadline (a key that expires by itself; one without an expiry, or not a number, is replaced) and
count the 429."""


class SharedLimit(AdaptiveLimit):
    """``AdaptiveLimit`` whose 429s and ``Retry-After`` deadlines are shared by every worker on the same keys."""

    def __init__(self, maximum: int, client: Redis, prefix: str) -> None:
        super().__init__(maximum)
        self._client = client
        self._deadline_key = f"{prefix}:resume_at"
        self._events_key = f"{prefix}:rate_limits"
        self._seen: int | None = None  # the shared counter as last read (None: not yet; history does not count)
        self._synced_at = -SYNC_S
        self.shared_rate_limits = 0  # 429s other workers saw that lowered this limit
        self._publishing: set[asyncio.Task[Any]] = set()

    def on_rate_limit(self, retry_after_s: float | None = None) -> None:
        super().on_rate_limit(retry_after_s)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(self._publish(retry_after_s))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, retry_after_s: float | None) -> None:
        pause = bounded_pause(retry_after_s) or 0.0
        deadline = time.time() + pause
        try:
            count = int(await self._client.eval(_RAISE_DEADLINE, 2, self._deadline_key, self._events_key,  # type: ignore[misc]
                                                f"{deadline:.3f}", int(pause * 1000) + 1000))
        except Exception as error:  # noqa: BLE001 - the shared view is an optimisation; this worker already slowed
            log.warning("cannot share a 429 through Redis: %s", error)
            return
        if self._seen is not None:
            self._seen = max(self._seen, count)  # our own 429 already lowered this limit

    async def __aenter__(self) -> None:
        await self._follow_others()
        await super().__aenter__()

    async def _follow_others(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self._synced_at < SYNC_S:
            return
        self._synced_at = loop.time()
        try:
            events, deadline = await self._client.mget(self._events_key, self._deadline_key)
        except Exception as error:  # noqa: BLE001 - see _publish
            log.warning("cannot read the shared 429s from Redis: %s", error)
            return
        count = _count(events)
        if self._seen is not None and count > self._seen:
            for _ in range(min(count - self._seen, FOLLOW_AT_MOST)):
                self.shared_rate_limits += 1
                self._lower()
        self._seen = count if self._seen is None else max(self._seen, count)
        pause = _pause_until(deadline)
        if pause > 0:
            self._resume_at = max(self._resume_at, loop.time() + pause)


def _count(value: bytes | str | None) -> int:
    """The shared 429 counter as read (0 when absent or not a count)."""
    try:
        return max(0, int(value or 0))
    except ValueError:
        return 0


def _pause_until(deadline: bytes | str | None) -> float:
    """Seconds until the shared deadline, within ``MAX_RETRY_AFTER_S`` (0 when absent or passed; the ceiling when
    it is not a number)."""
    if deadline is None:
        return 0.0
    try:
        pause = float(deadline) - time.time()
    except ValueError:
        pause = math.nan
    if not math.isfinite(pause):
        return MAX_RETRY_AFTER_S
    return min(max(pause, 0.0), MAX_RETRY_AFTER_S)


def limit_prefix(settings: BatchSettings) -> str:
    """Redis key prefix of one model server: workers calling the same model at the same URL share it."""
    where = settings.endpoint or settings.base_url or os.environ.get("OPENAI_BASE_URL", "")
    server = f"{settings.model}|{where}"
    return "extract:limit:" + hashlib.sha256(server.encode()).hexdigest()[:16]
