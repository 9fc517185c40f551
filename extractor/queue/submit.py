"""``extract run --queue``: put each document on the queue, then follow the batch until every one is finished.

Backpressure: documents are submitted in chunks; while more than ``max_pending`` documents (of any batch)
wait for a worker, submitting waits (or, with ``wait=False``, a batch that would pass the bound is refused
before anything is queued). Each chunk is committed, then sent through the outbox: while the broker is away its
documents wait in the run log, and the outbox's sweep sends them (and any the broker lost) while the batch is
followed (``extractor.queue.outbox``). Following reads the run log, not the broker: outcomes are where workers
write them; a message from the worker that finished a document says when to look (``extractor.queue.news``). The
first chunk is small, so workers start on it while the rest is read and committed.

E-mails come after the other files: each is taken apart by a reader of this process's CPU pool before it is queued
with its attachments (docs/formats.md#e-mail), several at once, each queued as soon as its reader is done. An e-mail
that holds its reader until the deadline holds no other: past the soft deadline its reader reads on at low priority
and one more starts (``extractor.offload``), as in a run here.
"""

from __future__ import annotations

import asyncio
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
        plain = [path for path in files if not is_mail(path)]
        mails = [path for path in files if is_mail(path)]
        if mails:  # the readers that take them apart start now: the fork server imports while the rest is queued
            from extractor import offload

            try:
                offload.POOL.start(offload.READER)
            except ValueError as error:  # a reading limit that is not one
                raise UsageError(str(error)) from None
        step = min(CHUNK, self.max_pending)  # a chunk never needs more room than the queue has
        start, size = 0, min(FIRST_CHUNK, step)
        while start < len(plain):
            self._submit(plain[start:start + size])
            start, size = start + size, step
        if mails:
            asyncio.run(self._submit_mails(mails))
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
        """Queue files that are not e-mails, in one transaction."""
        while self._full(len(paths)):
            time.sleep(POLL_S)  # room is made by workers of any batch: no message to wait for
        documents = [found for path in paths if (found := self._read(path)) is not None]
        if documents:
            self._queue(documents)

    async def _submit_mails(self, mails: list[Path]) -> None:
        """Queue each e-mail with its attachments, each in a transaction of its own once a reader of the CPU pool has
        taken it apart. As many e-mails are taken apart at once as the pool may have readers (twice
        ``EXTRACT_READERS`` while readers are past the soft deadline), so a few that hold their readers until the
        deadline leave the others to the rest.

        An e-mail its reader could not take apart (a reading limit, an attachment it could not decode) ends
        INPUT_ERROR naming why and is not read again (docs/formats.md#e-mail), as in a run here: a worker would spend
        as long on it, and queued alone it would be read without its attachments. One the reader could not parse
        (not an e-mail, too many parts) is queued alone: its worker's reading says why, in the run log."""
        from extractor import offload

        at_once = 2 * offload.readers()  # (a value that is not one was refused before the pool started)
        waiting = iter(mails)

        async def take() -> None:
            for mail in waiting:
                document = self._read(mail)
                if document is None:
                    continue
                try:
                    found = await offload.attachments(mail, document[1])
                except InputError as error:  # the e-mail ends naming why, as in a run here
                    self._queue([document], refused=str(error))
                    continue
                self.progress.more(len(found))
                while self._full(1 + len(found)):  # no await between the last look and the commit
                    await asyncio.sleep(POLL_S)
                self._queue([document, *found])

        try:
            await asyncio.gather(*(take() for _ in range(at_once)))
        finally:
            offload.POOL.close()  # its readers are not needed while the batch is followed

    def _full(self, count: int) -> bool:
        """Whether ``count`` more documents would pass ``max_pending`` (backpressure: the caller waits for workers;
        more than the queue may hold at all wait for it to be empty); what is due meanwhile is sent and collected."""
        pending = tasks.pending_count(self.store.engine)
        if pending == 0 or pending + count <= self.max_pending:
            return False
        self._sweep()
        self._collect()
        return True

    def _read(self, path: Path) -> tuple[str, bytes] | None:
        """The file's name and bytes to queue, or None when it cannot be read (reported INPUT_ERROR)."""
        from extractor.ingest import source_bytes

        try:
            return str(path), source_bytes(str(path))[0]
        except InputError as error:
            self._report(DocumentOutcome(str(path), Outcome.INPUT_ERROR, str(error)))
            return None

    def _queue(self, documents: Sequence[tuple[str, bytes]], refused: str | None = None) -> None:
        """Commit ``documents`` as tasks of the batch, then send them; ``refused``: why the one document (an e-mail
        whose reader passed a limit on it) ends INPUT_ERROR unread, a task of the batch no worker gets."""
        first = self.batch_id is None
        self.batch_id, task_ids = tasks.add_batch(self.store.engine, self.settings.to_json(), self.submitted_by,
                                                  documents, self.batch_id)
        if first:
            self.wakeup.follow(self.batch_id)  # before any of its messages can be sent
        self.summary.run_id = self.batch_id
        self.unfinished.update(task_ids)
        if refused is not None:
            tasks.finish_task(self.store.engine, task_ids[0], Outcome.INPUT_ERROR, refused, None)
        else:
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
