"""Queued documents (``tasks``), their batches and uploaded bytes: what the queue and the API share.

The Celery message of a document carries only its task id; the task row says where it is. A task is committed
``unsent`` and becomes ``queued`` once the broker took its message (``mark_sent``; ``extractor.queue.outbox``
sends what is left unsent, or was lost with a broker that restarted: ``to_send``). A worker starts
a delivery with ``start_delivery``, one short transaction that decides whether to work on it:

- the task is finished: nothing to do (a redelivery after the worker finished but died before acking);
- another worker run that is still alive has it: a duplicate delivery, nothing to do;
- otherwise this is a (re)delivery: ``deliveries`` grows by one and this worker run holds it.

``deliveries`` counts only starts whose earlier holder is gone, so a document that kills its worker every
time is recognised after N deliveries (``extractor.queue.runner`` then ends it ERROR), whatever the broker did.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from sqlalchemy import Engine, and_, case, func, insert, or_, select, update

from extractor.store.db import utcnow, write_connection
from extractor.store.runs import is_alive
from extractor.store.tables import batches, document_runs, documents, runs, tasks, uploads
from extractor.vocab import Outcome, TaskState


@dataclass(frozen=True)
class TaskInfo:
    """One queued document as the run log has it."""

    id: str
    batch_id: str
    name: str
    sent_name: str | None
    """The name as its submitter sent it, when ``name`` (its base name) differs."""
    sha256: str
    state: TaskState
    outcome: Outcome | None
    cause: str | None
    tokens: int
    rule_ids: tuple[str, ...]
    deliveries: int
    run_id: str | None
    document_run_id: int | None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "batch": self.batch_id, "name": self.name, "sent_name": self.sent_name,
                "sha256": self.sha256,
                "state": self.state, "outcome": self.outcome, "cause": self.cause, "tokens": self.tokens,
                "rule_ids": list(self.rule_ids), "deliveries": self.deliveries,
                "run": self.run_id, "document_run": self.document_run_id,
                "enqueued_at": self.enqueued_at.isoformat(),
                "started_at": self.started_at.isoformat() if self.started_at else None,
                "finished_at": self.finished_at.isoformat() if self.finished_at else None}


@dataclass(frozen=True)
class Delivery:
    """What ``start_delivery`` decided: ``start`` (with the delivery number) or why not."""

    decision: Literal["start", "finished", "duplicate", "missing"]
    deliveries: int = 0


_TASK_COLUMNS = (tasks.c.id, tasks.c.batch_id, uploads.c.name, tasks.c.sent_name, uploads.c.sha256, tasks.c.state,
                 tasks.c.outcome,
                 tasks.c.cause, tasks.c.tokens, tasks.c.rule_ids, tasks.c.deliveries, tasks.c.run_id,
                 tasks.c.document_run_id, tasks.c.enqueued_at, tasks.c.started_at, tasks.c.finished_at)


def _info(row: Any) -> TaskInfo:
    return TaskInfo(row.id, row.batch_id, row.name, row.sent_name, row.sha256, TaskState(row.state),
                    None if row.outcome is None else Outcome(row.outcome), row.cause, row.tokens,
                    tuple(row.rule_ids or ()), row.deliveries, row.run_id,
                    row.document_run_id, row.enqueued_at, row.started_at, row.finished_at)


class Upload(NamedTuple):
    """A document to queue: its name (the run log's), its bytes, and the name as sent when that differs."""

    name: str
    content: bytes
    sent_name: str | None = None


def add_batch(engine: Engine, settings: dict[str, Any], submitted_by: str,
              documents: Sequence[tuple[str, bytes] | Upload], batch_id: str | None = None, *,
              owner: str | None = None, state: TaskState = TaskState.unsent) -> tuple[str, list[str]]:
    """Record ``documents`` (``Upload``, or name and bytes) as tasks of a batch (new, or ``batch_id`` when adding
    to one); returns ``(batch id, task ids)`` in the order given. They are ``unsent`` until ``mark_sent`` (send the
    messages only after this commits); ``state=queued`` for a runner in this process, which needs no message.
    ``owner``: whose work it is (an API token's owner); None for batches only reviewers and admins see."""
    now = utcnow()
    task_ids = [str(uuid.uuid4()) for _ in documents]
    with write_connection(engine) as connection:
        if batch_id is None:
            batch_id = uuid.uuid4().hex
            connection.execute(insert(batches), {"id": batch_id, "settings": settings, "submitted_by": submitted_by,
                                               "owner": owner, "created_at": now})
        for task_id, document in zip(task_ids, documents):
            name, content, sent_name = Upload(*document)
            upload = connection.execute(insert(uploads), {
                "sha256": hashlib.sha256(content).hexdigest(), "name": name, "size": len(content),
                "content": content, "created_at": now}).inserted_primary_key
            assert upload is not None
            connection.execute(insert(tasks), {"id": task_id, "batch_id": batch_id, "upload_id": int(upload[0]),
                                              "state": state, "tokens": 0, "rule_ids": [], "deliveries": 0,
                                              "enqueued_at": now, "sent_name": sent_name})
    return batch_id, task_ids


def mark_sent(engine: Engine, task_ids: Sequence[str], broker: str) -> None:
    """The broker ``broker`` (its incarnation: ``extractor.queue.outbox``) took these tasks' messages: unsent ones
    are queued now, and every one records where its message went (a started one too: a worker may be faster than
    this update)."""
    if not task_ids:
        return
    with write_connection(engine) as connection:
        connection.execute(update(tasks).where(tasks.c.id.in_(list(task_ids)), tasks.c.state != TaskState.finished)
                           .values(sent_to=broker, state=case((tasks.c.state == TaskState.unsent, TaskState.queued),
                                                              else_=tasks.c.state)))


def to_send(engine: Engine, broker: str, *, unsent_before: datetime, stale_after_s: float, batch_id: str | None = None,
            limit: int) -> list[str]:
    """Tasks whose message the broker ``broker`` should get now, oldest first, at most ``limit``: unsent ones
    committed before ``unsent_before`` (a younger one may be being sent by its submitter right now), and those
    whose message went to another broker (one that restarted without its data lost it): queued, or started by a
    worker run that is gone since. Only of ``batch_id`` when given."""
    stale = or_(tasks.c.sent_to.is_(None), tasks.c.sent_to != broker)
    waiting = (select(tasks.c.id).where(or_(and_(tasks.c.state == TaskState.unsent, tasks.c.enqueued_at < unsent_before),
                                            and_(tasks.c.state == TaskState.queued, stale)))
               .order_by(tasks.c.enqueued_at, tasks.c.id).limit(limit))
    held = (select(tasks.c.id, runs.c.status, runs.c.host, runs.c.pid, runs.c.heartbeat_at)
            .outerjoin(runs, runs.c.id == tasks.c.run_id).where(tasks.c.state == TaskState.started, stale)
            .order_by(tasks.c.enqueued_at, tasks.c.id).limit(limit))  # apart: live holders never crowd out the rest
    if batch_id is not None:
        waiting, held = waiting.where(tasks.c.batch_id == batch_id), held.where(tasks.c.batch_id == batch_id)
    with engine.connect() as connection:
        found = list(connection.execute(waiting).scalars())
        orphans = [row.id for row in connection.execute(held) if row.status is None
                   or not is_alive(row.status, row.host, row.pid, row.heartbeat_at, stale_after_s)]
    return (found + orphans)[:limit]


def queued_on(engine: Engine, broker: str, *, batch_id: str | None = None, limit: int) -> list[str]:
    """Tasks whose message the broker ``broker`` took and no worker started yet, oldest first, at most ``limit``
    (of ``batch_id`` only, when given): the outbox compares them with the messages the broker still holds."""
    query = (select(tasks.c.id).where(tasks.c.state == TaskState.queued, tasks.c.sent_to == broker)
             .order_by(tasks.c.enqueued_at, tasks.c.id).limit(limit))
    if batch_id is not None:
        query = query.where(tasks.c.batch_id == batch_id)
    with engine.connect() as connection:
        return list(connection.execute(query).scalars())


def batch_settings(engine: Engine, batch_id: str) -> dict[str, Any] | None:
    with engine.connect() as connection:
        return connection.execute(select(batches.c.settings).where(batches.c.id == batch_id)).scalar()


WAITING = (TaskState.unsent, TaskState.queued)
"""States of a task that waits for a worker: what backpressure bounds and the queue-depth gauge counts."""


def pending_count(engine: Engine) -> int:
    """Tasks waiting for a worker (queued, or unsent while the broker is away), over every batch."""
    return sum(waiting_counts(engine).values())


def waiting_counts(engine: Engine) -> dict[TaskState, int]:
    """How many tasks wait for a worker, by state (``WAITING``)."""
    query = select(tasks.c.state, func.count()).where(tasks.c.state.in_(WAITING)).group_by(tasks.c.state)
    with engine.connect() as connection:
        found = {TaskState(state): int(count) for state, count in connection.execute(query)}
    return {state: found.get(state, 0) for state in WAITING}


def unfinished_ids(engine: Engine) -> list[str]:
    """Every task not finished yet, oldest first (what an in-process service picks up again when it starts)."""
    query = select(tasks.c.id).where(tasks.c.state != TaskState.finished).order_by(tasks.c.enqueued_at, tasks.c.id)
    with engine.connect() as connection:
        return list(connection.execute(query).scalars())


Everyone = None
"""The ``owner`` filter of a department-wide caller (an admin, an ``--all-owners`` reviewer, the workers): every
batch, whoever submitted it."""


def _owned(query: Any, owner: str | None) -> Any:
    """``query`` (over tasks) limited to the batches of ``owner`` by a join on the batch's key, so the cost is the
    same whatever the owner's number of batches (an ``IN`` over them built the owner's whole list first);
    unchanged for ``Everyone``."""
    if owner is Everyone:
        return query
    return query.join(batches, batches.c.id == tasks.c.batch_id).where(batches.c.owner == owner)


def get_task(engine: Engine, task_id: str, owner: str | None = Everyone) -> TaskInfo | None:
    """The task, if it exists and (with ``owner``) is that owner's: another owner's task is as missing."""
    query = select(*_TASK_COLUMNS).join(uploads, uploads.c.id == tasks.c.upload_id).where(tasks.c.id == task_id)
    with engine.connect() as connection:
        row = connection.execute(_owned(query, owner)).first()
    return None if row is None else _info(row)


def tasks_of_batch(engine: Engine, batch_id: str, task_ids: Iterable[str] | None = None,
                   owner: str | None = Everyone) -> list[TaskInfo]:
    """The batch's tasks (or only ``task_ids`` of it), in the order they were enqueued; none when ``owner`` is
    given and the batch is not that owner's."""
    query = select(*_TASK_COLUMNS).join(uploads, uploads.c.id == tasks.c.upload_id).where(tasks.c.batch_id == batch_id)
    if task_ids is not None:
        query = query.where(tasks.c.id.in_(list(task_ids)))
    with engine.connect() as connection:
        return [_info(row) for row in connection.execute(_owned(query, owner).order_by(tasks.c.enqueued_at, tasks.c.id))]


def batch_counts(engine: Engine, batch_id: str) -> dict[str, int]:
    """How many of the batch's tasks are queued, started and finished."""
    query = select(tasks.c.state, func.count()).where(tasks.c.batch_id == batch_id).group_by(tasks.c.state)
    with engine.connect() as connection:
        return {state: int(count) for state, count in connection.execute(query)}


@dataclass(frozen=True)
class BatchInfo:
    """A batch as listed: who submitted it, when, and how many of its documents are where."""

    id: str
    submitted_by: str
    created_at: datetime
    counts: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.id, "submitted_by": self.submitted_by, "created_at": self.created_at.isoformat(),
                "counts": self.counts}


def list_batches(engine: Engine, owner: str | None = Everyone, *, limit: int) -> list[BatchInfo]:
    """The newest ``limit`` batches (of ``owner`` only, when given), with their documents per task state; read
    from ``ix_batches_owner_created_at`` (``ix_batches_created_at`` for everyone's), newest first, without
    sorting the rest."""
    query = select(batches.c.id, batches.c.submitted_by, batches.c.created_at).order_by(batches.c.created_at.desc())
    if owner is not Everyone:
        query = query.where(batches.c.owner == owner)
    with engine.connect() as connection:
        found = connection.execute(query.limit(limit)).all()
        counts: dict[str, dict[str, int]] = {row.id: {} for row in found}
        for batch_id, state, count in connection.execute(
                select(tasks.c.batch_id, tasks.c.state, func.count()).where(tasks.c.batch_id.in_(list(counts)))
                .group_by(tasks.c.batch_id, tasks.c.state)):
            counts[batch_id][state] = int(count)
    return [BatchInfo(row.id, row.submitted_by, row.created_at, counts[row.id]) for row in found]


def owns_document_run(engine: Engine, owner: str, document_run_id: int) -> bool:
    """Whether a task of ``owner``'s batches ended in this document run (what a caller of one owner may read):
    the tasks of that document run (``ix_tasks_document_run_id``), each batch by its key."""
    query = _owned(select(tasks.c.id).where(tasks.c.document_run_id == document_run_id), owner).limit(1)
    with engine.connect() as connection:
        return connection.execute(query).first() is not None


def owned_by(owner: str) -> Any:
    """SQL condition on ``document_runs``: a task of ``owner``'s batches ended in it (for a query over document
    runs, such as the review queue of a reviewer of one owner)."""
    return (select(tasks.c.id).join(batches, batches.c.id == tasks.c.batch_id)
            .where(tasks.c.document_run_id == document_runs.c.id, batches.c.owner == owner).exists())


def owners_of(engine: Engine, document_run_ids: Iterable[int]) -> dict[int, set[str]]:
    """The owners whose tasks ended in each of these document runs (a run none did is left out: ``extract run``'s,
    or ``extract run --queue``'s, whose batches have no owner)."""
    wanted = sorted(set(document_run_ids))
    found: dict[int, set[str]] = {}
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            query = (select(tasks.c.document_run_id, batches.c.owner).join(batches, batches.c.id == tasks.c.batch_id)
                     .where(tasks.c.document_run_id.in_(wanted[start : start + 500]), batches.c.owner.is_not(None))
                     .distinct())
            for document_run_id, owner in connection.execute(query):
                found.setdefault(document_run_id, set()).add(owner)
    return found


ContentKey = tuple[str, str, int]
"""``(document sha256, contract, contract version)``: what one approved record is of."""


def owned_keys(engine: Engine, owner: str, keys: Iterable[ContentKey]) -> set[ContentKey]:
    """Which of these approved records' keys are ``owner``'s: a task of the owner's batches ended in a document run
    of that content under that contract version. Read per content (``documents``' unique sha256, document runs
    by document, tasks by document run), so the cost follows the keys asked, not the owner's size."""
    wanted = sorted(set(keys))
    found: set[ContentKey] = set()
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            chunk = set(wanted[start : start + 500])
            query = (select(documents.c.sha256, runs.c.contract, runs.c.contract_version)
                     .select_from(documents)
                     .join(document_runs, document_runs.c.document_id == documents.c.id)
                     .join(runs, runs.c.id == document_runs.c.run_id)
                     .join(tasks, tasks.c.document_run_id == document_runs.c.id)
                     .join(batches, batches.c.id == tasks.c.batch_id)
                     .where(documents.c.sha256.in_({sha for sha, _, _ in chunk}), batches.c.owner == owner)
                     .distinct())
            found.update(key for sha, contract, version in connection.execute(query)
                         if (key := (sha, contract, int(version))) in chunk)
    return found


def upload_of(engine: Engine, task_id: str) -> tuple[str, bytes]:
    """The task's document: ``(its name, bytes)``."""
    query = select(uploads.c.name, uploads.c.content).join(tasks, tasks.c.upload_id == uploads.c.id).where(tasks.c.id == task_id)
    with engine.connect() as connection:
        row = connection.execute(query).one()
    return row.name, bytes(row.content)


def start_delivery(engine: Engine, task_id: str, run_id: str, *, stale_after_s: float) -> Delivery:
    """Decide, in one transaction, whether this worker run works on the task now (see the module docstring)."""
    with write_connection(engine) as connection:
        row = connection.execute(
            select(tasks.c.state, tasks.c.deliveries, tasks.c.run_id, runs.c.status, runs.c.host, runs.c.pid, runs.c.heartbeat_at)
            .outerjoin(runs, runs.c.id == tasks.c.run_id).where(tasks.c.id == task_id).with_for_update(of=tasks)
        ).first()
        if row is None:
            return Delivery("missing")
        if row.state == TaskState.finished:
            return Delivery("finished", row.deliveries)
        if (row.state == TaskState.started and row.run_id is not None
                and is_alive(row.status, row.host, row.pid, row.heartbeat_at, stale_after_s)):
            return Delivery("duplicate", row.deliveries)
        deliveries = row.deliveries + 1
        connection.execute(update(tasks).where(tasks.c.id == task_id).values(
            state=TaskState.started, deliveries=deliveries, run_id=run_id, started_at=utcnow()))
        return Delivery("start", deliveries)


def finish_task(engine: Engine, task_id: str, outcome: Outcome, cause: str | None, document_run_id: int | None,
                tokens: int = 0, rule_ids: Sequence[str] = ()) -> bool:
    """Record where the task's document ended; False when it was finished before (the first result stays)."""
    with write_connection(engine) as connection:
        done = connection.execute(
            update(tasks).where(tasks.c.id == task_id, tasks.c.state != TaskState.finished)
            .values(state=TaskState.finished, outcome=outcome, cause=cause, document_run_id=document_run_id,
                    tokens=tokens, rule_ids=list(rule_ids), finished_at=utcnow()))
        return done.rowcount == 1


def document_with(engine: Engine, sha256: str, segmenter: str) -> int | None:
    """The id of the document with this content under this segmenter, if a worker got as far as storing it."""
    with engine.connect() as connection:
        return connection.execute(select(documents.c.id).where(documents.c.sha256 == sha256, documents.c.segmenter == segmenter)
                               ).scalar()


def state_in_run(engine: Engine, run_id: str, sha256: str, segmenter: str) -> str | None:
    """The state of the run's document run of this content, if it has one (a run converts a document once)."""
    query = (select(document_runs.c.state).join(documents, documents.c.id == document_runs.c.document_id)
             .where(document_runs.c.run_id == run_id, documents.c.sha256 == sha256, documents.c.segmenter == segmenter))
    with engine.connect() as connection:
        return connection.execute(query).scalar()


def upload_with(engine: Engine, sha256: str, named: Callable[[str], bool]) -> bytes | None:
    """The bytes of the oldest upload with this content whose name ``named`` accepts, read in one query (uploads
    of one content are few: one per submission of it)."""
    query = select(uploads.c.name, uploads.c.content).where(uploads.c.sha256 == sha256).order_by(uploads.c.id)
    with engine.connect() as connection:
        for name, content in connection.execute(query):
            if named(name):
                return bytes(content)
    return None


def add_upload(engine: Engine, name: str, content: bytes) -> None:
    """Keep a document given as bytes (to the Python API) in the run log, as a queued one is kept, so that review,
    approval and the document view read it from there (``extractor.queue.uploads.source_file``); once per content and
    name."""
    digest = hashlib.sha256(content).hexdigest()
    known = select(uploads.c.id).where(uploads.c.sha256 == digest, uploads.c.name == name).limit(1)
    with write_connection(engine) as connection:
        if connection.execute(known).first() is None:
            connection.execute(insert(uploads), {"sha256": digest, "name": name, "size": len(content),
                                                 "content": content, "created_at": utcnow()})
