"""The run's CPU pool (docs/design.md#glossary): files are read by sandboxed reader processes, the model's answers
are validated by a checker process.

**Readers.** Reading an untrusted file (ingest, OCR, segmentation) is where a hostile one does its harm: a zip member
that inflates to gigabytes, a PDF whose references loop, text that grows with the square of the input. The cheap
checks of ``extractor.ingest`` refuse what they recognise before any parse; what they miss is held by the limits
of the process that reads it (docs/formats.md#reading-limits), not by a guard per attack:

- memory: a reader's address space is capped (``RLIMIT_AS``: what it started with plus ``EXTRACT_READ_MEMORY``,
  default 1 GiB, which the Tesseract processes it starts inherit each); a reader out of memory exits with
  ``OUT_OF_MEMORY``;
- time: the run kills a reader still reading after ``EXTRACT_READ_TIMEOUT`` seconds (default 60) plus
  ``EXTRACT_READ_PAGE_TIMEOUT`` (default 30) for each page it OCRs;
- text: a document whose text is over ``EXTRACT_READ_TEXT`` characters (default 2,000,000) is refused before it
  is segmented or sent back.

Over a limit the file ends in one ``InputError`` line naming the limit; the reader is gone and a new one starts
when next needed. ``EXTRACT_READERS`` readers (default one per core) read at once, so a slow file holds one reader
and the others go on.

**The checker** checks the model's answers (jsonschema and the rules are pure Python: in the run's own process
they would hold the interpreter lock for milliseconds per answer, stalling every model call in flight). Answers
come in bursts, so a validation that finds the checker busy takes an idle reader instead. A checker that dies
is replaced; the answer is then checked in the run's own process, so a verdict never goes missing.

Every process starts from the standard library's fork server, which has imported what they need once
(``extractor.preload``); never a plain fork of the run, whose threads, locks and database connections a child must
not inherit. Ctrl-C and SIGTERM reach the whole process group: the pool's processes ignore them and the run stops
them itself (``CpuPool.close``, and at exit); a process whose run is gone, however it ended, leaves on its own.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import logging
import os
import re
import resource
import signal
import sys
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.document import Document
from extractor.errors import InputError

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.contracts.registry import ContractRef
    from extractor.evidence.report import Report

READERS_ENV = "EXTRACT_READERS"
MEMORY_ENV = "EXTRACT_READ_MEMORY"
TIMEOUT_ENV = "EXTRACT_READ_TIMEOUT"
PAGE_TIMEOUT_ENV = "EXTRACT_READ_PAGE_TIMEOUT"
TEXT_ENV = "EXTRACT_READ_TEXT"
SOFT_TIMEOUT_ENV = "EXTRACT_READ_SOFT_TIMEOUT"
DEFAULT_MEMORY = 1 << 30
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_PAGE_TIMEOUT_S = 30.0
DEFAULT_TEXT_CHARS = 2_000_000
DEFAULT_SOFT_TIMEOUT_S = 5.0
PASSED_ENV = ("EXTRACT_MAX_DOCUMENT_BYTES", "EXTRACT_OCR_LANG", "EXTRACT_OCR_CACHE", TEXT_ENV)
"""Settings a reader reads from the environment, sent with every file: a reader started earlier must not use stale
values."""
OUT_OF_MEMORY = 86
"""The exit status of a pool process that ran out of memory (``MemoryError``): its reading limit."""
PARENT_CHECK_S = 0.5
"""How often a pool process looks whether its run is still there."""
PR_SET_NAME = 15
LOW_PRIORITY = 19
"""The nice value of a reader past the soft deadline: it gets the cores other readers leave."""
PRELOAD = "extractor.preload"
"""What the fork server imports before it forks the pool's processes (``_context``)."""
_SIZE = re.compile(r"(\d+)\s*([KMG]?)(?:i?B)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class Limits:
    """What one reader may spend on one file (docs/formats.md#reading-limits)."""

    memory: int = DEFAULT_MEMORY
    timeout_s: float = DEFAULT_TIMEOUT_S
    page_timeout_s: float = DEFAULT_PAGE_TIMEOUT_S
    text_chars: int = DEFAULT_TEXT_CHARS
    soft_timeout_s: float = DEFAULT_SOFT_TIMEOUT_S

    @staticmethod
    def from_environment() -> Limits:
        """The limits the environment sets; ``ValueError`` (one line naming the variable) for a value that is not
        one."""
        return Limits(memory=_size(MEMORY_ENV, DEFAULT_MEMORY), timeout_s=_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S),
                      page_timeout_s=_seconds(PAGE_TIMEOUT_ENV, DEFAULT_PAGE_TIMEOUT_S),
                      text_chars=_count(TEXT_ENV, DEFAULT_TEXT_CHARS),
                      soft_timeout_s=_seconds(SOFT_TIMEOUT_ENV, DEFAULT_SOFT_TIMEOUT_S))

    def deadline_s(self, pages: int) -> float:
        """Seconds a reader may take on a file that OCRs ``pages`` pages."""
        return self.timeout_s + self.page_timeout_s * pages


def _size(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    found = _SIZE.fullmatch(raw)
    if found is None or int(found.group(1)) == 0:
        raise ValueError(f"{name} must be a size such as 1G, 512M or a number of bytes, not {raw!r}")
    return int(found.group(1)) * _UNITS[found.group(2).upper()]


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, not {raw!r}")
    return value


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip().replace("_", "").replace(",", "")
    if not raw:
        return default
    if not raw.isdigit() or int(raw) == 0:
        raise ValueError(f"{name} must be a positive whole number, not {os.environ[name]!r}")
    return int(raw)


def readers() -> int:
    """How many files are read at once: ``EXTRACT_READERS``, else one per core."""
    raw = os.environ.get(READERS_ENV, "").strip()
    if not raw:
        return os.cpu_count() or 1
    if not raw.isdigit() or int(raw) == 0:
        raise ValueError(f"{READERS_ENV} must be a positive whole number, not {raw!r}")
    return int(raw)


Attachments = tuple[tuple[str, bytes], ...]
"""What a reader took from one e-mail: its attachments of supported types (at most ingest's limit of one e-mail,
``extractor.ingest.eml``), each as its document's path (``mail.eml#attachment2/order.pdf``) and its bytes."""


def memory_label(size: int) -> str:
    """``1 GiB``, ``512 MiB``, ``1500000 bytes``: a memory limit as a person reads it."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


# -- what the pool's processes run ---------------------------------------------------------------------------------


def read_here(path: Path) -> Document:
    """Ingest and segment one file in this process, without the sandbox (tests and tools compare with it)."""
    from extractor.ingest import load
    from extractor.segment import segment

    return segment(load(path))


def _use(environment: dict[str, str | None]) -> None:
    """In a pool process: the caller's settings (``PASSED_ENV``) as this process's environment."""
    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _read(path: Path, environment: dict[str, str | None], data: bytes | None = None) -> tuple[Document, float]:
    """Run in a reader: ``path`` ingested and segmented with the caller's settings, and the CPU seconds it took;
    ``data``: the bytes of the document ``path`` names (an e-mail's attachment, as a reader took them from the
    e-mail; an upload), read as a file of that name.

    The text cap is checked between ingest and segmentation: a text over it is neither split nor sent back."""
    from extractor.ingest import load, load_bytes
    from extractor.segment import segment

    _use(environment)
    started = time.thread_time()
    try:
        cap = _count(TEXT_ENV, DEFAULT_TEXT_CHARS)
    except ValueError as error:
        raise InputError(str(path), str(error)) from None
    document = load(path, _report_page) if data is None else load_bytes(str(path), data, _report_page)
    if len(document.text) > cap:
        raise InputError(str(path), f"text over {cap:,} characters (the reading limit {TEXT_ENV}); refused")
    return segment(document), time.thread_time() - started


def _attachments(mail: str, data: bytes | None, environment: dict[str, str | None]) -> Attachments:
    """Run in a reader: the attachments of supported types of the e-mail ``mail`` (its bytes ``data``, else the
    file), parsed once. An e-mail that cannot be read has none here: reading it says why. ``InputError`` for an
    attachment whose bytes cannot be decoded (its headers cannot be read): the e-mail is readable without them, and
    its outcome must say that they are missing."""
    from extractor.ingest import FORMATS, max_document_bytes
    from extractor.ingest.eml import attachment_path, attachments

    _use(environment)
    try:
        if data is None:
            if os.stat(mail).st_size > max_document_bytes():
                return ()
            data = Path(mail).read_bytes()
        found = attachments(data, mail)
    except (OSError, ValueError, InputError):
        return ()
    return tuple((attachment_path(mail, a), a.payload) for a in found
                 if FORMATS.get(Path(a.name).suffix.lower(), "blocks") != "blocks")


def _validate(raw: str, document: Document, contract: ContractRef) -> tuple[Report, float]:
    """Run in the checker: its report on one answer (the contract named, as this code defines it), CPU seconds."""
    from extractor.contracts.recorded import resolve
    from extractor.validate import validate

    started = time.thread_time()
    report = validate(raw, document, resolve(contract))
    return report, time.thread_time() - started


def _check_structure(raw: str, contract: ContractRef) -> tuple[Report, float]:
    """Run in the checker: the structure rules' report on one window's answer and its CPU seconds."""
    from extractor.contracts.recorded import resolve
    from extractor.validate import check_structure

    started = time.thread_time()
    return check_structure(raw, resolve(contract)), time.thread_time() - started


WARM_UP_TEXTS = ("Purchase request 7. The manager approved it on 3 May.", "작업 요청을 검토했습니다. 팀장이 승인했습니다.",
                 "Заявление на отпуск. Руководитель его одобрил.")
"""A few sentences in each language the segmenter splits differently (``warm_process``)."""


def warm_process(contract: ContractRef | None) -> float:
    """Read and segment a few sentences per language, and validate them against ``contract`` if given, so that the
    modules, the Korean splitter and the contract's compiled schema are ready before the first document needs
    them; the CPU seconds it took.

    An answer that fails the contract's schema is enough: every rule module is imported with the contract, the
    schema is compiled to find its faults, and the critical rules read its text."""
    from extractor.ingest import from_text
    from extractor.segment import segment

    started = time.thread_time()
    documents = [segment(from_text(text)) for text in WARM_UP_TEXTS]
    if contract is not None:
        from extractor.contracts.recorded import resolve
        from extractor.validate import validate

        found = resolve(contract)
        for document in documents:
            validate(json.dumps({"warmUp": document.text}), document, found)
    return time.thread_time() - started


_CONNECTION: Connection | None = None
"""In a pool process: its end of the pipe to the run (``_report_page`` sends down it)."""


def _report_page(done: int, total: int) -> None:
    """In a reader: tell the run a page of a scan was OCR'd (it shows it, and allows the page its time)."""
    if _CONNECTION is not None:
        _CONNECTION.send(("page", done, total))


def _serve(connection: Connection, memory: int | None, role: str) -> None:
    """A pool process (``extract-reader`` or ``extract-checker`` in ``ps`` and ``top``): take ``(function, args)``
    from the run, answer ``("ok", result)`` or ``("error", exception)``, until the run closes the pipe. Out of memory
    (``MemoryError``, also as the cause of another error) it exits with ``OUT_OF_MEMORY`` at once: what it holds may
    be half built, and the run reports the limit."""
    global _CONNECTION
    _name_process(f"extract-{role}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_leave_with_the_run, args=(os.getppid(),), name="run-watch", daemon=True).start()
    limit = None if memory is None else _vm("VmSize:") + memory
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _CONNECTION = connection
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        except MemoryError:
            os._exit(OUT_OF_MEMORY)
        try:
            answer: tuple[str, Any] = ("ok", function(*args))
        except BaseException as error:  # noqa: BLE001 - every failure goes back to the run, which decides
            if _out_of_memory(error) or (not isinstance(error, InputError) and _reached(limit)):
                os._exit(OUT_OF_MEMORY)
            answer = ("error", error)
        try:
            connection.send(answer)
        except MemoryError:
            os._exit(OUT_OF_MEMORY)
        except Exception as error:  # noqa: BLE001 - an exception that cannot be pickled: its type and text
            connection.send(("error", RuntimeError(f"{type(error).__name__}: {error}")))


def _name_process(name: str) -> None:
    """The name ``ps``, ``top`` and the kernel's out-of-memory report show for this process (Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the process keeps the interpreter's name
        pass


def _leave_with_the_run(parent: int) -> None:
    """Leave once the process that started this one is gone, however it ended, even while busy reading: the run
    itself (a plain fork), or the fork server, which leaves as soon as the run is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error`` is, or was caused by, running out of memory (a reader may wrap it in its own error)."""
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, MemoryError):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def _reached(limit: int | None) -> bool:
    """Whether this process's address space came within 5% of its limit: C code whose allocation failed there may
    raise anything (lxml answered ``SystemError: error return without exception set``), and the failure is the
    limit's, not a bug to report as an internal error."""
    return limit is not None and _vm("VmPeak:") >= limit * 0.95


def _vm(field: str) -> int:
    """A size of this process's address space from ``/proc/self/status`` (``VmSize:`` now, ``VmPeak:`` its most), in
    bytes; 0 where the system does not say. A reader may use ``EXTRACT_READ_MEMORY`` on top of what it started with:
    a plain fork of a process that has run threads inherits its address space (glibc keeps an arena of 64 MiB
    reserved per thread that allocated), which alone passed 1 GiB, and every file then read as over the limit."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return next((int(line.split()[1]) << 10 for line in status if line.startswith(field)), 0)
    except (OSError, ValueError, IndexError):
        return 0


# -- one process of the pool, as the run sees it -------------------------------------------------------------------


class Gone(Exception):
    """A pool process ended before it answered; ``str`` says why, as the end of a file's error line."""


def _context(alone: bool = False) -> Any:
    """How a pool process starts: from the fork server, which has imported what it needs once
    (``extractor.preload``; public API only, ``set_forkserver_preload`` is read when the fork server starts);
    spawn where there is none. ``alone``: one process for a command that reads one file, a plain fork of this
    process while it has no other thread (a fork server would cost a new interpreter and its imports)."""
    import multiprocessing

    if alone and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD])
    return context


@contextmanager
def _main_left_alone() -> Iterator[None]:
    """While a pool process starts, multiprocessing sees no main module: it would have the process run the program's
    own script again first (``python script.py``, ``python -m module``), as it does for its targets defined there. A
    pool process runs only this module's functions, so a script calling the Python API needs no ``if __name__ ==
    "__main__"`` guard (without one, each reader would run the whole script again, model calls and all)."""
    main = sys.modules.get("__main__")
    if main is None or (getattr(main, "__file__", None) is None and getattr(main, "__spec__", None) is None):
        yield
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class Child:
    """One process of the pool (``role``: ``reader`` or ``checker``), started on first use; ``alone``: see
    ``_context``."""

    def __init__(self, role: str, memory: int | None, *, alone: bool = False) -> None:
        self.role = role
        self.memory = memory
        self.alone = alone
        self._process: Any = None
        self._connection: Connection | None = None
        self._starting = threading.Lock()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def start(self) -> None:
        """Start the process unless it runs (from any thread: ``CpuPool.start`` starts them early)."""
        with self._starting:
            if self._process is None:
                self._start()

    def _start(self) -> None:
        context = _context(self.alone)
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(target=_serve, args=(theirs, self.memory, self.role), name=f"extract-{self.role}", daemon=True)
        with _main_left_alone():
            process.start()
        theirs.close()
        self._process, self._connection = process, ours

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], limits: Limits | None = None,
             on_page: Callable[[int, int], None] | None = None, on_late: Callable[[], None] | None = None) -> Any:
        """``function(*args)`` in this process (started now if it is not): its result, or the exception it raised.

        ``limits``: the process is killed once the deadline passes (the base time, and the pages' time as the
        reader reports them), and ``on_late()`` is called once the soft deadline passes. ``Gone`` when the
        process ended first (``kill``, its memory, a crash), saying why; the next call starts another.
        """
        self.start()
        assert self._connection is not None
        connection, process = self._connection, self._process
        started = time.monotonic()
        pages = 0
        late = None if limits is None or on_late is None else started + limits.soft_timeout_s
        try:
            connection.send((function, args))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise self._ended(None) from None
        while True:
            deadline = None if limits is None else started + limits.deadline_s(pages)
            until = deadline if late is None or deadline is None else min(late, deadline)
            ready = wait([connection, process.sentinel], None if until is None else max(0.0, until - time.monotonic()))
            if not ready:
                now = time.monotonic()
                if late is not None and now >= late and on_late is not None:
                    late = None
                    on_late()
                elif limits is not None and deadline is not None and now >= deadline:
                    raise self._ended(f"still reading after {limits.deadline_s(pages):g} s (the reading limit "
                                      f"{TIMEOUT_ENV}" + (f", and {limits.page_timeout_s:g} s per OCR page" if pages
                                                          else "") + ")")
                continue
            try:
                if connection not in ready and not connection.poll():
                    raise EOFError
                message = connection.recv()
            except (EOFError, OSError):
                raise self._ended(None) from None
            if message[0] == "page":
                pages = max(pages, int(message[2]))
                if on_page is not None:
                    on_page(int(message[1]), int(message[2]))
                continue
            if message[0] == "error":
                raise message[1]
            return message[1]

    def _ended(self, overdue: str | None) -> Gone:
        """Stop the process and say why it ended: ``overdue`` when it is stopped for its time, else its exit
        (its memory limit, a signal)."""
        process = self._process
        self.stop(grace_s=0 if overdue else 5)
        if overdue is not None:
            return Gone(overdue)
        code = process.exitcode
        if code == OUT_OF_MEMORY:
            return Gone(f"over the {memory_label(self.memory or 0)} reading limit ({MEMORY_ENV})")
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (out of memory, or stopped)" if code == -signal.SIGKILL else ""
            return Gone(f"the {self.role} process was killed by {name}{hint}")
        return Gone(f"the {self.role} process ended (exit status {code})")

    def lower_priority(self) -> None:
        """The process, and those it started, at the lowest CPU priority (nice 19, every thread; Linux)."""
        process = self._process
        if process is None:
            return
        for pid in [int(process.pid), *_descendants(int(process.pid))]:
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:
                threads = [str(pid)]
            for thread in threads:
                try:
                    os.setpriority(os.PRIO_PROCESS, int(thread), LOW_PRIORITY)
                except OSError:  # ended meanwhile
                    pass

    def kill(self) -> None:
        """End the process now, from any thread: a call waiting on it returns ``Gone`` and stops it."""
        process = self._process
        if process is not None:
            _kill_tree(process)

    def stop(self, *, grace_s: float = 0) -> None:
        """End the process (after ``grace_s`` to end by itself: nothing it holds is worth keeping) and forget it."""
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if process is None:
            return
        process.join(grace_s)
        if process.exitcode is None:
            _kill_tree(process)
            process.join(5)
        if connection is not None:
            connection.close()


def _kill_tree(process: Any) -> None:
    """Kill ``process`` and the processes it started (a reader's Tesseract processes, which would go on reading
    after it: their parent gone, nothing waits for their time limit)."""
    below = _descendants(int(process.pid))
    process.kill()
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # ended meanwhile
            pass


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux's ``/proc/PID/task/TID/children``; none where there is no such file)."""
    found: list[int] = []
    parents = [pid]
    while parents:
        parent = parents.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{parent}/task/{thread}/children") as listed:
                    children = [int(child) for child in listed.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            parents += children
    return found


def _relay(loop: asyncio.AbstractEventLoop, on_page: Callable[[int, int], None]) -> Callable[[int, int], None]:
    """``on_page`` called on ``loop`` from the thread waiting on a reader (nothing once that loop has closed)."""
    def relay(done: int, total: int) -> None:
        try:
            loop.call_soon_threadsafe(on_page, done, total)
        except RuntimeError:  # the loop has closed: nobody is listening
            pass

    return relay


# -- the pool ------------------------------------------------------------------------------------------------------


READER = frozenset({"reader"})
EITHER = frozenset({"checker", "reader"})


def _passed() -> dict[str, str | None]:
    """The settings a reader takes from the caller's environment (``PASSED_ENV``)."""
    return {name: os.environ.get(name) for name in PASSED_ENV}


@dataclass(eq=False)
class _Waiter:
    roles: frozenset[str]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Child]


class CpuPool:
    """The readers and the checker of this process (module docstring), shared by every run and every event loop of
    the process: a file or an answer waits for a process that may take it, in the order they came.

    A reader still reading after the soft deadline (``EXTRACT_READ_SOFT_TIMEOUT``, 5 s) is probably on a file that
    will take long, or never end: it reads on at the lowest CPU priority, and one more reader starts for the files
    waiting behind it, up to as many extra readers as there are readers (so at most twice ``EXTRACT_READERS`` read
    at once, docs/formats.md#reading-limits); once its file is done, it leaves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: deque[Child] = deque()
        self._waiting: deque[_Waiter] = deque()
        self._children: list[Child] = []
        self._overdue: set[Child] = set()  # readers reading past the soft deadline
        self._threads: ThreadPoolExecutor | None = None
        self._size = 0

    def _ensure(self) -> None:
        """The processes, made (not started) on first use: ``EXTRACT_READERS`` readers, one checker."""
        with self._lock:
            if self._children:
                return
            memory = Limits.from_environment().memory
            self._size = readers()
            self._children = [Child("checker", None)] + [Child("reader", memory) for _ in range(self._size)]
            self._idle.extend(self._children)
            self._threads = ThreadPoolExecutor(max_workers=1 + 2 * self._size, thread_name_prefix="offload")

    def _allowed(self) -> int:
        """Readers there may be now: ``EXTRACT_READERS``, and one more for each reading past the soft deadline, up
        to twice as many. Called holding the lock."""
        return self._size + min(len(self._overdue), self._size)

    def _readers(self) -> int:
        return sum(child.role == "reader" for child in self._children)

    def _late(self, child: Child) -> None:
        """``child`` is still reading past the soft deadline (from its call's thread): it reads on at a lower
        priority, so the files behind it get the cores first, and a reader starts for them if one more is
        allowed."""
        with self._lock:
            if child not in self._children:  # the pool closed meanwhile
                return
            self._overdue.add(child)
            child.lower_priority()
            if self._readers() >= self._allowed():
                return
            extra = Child("reader", child.memory)
            self._children.append(extra)
        self._release(extra)

    def _done(self, child: Child) -> None:
        """``child`` finished its call: back in line, or stopped when it is a reader more than are allowed now. A
        reader that read past the soft deadline is replaced by a new one (started when next needed): it runs at
        the lower priority, and whatever the file made it hold is let go."""
        with self._lock:
            overdue = child in self._overdue
            self._overdue.discard(child)
            retire = child.role == "reader" and child in self._children and self._readers() > self._allowed()
            if retire:
                self._children.remove(child)
        if retire or overdue:
            child.stop()
        if not retire:
            self._release(child)

    def start(self, roles: frozenset[str] = EITHER) -> None:
        """Start every process of the pool now (of ``roles``: ``READER`` for a process that only reads), in the
        background: a long-lived process (``extract worker``) calls it first, so that the fork server imports what
        the pool needs while this process imports its own. ``ValueError`` for a reading limit that is not one."""
        self._ensure()
        threading.Thread(target=self._start_all, args=(roles,), name="offload-start", daemon=True).start()

    def _start_all(self, roles: frozenset[str]) -> None:
        with self._lock:
            children = [child for child in self._children if child.role in roles]
        for child in children:
            try:
                child.start()
            except Exception as error:  # noqa: BLE001 - the first call starts it again, and reports what fails
                logging.getLogger(__name__).warning("could not start the %s process: %s: %s", child.role,
                                                    type(error).__name__, error)
                return

    async def _acquire(self, roles: frozenset[str]) -> Child:
        self._ensure()
        loop = asyncio.get_running_loop()
        with self._lock:
            for child in self._idle:  # the checker is first in line for what it may take
                if child.role in roles:
                    self._idle.remove(child)
                    return child
            waiter = _Waiter(roles, loop, loop.create_future())
            self._waiting.append(waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())
            raise

    def _release(self, child: Child) -> None:
        """Hand ``child`` to the first waiter it may serve, on that waiter's loop, else put it back in line."""
        with self._lock:
            for waiter in self._waiting:
                if child.role in waiter.roles:
                    self._waiting.remove(waiter)
                    break
            else:
                if child.role == "checker":
                    self._idle.appendleft(child)
                else:
                    self._idle.append(child)
                return
        try:
            waiter.loop.call_soon_threadsafe(self._hand_over, waiter.future, child)
        except RuntimeError:  # that loop has closed: its waiter waits for nothing any more
            self._release(child)

    def _hand_over(self, future: asyncio.Future[Child], child: Child) -> None:
        if future.done():  # cancelled meanwhile (Ctrl-C): the next waiter gets it
            self._release(child)
        else:
            future.set_result(child)

    async def _call(self, roles: frozenset[str], function: Callable[..., Any], args: tuple[Any, ...],
                    limits: Limits | None = None, on_page: Callable[[int, int], None] | None = None) -> Any:
        """``function(*args)`` in the first free process of ``roles``. Cancelled meanwhile (the run stops), the
        process is stopped: its work is not wanted, and it would hold its slot until it finished."""
        child = await self._acquire(roles)
        loop = asyncio.get_running_loop()
        relay = None if on_page is None else _relay(loop, on_page)
        if limits is not None and child.memory != limits.memory:  # the limit changed since it started
            child.stop()
            child.memory = limits.memory
        late = None if limits is None or child.role != "reader" else functools.partial(self._late, child)
        working = loop.run_in_executor(self._threads, child.call, function, args, limits, relay, late)
        try:
            return await asyncio.shield(working)
        except asyncio.CancelledError:
            if not working.done():
                child.kill()  # its thread sees it end and stops it
            raise
        finally:
            if working.done():
                self._done(child)
            else:  # free for the next call once its thread is done with it
                working.add_done_callback(lambda done: self._abandoned(done, child))

    def _abandoned(self, done: asyncio.Future[Any], child: Child) -> None:
        """A call nobody waits for any more (the run stopped) has ended: its outcome is read, not reported (the child
        killed for it ends it with ``Gone``), and the child is free."""
        if not done.cancelled():
            done.exception()
        self._done(child)

    async def read(self, path: Path, on_page: Callable[[int, int], None] | None = None,
                   ocr_lang: str | None = None, data: bytes | None = None) -> tuple[Document, float]:
        """``path`` ingested and segmented by a reader: ``(document, CPU seconds spent on it)``. ``InputError`` for a
        file that cannot be used, a reader's limit among the reasons. ``ocr_lang``: the run's OCR languages (else
        ``EXTRACT_OCR_LANG`` of this process); ``data``: the bytes of the e-mail's attachment ``path`` names, as
        ``attachments`` took them (the e-mail is not parsed again)."""
        try:
            limits = Limits.from_environment()
            self._ensure()
        except ValueError as error:
            raise InputError(str(path), str(error)) from None
        environment = _passed()
        if ocr_lang:
            environment["EXTRACT_OCR_LANG"] = ocr_lang  # ingest reads it in the reader (extractor.ingest.ocr)
        try:
            found: tuple[Document, float] = await self._call(READER, _read, (path, environment, data), limits, on_page)
        except Gone as gone:
            raise InputError(str(path), str(gone)) from None
        return found

    async def attachments(self, mail: Path, data: bytes | None = None) -> Attachments:
        """The e-mail's attachments as a reader takes them from it (``Attachments``; ``data``: its bytes, else the
        reader reads the file); ``InputError`` naming the limit the reader passed on it."""
        try:
            limits = Limits.from_environment()
            self._ensure()
        except ValueError as error:
            raise InputError(str(mail), str(error)) from None
        try:
            found: Attachments = await self._call(READER, _attachments, (str(mail), data, _passed()), limits)
        except Gone as gone:
            raise InputError(str(mail), str(gone)) from None
        return found

    async def validate(self, raw: str, document: Document, contract: Contract) -> tuple[Report, float]:
        """The checker's report on one model answer and its CPU seconds (in this process if the checker died on
        it: a verdict never goes missing)."""
        try:
            found: tuple[Report, float] = await self._call(EITHER, _validate,
                                                           (raw, document, contract.ref))
            return found
        except Gone:
            from extractor.validate import validate as validate_here

            started = time.thread_time()
            return validate_here(raw, document, contract), time.thread_time() - started

    async def check_structure(self, raw: str, contract: Contract) -> tuple[Report, float]:
        """The structure rules alone on one window's answer (only the text travels), as ``validate``."""
        try:
            found: tuple[Report, float] = await self._call(EITHER, _check_structure,
                                                           (raw, contract.ref))
            return found
        except Gone:
            from extractor.validate import check_structure as check_here

            started = time.thread_time()
            return check_here(raw, contract), time.thread_time() - started

    async def warm_up(self, contract: Contract) -> float:
        """Start every process and have it import and build what its work needs (``warm_process``), the contract's
        validation included: a long-lived process (``extract worker``) calls it before its first document arrives,
        so the first documents of a batch wait for none of it. The CPU seconds it took."""
        self._ensure()
        spent = await asyncio.gather(*(self._call(frozenset({child.role}), warm_process, (contract.ref,))
                                       for child in self._children))
        return float(sum(spent))

    def pids(self) -> list[int]:
        """The processes started and not stopped."""
        return [pid for child in self._children if (pid := child.pid) is not None]

    def close(self) -> None:
        """Stop every process of the pool (tests and benchmarks; the run's exit stops them too). A process stays in
        the pool until it is stopped: Ctrl-C or SIGTERM in the middle leaves the rest to the close at exit, where
        multiprocessing's own exit handler would otherwise wait forever for processes that ignore SIGTERM."""
        with self._lock:
            children = list(self._children)
            self._idle.clear()
            threads, self._threads = self._threads, None
        for child in children:
            child.stop()
            with self._lock:
                if child in self._children:
                    self._children.remove(child)
        if threads is not None:
            threads.shutdown(wait=False)


POOL = CpuPool()
"""The pool of this process."""
atexit.register(POOL.close)  # before multiprocessing's own exit handler, which would wait for them
read = POOL.read
attachments = POOL.attachments
validate = POOL.validate
check_structure = POOL.check_structure
warm_up = POOL.warm_up


def read_now(path: Path, data: bytes | None = None) -> Document:
    """``path`` read by one reader with the reading limits, for a command that reads one file (``extract split``,
    ``validate``, ``show``, ``approve``; the review pages): the document, or ``InputError``. ``data``: the bytes of
    the document ``path`` names (an upload in the run log), read as a file of that name."""
    document: Document = in_reader(str(path), _read, (path, _passed(), data))[0]
    return document


def attachments_now(mail: str, data: bytes) -> Attachments:
    """The attachments of the e-mail ``mail`` whose bytes are ``data`` (an upload), taken by one
    reader with the reading limits, as ``CpuPool.attachments``."""
    found: Attachments = in_reader(mail, _attachments, (mail, data, _passed()))
    return found


def in_reader(name: str, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``function(*args)`` (a module-level function) in a reader of its own, with the reading limits, for work on
    the untrusted source ``name`` outside a run (the review page's page images): its result or the exception it
    raised; ``InputError`` naming ``name`` and the limit it passed."""
    try:
        limits = Limits.from_environment()
    except ValueError as error:
        raise InputError(name, str(error)) from None
    child = Child("reader", limits.memory, alone=True)
    try:
        return child.call(function, args, limits)
    except Gone as gone:
        raise InputError(name, str(gone)) from None
    finally:
        child.stop()
