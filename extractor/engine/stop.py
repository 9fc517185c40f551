"""Stopping a run cleanly: only waits are cut short, never the bookkeeping of an answer already received.

When a run is stopped (Ctrl-C, SIGTERM, or its task cancelled), every wait registered here (a model call in
flight, a call waiting for a slot, a file being read) ends at once with ``Interrupted``; a validation or a
run-log write under way finishes first, so no answer that was paid for is lost and no document is left
half recorded. Workers take no new document once the run is stopping.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Interrupted(Exception):
    """The run was stopped while this document waited (for the model, a slot or its file)."""


class Stop:
    """The run's stop request, and the waits it cuts short."""

    def __init__(self) -> None:
        self.requested = False
        self.reason: str | None = None
        """Why the run stopped when it was not a signal (``drain``): printed with the summary."""
        self._waiting: set[asyncio.Task[object]] = set()

    def request(self) -> None:
        """Stop: end every registered wait now; called from the event loop (a signal handler callback)."""
        if self.requested:
            return
        self.requested = True
        for task in self._waiting:
            task.cancel()

    def drain(self, reason: str) -> None:
        """Stop taking new work but let calls already under way finish (their answers are paid for): every
        wait from now on raises ``Interrupted``; waits already running are not cut short."""
        if not self.requested:
            self.requested = True
            self.reason = reason

    @asynccontextmanager
    async def waiting(self) -> AsyncIterator[None]:
        """A wait the run may cut short: raises ``Interrupted`` when the run stops (before or during it)."""
        if self.requested:
            raise Interrupted
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            yield
        except asyncio.CancelledError:
            if self.requested and task.uncancel() == 0:  # our own cancellation, not one from outside
                raise Interrupted from None
            raise
        finally:
            self._waiting.discard(task)
