"""``extract compare A B --gold DIR``: two selections scored against the same gold, paired by document
(docs/design.md#evaluation).

Only documents both sides ran and gold has are compared. Per field path and overall, the difference in F1
(normalised, B - A) gets a paired bootstrap interval (one set of document resamples for both sides); McNemar's
exact test compares the documents each side got fully right. The accuracy decision:

- **BLOCK** when the overall difference is significantly below ``-max_drop`` (the whole 95% interval is), or
  when McNemar's p < ``alpha`` with more documents fully right only in A than only in B: a significant
  accuracy regression;
- **MANUAL_REVIEW** when some field regressed significantly (its interval below ``-max_drop``) but not overall;
- **NOT_EVALUABLE** when no document is on both sides with gold; else **PROMOTE**.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from extractor.evaluation.align import COLUMNS
from extractor.evaluation.evaluate import ScoredDocument, cost_summary, score_selection, spend_of
from extractor.evaluation.metrics import (
    CANDIDATE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    GOLD,
    NORMALISED,
    Interval,
    f1,
    f1_of,
    mcnemar_exact,
    percentile_interval,
    resample_weights,
)
from extractor.vocab import GateDecision

if TYPE_CHECKING:
    from extractor.store import RunInfo, Store

DEFAULT_ALPHA = 0.05
DEFAULT_MAX_DROP = 0.0


@dataclass(frozen=True)
class FieldChange:
    """One field path's F1 on both sides and the paired interval of the difference."""

    contract: str
    name: str
    f1_a: float | None
    f1_b: float | None
    interval: Interval
    counts_a: dict[str, int]
    counts_b: dict[str, int]

    @property
    def difference(self) -> float | None:
        return None if self.f1_a is None or self.f1_b is None else self.f1_b - self.f1_a

    def regressed(self, max_drop: float) -> bool:
        """Significantly worse: the whole interval of B - A lies below ``-max_drop``."""
        return self.interval.high is not None and self.interval.high < -max_drop

    def to_json(self) -> dict[str, Any]:
        return {"contract": self.contract, "field": self.name, "f1_a": self.f1_a, "f1_b": self.f1_b,
                "difference": self.difference, "difference_ci": self.interval.to_json(),
                "counts_a": self.counts_a, "counts_b": self.counts_b}


@dataclass
class AccuracyComparison:
    decision: GateDecision
    reason: str
    documents: int
    max_drop: float
    alpha: float
    resamples: int
    seed: int
    overall: FieldChange | None = None
    fields: list[FieldChange] = field(default_factory=list)
    only_a_right: int = 0
    only_b_right: int = 0
    both_right: int = 0
    mcnemar_p: float = 1.0
    unpaired: dict[str, int] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    """Per side (``baseline``, ``candidate``): cost in all, per document and per correct field."""

    @property
    def regressed(self) -> list[FieldChange]:
        return [f for f in self.fields if f.regressed(self.max_drop)]

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value, "reason": self.reason, "documents": self.documents,
            "settings": {"max_f1_drop": self.max_drop, "alpha": self.alpha, "resamples": self.resamples,
                         "seed": self.seed, "level": 0.95, "unit": "documents, paired"},
            "overall": None if self.overall is None else self.overall.to_json(),
            "fields": [f.to_json() for f in self.fields],
            "regressed_fields": [f"{f.contract} {f.name}" for f in self.regressed],
            "fully_right": {"both": self.both_right, "only_baseline": self.only_a_right,
                            "only_candidate": self.only_b_right, "mcnemar_exact_p": self.mcnemar_p},
            "unpaired": self.unpaired,
            "cost": self.cost,
        }


def compare_accuracy(store: Store, runs_a: Sequence[RunInfo], runs_b: Sequence[RunInfo], gold: Sequence[Path], *,
                     max_drop: float = DEFAULT_MAX_DROP, alpha: float = DEFAULT_ALPHA,
                     resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> AccuracyComparison:
    """Both sides scored against ``gold``, paired by document sha256, and the accuracy decision."""
    scored_a, _, _, _ = score_selection(store, runs_a, gold)
    scored_b, _, _, _ = score_selection(store, runs_b, gold)
    by_a = {d.sha256: d for d in scored_a if d.evaluable}  # a document the model never answered: no accuracy
    by_b = {d.sha256: d for d in scored_b if d.evaluable}
    shared = sorted(set(by_a) & set(by_b), key=lambda sha: (by_a[sha].path, sha))
    result = AccuracyComparison(GateDecision.NOT_EVALUABLE, "", len(shared), max_drop, alpha, resamples, seed,
                                unpaired={"baseline_only": len(set(by_a) - set(by_b)),
                                          "candidate_only": len(set(by_b) - set(by_a))})
    if not shared:
        result.reason = "no document with a gold record is on both sides"
        return result
    a = [by_a[sha] for sha in shared]
    b = [by_b[sha] for sha in shared]
    labels = sorted({(d.contract, label) for d in (*a, *b) for label in d.score.fields})
    counts_a, counts_b = _matrix(a, labels), _matrix(b, labels)  # documents x (overall + fields) x columns
    sums_a, sums_b = _resampled(counts_a, counts_b, resamples, seed)
    differences = f1_of(sums_b, NORMALISED) - f1_of(sums_a, NORMALISED)  # resamples x (overall + fields)
    changes = [_change(contract, name, counts_a[:, i].sum(axis=0), counts_b[:, i].sum(axis=0), differences[:, i])
               for i, (contract, name) in enumerate([("", "overall"), *labels])]
    result.overall, result.fields = changes[0], changes[1:]
    right_a = np.array([d.fully_right for d in a])
    right_b = np.array([d.fully_right for d in b])
    result.both_right = int(np.sum(right_a & right_b))
    result.only_a_right, result.only_b_right = int(np.sum(right_a & ~right_b)), int(np.sum(~right_a & right_b))
    result.mcnemar_p = mcnemar_exact(result.only_a_right, result.only_b_right)
    result.decision, result.reason = _decide(result)
    right = {"baseline": int(counts_a[:, 0, NORMALISED].sum()), "candidate": int(counts_b[:, 0, NORMALISED].sum())}
    for side, runs, documents in (("baseline", runs_a, a), ("candidate", runs_b, b)):
        result.cost[side] = cost_summary(spend_of(store, runs, documents), len(documents), right[side])
    return result


def _matrix(documents: Sequence[ScoredDocument], labels: Sequence[tuple[str, str]]) -> np.ndarray:
    index = {label: i + 1 for i, label in enumerate(labels)}
    counts = np.zeros((len(documents), len(labels) + 1, len(COLUMNS)), dtype=np.int64)
    for row, document in enumerate(documents):
        for label, values in document.score.fields.items():
            counts[row, index[(document.contract, label)]] = values
    counts[:, 0] = counts[:, 1:].sum(axis=1)
    return counts


def _resampled(counts_a: np.ndarray, counts_b: np.ndarray, resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Both sides' counts summed over the same document resamples: ``resamples x groups x columns`` each."""
    n, groups, width = counts_a.shape
    flat_a = counts_a.reshape(n, -1).astype(np.float64)
    flat_b = counts_b.reshape(n, -1).astype(np.float64)
    parts_a, parts_b = [], []
    for weights in resample_weights(n, resamples, seed):
        w = weights.astype(np.float64)
        parts_a.append(w @ flat_a)
        parts_b.append(w @ flat_b)
    return (np.vstack(parts_a).reshape(-1, groups, width), np.vstack(parts_b).reshape(-1, groups, width))


def _change(contract: str, name: str, total_a: np.ndarray, total_b: np.ndarray, differences: np.ndarray) -> FieldChange:
    return FieldChange(contract, name, f1(total_a[NORMALISED], total_a[GOLD], total_a[CANDIDATE]),
                       f1(total_b[NORMALISED], total_b[GOLD], total_b[CANDIDATE]), percentile_interval(differences),
                       {c: int(total_a[i]) for i, c in enumerate(COLUMNS)},
                       {c: int(total_b[i]) for i, c in enumerate(COLUMNS)})


def _decide(result: AccuracyComparison) -> tuple[GateDecision, str]:
    overall = result.overall
    assert overall is not None
    shown = "-" if overall.difference is None else f"{overall.difference:+.3f}"
    interval = overall.interval
    where = "-" if interval.low is None else f"[{interval.low:+.3f}, {interval.high:+.3f}]"
    fully = (f"fully right only in baseline {result.only_a_right}, only in candidate {result.only_b_right}, "
             f"McNemar exact p = {result.mcnemar_p:.4f}")
    summary = f"F1 candidate - baseline {shown} {where} on {result.documents} document(s); {fully}"
    below = "0" if result.max_drop == 0 else f"-{result.max_drop:g} (--max-f1-drop)"
    if overall.regressed(result.max_drop):
        return GateDecision.BLOCK, (f"accuracy dropped significantly (the whole 95% interval of the F1 difference is "
                                    f"below {below}): {summary}")
    if result.mcnemar_p < result.alpha and result.only_a_right > result.only_b_right:
        return GateDecision.BLOCK, f"fewer documents fully right (p < {result.alpha:g}): {summary}"
    regressed = result.regressed
    if regressed:
        names = ", ".join(f.name for f in regressed[:5]) + (" ..." if len(regressed) > 5 else "")
        return GateDecision.MANUAL_REVIEW, f"field(s) regressed significantly: {names}; {summary}"
    return GateDecision.PROMOTE, f"no significant accuracy regression: {summary}"


SEVERITY = (GateDecision.PROMOTE, GateDecision.NOT_EVALUABLE, GateDecision.MANUAL_REVIEW, GateDecision.BLOCK)


def combined(pass_rate: GateDecision, accuracy: GateDecision) -> GateDecision:
    """The release decision from the pass-rate gate and the accuracy decision: the more severe of the two."""
    return max(pass_rate, accuracy, key=SEVERITY.index)
