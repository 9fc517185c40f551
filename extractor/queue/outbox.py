"""Nothing submitted is lost while the broker is away: committed tasks reach it when it is back.

A submission commits its tasks ``unsent`` first, then publishes their messages and marks them ``queued`` with
the broker that took them (``send``). Should the broker be away (stopped, restarting, unreachable), the tasks
stay ``unsent`` and the submitter says so: the API answers 503 with ``Retry-After``, ``extract run --queue``
prints a line and goes on. The sweep (``sweep``, every ``SWEEP_S`` in ``extract serve`` and while ``extract run
--queue`` follows its batch) sends them once the broker answers.

A Redis broker that restarted without its data (no persistence, or a failover) lost the messages it held: each
task records the broker that took its message (``sent_to``: the server's ``run_id``, new at every start), and
the sweep sends again every task whose message went to another one, queued or held by a worker that is gone
since. A message sent twice is harmless: as Celery's documentation asks of tasks acknowledged late, converting
a document is idempotent here (the run log decides who converts it, ``extractor.store.tasks.start_delivery``), so
the outbox may send more than once and never loses one.

A worker killed while taking a message loses it too: kombu's Redis transport takes it off the queue's list (BRPOP)
and only then records it as unacknowledged (``UNACKED_KEY``), where the workers' sweep would find it again, so a
SIGKILL between the two leaves a ``queued`` task no message will ever deliver, and its batch waiting for it
forever. While the queue's list is empty, the sweep compares the queued tasks with the messages workers hold
unacknowledged; a task in neither on two sweeps in a row (a live worker records a message within milliseconds
of taking it) is sent again (``_lost``). The cost is the messages workers hold, not the queue's length; a lost
message waits at most until the queue it was in has drained.

Another broker than Redis has no run id to compare: its unsent tasks are swept all the same, but a message it
lost is not noticed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from extractor.queue.celery_app import PUBLISH_TIMEOUT_S, QUEUE_NAME, UNACKED_KEY, enqueue, make_celery
from extractor.queue.news import REDIS_SCHEMES
from extractor.redact import redact_text
from extractor.store import Store, tasks
from extractor.store.db import utcnow

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger(__name__)

SWEEP_S = 2.0
"""Between two sweeps: how soon after the broker is back the tasks that waited for it are sent."""
GRACE_S = 5.0
"""An unsent task younger than this is left to its submitter, which may be sending it right now (a send gives
up after ``PUBLISH_TIMEOUT_S``; one that overlaps a sweep only sends a message twice, which is harmless)."""
SEND_AT_MOST = 500
"""Tasks one sweep sends at most (the next sweep takes the rest)."""
OTHER_BROKER = "-"
"""The incarnation recorded for a broker that has none to read (not Redis)."""


class BrokerAway(Exception):
    """The broker did not take the messages; the tasks stay unsent and the sweep sends them later."""


class Outbox:
    """Sends committed tasks to the broker at ``url`` (see the module docstring); thread-safe."""

    def __init__(self, store: Store, url: str) -> None:
        self.store = store
        self.url = url
        self._app = make_celery(url, publish_only=True)
        self._client: Redis | None = None
        self._lock = threading.Lock()
        self._swept_at = -SWEEP_S
        self._missing: set[str] = set()  # queued tasks the last sweep found no message of (``_lost``)
        self.away: str | None = None
        """Why the broker did not take the last send, while it has not taken one since (for messages)."""

    def send(self, task_ids: list[str]) -> None:
        """Publish the tasks' messages and mark them sent; ``BrokerAway`` (they stay unsent) when it cannot."""
        if not task_ids:
            return
        try:
            broker = self.incarnation()
            enqueue(self._app, task_ids)
        except _broker_errors() as error:
            self.away = _why(error)
            raise BrokerAway(self.away) from error
        self.away = None
        tasks.mark_sent(self.store.engine, task_ids, broker)

    def sweep(self, batch_id: str | None = None) -> int:
        """Send what waits for the broker (of ``batch_id`` only, when given); how many were sent (0 while the broker
        is away)."""
        with self._lock:
            self._swept_at = time.monotonic()
            try:
                broker = self.incarnation()
                lost = self._lost(broker, batch_id)
            except _broker_errors() as error:  # still away: the next sweep looks again
                self.away = _why(error)
                return 0
            self.away = None  # it answers (a send below that fails says so again)
            due = tasks.to_send(self.store.engine, broker, unsent_before=utcnow() - timedelta(seconds=GRACE_S),
                                stale_after_s=self.store.stale_after_s, batch_id=batch_id, limit=SEND_AT_MOST)
            try:
                self.send(due + lost)
            except BrokerAway as away:
                log.warning("the broker did not take %d waiting documents (%s); sending them again in %g s",
                            len(due) + len(lost), away, SWEEP_S)
                return 0
        if due:
            log.warning("sent %d documents that waited for the broker", len(due))
        if lost:
            log.warning("sent again %d queued documents whose message the broker no longer held (a worker killed "
                        "while taking it)", len(lost))
        return len(due) + len(lost)

    def _lost(self, broker: str, batch_id: str | None) -> list[str]:
        """Queued tasks whose message is neither on the queue's list nor held unacknowledged by a worker, on this
        sweep and the one before, while the list is empty (see the module docstring); read in that order (list,
        held messages, then the run log), so a message taken and started meanwhile is not counted lost."""
        if self._client is None or broker == OTHER_BROKER:
            return []
        if self._client.llen(QUEUE_NAME):
            self._missing = set()
            return []
        held = {_task_of(raw) for raw in self._client.hvals(UNACKED_KEY)}
        missing = set(tasks.queued_on(self.store.engine, broker, batch_id=batch_id, limit=SEND_AT_MOST)) - held
        lost = missing & self._missing
        self._missing = missing - lost
        return sorted(lost)

    def sweep_if_due(self, batch_id: str | None = None) -> int:
        """``sweep`` when ``SWEEP_S`` has passed since the last one, else nothing."""
        return self.sweep(batch_id) if time.monotonic() - self._swept_at >= SWEEP_S else 0

    def incarnation(self) -> str:
        """Which broker this is: Redis's run id (new at every start of the server); raises when it does not answer."""
        if not self.url.startswith(REDIS_SCHEMES):
            return OTHER_BROKER
        if self._client is None:
            from redis import Redis

            self._client = Redis.from_url(self.url, socket_timeout=PUBLISH_TIMEOUT_S,
                                          socket_connect_timeout=PUBLISH_TIMEOUT_S)
        return str(self._client.info("server")["run_id"])

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _broker_errors() -> tuple[type[Exception], ...]:
    """What the broker's clients raise when it is away: kombu's (Celery's publishing), redis-py's, the socket's."""
    from kombu.exceptions import OperationalError
    from redis import RedisError

    return OperationalError, RedisError, OSError


def _task_of(raw: bytes | str) -> str | None:
    """The task id of a message held unacknowledged (kombu keeps ``[message, exchange, routing key]``; Celery's
    message names its task in its headers); None for anything else."""
    try:
        message = json.loads(raw)[0]
        return str(message["headers"]["id"])
    except (ValueError, LookupError, TypeError):
        return None


def _why(error: Exception) -> str:
    return redact_text(" ".join(f"{type(error).__name__}: {error}".split()))[:300]


class Sweeper:
    """``extract serve``'s sweep: a daemon thread calling ``outbox.sweep()`` every ``SWEEP_S`` until ``stop()``."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="extract-outbox", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(SWEEP_S):
            try:
                self.outbox.sweep()
            except Exception:  # noqa: BLE001 - the run log unreachable for a moment: the next sweep tries again
                log.exception("the outbox sweep failed")

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=2 * PUBLISH_TIMEOUT_S + SWEEP_S)
