"""The Celery side of the queue: the app, its one task, and how a worker process is started.

Delivery guarantees, and why each setting:

- ``task_acks_late``: a message is acknowledged after its document is finished, so a worker that dies
  mid-document (SIGKILL, out of memory, a machine lost) leaves the message with the broker;
- Redis ``visibility_timeout``: an unacknowledged message goes back to the queue that long after it was
  delivered: another worker gets it. It must exceed the longest a document can take (model timeouts times
  retries, twice); a redelivery of a document still in progress is recognised and dropped (``start_delivery``);
- the sweep that puts such messages back is the workers' own (``RestoreUnacked``, every ``RESTORE_EVERY_S``):
  kombu's Redis transport sweeps only every tenth of its 10 s ticks by default (about 100 s, longer on older
  versions), so a dead worker's documents came back 84-91 s after a SIGKILL even with a 15 s timeout. With the
  workers sweeping, they come back within the visibility timeout + ``REDELIVERY_SLACK_S``;
- ``task_reject_on_worker_lost``: should a pool child die (prefork pools), its message is requeued rather
  than acknowledged as failed;
- ``worker_prefetch_multiplier = 1``: a worker reserves only as many messages as it has threads, so a slow
  worker does not sit on documents others could take, and a killed one returns few;
- a message is taken off the Redis list (BRPOP) and recorded as unacknowledged (``UNACKED_KEY``) in two steps: a
  worker killed between them loses it, and the outbox sends such a task again (``extractor.queue.outbox``);
- exactly once: whatever the broker redelivers, the run log's claim decides who converts a document
  (``extractor.store.claims``), and ``tasks.deliveries`` ends a document that kills every worker as ERROR.

The message carries only the task id; the document and its settings are in the run log (PostgreSQL when
workers run on several machines).
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery  # type: ignore[import-untyped]

    from extractor.queue.news import Notifier
    from extractor.queue.runner import Runner

BROKER_URL_ENV = "EXTRACT_BROKER_URL"
TASK_NAME = "extractor.convert"
QUEUE_NAME = "extract"
"""The queue, and on Redis the list its waiting messages are in."""
UNACKED_KEY = "unacked"
"""On Redis, the hash of the messages workers took and have not acknowledged (kombu's default, named here because
the outbox reads it: ``extractor.queue.outbox``)."""
DEFAULT_VISIBILITY_TIMEOUT_S = 3600.0
RESTORE_EVERY_S = 2.0
"""How often each worker puts messages held past the visibility timeout (by dead workers) back on the queue."""
RESTORE_AT_MOST = 1000
"""Messages one sweep restores at most (the next sweep takes the rest)."""
SWEEP_LOCK_S = 10
"""How long the broker's sweep lock outlives a worker killed while holding it (kombu's default is 300 s)."""
REDELIVERY_SLACK_S = RESTORE_EVERY_S + SWEEP_LOCK_S
"""A dead worker's documents are back on the queue within the visibility timeout plus this."""
PUBLISH_TIMEOUT_S = 2.0
"""How long a submitter waits for the broker to connect or answer before it leaves its tasks to the outbox."""

log = logging.getLogger(__name__)

_runner: Runner | None = None
"""The worker process's runner, set by ``start_worker`` before Celery starts its threads."""
_notifier: Notifier | None = None
"""Tells the batch's follower a task finished (``extractor.queue.news``), set by ``start_worker``."""


def broker_url(url: str | None = None) -> str | None:
    """The explicit URL, else ``EXTRACT_BROKER_URL``, else None (run in-process)."""
    return url or os.environ.get(BROKER_URL_ENV) or None


def make_celery(url: str, *, visibility_timeout_s: float = DEFAULT_VISIBILITY_TIMEOUT_S,
                publish_only: bool = False) -> Celery:
    """A Celery app on the broker at ``url`` with the one task ``extractor.convert(task_id)``.

    ``publish_only``: a submitter's (``extract serve``, ``extract run --queue``): a broker that is away fails a
    send within ``PUBLISH_TIMEOUT_S``, without Celery's and kombu's retries: the tasks are committed, and the
    outbox sends them when the broker is back (``extractor.queue.outbox``), so nothing waits on a request."""
    from celery import Celery  # type: ignore[import-untyped]

    transport: dict[str, Any] = {"visibility_timeout": visibility_timeout_s, "unacked_mutex_expire": SWEEP_LOCK_S,
                                 "unacked_key": UNACKED_KEY}
    if publish_only:
        transport |= {"max_retries": 0, "socket_connect_timeout": PUBLISH_TIMEOUT_S,
                      "socket_timeout": PUBLISH_TIMEOUT_S}
    app = Celery("extractor", broker=url, set_as_current=False)
    app.conf.update(
        task_publish_retry=not publish_only,
        broker_connection_timeout=PUBLISH_TIMEOUT_S if publish_only else 4.0,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport,
        task_default_queue=QUEUE_NAME,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # results are in the run log; no result backend to run
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )

    recheck_s = max(1.0, min(60.0, visibility_timeout_s / 2))
    app.steps["consumer"].add(_restore_step())

    @app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
    def convert(self: Any, task_id: str) -> str | None:
        """Convert one queued document in this worker's event loop; returns its outcome (for the worker's log).

        A copy of a task another live worker is converting comes back every ``recheck_s`` (a new message,
        this one acknowledged), so there is always a message for it should that worker die before finishing.
        """
        from extractor.queue.runner import StillRunning

        if _runner is None:
            raise RuntimeError("extractor.convert runs only in `extract worker`")
        try:
            found = _runner.run(task_id)
        except StillRunning as running:
            raise self.retry(countdown=recheck_s) from running
        if found is not None and found.outcome is not None and _notifier is not None:
            _notifier.finished(found.batch_id, task_id)  # whoever follows the batch looks now, not at its next poll
        return None if found is None or found.outcome is None else str(found.outcome)

    return app


def _restore_step() -> type:
    """The consumer step ``RestoreUnacked`` (a class made here: this module is imported without Celery)."""
    from celery import bootsteps  # type: ignore[import-untyped]

    class RestoreUnacked(bootsteps.StartStopStep):  # type: ignore[misc]
        """A consumer step: every ``RESTORE_EVERY_S`` the worker runs the Redis transport's own sweep
        (``QoS.restore_visible``, under the broker's lock, atomic per message) without kombu's throttle, so
        messages a dead worker held return promptly whatever the transport's defaults. Other brokers
        redeliver on their own (no ``restore_visible``): nothing to do."""

        requires = {"celery.worker.consumer.tasks:Tasks"}

        def __init__(self, parent: Any, **kwargs: Any) -> None:
            super().__init__(parent, **kwargs)
            self.entry: Any = None

        def start(self, consumer: Any) -> None:
            qos = getattr(consumer.task_consumer.channel, "qos", None)
            if qos is None or not callable(getattr(qos, "restore_visible", None)):
                return
            self.entry = consumer.timer.call_repeatedly(RESTORE_EVERY_S, _sweep, (qos,))

        def stop(self, consumer: Any) -> None:
            if self.entry is not None:
                self.entry.cancel()
                self.entry = None

    return RestoreUnacked


def _sweep(qos: Any) -> None:
    try:
        qos.restore_visible(num=RESTORE_AT_MOST, interval=1)
    except Exception as error:  # noqa: BLE001 - the broker is unreachable: the next sweep tries again
        log.warning("cannot restore unacknowledged messages: %s", error)


def enqueue(app: Celery, task_ids: list[str]) -> None:
    """Publish one message per task id (after the tasks are committed to the run log)."""
    with app.producer_or_acquire() as producer:  # one connection for the whole chunk
        for task_id in task_ids:
            app.send_task(TASK_NAME, args=[task_id], task_id=task_id, queue=QUEUE_NAME, producer=producer)


def start_worker(app: Celery, runner: Runner, *, concurrency: int, loglevel: str = "WARNING") -> None:
    """Run a Celery worker in this process until it is stopped (SIGTERM/Ctrl-C: warm shutdown).

    The ``threads`` pool: each thread hands a task id to ``runner``'s event loop (see
    ``extractor.queue.runner`` for why), so ``concurrency`` threads are ``concurrency`` documents in flight.
    """
    from celery.signals import worker_shutdown  # type: ignore[import-untyped]

    from extractor.queue.news import Notifier

    global _runner, _notifier
    _runner = runner
    _notifier = Notifier.for_broker(str(app.conf.broker_url))

    def closing(**_: Any) -> None:
        runner.close()

    worker_shutdown.connect(closing, weak=False)
    # the worker itself, as `celery worker` builds it, without Celery's command line (click, its REPL, the
    # inspect and amqp commands): 0.6 s of imports a new worker pays before its first document
    worker = app.Worker(hostname=f"extract-{os.getpid()}@{socket.gethostname()}", pool_cls="threads",
                        concurrency=concurrency, loglevel=loglevel.upper(), queues=[QUEUE_NAME], without_gossip=True,
                        without_mingle=True)
    worker.start()
    if worker.exitcode:
        raise SystemExit(worker.exitcode)
