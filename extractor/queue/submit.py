"""``extract run --queue``: put each document on the queue, then follow the batch until every one is finished.

Backpressure: documents are submitted in chunks; while more than ``max_pending`` documents (of any batch)
wait for a worker, submitting waits (or, with ``wait=False``, a batch that would pass the bound is refused
before anything is queued). Each chunk is committed, then sent through the outbox: while the broker is away its
documents wait in the run log, and the outbox's sweep sends them (and any the broker lost) while the batch is
followed (``extractor.queue.outbox``). Following reads the run log, not the broker: outcomes are where workers
write them; a message from the worker that finished a document says when to look (``extractor.queue.news``). The
first chunk is small, so workers start on it while the rest is read and committed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from extractor.engine import DocumentOutcome, Progress, RunSummary
from extractor.engine.discover import Discovery, is_mail
from extractor.errors import InputError, UsageError
from extractor.queue.news import POLL_S, Timer, Wakeup
from extractor.queue.outbox import SWEEP_S, BrokerAway, Outbox
from extractor.queue.settings import BatchSettings
from extractor.redact import redact_text
from extractor.store import Store, tasks
from extractor.store.tasks import TaskInfo
from extractor.vocab import Outcome, SkipReason, TaskState

CHUNK = 100
"""Documents read and committed per transaction while submitting."""
BUDGET_STOP = "--max-cost"
"""What the cause of a document the batch's budget stopped says (``extractor.engine.budget``)."""
FIRST_CHUNK = 16
"""Documents in the first transaction: the workers have them while the next chunk is read."""


def outcome_of(task: TaskInfo) -> DocumentOutcome:
    """A finished task as a batch outcome."""
    assert task.outcome is not None
    skip = None
    if task.outcome == Outcome.SKIPPED:
        skip = SkipReason.busy if (task.cause or "").startswith("busy") else SkipReason.done
    return DocumentOutcome(task.name, task.outcome, task.cause, task.rule_ids, task.tokens, task.document_run_id,
                           skip=skip)


class Submission:
    """One batch being submitted and followed; ``outbox`` sends the messages of committed tasks."""

    def __init__(self, store: Store, settings: BatchSettings, outbox: Outbox, *,
                 submitted_by: str, max_pending: int, wait: bool, progress: Progress, wakeup: Wakeup | None = None
                 ) -> None:
        self.store = store
        self.wakeup = wakeup or Timer()
        self.settings = settings
        self.outbox = outbox
        self._away = False  # the broker did not take the last send: said once, and again when it is back
        self.submitted_by = submitted_by
        self.max_pending = max_pending
        self.wait = wait
        self.progress = progress
        self.batch_id: str | None = None
        self.unfinished: set[str] = set()
        self.summary = RunSummary(None)

    def run(self, discovery: Discovery) -> RunSummary:
        """Submit every file, then follow until all are finished; Ctrl-C stops following (workers go on)."""
        started = time.monotonic()
        files = discovery.files
        self.summary.unsupported = dict(discovery.unsupported)
        self.progress.started(len(files) + len(discovery.missing))
        for raw in discovery.missing:
            self._report(DocumentOutcome(raw, Outcome.INPUT_ERROR, f"{raw}: no such file, folder or glob match"))
        if not self.wait:
            self._refuse_if_full(len(files))
        # E-mails last, each committed alone: a reader here takes each apart before it is queued, up to the reading
        # deadline (docs/formats.md#e-mail), so one that runs to it holds back only the e-mails after it.
        plain = [path for path in files if not is_mail(path)]
        step = min(CHUNK, self.max_pending)  # a chunk never needs more room than the queue has
        start, size = 0, min(FIRST_CHUNK, step)
        while start < len(plain):
            self._submit(plain[start:start + size])
            start, size = start + size, step
        for mail in (path for path in files if is_mail(path)):
            self._submit([mail])
        try:
            while self.unfinished:
                self.wakeup.wait()
                self._sweep()
                self._collect()
        finally:
            self.wakeup.close()
        self.summary.seconds = time.monotonic() - started
        budget = next((o.cause for o in self.summary.outcomes
                       if o.state == Outcome.INTERRUPTED and o.cause and BUDGET_STOP in o.cause), None)
        if budget is not None:  # the batch's budget stopped it: it ends as an interrupted run does, resumable
            self.summary.interrupted = True
            self.summary.stopped = budget[budget.index(BUDGET_STOP):].partition("; rerun to ")[0]
        return self.summary

    def _refuse_if_full(self, count: int) -> None:
        pending = tasks.pending_count(self.store.engine)
        if pending + count > self.max_pending:
            raise UsageError(f"queue full: {pending} documents wait for a worker and this batch adds {count}, over "
                             f"--max-pending {self.max_pending}; start more workers (extract worker) or retry later")

    def _submit(self, paths: Sequence[Path]) -> None:
        while tasks.pending_count(self.store.engine) + len(paths) > self.max_pending:  # backpressure: wait for workers
            self._sweep()
            self._collect()
            time.sleep(POLL_S)  # room is made by workers of any batch: no message to wait for
        from extractor.engine.discover import with_attachments
        from extractor.ingest import source_bytes

        documents: list[tuple[str, bytes]] = []
        for path in paths:
            try:  # a file, and after an e-mail its attachments, taken from it by a sandboxed reader
                data = source_bytes(str(path))[0]
            except InputError as error:
                self._report(DocumentOutcome(str(path), Outcome.INPUT_ERROR, str(error)))
                continue
            found = with_attachments(str(path), data)
            documents += found
            self.progress.more(len(found) - 1)
        if not documents:
            return
        first = self.batch_id is None
        self.batch_id, task_ids = tasks.add_batch(self.store.engine, self.settings.to_json(), self.submitted_by,
                                                  documents, self.batch_id)
        if first:
            self.wakeup.follow(self.batch_id)  # before any of its messages can be sent
        self.summary.run_id = self.batch_id
        self.unfinished.update(task_ids)
        try:
            self.outbox.send(task_ids)
        except BrokerAway as away:
            self._broker_away(str(away))
        self._collect()

    def _sweep(self) -> None:
        """Send what waits for the broker (unsent, or lost by a broker that restarted): this batch's, and any other
        batch's a submitter stopped following before the broker was back."""
        self.outbox.sweep_if_due()
        if self._away and self.outbox.away is None:
            self._away = False
            self.progress.note("the broker is back: the documents that waited for it are being sent")

    def unsent_note(self) -> str:
        """For a person who stops following: how many of the batch still wait for the broker, and who sends them."""
        if self.batch_id is None:
            return ""
        unsent = tasks.batch_counts(self.store.engine, self.batch_id).get(TaskState.unsent, 0)
        return (f"; {unsent} of them wait for the broker: `extract serve` or the next `extract run --queue` sends them "
                "when it is back" if unsent else "")

    def _broker_away(self, why: str) -> None:
        if not self._away:
            self._away = True
            self.progress.note(f"the broker at {redact_text(self.outbox.url)} did not take the documents ({why}); they "
                               f"are saved and sent when it is back (every {SWEEP_S:g} s this command tries again)")

    def _collect(self) -> None:
        if not self.unfinished or self.batch_id is None:
            return
        for task in tasks.tasks_of_batch(self.store.engine, self.batch_id, self.unfinished):
            if task.outcome is not None:
                self.unfinished.discard(task.id)
                self._report(outcome_of(task))

    def _report(self, outcome: DocumentOutcome) -> None:
        self.summary.outcomes.append(outcome)
        self.progress.finished(outcome)


def worker_runs(store: Store, batch_id: str) -> list[str]:
    """The worker runs that converted the batch's documents."""
    found: Iterable[TaskInfo] = tasks.tasks_of_batch(store.engine, batch_id)
    return sorted({task.run_id for task in found if task.run_id})
