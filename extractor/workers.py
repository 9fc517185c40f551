"""The run's CPU-heavy steps in worker processes: ingest + segment, and validation.

Segmentation (kss, pysbd) and validation (jsonschema, the rules) are pure Python. In the run's own
process they would hold the interpreter lock for milliseconds per document, stalling the event loop
(every model call in flight) and the run-log writer. Each step gets one worker process of its own, so a
slow document in one never holds up the other; they start on first use and are reused by every run of
the Python process. Each also takes the other's work while it has none of its own: answers come in bursts
(``_validator``), and files are read first by the validation worker whenever it is idle (``_reader``), so the
ingest worker keeps its time for what only it does, segmenting Korean with kss (a document with Hangul read by
the validation worker comes back unsegmented). ``EXTRACT_WORKER_PROCESSES=0`` runs both in threads of the run's
process instead.

A worker that dies (killed, out of memory) is replaced and the work tried once more; an ingest that
kills it twice reports the file as unusable, a validation falls back to the run's own process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.document import Document
from extractor.errors import InputError
from extractor.heap import settle_imports

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.contracts.registry import ContractRef
    from extractor.evidence.report import Report

log = logging.getLogger(__name__)

PROCESSES_ENV = "EXTRACT_WORKER_PROCESSES"
PASSED_ENV = ("EXTRACT_MAX_DOCUMENT_BYTES", "EXTRACT_OCR_LANG", "EXTRACT_OCR_CACHE")
"""Settings ingest reads from the environment, sent with every file: a worker started earlier must not
use stale values."""


def load_document(path: Path) -> Document:
    """Ingest and segment one file."""
    from extractor.ingest import load
    from extractor.segment import segment

    return segment(load(path))


def _load_measured(path: Path, environment: dict[str, str | None], korean: bool = True,
                   pages: Connection | None = None) -> tuple[Document, float]:
    """``load_document`` with the caller's settings, and the CPU seconds it took.

    ``korean=False`` (the validation worker reading): a document with Hangul comes back unsegmented (no
    ``segmenter``), since kss would have to be imported into this process (seconds, 340 MB); the ingest worker,
    which has it, segments it (``_segment_measured``). ``pages``: where to send ``(done, total)`` as each page of a
    scan is OCR'd (the run shows it).
    """
    from extractor.ingest import load
    from extractor.segment import needs_kss, segment

    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    started = time.thread_time()
    document = load(path, None if pages is None else lambda done, total: pages.send((done, total)))
    if korean or not needs_kss(document.text):
        segment(document)
    return document, time.thread_time() - started


def _segment_measured(document: Document) -> tuple[Document, float]:
    """A document read elsewhere, segmented, and the CPU seconds it took."""
    from extractor.segment import segment

    started = time.thread_time()
    return segment(document), time.thread_time() - started


def _validate_measured(raw: str, document: Document, contract: ContractRef) -> tuple[Report, float]:
    """The validator's report on one answer (the contract named, as this code defines it) and its CPU seconds."""
    from extractor.contracts.recorded import resolve
    from extractor.validate import validate

    started = time.thread_time()
    found = resolve(contract)
    report = validate(raw, document, found)
    return report, time.thread_time() - started


def _check_structure_measured(raw: str, contract: ContractRef) -> tuple[Report, float]:
    """The structure rules' report on one window's answer and its CPU seconds."""
    from extractor.contracts.recorded import resolve
    from extractor.validate import check_structure

    started = time.thread_time()
    return check_structure(raw, resolve(contract)), time.thread_time() - started


WARM_UP_TEXTS = ("Purchase request 7. The manager approved it on 3 May.", "작업 요청을 검토했습니다. 팀장이 승인했습니다.",
                 "Заявление на отпуск. Руководитель его одобрил.")
"""A few sentences in each language the segmenter splits differently (``warm_process``)."""


def warm_process(contract: ContractRef | None, korean: bool) -> float:
    """Read and segment a few sentences per language, and validate them against ``contract`` if given, so that the
    modules, the Korean splitter and the contract's compiled schema are ready before the first document needs
    them; the CPU seconds it took.

    An answer that fails the contract's schema is enough: every rule module is imported with the contract, the
    schema is compiled to find its faults, and the critical rules read its text. ``korean=False`` (the validation
    worker) leaves Korean out, as ``_load_measured`` does."""
    from extractor.ingest import from_text
    from extractor.segment import needs_kss, segment

    started = time.thread_time()
    documents = [segment(from_text(text)) for text in WARM_UP_TEXTS if korean or not needs_kss(text)]
    if contract is not None:
        from extractor.contracts.recorded import resolve
        from extractor.validate import validate

        found = resolve(contract)
        for document in documents:
            validate(json.dumps({"warmUp": document.text}), document, found)
    return time.thread_time() - started


def _step(function: Any, *args: Any) -> Any:
    """``function(*args)`` as a worker runs it: afterwards, what it imported is kept out of full collections
    (``extractor.heap``)."""
    try:
        return function(*args)
    finally:
        settle_imports()


def _start_worker(run: Connection) -> None:
    """Ctrl-C and SIGTERM reach the whole process group: the run stops its workers itself. A run killed
    outright (SIGKILL) cannot, so a worker leaves as soon as the run is gone instead of waiting for work forever.

    ``run`` is the reading end of a pipe whose writing end only the run holds (``_run_alive``): it reads end of
    file once the run is gone, however it ended, even before this worker got this far. The worker's parent is no
    sign: a worker forked by the fork server is its child, and the fork server outlives the run while workers live.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def watch() -> None:
        try:
            run.recv_bytes()  # nothing is ever sent: this returns (EOFError) when the run is gone
        except (EOFError, OSError):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


_ALIVE: tuple[Connection, Connection] | None = None
"""The pipe of ``_start_worker``: (reading end passed to each worker, writing end held open until the run exits)."""
PRELOAD = "extractor.preload"
"""What the fork server imports before it forks the workers (``_context``)."""


def _run_alive() -> Connection:
    global _ALIVE
    import multiprocessing

    if _ALIVE is None:
        _ALIVE = multiprocessing.Pipe(duplex=False)
    return _ALIVE[0]


def start_early() -> None:
    """Start the fork server now (``extract worker``, after its imports and before it opens anything or starts a
    thread): the worker processes are then forked as soon as the first document needs them, and the event loop that
    asks for them waits for nothing.

    The fork server is this very process, forked here: it has every module this process imported (the contracts,
    ingest, most of what the workers need) without importing them again, and imports the rest itself
    (``extractor.preload``). Forking is safe only while this process has no other thread; otherwise, or where the
    standard library's fork server is not the one this code knows, the fork server starts as a new interpreter and
    imports it all (about 0.6 s of CPU more, per ``extract worker``)."""
    if os.environ.get(PROCESSES_ENV, "1").strip() == "0" or _context().get_start_method() != "forkserver":
        return  # threads instead of worker processes, or no fork server on this platform
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver  # type: ignore[attr-defined]
    known = all(hasattr(server, name) for name in ("_lock", "_forkserver_pid", "_forkserver_address",
                                                       "_forkserver_alive_fd"))
    if threading.active_count() > 1 or not known or hasattr(server, "_forkserver_authkey"):
        forkserver.ensure_running()
        return
    with server._lock:
        if server._forkserver_pid is None:
            _fork_server(server)


def _fork_server(server: Any) -> None:
    """``multiprocessing.forkserver.ForkServer.ensure_running``, with ``os.fork`` where it starts a new interpreter."""
    import socket
    from multiprocessing import connection, forkserver, resource_tracker

    resource_tracker.ensure_running()
    with socket.socket(socket.AF_UNIX) as listener:
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the fork server: it leaves when this process and the workers it forked are gone
            try:
                os.close(alive_w)
                if _ALIVE is not None:  # only the run may hold the pipe its workers watch
                    _ALIVE[1].close()
                forkserver.main(listener.fileno(), alive_r, [PRELOAD])  # type: ignore[attr-defined]
            finally:
                os._exit(0)
        os.close(alive_r)
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid


def _context() -> Any:
    """How worker processes start: forked by a fork server that has imported what they need (``extractor.preload``),
    so the two of them pay for those imports once between them, not once each (about 0.4 s of CPU; an
    ``extract worker`` and ``extract run --queue`` start on shared cores); spawn where there is no fork server.
    Never a plain fork: a worker must not inherit the run's threads, locks or database connections."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD])  # read when the fork server starts (the first worker)
    return context


class _Worker:
    """One lazily started worker process (or thread), replaced if it dies."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._executor: Executor | None = None
        self._in_thread = False  # set when no worker process can be started on this machine
        self.pending = 0  # calls submitted and not yet answered

    def free(self, *, start: bool = False) -> bool:
        """A worker process with nothing to do, free to take another step's work: one started already, or with
        ``start`` one this call may start (it would start for its own work soon anyway)."""
        if self.pending or self._in_thread or os.environ.get(PROCESSES_ENV, "1").strip() == "0":
            return False
        return isinstance(self._executor, ProcessPoolExecutor) or (start and self._executor is None)

    def executor(self) -> Executor:
        with self._lock:
            if self._executor is None:
                raw = os.environ.get(PROCESSES_ENV, "1").strip()
                if raw == "0" or self._in_thread:
                    self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
                else:
                    self._executor = ProcessPoolExecutor(max_workers=1, initializer=_start_worker,
                                                         initargs=(_run_alive(),), mp_context=_context())
            return self._executor

    async def call(self, function: Any, *args: Any) -> Any:
        """``function(*args)`` in the worker; ``BrokenProcessPool`` after the worker died on it twice."""
        with self._lock:
            self.pending += 1
        try:
            return await self._call(function, *args)
        finally:
            with self._lock:
                self.pending -= 1
            _wake_readers()

    async def _call(self, function: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        for attempt in (1, 2):
            executor = self.executor()
            try:
                future = loop.run_in_executor(executor, _step, function, *args)
            except OSError as error:  # no process could be started (no /dev/shm, a process limit): use a thread
                log.warning("%s worker process cannot start (%s); working in a thread instead", self.name, error)
                self._in_thread = True
                self._replace(executor)
                future = loop.run_in_executor(self.executor(), _step, function, *args)
            try:
                return await future
            except BrokenProcessPool:
                self._replace(executor)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _replace(self, broken: Executor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None
        broken.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


_INGEST = _Worker("ingest")
_VALIDATION = _Worker("validate")
READ_AHEAD = 2
"""Files handed to the ingest worker at once while the validation worker is busy (one read, one waiting); the
others wait in the run for whichever worker frees first."""
_READERS_WAITING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, deque[asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary())
_READERS_LOCK = threading.Lock()  # loops in other threads add themselves while a call finishing here reads them


def _wake_readers() -> None:
    """A worker finished a call, which frees at most one reader: the file that has waited longest for one
    (``_reader``) looks again, on every event loop of the process (a call finished on one loop may free the worker a
    file waits for on another).

    One file, not all of them: at the start of a batch at 64 calls in flight 125 files wait, and waking them all
    took 0.25 ms of the event loop per finished call (measured on an idle machine), about 150 times while the
    first wave was starting.
    """
    running = asyncio.get_running_loop()
    with _READERS_LOCK:
        waiting = list(_READERS_WAITING.items())
    for loop, queue in waiting:
        if loop is running:
            _wake_first(queue)
        else:
            try:
                loop.call_soon_threadsafe(_wake_first, queue)
            except RuntimeError:  # that loop has closed: nothing waits on it any more
                with _READERS_LOCK:
                    _READERS_WAITING.pop(loop, None)


def _wake_first(queue: deque[asyncio.Future[None]]) -> None:
    """Wake the first waiter still waiting (one cancelled meanwhile, by Ctrl-C, is passed over). Runs in the
    waiters' own loop, the only one that changes their queue."""
    while queue:
        waiter = queue.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


async def _reader() -> _Worker:
    """Who reads the next file: the validation worker when it has nothing to do, else the ingest worker while it
    has fewer than ``READ_AHEAD``, else whichever frees first (files are served in the order they came; one woken
    that finds the reader taken waits again at the front).

    The validation worker first: only the ingest worker can segment Korean (kss is imported there alone), so the
    ingest worker should not also read what the idle validation worker can. Measured at 64 calls in flight on the
    three samples, when kss took 13 µs per character (before ``extractor.segment.korean``): the 64th call of a
    batch started 0.34-0.40 s into the run instead of 0.40-0.52 s, and four runs reached 94.8-95.3% of the ideal
    (92.8-94.8% before).
    """
    loop = asyncio.get_running_loop()
    woken = False
    while True:
        if _VALIDATION.free(start=True):
            return _VALIDATION
        if _INGEST.pending < READ_AHEAD:
            return _INGEST
        with _READERS_LOCK:
            queue = _READERS_WAITING.get(loop)
            if queue is None:
                queue = _READERS_WAITING[loop] = deque()
        waiter = loop.create_future()
        if woken:
            queue.appendleft(waiter)
        else:
            queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if not waiter.cancelled():  # woken, then cancelled before it could look: the next file looks instead
                _wake_first(queue)
            raise
        woken = True


PAGED_SUFFIXES = (".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff")
"""Files whose pages may be OCR'd: their reading reports each page (``prepare``'s ``on_page``)."""


async def prepare(path: Path, on_page: Callable[[int, int], None] | None = None,
                  ocr_lang: str | None = None) -> tuple[Document, float]:
    """Ingest and segment ``path``: ``(document, CPU seconds spent on it)``, in the validation worker while it is
    idle, which hands a document with Hangul back to the ingest worker unsegmented, else in the ingest worker
    (``_reader``). ``ocr_lang``: the run's OCR languages (else ``EXTRACT_OCR_LANG`` of this process).

    ``InputError`` comes back as raised; a file a worker dies on twice is reported as unusable.
    """
    environment = {name: os.environ.get(name) for name in PASSED_ENV}
    if ocr_lang:
        environment["EXTRACT_OCR_LANG"] = ocr_lang  # ingest reads it there (extractor.ingest.ocr)
    with _page_reports(path, on_page) as pages:
        return await _prepare(path, environment, pages)


async def _prepare(path: Path, environment: dict[str, str | None], pages: Connection | None) -> tuple[Document, float]:
    try:
        if await _reader() is not _VALIDATION:
            return await _INGEST.call(_load_measured, path, environment, True, pages)
        document, spent = await _VALIDATION.call(_load_measured, path, environment, False, pages)
        if document.segmenter:
            return document, spent
        segmented, seconds = await _INGEST.call(_segment_measured, document)
        return segmented, spent + seconds
    except BrokenProcessPool:
        raise InputError(str(path), "the worker process reading this file died (out of memory? "
                                    "a script that starts runs must guard them with if __name__ == '__main__')"
                         ) from None


@contextmanager
def _page_reports(path: Path, on_page: Callable[[int, int], None] | None) -> Iterator[Connection | None]:
    """A pipe the worker reading ``path`` sends each OCR'd page down, read by the event loop as pages arrive
    (nothing for a file without pages, or when nobody listens)."""
    if on_page is None or not str(path).lower().endswith(PAGED_SUFFIXES):
        yield None
        return
    import multiprocessing

    loop = asyncio.get_running_loop()
    receiver, sender = multiprocessing.Pipe(duplex=False)

    def relay() -> None:
        try:
            while receiver.poll():
                done, total = receiver.recv()
                on_page(done, total)
        except (EOFError, OSError, ValueError, TypeError):  # the worker is gone, or sent what is not a page report
            loop.remove_reader(receiver.fileno())

    loop.add_reader(receiver.fileno(), relay)
    try:
        yield sender
    finally:
        loop.remove_reader(receiver.fileno())
        if receiver.poll():  # reports sent just before the document came back
            relay()
        sender.close()
        receiver.close()


def _validator() -> _Worker:
    """The validation worker, or the ingest worker when it is idle and validations are waiting.

    Answers arrive in bursts (a wave of calls ends together; at the end of a batch nothing is left to read), and
    one process would validate them one after another while the ingest worker waits. (Reading goes the other way
    in ``_reader``, but never Korean segmentation: kss takes seconds to import and 340 MB.)
    """
    return _INGEST if _VALIDATION.pending and _INGEST.free() else _VALIDATION


async def validate(raw: str, document: Document, contract: Contract) -> tuple[Report, float]:
    """The validator's report on one model answer, computed in a worker process (``_validator``), and its CPU
    seconds."""
    try:
        return await _validator().call(_validate_measured, raw, document, contract.ref)
    except BrokenProcessPool:  # the answer is still judged, here: a verdict never goes missing
        from extractor.validate import validate as validate_here

        started = time.thread_time()
        return validate_here(raw, document, contract), time.thread_time() - started


async def check_structure(raw: str, contract: Contract) -> tuple[Report, float]:
    """The structure rules alone on one window's answer, in the validation worker (only the text travels)."""
    try:
        return await _validator().call(_check_structure_measured, raw, contract.ref)
    except BrokenProcessPool:
        from extractor.validate import check_structure as check_here

        started = time.thread_time()
        return check_here(raw, contract), time.thread_time() - started


async def warm_up(contract: Contract) -> float:
    """Start both worker processes and have each import and build what its work needs (``warm_process``), the contract's
    validation included: a long-lived process (``extract worker``) calls it before its first document arrives, so
    the first documents of a batch wait for none of it (docs/queue-and-api.md#how-it-behaves). The CPU seconds it took."""
    async def warm(worker: _Worker, korean: bool) -> float:
        reading = await worker.call(warm_process, None, korean)  # a file sent meanwhile is read before the validation's part
        return float(reading + await worker.call(warm_process, contract.ref, korean))

    return sum(await asyncio.gather(warm(_INGEST, True), warm(_VALIDATION, False)))


def shutdown() -> None:
    """Stop the workers (tests and benchmarks; a normal exit stops them by itself)."""
    _INGEST.shutdown()
    _VALIDATION.shutdown()
