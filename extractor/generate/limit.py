"""How many model calls may be in flight: lowered when the server is overloaded, grown back as it copes."""

from __future__ import annotations

import asyncio

from extractor.generate import bounded_pause


class AdaptiveLimit:
    """Concurrency that halves on every 429 or timeout and grows back by one after a run of successes.

    It bounds model calls (generation, repair, judge), not documents. Calls already under way keep their
    slots (their retries wait out ``Retry-After`` in the provider); the lower limit holds back the calls not
    yet started, and a ``Retry-After`` holds them back until that time has passed: a server that asked for
    a pause gets it from the whole run, not only from the call it answered.

    A timeout counts like a 429: a server that serves one request at a time answers queued calls late, and
    retrying them all at once only queues more. ``rate_limits``, ``timeouts`` and ``lowest`` say how hard
    the run was throttled.
    """

    def __init__(self, maximum: int) -> None:
        self.maximum = max(1, maximum)
        self.limit = self.maximum
        self.lowest = self.maximum
        self.rate_limits = 0
        self.timeouts = 0
        self._active = 0
        self._successes = 0
        self._resume_at = 0.0  # loop time before which no new call starts (Retry-After)
        self._changed = asyncio.Condition()
        self.filled = asyncio.Event()
        """Set once every slot was taken at the same time (the run's first wave of calls is under way)."""

    @property
    def in_flight(self) -> int:
        """Model calls under way right now (holding a slot)."""
        return self._active

    @property
    def lowered(self) -> bool:
        """Whether a 429 or a timeout ever lowered the limit."""
        return bool(self.rate_limits or self.timeouts)

    def on_rate_limit(self, retry_after_s: float | None = None) -> None:
        """A 429: halve the limit; with ``Retry-After``, start no new call before that time (at most
        ``MAX_RETRY_AFTER_S`` from now)."""
        self.rate_limits += 1
        self._lower()
        retry_after_s = bounded_pause(retry_after_s)  # whoever called: never longer than the ceiling
        if retry_after_s is not None and retry_after_s > 0:
            try:
                now = asyncio.get_running_loop().time()
            except RuntimeError:  # called outside the run's loop (a provider used on its own): nothing to hold
                return
            self._resume_at = max(self._resume_at, now + retry_after_s)

    def on_timeout(self) -> None:
        """A call that timed out: the server has more in flight than it can answer in time."""
        self.timeouts += 1
        self._lower()

    def _lower(self) -> None:
        self.limit = max(1, self.limit // 2)
        self.lowest = min(self.lowest, self.limit)
        self._successes = 0

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: self._active < self.limit)
                pause = self._resume_at - loop.time()
                if pause <= 0:
                    self._active += 1
                    if self._active >= self.limit:
                        self.filled.set()
                    return
            await asyncio.sleep(pause)  # outside the lock: others may be checked (and wait) meanwhile

    async def __aexit__(self, *exc: object) -> None:
        async with self._changed:
            self._active -= 1
            if exc[0] is None:
                self._successes += 1
                if self.limit < self.maximum and self._successes >= self.limit:
                    self.limit += 1
                    self._successes = 0
            self._changed.notify(max(0, self.limit - self._active))  # wake as many as may enter, not all waiting
