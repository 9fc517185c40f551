"""A finished document wakes whoever follows its batch: each worker publishes the task's id on a Redis channel of
the batch when it has recorded the outcome, and ``extract run --queue`` waits on that channel instead of sleeping
between looks at the run log. The outcomes are still read from the run log (a message only says "look now"), and
the follower still looks every ``FALLBACK_S`` should a message be lost, so nothing depends on delivery; with a
broker other than Redis it looks every ``POLL_S``, as before.

Why: polling every quarter of a second cost the end of every batch up to that long, and a shorter interval
would cost the run log a query per interval for the whole batch.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import PubSub

log = logging.getLogger(__name__)

POLL_S = 0.25
"""Between looks at the run log when no messages come (a broker other than Redis)."""
FALLBACK_S = 2.0
"""Between looks at the run log while following a batch's channel, should a message be lost."""
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def channel(batch_id: str) -> str:
    return f"extractor:batch:{batch_id}:finished"


def _is_redis(url: str) -> bool:
    return url.startswith(REDIS_SCHEMES)


class Notifier:
    """The worker's side: one Redis client for the process (its task threads share it); a failure to publish is
    logged and never fails the document, whose outcome is in the run log already."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: Redis | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_broker(cls, url: str) -> Notifier | None:
        return cls(url) if _is_redis(url) else None

    def finished(self, batch_id: str, task_id: str) -> None:
        try:
            with self._lock:
                if self._client is None:
                    from redis import Redis

                    self._client = Redis.from_url(self.url, socket_timeout=5)
                client = self._client
            client.publish(channel(batch_id), task_id)
        except Exception as error:  # noqa: BLE001 - the follower looks at the run log anyway, a little later
            log.warning("cannot tell the batch's follower that %s finished: %s", task_id, error)


class Wakeup(Protocol):
    """The submitter's side: ``follow`` a batch before its first message is sent, then ``wait`` until one of its
    documents may have finished."""

    def follow(self, batch_id: str) -> None: ...

    def wait(self) -> None: ...

    def close(self) -> None: ...


class Timer:
    """No messages to wait for: look every ``POLL_S``."""

    def follow(self, batch_id: str) -> None:
        return None

    def wait(self) -> None:
        time.sleep(POLL_S)

    def close(self) -> None:
        return None


class Follower:
    """Waits on the batch's channel (``FALLBACK_S`` at most); if Redis fails, it waits as ``Timer`` does."""

    def __init__(self, url: str) -> None:
        from redis import Redis

        self._client = Redis.from_url(url, socket_timeout=FALLBACK_S + 5)
        self._pubsub: PubSub | None = None

    def follow(self, batch_id: str) -> None:
        try:
            self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            self._pubsub.subscribe(channel(batch_id))
        except Exception as error:  # noqa: BLE001 - following by looking every POLL_S still works
            log.warning("cannot follow the batch's channel (looking every %s s instead): %s", POLL_S, error)
            self._pubsub = None

    def wait(self) -> None:
        if self._pubsub is None:
            time.sleep(POLL_S)
            return
        try:
            if self._pubsub.get_message(timeout=FALLBACK_S) is not None:
                while self._pubsub.get_message(timeout=0) is not None:  # one look for everything that came
                    pass
        except Exception as error:  # noqa: BLE001
            log.warning("lost the batch's channel (looking every %s s instead): %s", POLL_S, error)
            self._pubsub = None

    def close(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
        self._client.close()


def wakeup_for(broker: str) -> Wakeup:
    """How ``extract run --queue`` waits for a batch on ``broker``."""
    return Follower(broker) if _is_redis(broker) else Timer()
