"""The batch engine: a fixed number of tasks take files in order; each document goes
skip-if-done -> ingest + segment -> claim -> convert -> record, and one bad file never stops the batch.

What plugs in without editing this module: the per-document procedure (``converter``, see
``extractor.engine.convert``), the provider and the judge. A Celery worker (docs/queue-and-api.md) converts one document
per task on the same path as a task of a run here: ``Engine.process(path)`` after ``Engine.start`` (or, joining a
run another process started, with a ``Recorder`` given that run's id), then ``Engine.close``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor import offload
from extractor.engine.budget import LocalBudget, prices_for
from extractor.engine.calls import Converter, Job, ModelCalls, RunHandles
from extractor.engine.convert import convert
from extractor.engine.discover import Discovery, discover, is_mail
from extractor.engine.recorder import Observer, Recorder
from extractor.engine.settings import RunSettings, Scope
from extractor.engine.stop import Interrupted, Stop
from extractor.engine.summary import DocumentOutcome, Progress, RunSummary
from extractor.errors import ExtractorError, InputError
from extractor.generate import Provider
from extractor.generate.limit import AdaptiveLimit
from extractor.generate.prompt import load_prompt
from extractor.prices import RunModels, Spend, spend_by_key
from extractor.validate import VALIDATOR_VERSION
from extractor.vocab import FINAL_STATES, DocumentState, Outcome, RunStatus, SkipReason

if TYPE_CHECKING:  # the run log is only imported when a run starts, not by modules that show results
    from extractor.judge.modes import Judge
    from extractor.store import RunConfig, Store

HEARTBEAT_S = 10.0
INTERRUPTED_DOCUMENT = "run interrupted; rerun to finish this document"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Engine:
    """Runs one batch: ``await Engine(...).run(paths)`` -> ``RunSummary``.

    ``judge`` (optional) checks candidates that passed every rule; the run closes both providers.
    """

    def __init__(self, store: Store, provider: Provider, settings: RunSettings, limit: AdaptiveLimit | None = None,
                 progress: Progress | None = None, judge: Judge | None = None, converter: Converter = convert,
                 observer: Observer | None = None) -> None:
        self.store = store
        self.provider = provider
        self.judge = judge
        self.settings = settings
        self.limit = limit or AdaptiveLimit(settings.concurrency)
        self.progress = progress or Progress()
        self.converter = converter
        self.stop = Stop()
        self.cpu_seconds: dict[str, float] = {"ingest+segment": 0.0, "windows": 0.0, "merge": 0.0, "validate": 0.0,
                                             "database": 0.0}
        self.recorder = Recorder(store, self.cpu_seconds, observer)
        self.calls = ModelCalls(provider, self.limit, settings,
                                load_prompt(settings.contract, settings.options.prompt_version),
                                RunHandles(self.recorder, self.stop, self.cpu_seconds, self.progress), judge)
        money = None
        if settings.options.max_cost is not None:  # ValueError when a model's price is unknown
            prices = prices_for(provider, judge.provider if judge is not None else None)
            money = LocalBudget(settings.options.max_cost, prices, self.stop.drain)
        self.scope = Scope.of(settings.options, money)
        """What this run's own documents bring (a worker's engine is given each batch's with its documents)."""
        self._resuming = False  # whether this configuration finished documents before (then look per file)
        self._takers: list[asyncio.Task[None]] = []

    @property
    def run_id(self) -> str:
        return self.recorder.run_id

    def run_config(self, segmenter: str) -> RunConfig:
        from extractor.store import RunConfig

        s, options = self.settings, self.settings.options
        ocr_lang = options.ocr_lang or os.environ.get("EXTRACT_OCR_LANG") or None
        return RunConfig(
            contract=s.contract.name, contract_version=s.contract.version, prompt_version=options.prompt_version,
            model=self.provider.model, provider=self.provider.name, validator_version=VALIDATOR_VERSION,
            segmenter=segmenter, judge_model=self.judge.model if self.judge else None,
            config={"options": options.to_json(), "concurrency": s.concurrency, "temperature": s.temperature,
                    "max_tokens": options.max_tokens, "max_input_tokens": self.calls.budget.max_input,
                    "max_output_tokens": self.calls.budget.max_output, "overlap": options.overlap,
                    "tags": list(options.tags), "base_url": s.base_url, "force": options.force,
                    "retry_errors": options.retry_errors,
                    "guards": s.contract.guards.to_json(), "contract_settings_sha256": s.contract.settings_sha256,
                    "approvals": s.contract.approvals,
                    "contract_hash": s.contract.content_hash}
            | ({"contract_folder": str(s.contract.folder)} if s.contract.from_files else {})
            | ({"contract_files": dict(s.contract.content_files)} if s.contract.content_files else {})
            | ({"judge": self.judge.config()} if self.judge else {})
            # OCR languages asked for decide the text of scans: another choice is another configuration
            | ({"ocr_lang": ocr_lang} if ocr_lang else {}),
            command=s.command, host=socket.gethostname(), pid=os.getpid(),
        )

    async def run(self, paths: Iterable[str] | Discovery) -> RunSummary:
        """Process every document; one bad file never stops the batch.

        At most ``2 x concurrency`` documents are read and held at once (the ones waiting for a model slot are
        ready the moment one frees), so memory does not grow with the batch; a rerun skips what this
        configuration finished before reading it, and retries what ended ERROR (``retry_errors``).
        SIGINT and SIGTERM (or cancelling this coroutine) stop the run: model calls in flight end at once and
        are recorded as ``interrupted`` attempts, their documents become INTERRUPTED, and the summary lists
        what is left; rerunning the same command finishes it. Nothing to read: no run is recorded.
        """
        started = time.monotonic()
        with self._stop_on_signals():
            discovery = paths if isinstance(paths, Discovery) else discover(paths)
            summary = RunSummary(None, unsupported=dict(discovery.unsupported))
            summary.outcomes = [DocumentOutcome(raw, Outcome.INPUT_ERROR, f"{raw}: no such file, folder or glob match")
                                for raw in discovery.missing]
            if not discovery.files:
                summary.nothing_found = discovery.nothing_found()
                await self._close_providers()
                self.recorder.close()
                return summary
            try:
                await self.start()
                summary.run_id = self.run_id
                await self._pool(discovery, summary)
            finally:
                await self.close(summary, started)
        return summary

    async def start(self) -> None:
        """Record the run as started (and free what killed runs left)."""
        from extractor.segment import SEGMENTER_ID

        await self.recorder.start(self.run_config(SEGMENTER_ID))
        self._resuming = await self.recorder.any_finished()

    async def _pool(self, discovery: Discovery, summary: RunSummary) -> None:
        files = discovery.files
        self.progress.calls(lambda: self.limit.in_flight)
        self.progress.started(len(files) + len(summary.outcomes))
        for outcome in summary.outcomes:
            self.progress.finished(outcome)
        heartbeat = asyncio.create_task(self._heartbeat())
        pending = _Pending(files)
        # documents waiting for the judge have tasks of their own (its queue depth), so they never leave
        # the generation slots without documents to fill them
        judging = self.judge.queue.depth if self.judge is not None else 0
        # as many tasks as documents, or as slots: an e-mail may bring documents of its own
        documents = len(files) if not any(map(is_mail, files)) else 2 * self.limit.maximum + judging
        # the first wave first: the tasks that read ahead start once every slot was taken (or a document
        # ended); until then their reading only competes with the first wave for this process (at 64 in flight
        # the 64th call started 0.28 s into a run instead of 0.32 s, medians of six)
        opening = min(documents, self.limit.maximum)
        self._takers = [asyncio.create_task(self._take_files(pending, discovery, summary, opens=self.limit.filled))
                         for _ in range(opening)]
        self._takers += [asyncio.create_task(self._take_files(pending, discovery, summary, after=self.limit.filled))
                          for _ in range(min(documents, 2 * self.limit.maximum + judging) - opening)]
        try:
            try:
                await asyncio.wait(self._takers)  # unlike gather, a cancelled wait leaves the tasks running
            except asyncio.CancelledError:  # the run's task was cancelled: stop like Ctrl-C, then finish the record
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                self.stop.request()
                await asyncio.wait(self._takers)
            for taker in self._takers:
                if not taker.cancelled() and taker.exception() is not None:
                    raise taker.exception()  # type: ignore[misc]  # a bug in the engine itself
        finally:
            heartbeat.cancel()
        summary.interrupted = self.stop.requested
        summary.stopped = self.stop.reason
        if summary.interrupted:
            await self.recorder.interrupted()
            summary.outcomes += await self._left_over([discovery.name_of(path) for path in pending.files()], summary)

    async def close(self, summary: RunSummary, started: float) -> None:
        """Record how the run ended, close the providers and the run-log writer."""
        try:
            if self.run_id:  # the run was recorded as started
                await self.recorder.finish(RunStatus.interrupted if self.stop.requested else RunStatus.finished,
                                           summary.outcome)
                summary.spend = await asyncio.to_thread(self.spend)
        finally:
            summary.seconds = time.monotonic() - started
            summary.rate_limits, summary.timeouts = self.limit.rate_limits, self.limit.timeouts
            summary.lowest_concurrency = self.limit.lowest if self.limit.lowered else None
            await self._close_providers()
            self.recorder.close()

    def spend(self) -> Spend:
        """This run's model calls as the run log has them, priced (``extractor.prices``)."""
        rows = self.store.spend(run_ids=[self.run_id])
        judge = None if self.judge is None else self.judge.model
        models = RunModels.of(self.provider.name, self.provider.model, judge)
        return spend_by_key(rows, lambda row: 0, {self.run_id: models}).get(0, Spend())

    async def _close_providers(self) -> None:
        await self.provider.aclose()
        if self.judge is not None:
            await self.judge.aclose()

    @contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """SIGINT and SIGTERM stop the run (a second one cancels what is still running); the handlers that
        were there before come back afterwards.

        Installed on the loop, whatever the process inherited: a run started as a background job inherits
        SIGINT *ignored*, and containers and Celery stop a process with SIGTERM.
        """
        loop = asyncio.get_running_loop()
        installed: dict[signal.Signals, Any] = {}
        for number in STOP_SIGNALS:
            previous = signal.getsignal(number)
            try:
                loop.add_signal_handler(number, self._on_signal)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
                continue
            installed[number] = previous
        try:
            yield
        finally:
            for number, previous in installed.items():
                loop.remove_signal_handler(number)
                signal.signal(number, previous)

    def _on_signal(self) -> None:
        if not self.stop.requested:
            self.stop.request()
            return
        for taker in self._takers:  # asked twice: stop waiting for anything (writes still finish)
            taker.cancel()

    async def _take_files(self, pending: _Pending, discovery: Discovery, summary: RunSummary, *,
                          opens: asyncio.Event | None = None, after: asyncio.Event | None = None) -> None:
        """Take the next file until none is left or the run stops (``pending`` hands each file to one task).

        ``after``: start only once that event is set; ``opens``: set it when a document ends here (documents
        that end without a call, skipped or unreadable, never fill the slots). An e-mail's attachments are taken
        from it first, and come next (``_open_mail``).
        """
        try:
            if after is not None:
                async with self.stop.waiting():
                    await after.wait()
            while not self.stop.requested:
                async with self.stop.waiting():
                    taken = await pending.take()
                if taken is None:
                    return
                path, data = taken
                name = discovery.names.get(path)
                if data is None and is_mail(path):
                    outcome = await self._open_mail(path, name, pending)
                    if outcome is None:
                        outcome = await self.process(path, name)
                else:
                    outcome = await self.process(path, name, data=data)
                summary.outcomes.append(outcome)
                self.progress.finished(outcome)
                if opens is not None:
                    opens.set()
        except Interrupted:
            return
        finally:
            if opens is not None:  # (a run that stopped before any document ended)
                opens.set()

    async def _open_mail(self, mail: Path, name: str | None, pending: _Pending) -> DocumentOutcome | None:
        """Have a reader take the e-mail's attachments from it and put them next in line, each a document of its own
        (docs/formats.md#e-mail). Done on every run, a resumed one too, whether or not the e-mail itself was done
        before. A reader that passed a limit on it gives the e-mail's outcome (INPUT_ERROR naming the limit): it is
        not read again. ``name``: the e-mail's name in the run log, when ``mail`` is a local copy."""
        pending.opening()
        found: offload.Attachments = ()
        try:
            async with self.stop.waiting():
                found = await offload.attachments(mail)
        except Interrupted:
            return DocumentOutcome(name or str(mail), Outcome.INTERRUPTED, INTERRUPTED_DOCUMENT)
        except InputError as error:
            return DocumentOutcome(name or str(mail), Outcome.INPUT_ERROR, str(error).replace(str(mail), name or str(mail)))
        finally:
            pending.opened(mail, found)
        self.progress.more(len(found))
        return None

    async def _left_over(self, files: list[str], summary: RunSummary) -> list[DocumentOutcome]:
        """After an interruption: the files (as the run log names them) without an outcome, as the run log has them."""
        done = {outcome.path for outcome in summary.outcomes}
        recorded = {run.path: run for run in await self.recorder.document_runs()}
        left = []
        for path in files:
            if path in done:
                continue
            run = recorded.get(path)
            if run is not None and run.state in FINAL_STATES:
                left.append(DocumentOutcome(path, Outcome(run.state), run.cause, document_run_id=run.id))
            else:
                left.append(DocumentOutcome(path, Outcome.INTERRUPTED, None if run is None else run.cause,
                                            document_run_id=None if run is None else run.id))
        return left

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            await self.recorder.heartbeat()

    async def process(self, path: Path, name: str | None = None, scope: Scope | None = None,
                      data: bytes | None = None) -> DocumentOutcome:
        """One document from file to final state; an unexpected bug in it is reported, not allowed to sink
        the batch (a claimed document then ends ERROR, so a rerun tries it again).

        ``name`` is the path the run log records, when ``path`` is only a local copy (a queued upload);
        ``scope``, what its batch brings when that is not this run (a queued document's); ``data`` the bytes of
        the e-mail's attachment ``path`` names (``offload.Attachments``).
        """
        job: Job | None = None
        label = name or str(path)
        scope = scope or self.scope
        try:
            retried, skipped = await self._done_before(path, label, scope, data)
            if skipped is not None:
                return skipped
            async with self.stop.waiting():
                document, seconds = await offload.read(path, lambda done, total: self.progress.page(label, done, total),
                                                       self.settings.options.ocr_lang, data)
            if name is not None:
                document = replace(document, path=name)
            self.cpu_seconds["ingest+segment"] += seconds
            if self.stop.requested:  # read, but not claimed: nothing to undo
                raise Interrupted
            document_id, claim = await self.recorder.claim(document, label, force=scope.force, tags=scope.tags,
                                                           retry=scope.retry_states)
            if claim.status == "busy":
                return DocumentOutcome(label, Outcome.SKIPPED, f"busy: run {claim.ref} is processing it",
                                       skip=SkipReason.busy, other_run=str(claim.ref))
            if claim.status == "done":
                return DocumentOutcome(label, Outcome.SKIPPED, f"done before (document run {claim.ref})",
                                       skip=SkipReason.done, document_run_id=claim.document_run_id)
            job = Job(path, document, document_id, claim.document_run_id, scope.money, scope.force)
            conversion = await self.converter(job, self.calls)
        except Interrupted as stopped:
            cause = f"{stopped}; rerun to finish this document" if str(stopped) else INTERRUPTED_DOCUMENT
            if job is not None and not self.stop.requested:  # its budget stopped it, not the run: recorded now
                await self.recorder.finish_document(job.document_run_id, DocumentState.INTERRUPTED, cause, (), None)
            return DocumentOutcome(label, Outcome.INTERRUPTED, cause,
                                   document_run_id=None if job is None else job.document_run_id)
        except InputError as error:  # named as the run log names it (a local copy's own path means nothing)
            return DocumentOutcome(label, Outcome.INPUT_ERROR, str(error).replace(str(path), label))
        except Exception as error:  # noqa: BLE001 - reported with its type, the batch goes on
            # one a user can act on (the contract's files edited during the run) is its own line, not a bug
            why = str(error) if isinstance(error, ExtractorError) else f"internal error {type(error).__name__}: {error}"
            cause = f"{label}: {why}"
            if job is not None:
                await self.recorder.finish_document(job.document_run_id, DocumentState.ERROR, cause, (), None)
            return DocumentOutcome(label, Outcome.ERROR, cause,
                                   document_run_id=None if job is None else job.document_run_id)
        await self.recorder.finish_document(job.document_run_id, conversion.state, conversion.cause,
                                            conversion.needs_person, conversion.final_attempt_id)
        return DocumentOutcome(label, Outcome(conversion.state.value), conversion.cause, conversion.rule_ids,
                               conversion.tokens, job.document_run_id, retried=retried)

    async def _done_before(self, path: Path, label: str, scope: Scope, data: bytes | None = None
                           ) -> tuple[bool, DocumentOutcome | None]:
        """Whether this configuration finished the file's content (or an attachment's, ``data``) before:
        ``(retried, skipped outcome)``.

        Looked up before ingest, so a rerun does not read and segment what is done; the claim still decides.
        """
        if not self._resuming or scope.force:
            return False, None
        digest = hashlib.sha256(data).hexdigest() if data is not None else await asyncio.to_thread(file_sha256, path)
        finished = digest and await self.recorder.finished(digest)
        if not finished:
            return False, None
        where = f"run {finished.run_id} (document run {finished.document_run_id})"
        if finished.state in scope.retry_states:
            return True, None
        if finished.state == DocumentState.ERROR:
            cause = f"ended ERROR in {where}; --retry-errors tries it again"
        else:
            cause = f"done before by {where}"
        return False, DocumentOutcome(label, Outcome.SKIPPED, cause, skip=SkipReason.done, other_run=finished.run_id,
                                      document_run_id=finished.document_run_id)


class _Pending:
    """The files a run has yet to take, shared by its tasks: discovery's, and each e-mail's attachments, put right
    after it once a reader has taken them from it. A task finding none left waits while an e-mail is being taken
    apart: its attachments may still come."""

    def __init__(self, files: list[Path]) -> None:
        self._files = files
        self._queue: deque[tuple[Path, bytes | None]] = deque((path, None) for path in files)
        self._attached: dict[Path, list[Path]] = {}
        self._opening = 0
        self._changed = asyncio.Event()

    async def take(self) -> tuple[Path, bytes | None] | None:
        """The next file (and an attachment's bytes), or None once there is none and none can come."""
        while not self._queue:
            if not self._opening:
                return None
            self._changed.clear()
            await self._changed.wait()
        return self._queue.popleft()

    def opening(self) -> None:
        """An e-mail is being taken apart: tasks wait for its attachments rather than end."""
        self._opening += 1

    def opened(self, mail: Path, attachments: Iterable[tuple[str, bytes]]) -> None:
        """The e-mail's attachments, next in line."""
        found = [(Path(name), data) for name, data in attachments]
        self._queue.extendleft(reversed(found))
        self._attached[mail] = [path for path, _ in found]
        self._opening -= 1
        self._changed.set()

    def files(self) -> list[Path]:
        """Every file of the run in order, each e-mail's attachments after it."""
        return [each for path in self._files for each in (path, *self._attached.get(path, ()))]


def file_sha256(path: Path, largest: int = 64 << 20) -> str | None:
    """The content hash ingest gives the file; None when it cannot be read or is over ``largest`` bytes
    (ingest then says why, or reads it anyway: the claim still finds a finished document)."""
    digest = hashlib.sha256()
    try:
        if os.stat(path).st_size > largest:
            return None
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()
