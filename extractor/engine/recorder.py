"""The run log as the engine writes it: one writer thread, writes that survive an interruption.

Every store call of a run goes through here, so the event loop never blocks on the database and the CPU the
run log costs is measured in one place. A write that records a model call is *shielded*: once a model answer
was paid for, Ctrl-C does not drop it (the write finishes, then the interruption proceeds).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from extractor.document import Document
from extractor.vocab import DocumentState, GateDecision, RunStatus

if TYPE_CHECKING:
    from extractor.store import AttemptInfo, AttemptRecord, ClaimResult, DocumentRunInfo, FinishedClaim, RunConfig, Store

T = TypeVar("T")


class Observer(Protocol):
    """What watches a run's writes as they are recorded (the Prometheus metrics of ``extract serve`` and
    ``extract worker``): it sees exactly what the run log gets, so its counts match the run log."""

    def attempt(self, record: AttemptRecord) -> None: ...

    def document_finished(self, state: DocumentState) -> None: ...


class Recorder:
    """One run's writes and reads of the run log; ``cpu`` counts the writer thread's CPU seconds."""

    def __init__(self, store: Store, cpu: dict[str, float], observer: Observer | None = None) -> None:
        self.store = store
        self.cpu = cpu
        self.observer = observer
        self.run_id = ""
        self.config_hash = ""
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runlog")

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in the writer thread (one at a time, in order)."""
        def timed() -> T:
            began = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu["database"] += time.thread_time() - began

        return await asyncio.get_running_loop().run_in_executor(self._writer, timed)

    async def shielded(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A write that is carried out even when the run is interrupted while it waits its turn."""
        return await asyncio.shield(self.call(function, *args, **kwargs))

    # -- the run ---------------------------------------------------------------------------------------

    async def start(self, config: RunConfig) -> str:
        """Free what killed runs left, then record this run as started."""
        await self.call(self.store.reap_dead_runs)  # a killed run's documents are free at once
        self.run_id = await self.call(self.store.start_run, config)
        self.config_hash = config.config_hash
        return self.run_id

    async def heartbeat(self) -> None:
        await self.call(self.store.heartbeat, self.run_id)

    async def finish(self, status: RunStatus, outcome: GateDecision | None = None) -> None:
        await self.call(self.store.finish_run, self.run_id, status, outcome)

    async def interrupted(self) -> None:
        """Every document this run was still processing becomes INTERRUPTED (a rerun redoes it)."""
        await self.shielded(self.store.mark_interrupted, self.run_id)

    async def document_runs(self) -> list[DocumentRunInfo]:
        return await self.call(self.store.document_runs_for, self.run_id)

    def close(self) -> None:
        self._writer.shutdown(wait=True)

    # -- documents -------------------------------------------------------------------------------------

    async def any_finished(self) -> bool:
        """Whether this configuration finished any document before (if not, no need to look per file)."""
        return await self.call(self.store.has_finished, self.config_hash)

    async def finished(self, sha256: str) -> FinishedClaim | None:
        return await self.call(self.store.finished_run_of, self.config_hash, sha256)

    async def claim(self, document: Document, path: Path | str, *, force: bool, tags: Iterable[str],
                    retry: Collection[DocumentState]) -> tuple[int, ClaimResult]:
        """``(document id, claim)``: whether this run processes the document."""
        return await self.call(self.store.claim_document, self.run_id, self.config_hash, document, str(path),
                               force, tuple(tags), retry)

    async def attempt(self, record: AttemptRecord) -> int:
        """Record one model call as it happened (shielded); returns the attempt id."""
        attempt_id = await self.shielded(self.store.record_attempt, record)
        if self.observer is not None:
            self.observer.attempt(record)
        return attempt_id

    async def window_answers(self, document_id: int) -> dict[str, AttemptInfo]:
        """Answered window calls of this document under this run's configuration, by request fingerprint."""
        return await self.call(self.store.window_answers, document_id, self.config_hash)

    async def finish_document(self, document_run_id: int, state: DocumentState, cause: str | None,
                              needs_person: Iterable[str], final_attempt_id: int | None) -> None:
        await self.shielded(self.store.finish_document, document_run_id, state, cause=cause,
                            needs_person=list(needs_person), final_attempt_id=final_attempt_id)
        if self.observer is not None:
            self.observer.document_finished(state)
