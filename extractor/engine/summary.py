"""What a batch reports: one outcome per input, the run's counts, and the hooks a front end may watch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from extractor.prices import Spend
from extractor.vocab import GATE_EXIT_CODES, ExitCode, GateDecision, Outcome, SkipReason

NEEDS_A_PERSON = (Outcome.MANUAL_REVIEW, Outcome.BLOCKED)
"""Documents a person must decide (``extract review`` lists them)."""
NOT_ANSWERED = (Outcome.ERROR,)
"""Documents the model never answered (transport, timeout, refused request): nothing for a person to decide,
and a rerun retries them."""
NOT_DECIDED = (Outcome.INTERRUPTED, Outcome.INPUT_ERROR)
"""Inputs this run could not evaluate: among evaluated ones they make the outcome MANUAL_REVIEW (docs/design.md#exit-codes)."""


def run_outcome(states: Iterable[str]) -> GateDecision:
    """A run's outcome from its documents' states, conservatively (docs/design.md#exit-codes).

    Any BLOCKED -> BLOCK; else any ERROR (the model never answered it) -> NOT_EVALUABLE: the run cannot be
    judged until a rerun gets the answers, and a person has nothing to decide about those documents; else any
    MANUAL_REVIEW -> MANUAL_REVIEW; else no document evaluated (none READY_FOR_REVIEW: nothing given,
    everything skipped, unreadable or interrupted) -> NOT_EVALUABLE; else any input the run could not evaluate
    (unreadable, interrupted) -> MANUAL_REVIEW; else PROMOTE. Skipped documents were decided by an earlier run
    and take no part. PROMOTE promotes nothing by itself: every record still waits for a person's approval
    before export.
    """
    seen = set(states)
    if Outcome.BLOCKED in seen:
        return GateDecision.BLOCK
    if seen & set(NOT_ANSWERED):
        return GateDecision.NOT_EVALUABLE
    if Outcome.MANUAL_REVIEW in seen:
        return GateDecision.MANUAL_REVIEW
    if Outcome.READY_FOR_REVIEW not in seen:
        return GateDecision.NOT_EVALUABLE
    if seen & set(NOT_DECIDED):
        return GateDecision.MANUAL_REVIEW
    return GateDecision.PROMOTE


@dataclass
class DocumentOutcome:
    """Where one input ended in this run, and why (``cause``) when that is not plain success.

    ``skip`` and ``other_run`` say why a document was skipped (done before by, or busy in, that run);
    ``retried`` marks a document that ended ERROR in an earlier run and was tried again.
    """

    path: str
    state: Outcome
    cause: str | None = None
    rule_ids: tuple[str, ...] = ()
    tokens: int = 0
    document_run_id: int | None = None
    skip: SkipReason | None = None
    other_run: str | None = None
    retried: bool = False

    def to_json(self) -> dict[str, Any]:
        return vars(self) | {"rule_ids": list(self.rule_ids)}


@dataclass
class RunSummary:
    """The outcomes of one run; ``run_id`` is None when nothing was there to do (no run was recorded)."""

    run_id: str | None
    outcomes: list[DocumentOutcome] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False
    rate_limits: int = 0  # 429 answers seen; each one halved the concurrency
    timeouts: int = 0  # timed-out calls; each one halved the concurrency too
    lowest_concurrency: int | None = None  # the lowest the concurrency went (None: never lowered)
    unsupported: dict[str, int] = field(default_factory=dict)  # suffix -> files in folders that are not documents
    nothing_found: str | None = None  # why there was nothing to read, when there was not
    stopped: str | None = None  # why the run stopped early when no signal stopped it (--max-cost)
    spend: Spend | None = None  # the model calls' tokens and cost, from the run log (``extractor.prices``)

    @property
    def counts(self) -> Counter[str]:
        return Counter(outcome.state for outcome in self.outcomes)

    @property
    def outcome(self) -> GateDecision:
        """The run's outcome (``run_outcome`` of its documents)."""
        return run_outcome(o.state for o in self.outcomes)

    @property
    def exit_code(self) -> ExitCode:
        """What ``extract run`` exits with: 130 interrupted; else 1 for BLOCK (a critical finding outranks
        everything else); else 2 when an input was unusable; else the outcome's code as ``extract compare`` uses
        it (0 PROMOTE, 3 MANUAL_REVIEW, 4 NOT_EVALUABLE)."""
        if self.interrupted:
            return ExitCode.INTERRUPTED
        outcome = self.outcome
        if outcome is not GateDecision.BLOCK and self.counts[Outcome.INPUT_ERROR]:
            return ExitCode.USAGE
        return GATE_EXIT_CODES[outcome]

    @property
    def top_rules(self) -> list[tuple[str, int]]:
        return Counter(rule for o in self.outcomes for rule in o.rule_ids).most_common(10)

    @property
    def tokens(self) -> int:
        return sum(outcome.tokens for outcome in self.outcomes)

    @property
    def evaluated(self) -> int:
        """Documents this run converted (not skipped, not unusable, not interrupted): what its cost was spent on."""
        return sum(o.state not in (Outcome.SKIPPED, *NOT_DECIDED) for o in self.outcomes)

    @property
    def needs_person(self) -> int:
        """Documents a person must decide (MANUAL_REVIEW, BLOCKED)."""
        return sum(self.counts[state] for state in NEEDS_A_PERSON)

    @property
    def not_answered(self) -> list[DocumentOutcome]:
        """Documents the model never answered (ERROR), in input order."""
        return [outcome for outcome in self.outcomes if outcome.state in NOT_ANSWERED]

    def not_answered_causes(self) -> list[tuple[str, int]]:
        """Why the model never answered, most frequent first: ``(cause, documents)``."""
        return Counter(outcome.cause or "no cause recorded" for outcome in self.not_answered).most_common()

    @property
    def retried_errors(self) -> int:
        return sum(outcome.retried for outcome in self.outcomes)

    def skipped_because(self) -> list[tuple[SkipReason, str | None, int]]:
        """``(reason, run, documents)`` for the skipped documents, most first: why each group was skipped."""
        groups = Counter((o.skip, o.other_run) for o in self.outcomes if o.state == Outcome.SKIPPED and o.skip)
        return [(reason, run, count) for (reason, run), count in groups.most_common()]

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "outcome": self.outcome.value,
            "exit_code": int(self.exit_code),
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
            "rate_limits": self.rate_limits,
            "timeouts": self.timeouts,
            "lowest_concurrency": self.lowest_concurrency,
            "documents": len(self.outcomes),
            "counts": dict(sorted(self.counts.items())),
            "needs_person": self.needs_person,
            "not_answered": len(self.not_answered),
            "not_answered_causes": [{"cause": cause, "documents": count} for cause, count in self.not_answered_causes()],
            "retried_errors": self.retried_errors,
            "skipped": [{"reason": reason, "run_id": run, "documents": count}
                        for reason, run, count in self.skipped_because()],
            "unsupported_files": dict(sorted(self.unsupported.items())),
            "nothing_found": self.nothing_found,
            "top_rule_ids": dict(self.top_rules),
            "tokens": self.tokens,
            "stopped": self.stopped,
            "cost": None if self.spend is None else self.spend.to_json() | {
                "per_document_usd": self.spend.per(self.evaluated)},
            "outcomes": [outcome.to_json() for outcome in self.outcomes],
        }


class Progress:
    """What a front end may show while a batch runs; the default shows nothing."""

    def started(self, total: int) -> None:
        """Called once with the number of inputs (files plus unusable paths)."""

    def finished(self, outcome: DocumentOutcome) -> None:
        """Called as each input reaches its outcome."""

    def window(self, path: str, done: int, total: int) -> None:
        """Called as each window of a long document gets its answer (``done`` of ``total``)."""

    def page(self, path: str, done: int, total: int) -> None:
        """Called as each page of a scan is OCR'd (``done`` of ``total``), from the worker reading it."""

    def calls(self, in_flight: Callable[[], int]) -> None:
        """Called once, before the first call, with a way to count the model calls in flight."""

    def answered(self, tokens: int) -> None:
        """Called as each model call is answered, with its prompt and completion tokens (0 when not reported)."""

    def note(self, line: str) -> None:
        """A line a person should read while the batch goes on (the broker is away, and back)."""
