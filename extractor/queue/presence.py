"""Which workers are online: each ``extract worker`` says so in the broker's Redis every ``EVERY_S`` seconds.

A sorted set (``extract:workers``: member ``host:pid``, score the time it last said so) that ``extract serve``
counts when scraped (``extract_workers_online``): a worker stopped cleanly leaves it at once, one killed is
counted until ``STALE_S`` after its last word. One number for the whole fleet, read by one process, so a
dashboard needs no list of workers and a sum over processes never counts one twice. Only a Redis broker keeps it
(another broker's service exports no such series).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

log = logging.getLogger(__name__)

KEY = "extract:workers"
EVERY_S = 5.0
STALE_S = 3 * EVERY_S
"""A worker not heard from for this long is not counted (killed, or cut off from the broker)."""


class Presence:
    """Tell the broker this worker is online, from a daemon thread, until ``stop``."""

    def __init__(self, broker_url: str, every_s: float = EVERY_S) -> None:
        import redis

        self.member = f"{socket.gethostname()}:{os.getpid()}"
        self.every_s = every_s
        self._client = redis.Redis.from_url(broker_url, socket_timeout=5, socket_connect_timeout=5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._announce, name="extract-presence", daemon=True)

    def start(self) -> Presence:
        self._thread.start()
        return self

    def _announce(self) -> None:
        import redis

        while not self._stop.is_set():
            try:
                self._client.zadd(KEY, {self.member: time.time()})
            except redis.RedisError as error:  # the broker is away: the worker is not counted until it is back
                log.warning("cannot tell the broker this worker is online: %s", error)
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        """Leave the set at once (a clean stop is not counted for ``STALE_S`` more)."""
        import redis

        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self._client.zrem(KEY, self.member)
        except redis.RedisError as error:
            log.warning("cannot tell the broker this worker stopped: %s", error)
        finally:
            self._client.close()


def online(broker_url: str) -> int:
    """Workers heard from in the last ``STALE_S`` seconds (older entries are dropped); raises ``redis.RedisError``
    when the broker does not answer."""
    import redis

    client = redis.Redis.from_url(broker_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        now = time.time()
        client.zremrangebyscore(KEY, "-inf", now - STALE_S)
        return int(client.zcount(KEY, now - STALE_S, "+inf"))
    finally:
        client.close()
