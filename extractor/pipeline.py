"""Documents in, validated candidates out, every attempt recorded as it happens.

Per document: ingest -> segment -> claim (skip what this configuration already finished) -> generate ->
validate -> at most one repair -> validate -> route to exactly one state. Generation calls are bounded to
two per document per run; transport retries live in the provider and are recorded, not hidden.
The pipeline never approves anything and never writes the approved-records table.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from extractor.contracts import Contract
from extractor.document import Document
from extractor.errors import InputError
from extractor.generate import GenerationRequest, GenerationResult, Provider, ProviderError
from extractor.generate.prompt import load_prompt, render_request
from extractor.repair import render_repair
from extractor.validate import VALIDATOR_VERSION, Report, Source
from extractor.workers import load_document as load_document  # re-exported: ingest + segment one file
from extractor.workers import prepare
from extractor.workers import validate as validate_in_worker

if TYPE_CHECKING:  # the run log is only imported when a run starts, not by modules that show results
    from extractor.judge.modes import Judge, JudgeDecision
    from extractor.store import RunConfig, Store

READY = "READY_FOR_REVIEW"
MANUAL = "MANUAL_REVIEW"
ERROR = "ERROR"
FINAL_STATES = (READY, MANUAL, ERROR)
DOCUMENT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".docx", ".html", ".htm", ".pdf")
T = TypeVar("T")


@dataclass
class RunSettings:
    """What decides results (contract, prompt, model) plus how the batch is run."""

    contract: Contract
    prompt_version: str = "v1"
    concurrency: int = 4
    force: bool = False
    max_tokens: int | None = None
    temperature: float = 0.0
    tags: tuple[str, ...] = ()
    command: str = ""
    base_url: str | None = None


@dataclass
class DocumentOutcome:
    path: str
    state: str  # a final state, "SKIPPED", "INPUT_ERROR" or "INTERRUPTED"
    cause: str | None = None
    rule_ids: tuple[str, ...] = ()
    tokens: int = 0
    document_run_id: int | None = None


@dataclass
class RunSummary:
    run_id: str
    outcomes: list[DocumentOutcome] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False
    rate_limits: int = 0  # 429 answers seen; each one halved the concurrency
    lowest_concurrency: int | None = None  # the lowest the concurrency went (None: never lowered)

    @property
    def counts(self) -> Counter[str]:
        return Counter(outcome.state for outcome in self.outcomes)

    @property
    def top_rules(self) -> list[tuple[str, int]]:
        return Counter(rule for o in self.outcomes for rule in o.rule_ids).most_common(10)

    @property
    def tokens(self) -> int:
        return sum(outcome.tokens for outcome in self.outcomes)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
            "rate_limits": self.rate_limits,
            "lowest_concurrency": self.lowest_concurrency,
            "documents": len(self.outcomes),
            "counts": dict(sorted(self.counts.items())),
            "top_rule_ids": dict(self.top_rules),
            "tokens": self.tokens,
            "outcomes": [vars(outcome) | {"rule_ids": list(outcome.rule_ids)} for outcome in self.outcomes],
        }


def expand_paths(paths: Iterable[str]) -> tuple[list[Path], list[DocumentOutcome]]:
    """Files, folders (recursively, document suffixes only) and globs -> unique files in a stable order.

    A path that matches nothing is reported as an input error instead of silently vanishing. ``.json``
    sources are taken only when named explicitly, so a folder's expected outputs are not read as documents.
    """
    found: dict[Path, None] = {}
    problems: list[DocumentOutcome] = []
    for raw in paths:
        matches = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) else [raw]
        if not matches or not any(os.path.exists(m) for m in matches):
            problems.append(DocumentOutcome(raw, "INPUT_ERROR", f"{raw}: no such file, folder or glob match"))
            continue
        for match in matches:
            path = Path(match)
            if path.is_dir():
                for child in sorted(path.rglob("*")):
                    if child.is_file() and child.suffix.lower() in DOCUMENT_SUFFIXES:
                        found[child] = None
            else:
                found[path] = None
    return list(found), problems


class AdaptiveLimit:
    """Concurrency that halves on every 429 or timeout and grows back by one after a run of successes.

    It bounds model calls (generation, repair, judge), not documents. Calls already under way keep their
    slots (their retries wait out ``Retry-After``); the lower limit holds back the calls not yet started.
    A timeout counts like a 429: a server that serves one request at a time answers queued calls late, and
    retrying them all at once only queues more. ``rate_limits``, ``timeouts`` and ``lowest`` say how hard
    the run was throttled.
    """

    def __init__(self, maximum: int) -> None:
        self.maximum = max(1, maximum)
        self.limit = self.maximum
        self.lowest = self.maximum
        self.rate_limits = 0
        self.timeouts = 0
        self._active = 0
        self._successes = 0
        self._changed = asyncio.Condition()

    def on_rate_limit(self, retry_after_s: float | None = None) -> None:
        self.rate_limits += 1
        self._halve()

    def on_timeout(self) -> None:
        self.timeouts += 1
        self._halve()

    def _halve(self) -> None:
        self.limit = max(1, self.limit // 2)
        self.lowest = min(self.lowest, self.limit)
        self._successes = 0

    async def __aenter__(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._active < self.limit)
            self._active += 1

    async def __aexit__(self, *exc: object) -> None:
        async with self._changed:
            self._active -= 1
            if exc[0] is None:
                self._successes += 1
                if self.limit < self.maximum and self._successes >= self.limit:
                    self.limit += 1
                    self._successes = 0
            self._changed.notify(max(0, self.limit - self._active))  # wake as many as may enter, not all waiting


class Progress:
    """What a front end may show while a batch runs; the default shows nothing."""

    def started(self, total: int) -> None:
        """Called once with the number of inputs (files plus unusable paths)."""

    def finished(self, outcome: DocumentOutcome) -> None:
        """Called as each input reaches its outcome."""


@dataclass
class Job:
    """One claimed document in this run, with its source index built once for both attempts."""

    path: Path
    document: Document
    document_id: int
    document_run_id: int

    def __post_init__(self) -> None:
        self.source = Source(self.document)


class Pipeline:
    _resuming = False  # set by run(): whether this configuration finished documents before (then look per file)

    def __init__(self, store: Store, provider: Provider, settings: RunSettings,
                 limit: AdaptiveLimit | None = None, progress: Progress | None = None,
                 judge: Judge | None = None) -> None:
        """``judge`` (optional) checks candidates that passed every rule; the run closes both providers."""
        self.store = store
        self.provider = provider
        self.judge = judge
        self.settings = settings
        self.limit = limit or AdaptiveLimit(settings.concurrency)
        self.progress = progress or Progress()
        self.prompt = load_prompt(settings.contract.name, settings.prompt_version)
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runlog")  # one writer, loop never blocks
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment")
        self.run_id = ""

    def run_config(self, segmenter: str) -> RunConfig:
        from extractor.store import RunConfig

        s = self.settings
        return RunConfig(
            contract=s.contract.name, contract_version=s.contract.version, prompt_version=s.prompt_version,
            model=self.provider.model, provider=self.provider.name, validator_version=VALIDATOR_VERSION,
            segmenter=segmenter, judge_model=self.judge.model if self.judge else None,
            config={"concurrency": s.concurrency, "temperature": s.temperature, "max_tokens": s.max_tokens,
                    "tags": list(s.tags), "base_url": s.base_url, "force": s.force}
            | ({"judge": self.judge.config()} if self.judge else {}),
            command=s.command, host=socket.gethostname(), pid=os.getpid(),
        )

    async def _db_call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        def timed() -> T:
            began = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu_seconds["database"] += time.thread_time() - began

        return await asyncio.get_running_loop().run_in_executor(self._db, timed)

    async def _write(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A run-log write that is carried out even when the run is interrupted while it waits its turn:
        a model answer that was paid for is never dropped."""
        return await asyncio.shield(self._db_call(function, *args, **kwargs))

    async def run(self, paths: Iterable[str]) -> RunSummary:
        """Process every document; one bad file never stops the batch.

        A fixed pool of workers takes files in order: at most ``2 x concurrency`` documents are read and
        held at once (the ones waiting for a model slot are ready the moment one frees), so memory does
        not grow with the batch; a rerun skips what this configuration finished before reading it.
        Cancellation (Ctrl-C under ``asyncio.run``) stops the workers, records the in-flight model calls
        as ``interrupted`` attempts, marks their documents INTERRUPTED and returns a summary that lists
        what is left; rerunning the same command finishes it.
        """
        from extractor.segment import SEGMENTER_ID

        started = time.monotonic()
        self.cpu_seconds: Counter[str] = Counter({"ingest+segment": 0.0, "validate": 0.0, "database": 0.0})
        files, problems = expand_paths(paths)
        config = self.run_config(SEGMENTER_ID)
        await self._db_call(self.store.reap_dead_runs)  # a killed run's documents are free at once
        self.run_id = await self._db_call(self.store.start_run, config)
        self.config_hash = config.config_hash
        self._resuming = not self.settings.force and await self._db_call(self.store.has_finished, self.config_hash)
        summary = RunSummary(self.run_id, outcomes=list(problems))
        self.progress.started(len(files) + len(problems))
        for outcome in problems:
            self.progress.finished(outcome)
        heartbeat = asyncio.create_task(self._heartbeat())
        pending = iter(files)
        workers = [asyncio.create_task(self._worker(pending, summary))
                   for _ in range(min(len(files), 2 * self.limit.maximum))]
        try:
            await asyncio.gather(*workers)
        except (asyncio.CancelledError, KeyboardInterrupt):
            summary.interrupted = True
            for worker in workers:
                if not worker.cancelling():  # already cancelled with the gather: once is enough
                    worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await self._db_call(self.store.mark_interrupted, self.run_id)
            summary.outcomes += await self._left_over(files, summary)
        finally:
            heartbeat.cancel()
            status = "interrupted" if summary.interrupted else "finished"
            await self._db_call(self.store.finish_run, self.run_id, status)
            summary.seconds = time.monotonic() - started
            summary.rate_limits = self.limit.rate_limits
            summary.lowest_concurrency = self.limit.lowest if self.limit.lowest < self.limit.maximum else None
            await self.provider.aclose()
            if self.judge is not None:
                await self.judge.aclose()
            self._db.shutdown(wait=True)
            self._cpu.shutdown(wait=False, cancel_futures=True)
        return summary

    async def _worker(self, pending: Iterator[Path], summary: RunSummary) -> None:
        """Take the next file until none is left (the shared iterator hands each file to one worker)."""
        for path in pending:
            outcome = await self._guarded(path)
            summary.outcomes.append(outcome)
            self.progress.finished(outcome)

    async def _left_over(self, files: list[Path], summary: RunSummary) -> list[DocumentOutcome]:
        """After an interruption: the files without an outcome, as the run log has them (a write that was
        already under way when the run stopped may still have finished its document)."""
        done = {outcome.path for outcome in summary.outcomes}
        recorded = {run.path: run for run in await self._db_call(self.store.document_runs_for, self.run_id)}
        left = []
        for path in map(str, files):
            if path in done:
                continue
            run = recorded.get(path)
            if run is not None and run.state in FINAL_STATES:
                left.append(DocumentOutcome(path, run.state, run.cause, document_run_id=run.id))
            else:
                left.append(DocumentOutcome(path, "INTERRUPTED", None if run is None else run.cause,
                                            document_run_id=None if run is None else run.id))
        return left

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(10)
            await self._db_call(self.store.heartbeat, self.run_id)

    async def _guarded(self, path: Path) -> DocumentOutcome:
        """One document; an unexpected bug in one document is reported, not allowed to sink the batch."""
        try:
            return await self.process(path)
        except asyncio.CancelledError:
            raise
        except InputError as error:
            return DocumentOutcome(str(path), "INPUT_ERROR", str(error))
        except Exception as error:  # noqa: BLE001 - reported with its type, the batch goes on
            return DocumentOutcome(str(path), ERROR, f"{path}: internal error {type(error).__name__}: {error}")

    async def process(self, path: Path) -> DocumentOutcome:
        loop = asyncio.get_running_loop()
        if self._resuming:  # what this configuration already finished is skipped before ingest and segmentation
            digest = await loop.run_in_executor(self._cpu, file_sha256, path)
            finished = digest and await self._db_call(self.store.finished_run_of, self.config_hash, digest)
            if finished:
                return DocumentOutcome(str(path), "SKIPPED", f"done (document run {finished})")
        document, seconds = await prepare(path)
        self.cpu_seconds["ingest+segment"] += seconds
        document_id, claim = await self._db_call(self.store.claim_document, self.run_id, self.config_hash, document,
                                                 str(path), self.settings.force, self.settings.tags)
        if claim.status != "claimed":
            return DocumentOutcome(str(path), "SKIPPED", f"{claim.status} ({claim.detail})")
        return await self._convert(Job(path, document, document_id, claim.document_run_id))

    async def _convert(self, job: Job) -> DocumentOutcome:
        request = render_request(self.prompt, self.settings.contract, job.document,
                                 temperature=self.settings.temperature, max_tokens=self.settings.max_tokens)
        first = await self._attempt(job, request, number=1, kind="generate")
        if isinstance(first, ProviderError):
            return await self._finish(job, ERROR, first.cause, ())
        first_result, first_report, first_id, tokens = first
        if first_report.passed:
            return await self._route(job, first_report, first_id, tokens)
        repair = render_repair(self.prompt, request, first_result.text, first_report, job.document)
        second = await self._attempt(job, repair, number=2, kind="repair")
        if isinstance(second, ProviderError):
            return await self._finish(job, ERROR, f"repair call failed: {second.cause}", _rule_ids(first_report),
                                      final_attempt_id=first_id, tokens=tokens)
        _, second_report, second_id, more = second
        tokens += more
        if second_report.passed:
            return await self._route(job, second_report, second_id, tokens)
        cause = ("unparseable twice" if not first_report.parsed and not second_report.parsed
                 else f"failed validation after repair: {len(second_report.errors)} error(s)")
        return await self._finish(job, MANUAL, cause, _rule_ids(second_report), final_attempt_id=second_id,
                                  tokens=tokens)

    async def _route(self, job: Job, report: Report, attempt_id: int, tokens: int) -> DocumentOutcome:
        """No error findings: ready for a person, unless a warning the contract marks needs a person first.

        With a judge, it runs here and only here: after every deterministic rule passed. Its call is
        recorded as an attempt of kind ``judge``; what it may change depends on its mode (``extractor.judge``).
        The final attempt stays the candidate's generation attempt.
        """
        needing = sorted({f.rule_id for f in report.warnings_needing_person})
        causes = [f"warning needs a person: {', '.join(needing)}"] if needing else []
        marks = list(needing)
        if self.judge is not None:
            decision, spent = await self._judge(job, report)
            tokens += spent
            if decision.to_person:
                causes.append(decision.cause or f"judge {decision.result}")
                marks += decision.marks
        if causes:
            return await self._finish(job, MANUAL, "; ".join(causes), _rule_ids(report), needs_person=marks,
                                      final_attempt_id=attempt_id, tokens=tokens)
        return await self._finish(job, READY, None, _rule_ids(report), final_attempt_id=attempt_id, tokens=tokens)

    async def _judge(self, job: Job, report: Report) -> tuple[JudgeDecision, int]:
        """One judge call for a candidate that passed the rules, recorded as it happened (raw answer always)."""
        from extractor.judge.modes import attempt_fields

        assert self.judge is not None
        base = dict(document_run_id=job.document_run_id, run_id=self.run_id, document_id=job.document_id, number=1,
                    kind="judge", prompt_version=self.judge.rubric.prompt_version, created_at=datetime.now(UTC))
        try:
            async with self.limit:  # a judge call is a model call: it takes a slot like generation and repair
                outcome, decision = await self.judge.evaluate(report)
        except asyncio.CancelledError:
            request = self.judge.request_for(report)
            if request is not None:  # shielded: the record of an interrupted call survives the interruption
                await asyncio.shield(self._db_call(
                    self.store.record_attempt, **base, request=request.to_json(), request_hash=request.fingerprint,
                    outcome="interrupted", error="run interrupted while waiting for the judge; rerun to redo this document"))
            raise
        if outcome.request is not None:  # no call, no attempt: an empty context is not_evaluable by itself
            await asyncio.shield(self._db_call(
                self.store.record_attempt, **base, request=outcome.request.to_json(),
                request_hash=outcome.request.fingerprint, **attempt_fields(outcome, decision, self.judge.policy)))
        return decision, outcome.tokens

    async def _finish(self, job: Job, state: str, cause: str | None, rule_ids: tuple[str, ...],
                      needs_person: Iterable[str] = (), final_attempt_id: int | None = None,
                      tokens: int = 0) -> DocumentOutcome:
        await self._db_call(self.store.finish_document, job.document_run_id, state, cause=cause,
                            needs_person=list(needs_person), final_attempt_id=final_attempt_id)
        return DocumentOutcome(str(job.path), state, cause, rule_ids, tokens, job.document_run_id)

    async def _attempt(self, job: Job, request: GenerationRequest, number: int,
                       kind: str) -> tuple[GenerationResult, Report, int, int] | ProviderError:
        """One generation call, validated and recorded; a provider failure is recorded and returned."""
        base = dict(document_run_id=job.document_run_id, run_id=self.run_id, document_id=job.document_id, number=number,
                    kind=kind, prompt_version=self.settings.prompt_version, request=request.to_json(),
                    request_hash=request.fingerprint)
        called_at, calling = datetime.now(UTC), False
        try:
            async with self.limit:  # bounds model calls, not documents: validation and writes hold no slot
                called_at, calling = datetime.now(UTC), True
                result = await self.provider.generate(request)
        except ProviderError as error:
            await self._write(self.store.record_attempt, **base, outcome="transport_error", error=error.cause,
                              transport=[t.to_json() for t in error.transport], created_at=called_at)
            return error
        except asyncio.CancelledError:
            if calling:  # a call was under way (not merely waiting for a slot): it is part of the record
                await self._write(self.store.record_attempt, **base, outcome="interrupted", created_at=called_at,
                                  error="run interrupted while waiting for the model; rerun to redo this document")
            raise
        report, seconds = await validate_in_worker(result.text, job.document, self.settings.contract)
        self.cpu_seconds["validate"] += seconds
        outcome = "passed" if report.passed else ("unparseable" if not report.parsed else "failed")
        record = report.to_json()
        attempt_id = await self._write(
            self.store.record_attempt, **base, created_at=called_at, raw_response=result.text, parsed=report.candidate,
            findings=record["findings"], fields=record["fields"], sentences=record["sentences"],
            evidence_spans=record["evidence_spans"], passed=report.passed, outcome=outcome, mode=result.mode,
            model=result.model, prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
            latency_ms=result.latency_ms, transport=[t.to_json() for t in result.transport],
        )
        tokens = (result.prompt_tokens or 0) + (result.completion_tokens or 0)
        return result, report, attempt_id, tokens


def _rule_ids(report: Report) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f.rule_id for f in report.findings))


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
