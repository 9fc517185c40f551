"""Where a queued document is converted: one asyncio event loop per worker process, fed by task threads.

Why one loop and a thread pool in Celery: the work of a document is waiting for the model (HTTP), so one
event loop carries many model calls at once, as ``extract run`` does; Celery's prefork pool would give
each document a process of its own (hundreds of MB each, a local model loaded N times) and its
``threads`` pool alone would give each a loop of its own (no shared limit, no shared client). So the
pool's threads only hand a task id to this loop and wait for the answer: the worker's ``--concurrency``
is the number of documents, and so of model calls, in flight; the engine's ``AdaptiveLimit`` lowers it on
429s and timeouts. CPU work (reading, validation) still goes to the CPU pool (``extractor.offload``).

Engines are kept per conversion: what makes one document's conversion differ from another's (model, model
server, contract and its hash, prompt version and the other options of ``RunOptions.conversion``). Each is one run
in the run log (``extract worker`` as its command, this host and pid, a heartbeat): the claim protocol of the run
log then decides, per document, exactly as between ``extract run`` processes; a worker killed mid-document leaves
its claim to be taken over when the document is delivered again. What differs per batch and not per conversion
(tags, ``force``, ``retry_errors``, the budget of ``max_cost``) comes with each task (``Scope``), so any number of
batches share one engine; an engine no document used for ``IDLE_CLOSE_S`` is closed (its run recorded finished,
its model client's connections closed), so a long-lived worker holds what it is doing, not what it has seen.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from extractor import offload
from extractor.engine import AdaptiveLimit, DocumentOutcome, Engine, RunSummary
from extractor.engine.budget import Budget, LocalBudget, prices_for
from extractor.engine.engine import HEARTBEAT_S
from extractor.engine.recorder import Observer
from extractor.engine.settings import Scope
from extractor.errors import ExtractorError
from extractor.queue.endpoints import Endpoints, load_endpoints
from extractor.queue.settings import BatchSettings
from extractor.queue.uploads import safe_suffix
from extractor.store import Store, tasks
from extractor.store.db import utcnow
from extractor.store.tasks import TaskInfo
from extractor.vocab import DEFAULT_CONTRACT, DEFAULT_MAX_DELIVERIES, FINAL_STATES, DocumentState, Outcome, SkipReason

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.contracts.registry import ContractRef
    from extractor.prices import Price

log = logging.getLogger(__name__)

IDLE_CLOSE_S = 300.0
"""An engine (a worker run, its model client and its connections) no document used this long is closed; the next
document of its configuration starts a new one."""
BUDGETS_KEPT = 4096
"""Budgets of batches a worker keeps at hand (the least recently used one is dropped past this): a shared one is
read again from the broker, so only an in-process service's (``Alone``) is forgotten."""


class Fleet(Protocol):
    """What the workers of one broker share: a 429 slows every worker calling that server, and a batch's budget
    is one, whichever worker spends from it (``extractor.queue.fleet``)."""

    def limit(self, concurrency: int, settings: BatchSettings) -> AdaptiveLimit: ...

    def budget(self, batch_id: str, limit: float, prices: Mapping[str, Price]) -> Budget: ...


class Alone:
    """A fleet of one process (``extract serve`` without a broker): a 429 slows this process, budgets are kept
    here."""

    def limit(self, concurrency: int, settings: BatchSettings) -> AdaptiveLimit:
        return AdaptiveLimit(concurrency)

    def budget(self, batch_id: str, limit: float, prices: Mapping[str, Price]) -> Budget:
        return LocalBudget(limit, prices, lambda reason: log.warning("batch %s stopped: %s", batch_id, reason))


class TaskObserver(Protocol):
    """What watches the queued documents (``extractor.service.metrics``): how long each waited for a worker, where
    it ended and how long it ran; and, per engine, the run's observer of that engine's model server."""

    def for_endpoint(self, endpoint: str) -> Observer: ...

    def task_started(self, waited_s: float) -> None: ...

    def task_finished(self, outcome: Outcome, ran_s: float | None) -> None: ...


class StillRunning(Exception):
    """A delivery of a task another live worker is converting right now (the broker redelivered it because it
    took longer than the visibility timeout): this copy must come back later, in case that worker dies."""


@dataclass
class _Slot:
    engine: Engine
    started: float
    heartbeat: asyncio.Task[None]
    used: float
    busy: int = 0


class Runner:
    """Runs queued documents (by task id) on one event loop in a background thread; see the module docstring.

    ``run(task_id)`` blocks the calling thread until the document is finished (a Celery task thread);
    ``submit(task_id)`` returns a future (``extract serve`` without a broker). ``close()`` records the
    worker runs as finished.
    """

    def __init__(self, store: Store, *, concurrency: int, max_deliveries: int = DEFAULT_MAX_DELIVERIES,
                 fleet: Fleet | None = None, command: str = "extract worker", endpoints: Endpoints | None = None,
                 observer: TaskObserver | None = None, idle_s: float = IDLE_CLOSE_S) -> None:
        self.store = store
        self.observer = observer
        self.endpoints = endpoints or load_endpoints()
        self.concurrency = concurrency
        self.max_deliveries = max_deliveries
        self.command = command
        self.fleet = fleet or Alone()
        self.idle_s = idle_s
        self._slots: dict[str, _Slot] = {}  # the engine each conversion takes new documents on
        self._open: set[Engine] = set()  # every engine started and not yet closed (``engines``)
        self._closing: set[asyncio.Task[None]] = set()
        self._budgets: OrderedDict[str, Budget] = OrderedDict()
        self._janitor: asyncio.Task[None] | None = None
        self._warmed: set[ContractRef] = set()
        self._warming: set[asyncio.Task[bool]] = set()
        self._scratch = Path(tempfile.mkdtemp(prefix="extract-worker-"))
        self.loop = asyncio.new_event_loop()
        self._creating = asyncio.Lock()  # bound to self.loop on first use
        self._in_flight = asyncio.Semaphore(concurrency)  # submit() may hand over any number of tasks at once
        self._thread = threading.Thread(target=self.loop.run_forever, name="extract-loop", daemon=True)
        self._thread.start()

    def warm_up(self) -> Future[None]:
        """Prepare, before any batch comes, what every configuration needs: the model client's modules, the
        CPU pool's processes with their modules and the default contract (``offload.warm_up``). A batch that
        arrives meanwhile waits for what it needs of it, no longer than it would have without it."""
        return asyncio.run_coroutine_threadsafe(self._warm_up(), self.loop)

    async def _warm_up(self) -> None:
        from extractor.contracts import get_contract

        started = time.monotonic()
        await asyncio.to_thread(import_module, "extractor.providers.openai_compat")
        if await self._warm_contract(get_contract(DEFAULT_CONTRACT)):
            log.info("worker ready in %.1f s", time.monotonic() - started)

    async def _warm_contract(self, contract: Contract) -> bool:
        """The worker processes' validation of ``contract`` made ready, once per contract in this process; False
        (and a warning) if that failed: not fatal, the first documents then do it themselves, and say what is
        wrong with their outcome."""
        if contract.ref in self._warmed:
            return True
        self._warmed.add(contract.ref)
        try:
            await offload.warm_up(contract)
        except Exception as error:  # noqa: BLE001 - see above
            log.warning("could not prepare the CPU pool for contract %s: %s: %s", contract.name,
                        type(error).__name__, error)
            return False
        return True

    def run(self, task_id: str) -> TaskInfo | None:
        """Convert the task's document now (blocking); None when this delivery had nothing to do.

        Raises ``StillRunning`` for a duplicate delivery of a task a live worker holds."""
        return self.submit(task_id).result()

    def submit(self, task_id: str) -> Future[TaskInfo | None]:
        return asyncio.run_coroutine_threadsafe(self.handle(task_id), self.loop)

    def close(self) -> None:
        """Record every worker run as finished, stop the loop and the CPU pool."""
        if not self.loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        offload.POOL.close()  # its processes, before the interpreter's exit waits for them
        shutil.rmtree(self._scratch, ignore_errors=True)

    async def _close(self) -> None:
        if self._janitor is not None:
            self._janitor.cancel()
        await asyncio.gather(*self._closing)  # what the janitor was closing is closed whole, its run recorded
        slots, self._slots = list(self._slots.values()), {}
        for slot in slots:
            await self._close_slot(slot)

    async def _close_slot(self, slot: _Slot) -> None:
        """Record the slot's worker run as ended and close its engine; only then is it no longer counted open."""
        slot.heartbeat.cancel()
        try:
            await slot.engine.close(await asyncio.to_thread(self._summary, slot.engine.run_id), slot.started)
        finally:
            self._open.discard(slot.engine)

    @property
    def engines(self) -> int:
        """Engines (worker runs, each with its model client) open now: one being closed counts until its run is
        recorded as ended, so ``engines == 0`` means every worker run of this runner is."""
        return len(self._open)

    async def _close_idle(self) -> None:
        """Every so often, close the engines no document used for ``idle_s`` seconds. Each close is a task of its
        own that ``close()`` waits for: cancelling the janitor never leaves a worker run half closed."""
        while True:
            await asyncio.sleep(max(0.05, min(self.idle_s / 2, 30.0)))
            async with self._creating:
                now = time.monotonic()
                idle = [key for key, slot in self._slots.items() if not slot.busy and now - slot.used > self.idle_s]
                closing = [asyncio.create_task(self._close_slot(self._slots.pop(key))) for key in idle]
                self._closing.update(closing)
            for task in closing:
                task.add_done_callback(self._closing.discard)
            await asyncio.shield(asyncio.gather(*closing))

    def _summary(self, run_id: str) -> RunSummary:
        """A worker run's documents as the run log has them, so the run ends with their outcome (with none, every
        worker run ended NOT_EVALUABLE whatever its documents did)."""
        summary = RunSummary(run_id)
        summary.outcomes = [DocumentOutcome(found.path, Outcome(found.state), found.cause)
                            for found in self.store.document_runs_for(run_id) if found.state in FINAL_STATES]
        return summary

    async def handle(self, task_id: str) -> TaskInfo | None:
        """One delivery of a task: start it (or find there is nothing to do), convert, record the outcome.

        At most ``concurrency`` at once: the rest wait here, before reading anything."""
        async with self._in_flight:
            return await self._handle(task_id)

    async def _handle(self, task_id: str) -> TaskInfo | None:
        db = self.store.engine
        task = await asyncio.to_thread(tasks.get_task, db, task_id)
        if task is None:
            log.warning("task %s is not in the run log at %s (a worker on another database?)", task_id, self.store.url)
            return None
        if task.outcome is not None:
            return task
        try:
            stored = await asyncio.to_thread(tasks.batch_settings, db, task.batch_id)
            settings = BatchSettings.from_json(stored or {})
            slot = await self._engine(settings, task.batch_id)
            if await self._redoes_own(slot.engine, task, settings):  # a worker run converts a document once
                slot = await self._engine(settings, task.batch_id, retire=slot)
        except Exception as error:  # noqa: BLE001 - a batch this worker cannot run ends ERROR, with the reason
            why = str(error) if isinstance(error, ExtractorError) else f"{type(error).__name__}: {error}"
            refused = f"{task.name}: this worker cannot run the batch's settings: {why}"
            await self._finished_unread(task_id, Outcome.ERROR, refused)
            return await asyncio.to_thread(tasks.get_task, db, task_id)
        try:
            return await self._deliver(slot.engine, task, settings)
        finally:
            slot.busy -= 1
            slot.used = time.monotonic()

    async def _deliver(self, engine: Engine, task: TaskInfo, settings: BatchSettings) -> TaskInfo | None:
        """One delivery of ``task`` on ``engine``, with what its batch brings (``Scope``)."""
        db, task_id = self.store.engine, task.id
        try:
            scope = Scope.of(settings, await self._budget(engine, task.batch_id, settings))
            stopped = "" if scope.money is None else await scope.money.stopped()
        except ValueError as error:  # the price of a model of the batch is unknown here
            await self._finished_unread(task_id, Outcome.ERROR, f"{task.name}: {error}")
            return await asyncio.to_thread(tasks.get_task, db, task_id)
        if stopped:  # the batch's budget is spent: its documents wait for a rerun, unread
            await self._finished_unread(task_id, Outcome.INTERRUPTED, f"{task.name}: {stopped}; rerun to resume")
            return await asyncio.to_thread(tasks.get_task, db, task_id)
        delivery = await asyncio.to_thread(tasks.start_delivery, db, task_id, engine.run_id,
                                           stale_after_s=self.store.stale_after_s)
        if delivery.decision == "duplicate":
            raise StillRunning(task_id)
        if delivery.decision != "start":
            return None
        started = time.monotonic()
        if self.observer is not None and delivery.deliveries == 1:  # its wait for a worker, not a redelivery's
            self.observer.task_started((utcnow() - task.enqueued_at).total_seconds())
        if delivery.deliveries > 1:  # a worker died holding it: record its run as crashed now, not at its next start
            await engine.recorder.call(self.store.reap_dead_runs)
        result = DocumentOutcome(task.name, Outcome.ERROR, f"{task.name}: the worker failed on it")
        try:
            if delivery.deliveries > self.max_deliveries:
                result = await asyncio.to_thread(self._give_up, engine, task, delivery.deliveries - 1)
            else:
                result = await self._convert(engine, task, scope)
            if result.skip == SkipReason.done:
                result = await asyncio.to_thread(self._finished_before, engine, task, result)
        finally:  # whatever happened, the task does not stay "started" under a live worker
            first = await asyncio.to_thread(tasks.finish_task, db, task_id, result.state, result.cause,
                                            result.document_run_id, result.tokens, result.rule_ids)
            if first and self.observer is not None:
                self.observer.task_finished(result.state, time.monotonic() - started)
        return await asyncio.to_thread(tasks.get_task, db, task_id)

    async def _finished_unread(self, task_id: str, outcome: Outcome, cause: str) -> None:
        """The task ends without being converted (its settings refused, its budget spent)."""
        first = await asyncio.to_thread(tasks.finish_task, self.store.engine, task_id, outcome, cause, None)
        if first and self.observer is not None:
            self.observer.task_finished(outcome, None)

    async def _redoes_own(self, engine: Engine, task: TaskInfo, settings: BatchSettings) -> bool:
        """Whether the task redoes a document this engine's run left unfinished (INTERRUPTED: its batch's budget
        stopped) or finished in a state its batch takes over (``force``, ``retry_errors``): a run holds one
        document run per document, so the redo needs an engine (a worker run) of its own."""
        from extractor.segment import SEGMENTER_ID

        state = await asyncio.to_thread(tasks.state_in_run, self.store.engine, engine.run_id, task.sha256, SEGMENTER_ID)
        return state == DocumentState.INTERRUPTED or state in settings.retry_states

    async def _engine(self, settings: BatchSettings, batch_id: str, retire: _Slot | None = None) -> _Slot:
        """The engine (worker run) for this conversion, started on first use, marked busy for the caller;
        ``retire``: that engine takes no new document (it is closed once idle) and a new one is started."""
        async with self._creating:
            if self._janitor is None:
                self._janitor = asyncio.create_task(self._close_idle())
            key = settings.key()
            if retire is not None:
                retire.busy -= 1
                if self._slots.get(key) is retire:
                    self._slots[f"{key}#{id(retire)}"] = self._slots.pop(key)
            slot = self._slots.get(key)
            if slot is None:
                engine = self._new_engine(settings, batch_id)
                self._open.add(engine)  # counted before its run is recorded as running
                try:
                    await engine.start()
                except BaseException:
                    self._open.discard(engine)
                    raise
                # a contract of its own is made ready in the worker processes while the first calls wait for the model
                warming = asyncio.create_task(self._warm_contract(engine.settings.contract))
                self._warming.add(warming)
                warming.add_done_callback(self._warming.discard)
                now = time.monotonic()
                slot = _Slot(engine, now, asyncio.create_task(self._heartbeat(engine)), now)
                self._slots[key] = slot
            slot.busy += 1
            return slot

    def _new_engine(self, settings: BatchSettings, batch_id: str) -> Engine:
        """An engine for ``settings``: the model server (and the judge's) as this worker's configuration has them."""
        server = settings.server(self.endpoints)  # this worker's URL and key of the batch's server
        limit = self.fleet.limit(self.concurrency, settings)
        run_settings = settings.run_settings(self.concurrency, self.command, server[0], batch_id)
        provider = settings.provider(limit, server)
        judge = None
        if settings.judge is not None:
            from extractor.judge.modes import build_judge
            from extractor.providers.openai_compat import NO_KEY_PLACEHOLDER

            judge_url, judge_key = settings.judge_server(self.endpoints)
            judge, notes = build_judge(run_settings.options, generator=provider, store=self.store,
                                       contract=run_settings.contract, base_url=judge_url,
                                       api_key=judge_key or NO_KEY_PLACEHOLDER)
            for note in notes:
                log.warning("batch %s: %s", batch_id, note)
        observer = None if self.observer is None else self.observer.for_endpoint(self._endpoint_name(settings, server))
        return Engine(self.store, provider, run_settings, limit=limit, observer=observer, judge=judge)

    def _endpoint_name(self, settings: BatchSettings, server: tuple[str | None, str | None]) -> str:
        """The endpoint's name the model calls are counted under: the batch's, else the one configured at its URL;
        "" for a URL none names, "local" for a model in the process (a URL is never a label: it may hold a key)."""
        if settings.endpoint is not None:
            return settings.endpoint
        url = server[0]
        if url is None:
            return "local"
        configured = self.endpoints.at_url(url)
        return "" if configured is None else configured.name

    async def _budget(self, engine: Engine, batch_id: str, settings: BatchSettings) -> Budget | None:
        """The batch's budget (``max_cost``), priced at this engine's models; ``ValueError`` for an unknown price."""
        if settings.max_cost is None:
            return None
        found = self._budgets.pop(batch_id, None)
        if found is None:
            judge = engine.judge.provider if engine.judge is not None else None
            found = self.fleet.budget(batch_id, settings.max_cost, prices_for(engine.provider, judge))
        self._budgets[batch_id] = found
        while len(self._budgets) > BUDGETS_KEPT:
            self._budgets.popitem(last=False)
        return found

    async def _heartbeat(self, engine: Engine) -> None:
        """Keep this worker run alive in the run log, and mark runs of this machine whose process died as crashed."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            await engine.recorder.heartbeat()
            await engine.recorder.call(self.store.reap_dead_runs)

    async def _convert(self, engine: Engine, task: TaskInfo, scope: Scope) -> DocumentOutcome:
        """The document through the engine, from a scratch copy named like the upload (its suffix picks the reader)."""
        name, content = await asyncio.to_thread(tasks.upload_of, self.store.engine, task.id)
        folder = self._scratch / task.id
        path = folder / f"document{safe_suffix(name)}"
        try:
            await asyncio.to_thread(_write, path, content)
            result = await engine.process(path, name=name, scope=scope)
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)
        return replace(result, cause=result.cause.replace(str(path), name)) if result.cause else result

    def _finished_before(self, engine: Engine, task: TaskInfo, skipped: DocumentOutcome) -> DocumentOutcome:
        """The outcome of a document this configuration had finished when this delivery came: the final state
        and document run that exist, not "skipped". Either a worker died after writing the document's final
        state but before its task was marked (this task's earlier delivery did the work, and its tokens count),
        or the content was converted for another submission (its cause says where; no tokens spent here)."""
        finished = self.store.finished_run_of(engine.recorder.config_hash, task.sha256)
        found = self.store.find_document_runs(ids=[finished.document_run_id]) if finished is not None else []
        if not found:
            return skipped
        document_run = found[0]
        attempts = self.store.attempts_for(document_run.id)
        final = next((a for a in attempts if a.id == document_run.final_attempt_id), None)
        rule_ids = tuple(dict.fromkeys(f["rule_id"] for f in (final.findings if final is not None else []) or ()))
        if document_run.run_id == task.run_id:  # the earlier delivery of this very task converted it
            tokens = sum((a.prompt_tokens or 0) + (a.completion_tokens or 0) for a in attempts)
            return DocumentOutcome(task.name, Outcome(document_run.state), document_run.cause, rule_ids, tokens,
                                   document_run.id)
        converted = f"converted before: document run {document_run.id} of run {document_run.run_id}"
        cause = f"{document_run.cause} ({converted})" if document_run.cause else converted
        return DocumentOutcome(task.name, Outcome(document_run.state), cause, rule_ids, 0, document_run.id)

    def _give_up(self, engine: Engine, task: TaskInfo, deaths: int) -> DocumentOutcome:
        """A poison document: its workers died ``deaths`` times on it. It ends ERROR with that cause, through the
        claim protocol (taking over the dead worker's claim), without being converted again."""
        from extractor.segment import SEGMENTER_ID

        cause = (f"{task.name}: the worker processing it died {deaths} times (killed, crashed or out of memory); "
                 "not delivered again")
        document_id = tasks.document_with(self.store.engine, task.sha256, SEGMENTER_ID)
        if document_id is None:  # it never got as far as the run log (it killed the worker while being read)
            return DocumentOutcome(task.name, Outcome.ERROR, cause)
        claim = self.store.claim(engine.run_id, engine.recorder.config_hash, document_id, task.name, retry=())
        if claim.status == "claimed":
            self.store.finish_document(claim.document_run_id, DocumentState.ERROR, cause)
            return DocumentOutcome(task.name, Outcome.ERROR, cause, document_run_id=claim.document_run_id)
        if claim.status == "done":
            return DocumentOutcome(task.name, Outcome.SKIPPED, f"done before (document run {claim.ref})",
                                   document_run_id=claim.document_run_id, skip=SkipReason.done)
        return DocumentOutcome(task.name, Outcome.SKIPPED, f"busy: run {claim.ref} is processing it",
                               skip=SkipReason.busy, other_run=str(claim.ref))


def _write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
