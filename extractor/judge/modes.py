"""What a judge's answer is allowed to do: modes, the block admission rule, and the routing decision.

Modes (docs/design.md#judge): ``observe`` reports only; ``review`` sends a failure to a person; ``block`` rejects
the candidate to a person with a BLOCK mark. A judge is an unverified instrument until it is measured
against human labels, so ``block`` is granted only when the latest calibration on record for exactly
this model + rubric version + threshold admits it (``admit-block``); otherwise the judge runs in
``review`` and the caller is told why. A newer calibration supersedes an older one: a judge that was
admitted once and rejected later is no longer admitted.

Why a missing verdict always goes to a person, in every mode: modes decide what a *measured* failure
does. A protocol error, a failed call or a ``not_evaluable`` answer is no measurement at all and must
never pass as a score or as "passed" (NOT_EVALUABLE and broken answers -> review; docs/design.md#judge).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from extractor.errors import UsageError
from extractor.evidence.report import Report
from extractor.generate import GenerationRequest, Provider
from extractor.generate.limit import AdaptiveLimit
from extractor.judge.stage import JudgeOutcome, Rubric, links_for, model_id, render_judge_request, run_judge
from extractor.vocab import (
    DEFAULT_JUDGE_CONCURRENCY,
    DEFAULT_JUDGE_QUEUE,
    MARK_BLOCK,
    AttemptOutcome,
    CalibrationVerdict,
    JudgeMode,
    JudgeResult,
    JudgeVerdict,
)

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.options import RunOptions
    from extractor.store import Store

MARKS: dict[JudgeResult, str] = {
    JudgeResult.warn: "JUDGE_WARN",
    JudgeResult.fail: "JUDGE_FAIL",
    JudgeResult.not_evaluable: "JUDGE_NOT_EVALUABLE",
    JudgeResult.protocol_error: "JUDGE_PROTOCOL_ERROR",
    JudgeResult.transport_error: "JUDGE_NOT_JUDGED",
}
"""Marks added to a document run's ``needs_person`` so a reviewer sees why the judge sent it (a warning is
marked on a READY_FOR_REVIEW document too, and shown first in ``extract review``)."""

JUDGE_METRICS = ("support", "invented_facts", "contradicts_context", "grounded", "verdict")
"""What a judge answer measures, each with its own mode in the contract settings (``modes.judge``):
``support`` a link scored below the threshold, ``invented_facts`` the judge listed invented facts,
``contradicts_context`` a value contradicts its excerpt, ``grounded`` the judge said not grounded,
``verdict`` the judge's own fail or warn."""

_STRENGTH = {JudgeMode.observe: 0, JudgeMode.review: 1, JudgeMode.block: 2}


@dataclass(frozen=True)
class JudgePolicy:
    """The judge as a run uses it; ``reason`` says why a mode is lower than requested.

    ``mode`` is the mode of every metric not named in ``metric_modes`` (the contract settings' per-metric
    modes, or ``--judge-mode`` for all of them).
    """

    model: str
    rubric_version: str
    threshold: float
    mode: JudgeMode
    requested: JudgeMode
    reason: str | None = None
    calibration_id: int | None = None
    metric_modes: tuple[tuple[str, JudgeMode], ...] = ()

    def mode_for(self, metric: str) -> JudgeMode:
        return dict(self.metric_modes).get(metric, self.mode)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "rubric_version": self.rubric_version, "threshold": self.threshold,
                "mode": self.mode.value, "requested_mode": self.requested.value, "downgrade_reason": self.reason,
                "calibration_id": self.calibration_id,
                "metric_modes": {metric: self.mode_for(metric).value for metric in JUDGE_METRICS}}


def resolve_policy(store: Store, model: str, rubric_version: str, threshold: float, requested: JudgeMode,
                   metric_modes: Mapping[str, JudgeMode] | None = None) -> JudgePolicy:
    """``requested`` (and the per-metric modes) if allowed; block without an admitting calibration on record
    for this model + rubric + threshold becomes review, for every metric, with the reason."""
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"judge threshold must be between 0 and 1 (exclusive), not {threshold}")
    unknown = sorted(set(metric_modes or {}) - set(JUDGE_METRICS))
    if unknown:
        raise ValueError(f"unknown judge metric(s) {', '.join(unknown)} (known: {', '.join(JUDGE_METRICS)})")
    latest = store.latest_calibration(model, rubric_version, threshold)
    calibration_id = latest.id if latest is not None else None
    wanted = dict(metric_modes or {})
    if requested is not JudgeMode.block and JudgeMode.block not in wanted.values():
        return JudgePolicy(model, rubric_version, threshold, requested, requested, calibration_id=calibration_id,
                           metric_modes=tuple(sorted(wanted.items())))
    key = f"{model} + rubric {rubric_version} + threshold {threshold:g}"
    if latest is None:
        reason = (f"block mode needs an admit-block calibration for {key}; none is on record "
                  "(run: extract judge calibrate LABELS.csv --judge ...)")
    elif latest.verdict != CalibrationVerdict.admit_block:
        reason = (f"block mode needs an admit-block calibration for {key}; the latest (#{latest.id}, "
                  f"{latest.created_at:%Y-%m-%d}) says {latest.verdict}: {latest.report.summary}")
    else:
        return JudgePolicy(model, rubric_version, threshold, requested, requested, calibration_id=latest.id,
                           metric_modes=tuple(sorted(wanted.items())))
    lowered = {metric: JudgeMode.review if mode is JudgeMode.block else mode for metric, mode in wanted.items()}
    mode = JudgeMode.review if requested is JudgeMode.block else requested
    return JudgePolicy(model, rubric_version, threshold, mode, requested, reason, calibration_id,
                       tuple(sorted(lowered.items())))


@dataclass(frozen=True)
class JudgeDecision:
    """What one judge outcome does to a document that passed every rule.

    ``regenerate``: a measured fail in review or block mode earns one regeneration with stronger context
    (docs/design.md#judge) before a person sees it; the caller decides whether this document still has it.
    """

    result: JudgeResult
    to_person: bool
    block: bool
    cause: str | None
    marks: tuple[str, ...]
    failing: tuple[int, ...] = ()  # link indices scoring below the threshold
    unevaluated: tuple[int, ...] = ()  # link indices the judge scored null
    metrics: tuple[str, ...] = ()  # the judge metrics that failed (JUDGE_METRICS)

    @property
    def evaluable(self) -> bool:
        """False when the judge gave no measurement (outage, garbage, not_evaluable): NOT_EVALUABLE."""
        return self.result in (JudgeResult.passed, JudgeResult.warn, JudgeResult.fail)

    @property
    def regenerate(self) -> bool:
        return self.result is JudgeResult.fail and self.to_person

    def to_json(self) -> dict[str, Any]:
        return {"result": self.result, "to_person": self.to_person, "block": self.block, "cause": self.cause,
                "marks": list(self.marks), "failing_links": list(self.failing),
                "unevaluated_links": list(self.unevaluated), "metrics": list(self.metrics)}


def _quote(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def judge_decision(outcome: JudgeOutcome, policy: JudgePolicy) -> JudgeDecision:
    """The judge's result for one document and, with the modes, whether it goes to a person.

    A link fails when its score is below the threshold; the document fails when any link fails or the
    (overridden) verdict is ``fail``; ``warn`` is the judge's own partial-support verdict (or a "not
    grounded" that lists nothing). No measurement (outage, protocol error, not_evaluable) always goes to a
    person as NOT_EVALUABLE, in every mode, and is never counted as a fail.
    """
    if outcome.kind == "transport_error":
        cause = f"judge call failed: {outcome.error}; the candidate passed the rules but was not judged"
        return JudgeDecision(JudgeResult.transport_error, True, False, cause, (MARKS[JudgeResult.transport_error],))
    if outcome.kind == "protocol_error":
        return JudgeDecision(JudgeResult.protocol_error, True, False, f"judge protocol error: {outcome.error}",
                             (MARKS[JudgeResult.protocol_error],))
    if outcome.kind == "not_evaluable" or outcome.verdict is None:
        return JudgeDecision(JudgeResult.not_evaluable, True, False, f"judge not evaluable: {outcome.error}",
                             (MARKS[JudgeResult.not_evaluable],))
    verdict = outcome.verdict
    by_index = {link.index: link for link in outcome.links}
    failing = tuple(s.index for s in verdict.links if s.supported is not None and s.supported < policy.threshold)
    unevaluated = tuple(s.index for s in verdict.links if s.supported is None)
    metrics = [name for name, failed in (
        ("support", bool(failing)), ("invented_facts", bool(verdict.invented_facts)),
        ("contradicts_context", verdict.contradicts_context is True), ("grounded", verdict.grounded is False),
        ("verdict", verdict.model_verdict in (JudgeVerdict.fail, JudgeVerdict.warn))) if failed]
    details = [f"{by_index[i].field_path} supported {verdict.score(i):.2f} < {policy.threshold:g}" for i in failing]
    if verdict.invented_facts:
        details.append("invented: " + ", ".join(_quote(v) for v in verdict.invented_facts[:5]))
    if verdict.contradicts_context:
        details.append("contradicts the context")
    if verdict.overridden:
        details.append(f"verdict {verdict.model_verdict} overridden to {verdict.verdict} ({verdict.override_reason})")
    if verdict.verdict is JudgeVerdict.fail or failing:
        result = JudgeResult.fail
        if not details:  # the model's own verdict and nothing measured behind it: the cause says so, never nothing
            details.append(f"verdict fail, comment: {_quote(verdict.comment, 160)}" if verdict.comment
                           else "verdict fail, no reason given")
    elif unevaluated:
        paths = ", ".join(by_index[i].field_path for i in unevaluated)
        return JudgeDecision(JudgeResult.not_evaluable, True, False, f"judge not evaluable: it could not score {paths}",
                             (MARKS[JudgeResult.not_evaluable],), failing, unevaluated)
    elif verdict.verdict is JudgeVerdict.warn or verdict.grounded is False:
        result = JudgeResult.warn
        if verdict.grounded is False and verdict.verdict is not JudgeVerdict.warn:
            details.append(f"judge said not grounded but verdict {verdict.verdict}")
        details.append(f"comment: {_quote(verdict.comment, 160)}" if verdict.comment else "partly supported")
    else:
        return JudgeDecision(JudgeResult.passed, False, False, None, (), failing, unevaluated)
    mode = max((policy.mode_for(m) for m in metrics), key=_STRENGTH.__getitem__, default=policy.mode)
    if mode is JudgeMode.observe:
        return JudgeDecision(result, False, False, None, (), failing, unevaluated, tuple(metrics))
    block = mode is JudgeMode.block and result is JudgeResult.fail
    where = f"{mode.value} mode, threshold {policy.threshold:g}"
    if block and policy.calibration_id is not None:
        where += f", calibration #{policy.calibration_id}"
    cause = f"judge {result} ({where}): " + "; ".join(details)
    marks = (MARK_BLOCK, MARKS[result]) if block else (MARKS[result],)
    # a warning is shown to the reviewer first but does not hold the document back (docs/design.md#judge: warn -> review)
    to_person = result is JudgeResult.fail
    return JudgeDecision(result, to_person, block, ("BLOCK: " + cause) if block else cause, marks, failing,
                         unevaluated, tuple(metrics))


ATTEMPT_OUTCOME: dict[JudgeResult, AttemptOutcome] = {
    JudgeResult.passed: AttemptOutcome.passed, JudgeResult.warn: AttemptOutcome.failed,
    JudgeResult.fail: AttemptOutcome.failed, JudgeResult.not_evaluable: AttemptOutcome.failed,
    JudgeResult.protocol_error: AttemptOutcome.protocol_error, JudgeResult.transport_error: AttemptOutcome.transport_error,
}


def attempt_fields(outcome: JudgeOutcome, decision: JudgeDecision, policy: JudgePolicy) -> dict[str, Any]:
    """The run-log attempt of one judge call (kind ``judge``): raw answer always, parsed verdict only if valid.

    ``passed`` is True/False for a judged document and None when there is no valid verdict; a protocol error
    keeps ``parsed`` empty on purpose, so nothing downstream can read a score out of a broken answer.
    """
    result = outcome.result
    parsed = None
    if outcome.verdict is not None:
        parsed = {"verdict": outcome.verdict.to_json(), "decision": decision.to_json(), "policy": policy.to_json(),
                  "links": [link.to_json() for link in outcome.links]}
    passed = {JudgeResult.passed: True, JudgeResult.warn: False, JudgeResult.fail: False}.get(decision.result)
    fields: dict[str, Any] = dict(
        outcome=ATTEMPT_OUTCOME[decision.result], parsed=parsed, passed=passed, error=outcome.error,
        transport=outcome.transport,
    )
    if result is not None:
        fields.update(raw_response=result.text, mode=result.mode, model=result.model, latency_ms=result.latency_ms,
                      prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                      cached_tokens=result.cached_tokens)
    return fields


class JudgeQueue:
    """The judge's own bounded queue: ``depth`` documents may wait for it, ``concurrency`` calls run at once.

    Why its own: a judge call that took a generation slot would let slow judging (docs/design.md#judge: a proxy that
    cuts at 100 s, a queue that grows at peak) starve generation. Judge calls take slots only here, with
    their own adaptive limit (halved on the judge's 429s and timeouts) and their provider's own timeout.
    When ``depth`` documents already wait, the next one waits to enter (backpressure): the batch slows to
    the judge's pace instead of piling up candidates in memory.
    """

    def __init__(self, concurrency: int = DEFAULT_JUDGE_CONCURRENCY, depth: int = DEFAULT_JUDGE_QUEUE) -> None:
        if concurrency < 1 or depth < concurrency:
            raise ValueError(f"judge queue needs concurrency >= 1 and depth >= concurrency, not {concurrency}/{depth}")
        self.limit = AdaptiveLimit(concurrency)
        self.depth = depth
        self._room: asyncio.Semaphore | None = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A place in the queue, then one of the judge's call slots."""
        if self._room is None:
            self._room = asyncio.Semaphore(self.depth)
        async with self._room, self.limit:
            yield


class Judge:
    """The judge a run uses: its provider, rubric, policy and queue, plus per-run counts for the summary.

    ``aclose`` closes its provider (the pipeline does, at the end of a run).
    """

    def __init__(self, provider: Provider, policy: JudgePolicy, rubric: Rubric, *,
                 same_model_as_generator: bool = False, queue: JudgeQueue | None = None,
                 timeout_s: float | None = None) -> None:
        self.provider = provider
        self.policy = policy
        self.rubric = rubric
        self.same_model_as_generator = same_model_as_generator
        self.queue = queue or JudgeQueue()
        self.timeout_s = timeout_s  # the judge provider's own call timeout, recorded in the run config
        self.counts: Counter[str] = Counter()
        self.regenerations = 0
        self._closed = False

    @property
    def model(self) -> str:
        return model_id(self.provider)

    def config(self) -> dict[str, Any]:
        """What the run config records under ``judge`` (the model itself is ``RunConfig.judge_model``)."""
        return {**self.policy.to_json(), "same_model_as_generator": self.same_model_as_generator,
                "concurrency": self.queue.limit.maximum, "queue": self.queue.depth,
                "timeout_s": self.timeout_s}

    def summary(self) -> dict[str, Any]:
        """What a run reports about its judge: model, policy, how many documents got each result and how
        many candidates were regenerated after a judge fail."""
        return {"model": self.model, **self.config(), "results": dict(sorted(self.counts.items())),
                "regenerations": self.regenerations}

    def request_for(self, report: Report) -> GenerationRequest | None:
        """The request ``evaluate`` sends for this report (None: nothing to judge, no call)."""
        links = links_for(report)
        return render_judge_request(self.rubric, report.contract, links) if links else None

    async def evaluate(self, report: Report, max_tokens: int | None = None) -> tuple[JudgeOutcome, JudgeDecision]:
        """One judge call for ``report`` (with ``max_tokens`` as its output limit when given) and its decision."""
        outcome = await run_judge(self.provider, self.rubric, report.contract, links_for(report), max_tokens)
        decision = judge_decision(outcome, self.policy)
        self.counts[decision.result] += 1
        return outcome, decision

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self.provider.aclose()


def same_model(generator: Provider, judge: Provider) -> bool:
    """Seed 004: a judge of the same model shares the generator's blind spots."""
    return model_id(generator) == model_id(judge)


def build_judge(options: RunOptions, *, generator: Provider | None, store: Store, contract: Contract,
                base_url: str | None = None, api_key: str | None = None) -> tuple[Judge, list[str]]:
    """The judge ``options.judge`` names for a run, with its policy resolved against the calibrations on record,
    and the notes its user should read: why ``block`` was downgraded, and a warning when judge and generator are
    one model. ``base_url`` and ``api_key``: the judge's server as resolved (default: ``OPENAI_*``).

    The judge gets its own queue, concurrency and timeout; its 429s and timeouts lower only its own limit. Modes:
    ``judge_mode`` for every metric, else the contract settings' per-metric modes (default review). A rubric,
    model string or contract judge mode that cannot be used raises ``UsageError`` naming the option.
    """
    from extractor.judge.stage import load_rubric
    from extractor.providers import ProviderSettings, from_string

    assert options.judge is not None, "build_judge needs options with a judge"
    try:
        rubric = load_rubric(options.judge_rubric)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    queue = JudgeQueue(options.judge_concurrency, options.judge_queue)
    settings = ProviderSettings.of(options, connections=options.judge_concurrency, judge=True)
    try:
        provider = from_string(options.judge, base_url=base_url, api_key=api_key, settings=settings,
                               on_rate_limit=queue.limit.on_rate_limit, on_timeout=queue.limit.on_timeout)
    except (ValueError, ImportError) as error:
        raise UsageError(f"--judge: {error}") from None
    metric_modes = {} if options.judge_mode is not None else dict(contract.modes.judge)
    try:
        policy = resolve_policy(store, model_id(provider), rubric.version, options.judge_threshold,
                                options.judge_mode or JudgeMode.review, metric_modes)
    except ValueError as error:
        raise UsageError(f"contract {contract.id} ({contract.folder}): {error}") from None
    notes = [f"note: judge runs in {policy.mode.value} mode: {policy.reason}"] if policy.reason else []
    same = generator is not None and same_model(generator, provider)
    if same:
        notes.append(f"warning: the judge ({model_id(provider)}) is the generator's own model; it tends to share the "
                     "generator's blind spots. Use a different model for the judge (recorded in the run config).")
    return Judge(provider, policy, rubric, same_model_as_generator=same, queue=queue,
                 timeout_s=options.judge_timeout), notes
