"""Where a document goes once its last candidate was checked: one pure decision, no I/O.

A critical finding (a leaked secret, invented personal data, a prompt echo, a forbidden phrase), a finding of
a rule in block mode, or a judge failure in block mode: BLOCKED, whatever else holds. No error finding: ready
for a person's review, unless a warning in review mode (the contract's needs-a-person list by default) or the
judge (when a run has one) sends it to a person. A judge ``warn`` stays READY_FOR_REVIEW with its mark and
cause, which ``extract review`` shows first (docs/design.md#judge: warn goes to the reviewer's queue, not back to the
model). Error findings after the one repair: manual review. The engine never approves anything:
READY_FOR_REVIEW still waits for a person, and BLOCKED is approved only by a person overriding the block
with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from extractor.evidence.report import Report
from extractor.vocab import MARK_BLOCK, DocumentState, JudgeMode, Severity

if TYPE_CHECKING:
    from extractor.engine.settings import RunSettings
    from extractor.judge.modes import JudgeDecision


@dataclass(frozen=True)
class Route:
    """The state a document ends in, why (``cause``), and the marks a reviewer sees (``needs_person``)."""

    state: DocumentState
    cause: str | None = None
    needs_person: tuple[str, ...] = ()


def route(report: Report, judge: JudgeDecision | None, settings: RunSettings, *,
          earlier: Report | None = None) -> Route:
    """The state for a document whose final candidate got ``report`` (``earlier``: the one before the repair).

    ``judge`` is the judge's decision on a candidate that passed every rule (None: no judge, or not judged).
    Each rule's mode comes from the contract settings: a warning in review or block mode needs a person;
    any finding of a rule in block mode adds the BLOCK mark.
    """
    critical = report.critical
    if critical:
        rules = tuple(dict.fromkeys(f.rule_id for f in critical))
        first = critical[0]
        return Route(DocumentState.BLOCKED, f"critical finding(s): {', '.join(rules)} (first: {first.location}: "
                     f"{first.message})", rules)
    contract = settings.contract
    blocking = sorted({f.rule_id for f in report.findings
                       if contract.rule_mode(f.rule_id, error=f.severity is Severity.ERROR).mode is JudgeMode.block})
    block_marks = (MARK_BLOCK,) if blocking else ()
    if not report.passed:
        both_unparseable = earlier is not None and not earlier.parsed and not report.parsed
        cause = ("unparseable twice" if both_unparseable
                 else f"failed validation after repair: {len(report.errors)} error(s)")
        if blocking:
            return Route(DocumentState.BLOCKED, f"BLOCK ({', '.join(blocking)} in block mode): {cause}",
                         (*block_marks, *blocking))
        return Route(DocumentState.MANUAL_REVIEW, cause)
    needing = sorted({f.rule_id for f in report.warnings
                      if contract.rule_mode(f.rule_id, error=False).mode is not JudgeMode.observe})
    causes = [f"warning needs a person: {', '.join(needing)}"] if needing else []
    marks = [*block_marks, *needing]
    if judge is not None and judge.to_person:
        causes.append(judge.cause or f"judge {judge.result}")
        marks += [mark for mark in judge.marks if mark not in marks]
    if blocking or (judge is not None and judge.block):
        return Route(DocumentState.BLOCKED, "; ".join(causes), tuple(marks))
    if causes:
        return Route(DocumentState.MANUAL_REVIEW, "; ".join(causes), tuple(marks))
    if judge is not None and judge.marks:  # a warning for the reviewer, shown first
        return Route(DocumentState.READY_FOR_REVIEW, judge.cause, judge.marks)
    return Route(DocumentState.READY_FOR_REVIEW)
