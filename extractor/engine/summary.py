"""What a batch reports: one outcome per input, the run's counts, and the hooks a front end may watch."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from extractor.vocab import Outcome, SkipReason


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

    @property
    def counts(self) -> Counter[str]:
        return Counter(outcome.state for outcome in self.outcomes)

    @property
    def top_rules(self) -> list[tuple[str, int]]:
        return Counter(rule for o in self.outcomes for rule in o.rule_ids).most_common(10)

    @property
    def tokens(self) -> int:
        return sum(outcome.tokens for outcome in self.outcomes)

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
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
            "rate_limits": self.rate_limits,
            "timeouts": self.timeouts,
            "lowest_concurrency": self.lowest_concurrency,
            "documents": len(self.outcomes),
            "counts": dict(sorted(self.counts.items())),
            "retried_errors": self.retried_errors,
            "skipped": [{"reason": reason, "run_id": run, "documents": count}
                        for reason, run, count in self.skipped_because()],
            "unsupported_files": dict(sorted(self.unsupported.items())),
            "nothing_found": self.nothing_found,
            "top_rule_ids": dict(self.top_rules),
            "tokens": self.tokens,
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
