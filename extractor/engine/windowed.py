"""A long document, end to end: one call per window, the merge, whole-document validation, one repair round.

Each window's call is an attempt of the document run (kind ``generate``, its repair ``repair``) with its
window index and sentence range; its answer is checked for structure only. The merged candidate is recorded
as the document's own attempts (``generate`` 1 and, after the repair round, ``repair`` 2, no window) and
validated against the whole document by the same rules as any candidate, so review, export and the
statistics read it like a one-call candidate. The repair round sends each window only the findings it owns
(``owners``), worded in the window's own numbering, ids and sentences (``as_window_sees``); windows without
findings are not called again. A rerun of a document whose windows were
answered before (a killed or failed run, same configuration, same requests) records those answers again
(``reused_from``) and calls the model only for the others.
"""

from __future__ import annotations

import asyncio
import json
import time
from bisect import bisect_right
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from extractor import offload
from extractor.engine.calls import Conversion, Job, ModelCalls, rule_ids
from extractor.engine.route import route
from extractor.engine.stop import Interrupted
from extractor.evidence import fieldpath
from extractor.evidence.report import Finding, Report
from extractor.evidence.source import Source
from extractor.generate import GenerationRequest, ProviderError
from extractor.generate.prompt import render_request
from extractor.repair import render_repair
from extractor.vocab import AttemptKind, AttemptOutcome, DocumentState
from extractor.windows.merge import Merged, Partial, merge
from extractor.windows.plan import Window, window_lines

if TYPE_CHECKING:
    from extractor.store import AttemptInfo

MAX_OCCURRENCES = 20  # excerpt occurrences looked at when locating a step's evidence inside its window


@dataclass
class WindowAnswer:
    """One window's latest answer: the request it answered, the raw text, its structure check, its attempt."""

    window: Window
    request: GenerationRequest
    raw: str
    report: Report
    attempt_id: int
    tokens: int = 0

    @property
    def partial(self) -> dict[str, Any] | None:
        """The partial candidate, when it is a schema-valid object (else the window contributes nothing)."""
        usable = not self.report.findings and isinstance(self.report.candidate, dict)
        return self.report.candidate if usable else None


def number_of(window: Window, kind: AttemptKind) -> int:
    """Attempt numbers of window calls: after the merged candidate's 1 and 2, two per window (call, repair)."""
    return 2 * window.index + (1 if kind is AttemptKind.generate else 2)


class LongDocument:
    """The windows of one document and the calls, merge and checks made for them."""

    def __init__(self, job: Job, calls: ModelCalls, windows: list[Window]) -> None:
        self.job, self.calls, self.windows = job, calls, windows
        self.document = job.document
        self.contract = calls.settings.contract
        self.source = Source(self.document)
        self.starts = [window.start for window in windows]
        self.reusable: dict[str, AttemptInfo] = {}
        self.done = 0

    def request_for(self, window: Window) -> GenerationRequest:
        settings = self.calls.settings
        return render_request(self.calls.prompt, self.contract, self.document, temperature=settings.temperature,
                              max_tokens=settings.options.max_tokens or self.calls.budget.max_output,
                              lines=window_lines(self.document, window, len(self.windows)))

    def window_of(self, sentence_id: str) -> Window | None:
        position = self.positions.get(sentence_id)
        return None if position is None else self.windows[bisect_right(self.starts, position) - 1]

    @cached_property
    def positions(self) -> dict[str, int]:
        return {sentence.id: position for position, sentence in enumerate(self.document.sentences)}

    # -- window calls ---------------------------------------------------------------------------------

    async def answer(self, window: Window, request: GenerationRequest, kind: AttemptKind) -> WindowAnswer:
        """One window call (or the earlier answer to the very same request), checked and recorded."""
        fields = dict(window=window.index, first_sentence=window.first_number, last_sentence=window.last_number)
        number = number_of(window, kind)
        earlier = self.reusable.get(request.fingerprint)
        if earlier is not None and earlier.raw_response is not None:
            report = await self.check_structure(earlier.raw_response)
            attempt_id = await self.calls.recorder.attempt(self.calls.record(
                self.job, request, number=number, kind=kind, created_at=datetime.now(UTC),
                raw_response=earlier.raw_response, parsed=report.candidate, findings=_findings(report),
                outcome=_outcome(report), mode=earlier.mode, model=earlier.model, reused_from=earlier.id, **fields))
            return self._progress(WindowAnswer(window, request, earlier.raw_response, report, attempt_id))
        asked = await self.calls.ask(self.job, request, number=number, kind=kind, **fields)
        result = asked.result
        report = await self.check_structure(result.text)
        attempt_id = await self.calls.recorder.attempt(self.calls.record(
            self.job, asked.request, number=number, kind=kind, created_at=asked.called_at, raw_response=result.text,
            parsed=report.candidate, findings=_findings(report), outcome=_outcome(report), mode=result.mode,
            model=result.model, prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
            cached_tokens=result.cached_tokens,
            latency_ms=result.latency_ms, transport=[t.to_json() for t in result.transport], **fields))
        tokens = (result.prompt_tokens or 0) + (result.completion_tokens or 0)
        return self._progress(WindowAnswer(window, request, result.text, report, attempt_id, tokens))

    async def check_structure(self, raw: str) -> Report:
        """A window's answer against the structure rules, in the validation worker (off the event loop)."""
        report, seconds = await offload.check_structure(raw, self.contract)
        self.calls.cpu["validate"] += seconds
        return report

    def _progress(self, answer: WindowAnswer) -> WindowAnswer:
        self.done += 1
        self.calls.progress.window(str(self.job.path), self.done, len(self.windows))
        return answer

    async def answer_all(self, jobs: list[tuple[Window, GenerationRequest]], kind: AttemptKind) -> list[WindowAnswer]:
        """Every window's call at once (the run's limit bounds how many are in flight); all are awaited, so
        every answer that came is recorded even when another window failed. The first failure is raised."""
        results = await asyncio.gather(*(self.answer(w, r, kind) for w, r in jobs), return_exceptions=True)
        for failure in (Interrupted, ProviderError, BaseException):
            found = next((r for r in results if isinstance(r, failure)), None)
            if found is not None:
                raise found
        return [r for r in results if isinstance(r, WindowAnswer)]

    # -- the merged candidate -------------------------------------------------------------------------

    def locate(self, excerpt: str, index: int) -> int | None:
        """Where ``excerpt`` starts inside window ``index`` (its context included), for identifying steps."""
        window = self.windows[index - 1]
        sentences = self.document.sentences
        low, high = sentences[window.context].start, sentences[window.end - 1].end
        matcher = self.source.matcher(self.contract.settings.get("evidence_normalisation", "nfc_whitespace"))
        return next((start for start, _ in matcher.find_all(excerpt, MAX_OCCURRENCES) if low <= start < high), None)

    def merge(self, answers: dict[int, WindowAnswer]) -> Merged:
        assert self.contract.merge is not None
        partials = [Partial(index, frozenset(s.id for s in answer.window.own(self.document)), partial)
                    for index, answer in sorted(answers.items()) if (partial := answer.partial) is not None]
        started = time.thread_time()
        try:
            return merge(self.contract.merge, partials, self.locate)
        finally:
            self.calls.cpu["merge"] += time.thread_time() - started

    async def check(self, merged: Merged, answers: dict[int, WindowAnswer], *, number: int,
                    kind: AttemptKind) -> tuple[Report, int]:
        """Validate the merged candidate against the whole document and record it as the document's attempt."""
        raw = json.dumps(merged.candidate, ensure_ascii=False)
        report, seconds = await offload.validate(raw, self.document, self.contract)
        self.calls.cpu["validate"] += seconds
        report.findings += merged.findings
        ids = ", ".join(str(answers[index].attempt_id) for index in sorted(answers))
        request = GenerationRequest(
            messages=[{"role": "merge", "content": f"merged from {len(answers)} windows (attempts {ids}); "
                                                   f"{merged.dropped_context} coverage entries for context "
                                                   "sentences dropped"}],
            schema=self.contract.schema, schema_name=f"{self.contract.name}_v{self.contract.version}")
        record = report.to_json()
        outcome = AttemptOutcome.passed if report.passed else AttemptOutcome.failed
        attempt_id = await self.calls.recorder.attempt(self.calls.record(
            self.job, request, number=number, kind=kind, created_at=datetime.now(UTC), raw_response=raw,
            parsed=report.candidate, findings=record["findings"], fields=record["fields"],
            sentences=record["sentences"], evidence_spans=record["evidence_spans"], passed=report.passed,
            outcome=outcome))
        return report, attempt_id

    # -- the repair round -----------------------------------------------------------------------------

    def owners(self, report: Report, merged: Merged) -> dict[int, list[Finding]]:
        """Each error finding of the merged candidate, as its owning window sees it (local location)."""
        owned: dict[int, list[Finding]] = {}
        for finding in report.errors:
            window, location = self._owner(finding, merged)
            owned.setdefault(window, []).append(replace(finding, location=location))
        return owned

    def _owner(self, finding: Finding, merged: Merged) -> tuple[int, str]:
        steps = fieldpath.parse(finding.location) if finding.location != "$" else None
        if steps and len(steps) >= 2 and isinstance(steps[1], int) and str(steps[0]) in merged.origin:
            entries = merged.origin[str(steps[0])]
            if steps[1] < len(entries):
                window, local = entries[steps[1]]
                return window, fieldpath.location(steps[0], local, *steps[2:])
        if steps and str(steps[0]) in merged.scalar_origin:
            return merged.scalar_origin[str(steps[0])], finding.location
        sentence_id = (finding.hint or {}).get("sentence_id")
        owner = self.window_of(sentence_id) if isinstance(sentence_id, str) else None
        return (owner or self.windows[0]).index, finding.location

    async def as_window_sees(self, answer: WindowAnswer, findings: list[Finding]) -> list[Finding]:
        """The merged candidate's findings a window owns, in that window's own numbering and ids.

        The merged candidate numbers items across the document and reconciles ids, so its messages, and the
        nearest-sentence hints it searched the whole document for, would send a window to items, ids and
        sentences it has never seen. The window's own answer is therefore checked again on its own sentences
        (context included), and each owned finding is taken as that check words it: same rule, same local
        location, same sentence. A finding only the whole document shows (none of the window's own answer
        has it) keeps its rule and location and says what the rule checks, as its card words it.
        """
        sentences = self.document.sentences[answer.window.context:answer.window.end]
        own, seconds = await offload.validate(answer.raw, replace(self.document, sentences=sentences), self.contract)
        self.calls.cpu["validate"] += seconds
        twins: dict[tuple[str, str, Any], list[Finding]] = {}
        for finding in own.findings:
            twins.setdefault(_key(finding), []).append(finding)
        cards = {rule.card.rule_id: rule.card for rule in self.contract.rules}
        seen: list[Finding] = []
        for finding in findings:
            same = twins.get(_key(finding))
            if same:
                seen.append(replace(same.pop(0), severity=finding.severity))
                continue
            card = cards.get(finding.rule_id)
            sentence_id = (finding.hint or {}).get("sentence_id")
            mine = sentence_id in {sentence.id for sentence in sentences}
            seen.append(Finding(finding.rule_id, finding.severity, finding.location,
                                (card.fires_when if card else finding.rule_id)
                                + (f" ({sentence_id})" if mine else "") + "; seen when the parts of the document are "
                                "checked together", {"sentence_id": sentence_id} if mine else None))
        return seen

    def repair_request(self, answer: WindowAnswer, findings: list[Finding], report: Report) -> GenerationRequest:
        """The window's repair: its request and answer, then ``findings`` (``as_window_sees``) and its own sentences
        still unaccounted for."""
        own = answer.window.own(self.document)
        ids = {s.id for s in own}
        local = Report(report.contract, report.contract_version, report.validator_version, findings=findings,
                       sentences=[s for s in report.sentences if s.id in ids], candidate=answer.partial)
        if answer.partial is None:  # its answer was unusable: everything it owns is still to be accounted for
            local.findings = [*answer.report.findings, *findings]
        return render_repair(self.calls.prompt, answer.request, answer.raw, local, replace(self.document, sentences=own),
                             self.contract)


def _key(finding: Finding) -> tuple[str, str, Any]:
    """What makes a window's own finding the same as one of the merged candidate: rule, location, sentence."""
    return finding.rule_id, finding.location, (finding.hint or {}).get("sentence_id")


def _findings(report: Report) -> list[dict[str, Any]]:
    return [finding.to_json() for finding in report.findings]


def _outcome(report: Report) -> AttemptOutcome:
    """A window's answer is judged on structure only: usable (passed), not the schema (failed), not JSON."""
    if not report.parsed:
        return AttemptOutcome.unparseable
    return AttemptOutcome.failed if report.findings else AttemptOutcome.passed


async def convert_windows(job: Job, calls: ModelCalls, windows: list[Window]) -> Conversion:
    """Windows -> merge -> whole-document validation -> one repair round for the windows that own errors -> route."""
    long = LongDocument(job, calls, windows)
    if not job.force:
        long.reusable = await calls.recorder.window_answers(job.document_id)
    try:
        answers = {a.window.index: a for a in await long.answer_all([(w, long.request_for(w)) for w in windows],
                                                                      AttemptKind.generate)}
    except ProviderError as error:
        return Conversion(DocumentState.ERROR, f"window call failed: {error.cause}")
    tokens = sum(answer.tokens for answer in answers.values())
    merged = long.merge(answers)
    first, first_id = await long.check(merged, answers, number=1, kind=AttemptKind.generate)
    final, final_id = first, first_id
    earlier = None
    if not first.passed:
        owned = sorted(long.owners(first, merged).items())
        seen = await asyncio.gather(*(long.as_window_sees(answers[index], findings) for index, findings in owned))
        jobs = [(answers[index].window, long.repair_request(answers[index], findings, first))
                for (index, _), findings in zip(owned, seen)]
        try:
            repaired = await long.answer_all(jobs, AttemptKind.repair)
        except ProviderError as error:
            return Conversion(DocumentState.ERROR, f"repair call failed: {error.cause}", rule_ids(first),
                              final_attempt_id=first_id, tokens=tokens)
        for answer in repaired:
            tokens += answer.tokens
            if answer.partial is not None:  # an unusable repair leaves the window's first answer in place
                answers[answer.window.index] = answer
        merged = long.merge(answers)
        final, final_id = await long.check(merged, answers, number=2, kind=AttemptKind.repair)
        earlier = first
    decision = None
    if final.passed:  # judged once; a windowed document gets no regeneration (a person sees a judge fail)
        judged = await calls.judge(job, final)
        if judged is not None:
            decision, tokens = judged.decision, tokens + judged.tokens
    routed = route(final, decision, calls.settings, earlier=earlier)
    return Conversion(routed.state, routed.cause, rule_ids(final), routed.needs_person, final_id, tokens)

