"""What one document's conversion works with: the job, the model calls (each recorded as an attempt), the
answers and the conversion's result; ``extractor.engine.convert`` (a whole document) and
``extractor.engine.windowed`` (a long one, window by window) are both built on them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from extractor import offload
from extractor.document import Document
from extractor.engine.budget import GENERATE, JUDGE, Budget, Reservation
from extractor.engine.recorder import Recorder
from extractor.engine.settings import RunSettings
from extractor.engine.stop import Interrupted, Stop
from extractor.engine.summary import Progress
from extractor.evidence.report import Report
from extractor.generate import GenerationRequest, GenerationResult, Provider, ProviderError
from extractor.generate.prompt import PromptTemplate, render_request
from extractor.vocab import AttemptKind, AttemptOutcome, DocumentState
from extractor.windows.plan import MESSAGE_OVERHEAD_TOKENS, Window, costs, plan
from extractor.windows.tokens import TokenCounter, budget_for, counter_for

if TYPE_CHECKING:
    from extractor.generate.limit import AdaptiveLimit
    from extractor.judge.modes import Judge, JudgeDecision
    from extractor.judge.stage import JudgeOutcome
    from extractor.store import AttemptRecord

INTERRUPTED_CALL = "run interrupted while waiting for the model; rerun to redo this document"


@dataclass(frozen=True)
class Job:
    """One document this run claimed: the file, its segmented text and its run-log ids."""

    path: Path
    document: Document
    document_id: int
    document_run_id: int
    money: Budget | None = None
    """The budget its calls spend from (``--max-cost``): the run's, or its queued batch's."""
    force: bool = False
    """Its batch redoes what was done before (``--force``): no earlier window answer is reused."""


class Asked(NamedTuple):
    """A model's raw answer, the request as sent (its output limit lowered to what a budget pays for) and when
    the call started (after it got its slot)."""

    result: GenerationResult
    request: GenerationRequest
    called_at: datetime


@dataclass(frozen=True)
class Answer:
    """A model's answer to one generation call, checked against the source and recorded."""

    result: GenerationResult
    report: Report
    attempt_id: int

    @property
    def tokens(self) -> int:
        return (self.result.prompt_tokens or 0) + (self.result.completion_tokens or 0)


@dataclass(frozen=True)
class Conversion:
    """Where one document ends (``state``), why (``cause``), and what the run log and the summary keep."""

    state: DocumentState
    cause: str | None = None
    rule_ids: tuple[str, ...] = ()
    needs_person: tuple[str, ...] = ()
    final_attempt_id: int | None = None
    tokens: int = 0


class ModelCalls:
    """The model calls of one run: each takes a slot of the limit, ends when the run stops, and is recorded."""

    def __init__(self, provider: Provider, limit: AdaptiveLimit, recorder: Recorder, settings: RunSettings,
                 prompt: PromptTemplate, stop: Stop, cpu: dict[str, float], judge: Judge | None = None,
                 progress: Progress | None = None) -> None:
        self.provider = provider
        self.limit = limit
        self.recorder = recorder
        self.settings = settings
        self.prompt = prompt
        self.stop = stop
        self.cpu = cpu
        self.judge_model = judge
        self.progress = progress or Progress()
        self.budget = budget_for(provider, settings.options.max_input_tokens, settings.options.max_output_tokens)

    @cached_property
    def counter(self) -> TokenCounter:
        """The provider's tokenizer (or the conservative estimate), loaded on the first document that needs it."""
        return counter_for(self.provider)

    @cached_property
    def fixed_input(self) -> int:
        """Tokens of a request without any sentence: what every window's prompt repeats."""
        contract = self.settings.contract
        empty = Document("", "", [], "", "text")
        request = render_request(self.prompt, contract, empty, lines="")
        return sum(self.counter.count(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in request.messages)

    def windows(self, document: Document) -> list[Window]:
        """The document's windows under this run's budgets: one unless it is too long for one call (and the
        contract says how to merge windows)."""
        if self.settings.contract.merge is None:
            return [Window(1, 0, len(document.sentences), 0)]
        fixed = self.fixed_input
        started = time.thread_time()
        try:
            return plan(document, costs(document, self.counter, fixed), self.budget, self.settings.options.overlap)
        finally:
            self.cpu["windows"] += time.thread_time() - started

    def record(self, job: Job, request: GenerationRequest, *, number: int, kind: AttemptKind,
               **fields: Any) -> AttemptRecord:
        """The run-log record of one attempt of ``job``."""
        from extractor.store import AttemptRecord

        return AttemptRecord(document_run_id=job.document_run_id, number=number, kind=kind,
                             prompt_version=self.settings.options.prompt_version, request=request, **fields)

    async def ask(self, job: Job, request: GenerationRequest, *, number: int, kind: AttemptKind,
                  **fields: Any) -> Asked:
        """One model call. A failed call is recorded and raised (``ProviderError``); a call the run's stop cut
        short is recorded as interrupted (``Interrupted``); an answer is returned for ``check`` to record.
        ``fields``: more columns for those records (a window's index and sentence range)."""
        called_at, calling = datetime.now(UTC), False
        held: Reservation | None = None
        try:
            async with self.stop.waiting(), self.limit:  # bounds model calls, not documents
                if job.money is not None:  # raises Interrupted when the budget cannot pay for the call
                    held = await job.money.reserve(self.prompt_tokens(request),
                                                   request.max_tokens or self.budget.max_output, GENERATE)
                    request = replace(request, max_tokens=held.max_output)
                called_at, calling = datetime.now(UTC), True
                result = await self.provider.generate(request)
                self.progress.answered((result.prompt_tokens or 0) + (result.completion_tokens or 0))
                if held is not None:
                    reservation, held = held, None
                    await job.money.settle(reservation, result)  # type: ignore[union-attr]
                return Asked(result, request, called_at)
        except ProviderError as error:
            await self.recorder.attempt(self.record(
                job, request, number=number, kind=kind, created_at=called_at, outcome=AttemptOutcome.transport_error,
                error=error.cause, transport=[t.to_json() for t in error.transport], **fields))
            raise
        except Interrupted:
            if calling:  # a call was under way (not merely waiting for a slot): it is part of the record
                await self.recorder.attempt(self.record(
                    job, request, number=number, kind=kind, created_at=called_at,
                    outcome=AttemptOutcome.interrupted, error=INTERRUPTED_CALL, **fields))
            raise
        finally:
            if held is not None and job.money is not None:
                await job.money.release(held)

    def prompt_tokens(self, request: GenerationRequest) -> int:
        """The request's prompt as this run counts tokens (what a budget reserves for it)."""
        return sum(self.counter.count(message["content"]) + MESSAGE_OVERHEAD_TOKENS for message in request.messages)

    async def check(self, job: Job, asked: Asked, *, number: int, kind: AttemptKind) -> Answer:
        """Validate an answer (in the validation worker) and record it with its report, raw text verbatim."""
        result, request = asked.result, asked.request
        report, seconds = await offload.validate(result.text, job.document, self.settings.contract)
        self.cpu["validate"] += seconds
        outcome = (AttemptOutcome.passed if report.passed else
                   AttemptOutcome.unparseable if not report.parsed else AttemptOutcome.failed)
        record = report.to_json()
        attempt_id = await self.recorder.attempt(self.record(
            job, request, number=number, kind=kind, created_at=asked.called_at, raw_response=result.text,
            parsed=report.candidate, findings=record["findings"], fields=record["fields"],
            sentences=record["sentences"], evidence_spans=record["evidence_spans"], passed=report.passed,
            outcome=outcome, mode=result.mode, model=result.model, prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens, cached_tokens=result.cached_tokens, latency_ms=result.latency_ms,
            transport=[t.to_json() for t in result.transport]))
        return Answer(result, report, attempt_id)

    async def generate(self, job: Job, request: GenerationRequest, *, number: int, kind: AttemptKind) -> Answer:
        """``ask`` then ``check``: one generation call, answered, validated and recorded."""
        asked = await self.ask(job, request, number=number, kind=kind)
        return await self.check(job, asked, number=number, kind=kind)

    async def judge(self, job: Job, report: Report, *, number: int = 1) -> JudgeCall | None:
        """With a judge: one judge call for a candidate that passed the rules, recorded as it happened (its raw
        answer always); None without a judge. The call waits in the judge's own queue and takes the judge's
        own slot, never a generation slot."""
        from extractor.judge.modes import attempt_fields

        judge = self.judge_model
        if judge is None:
            return None
        from extractor.store import AttemptRecord

        base: dict[str, Any] = dict(document_run_id=job.document_run_id, number=number, kind=AttemptKind.judge,
                                    prompt_version=judge.rubric.prompt_version, created_at=datetime.now(UTC))
        held: Reservation | None = None
        try:
            async with self.stop.waiting(), judge.queue.slot():
                request = judge.request_for(report) if job.money is not None else None
                if request is not None and job.money is not None:  # raises Interrupted when it cannot be paid
                    held = await job.money.reserve(self.prompt_tokens(request),
                                                   request.max_tokens or self.budget.max_output, JUDGE)
                base["created_at"] = datetime.now(UTC)
                outcome, decision = await judge.evaluate(report, None if held is None else held.max_output)
                self.progress.answered(outcome.tokens)
                if held is not None and outcome.result is not None:
                    reservation, held = held, None
                    await job.money.settle(reservation, outcome.result)  # type: ignore[union-attr]
        except Interrupted as stopped:
            request = judge.request_for(report)
            if request is not None:
                await self.recorder.attempt(AttemptRecord(
                    **base, request=request, outcome=AttemptOutcome.interrupted,
                    error=str(stopped) or "run interrupted while waiting for the judge; rerun to redo this document"))
            raise
        finally:
            if held is not None and job.money is not None:
                await job.money.release(held)
        if outcome.request is not None:  # no call, no attempt: an empty context is not_evaluable by itself
            await self.recorder.attempt(AttemptRecord(**base, request=outcome.request,
                                                      **attempt_fields(outcome, decision, judge.policy)))
        return JudgeCall(outcome, decision, outcome.tokens)


class JudgeCall(NamedTuple):
    """One judge call's outcome, what it decided, and the tokens it cost."""

    outcome: JudgeOutcome
    decision: JudgeDecision
    tokens: int


Converter = Callable[[Job, ModelCalls], Awaitable[Conversion]]
"""A per-document procedure the engine runs on each claimed document (``convert`` by default)."""


def rule_ids(report: Report) -> tuple[str, ...]:
    """The rules that fired on a candidate, each once, in report order."""
    return tuple(dict.fromkeys(f.rule_id for f in report.findings))
