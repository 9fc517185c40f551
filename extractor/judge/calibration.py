"""Calibrating a judge against two human annotators (docs/design.md#judge-calibration), with numpy only.

The report answers, in this order: do the people agree (raw agreement, Cohen's kappa; "undefined" when
both annotators used one and the same class, never a number), are both classes present enough (minority
share >= 30%, warned before any metric), does the judge separate the classes (AUROC on raw scores), how
good is it at the operating threshold (MCC and agreement at 0.8) and at others (sweep 0.1..0.9), how sure
are we (95% percentile bootstrap intervals: 1,000 resamples of the cases, the same resamples for every
metric, numpy ``Generator(PCG64(seed))`` with 42 by default), and where it is confidently wrong (score >= 0.9 on a
case people labelled unsupported). Then a verdict under a documented, settable ``VerdictPolicy``.

Why numpy and not scikit-learn: the product must not pull a machine-learning stack for five formulas;
tests check every number against scikit-learn on fixed data, and the bootstrap against a reference that
runs scikit-learn on the same resample indices.

Labels: 1 = the excerpt supports the value. The gold label of a case is the adjudicated label when the
file has one, else the annotators' label when they agree; disagreements without adjudication are listed
for adjudication and left out of the judge's metrics (never resolved by a coin or by either annotator).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extractor.calibration_report import (
    AnnotatorAgreement,
    Bootstrap,
    CalibrationReport,
    CaseCounts,
    ClassBalance,
    ConfidentMiss,
    Disagreement,
    JudgeMetrics,
    JudgeProblem,
    Metric,
    SweepPoint,
    VerdictPolicy,
    fmt,
)
from extractor.vocab import CalibrationVerdict

SWEEP = tuple(round(0.1 * step, 1) for step in range(1, 10))


@dataclass(frozen=True)
class Case:
    """One labelled link; ``score`` is None when the judge gave none (protocol error or empty cell)."""

    case_id: str
    label_1: int
    label_2: int
    adjudicated: int | None = None
    score: float | None = None
    value: str = ""
    excerpt: str = ""
    source: str = ""
    language: str = ""  # optional: per-language figures (lexical support calibration)
    judge_status: str = "scored"  # "scored", "missing", "protocol_error", "not_evaluable"
    judge_error: str | None = None

    @property
    def gold(self) -> int | None:
        if self.adjudicated is not None:
            return self.adjudicated
        return self.label_1 if self.label_1 == self.label_2 else None


# ---------------------------------------------------------------- metrics (rows = resamples)


def _rows(values: Any) -> np.ndarray:
    array = np.asarray(values)
    return array[None, :] if array.ndim == 1 else array


def kappa_rows(a: Any, b: Any) -> np.ndarray:
    """Cohen's kappa of two binary raters per row; NaN where undefined (both raters one and the same class).

    kappa = 1 - n * disagreements / (A1*B0 + A0*B1), integer counts, so "undefined" is decided exactly.
    """
    a, b = _rows(a).astype(np.int64), _rows(b).astype(np.int64)
    n = a.shape[1]
    a1, b1 = a.sum(axis=1), b.sum(axis=1)
    a0, b0 = n - a1, n - b1
    disagreements = (a != b).sum(axis=1)
    expected = a1 * b0 + a0 * b1
    out = np.full(a.shape[0], np.nan)
    defined = expected > 0
    out[defined] = 1.0 - n * disagreements[defined] / expected[defined]
    return out


def agreement_rows(a: Any, b: Any) -> np.ndarray:
    a, b = _rows(a), _rows(b)
    return (a == b).mean(axis=1)


def mcc_rows(y: Any, predicted: Any) -> np.ndarray:
    """Matthews correlation per row; 0.0 where a margin is empty (scikit-learn's convention)."""
    y, p = _rows(y).astype(bool), _rows(predicted).astype(bool)
    tp = (y & p).sum(axis=1).astype(np.float64)
    tn = (~y & ~p).sum(axis=1).astype(np.float64)
    fp = (~y & p).sum(axis=1).astype(np.float64)
    fn = (y & ~p).sum(axis=1).astype(np.float64)
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    out = np.zeros(y.shape[0])
    positive = denominator > 0
    out[positive] = (tp * tn - fp * fn)[positive] / np.sqrt(denominator[positive])
    return out


def auroc_rows(y: Any, scores: Any, *, chunk_cells: int = 2_000_000) -> np.ndarray:
    """Area under the ROC curve per row (Mann-Whitney with average ranks for ties); NaN with one class only.

    Ties are ranked exactly: scores are first replaced by integer codes (``np.unique``), then each row is
    offset by ``row * n_codes`` so one sort ranks all rows without floating-point collisions.
    """
    y, s = _rows(y).astype(np.int64), _rows(scores)
    _, codes = np.unique(s, return_inverse=True)
    codes = codes.reshape(s.shape).astype(np.int64)
    n_codes = int(codes.max()) + 1 if codes.size else 1
    rows, n = y.shape
    out = np.full(rows, np.nan)
    step = max(1, chunk_cells // max(n, 1))
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        keys = codes[start:stop] + (np.arange(stop - start, dtype=np.int64) * n_codes)[:, None]
        flat = keys.ravel()
        ordered = np.sort(flat)
        low = np.searchsorted(ordered, flat, side="left")
        high = np.searchsorted(ordered, flat, side="right")
        offsets = np.repeat(np.arange(stop - start, dtype=np.int64) * n, n)
        ranks = ((low + high + 1) / 2.0 - offsets).reshape(stop - start, n)
        labels = y[start:stop]
        positives = labels.sum(axis=1)
        negatives = n - positives
        rank_sum = (ranks * labels).sum(axis=1)
        both = (positives > 0) & (negatives > 0)
        out[start:stop][both] = (rank_sum - positives * (positives + 1) / 2.0)[both] / (positives * negatives)[both]
    return out


def bootstrap_indices(n: int, resamples: int = 1000, seed: int = 42) -> np.ndarray:
    """Case indices of every resample (rows), drawn with replacement; the same for every metric."""
    generator = np.random.Generator(np.random.PCG64(seed))
    return generator.integers(0, n, size=(resamples, n))


def percentile_interval(values: np.ndarray) -> tuple[float, float] | None:
    """The 95% percentile interval of the defined (non-NaN) resample values; None if none is defined."""
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return None
    low, high = np.percentile(defined, [2.5, 97.5])
    return float(low), float(high)


def _metric(point: float, samples: np.ndarray, undefined_reason: str | None = None) -> Metric:
    """A point estimate with its interval; an undefined point is ``None`` with the reason, never a number."""
    undefined_resamples = int(np.isnan(samples).sum())
    if math.isnan(point):
        return Metric(None, None, None, undefined_reason or "undefined", undefined_resamples)
    interval = percentile_interval(samples)
    return Metric(float(point), interval[0] if interval else None, interval[1] if interval else None, None,
                  undefined_resamples)


# ---------------------------------------------------------------- the report


@dataclass
class CalibrationInput:
    cases: list[Case]
    judge_model: str
    rubric_version: str
    labels_file: str
    labels_sha256: str
    score_source: str
    notes: list[str] = field(default_factory=list)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def calibrate(data: CalibrationInput, policy: VerdictPolicy | None = None) -> CalibrationReport:
    """The full report; ``CalibrationReport.to_json`` is what is stored and printed."""
    policy = policy or VerdictPolicy()
    cases = data.cases
    if not cases:
        raise ValueError("no cases")
    l1 = np.array([c.label_1 for c in cases], dtype=np.int64)
    l2 = np.array([c.label_2 for c in cases], dtype=np.int64)

    # Annotators: on every case, with their own bootstrap over all cases.
    annotator_idx = bootstrap_indices(len(cases), policy.resamples, policy.seed)
    kappa_point = float(kappa_rows(l1, l2)[0])
    classes = sorted({*l1.tolist(), *l2.tolist()})
    kappa_undefined = (f"both annotators used only label {classes[0]}: agreement beyond chance is undefined"
                       if len(classes) == 1 else "undefined: no disagreement is possible by chance")
    annotators = AnnotatorAgreement(
        cases=len(cases),
        raw_agreement=_metric(float(agreement_rows(l1, l2)[0]), agreement_rows(l1[annotator_idx], l2[annotator_idx])),
        kappa=_metric(kappa_point, kappa_rows(l1[annotator_idx], l2[annotator_idx]), kappa_undefined),
        disagreements=tuple(Disagreement(c.case_id, c.label_1, c.label_2, c.adjudicated, c.value, c.excerpt, c.source)
                            for c in cases if c.label_1 != c.label_2),
    )

    unresolved = [c for c in cases if c.gold is None]
    no_score = [c for c in cases if c.gold is not None and c.score is None]
    used = [c for c in cases if c.gold is not None and c.score is not None]
    y = np.array([c.gold for c in used], dtype=np.int64)
    scores = np.array([c.score for c in used], dtype=np.float64)
    positives = int(y.sum())
    negatives = len(used) - positives
    minority = min(positives, negatives) / len(used) if used else 0.0
    balance_ok = bool(used) and minority >= policy.min_minority_share
    balance = ClassBalance(
        supported=positives, unsupported=negatives, minority_share=minority, ok=balance_ok,
        warning=None if balance_ok else (
            f"class balance: the minority class is {minority:.0%} of {len(used)} usable cases "
            f"(< {policy.min_minority_share:.0%}); every metric below is fragile and block is not possible"),
    )
    counts = CaseCounts(total=len(cases), agreed=sum(c.label_1 == c.label_2 for c in cases),
                        disagreements=len(annotators.disagreements),
                        adjudicated=sum(c.adjudicated is not None for c in cases),
                        unresolved_disagreements=len(unresolved), without_score=len(no_score), used=len(used),
                        protocol_errors=sum(c.judge_status == "protocol_error" for c in cases))

    judge = JudgeMetrics(None, None, None, ())
    confident: tuple[ConfidentMiss, ...] = ()
    if used:
        idx = bootstrap_indices(len(used), policy.resamples, policy.seed)
        y_b, s_b = y[idx], scores[idx]
        auroc = _metric(float(auroc_rows(y, scores)[0]), auroc_rows(y_b, s_b), "only one class among the usable cases")
        points = {threshold: _sweep_point(threshold, y, scores, y_b, s_b) for threshold in sorted({*SWEEP, policy.threshold})}
        operating = points[policy.threshold]
        judge = JudgeMetrics(auroc, operating.mcc, operating.agreement, tuple(points[t] for t in SWEEP))
        confident = tuple(
            ConfidentMiss(c.case_id, c.score, c.value, c.excerpt, c.source)
            for c in used if c.gold == 0 and c.score is not None and c.score >= policy.confident_score
        )

    verdict, reasons = _verdict(policy, counts, balance, annotators, judge, confident, negatives)
    return CalibrationReport(
        judge_model=data.judge_model,
        rubric_version=data.rubric_version,
        labels_file=data.labels_file,
        labels_sha256=data.labels_sha256,
        score_source=data.score_source,
        notes=tuple(data.notes),
        policy=policy,
        cases=counts,
        balance=balance,
        annotators=annotators,
        judge=judge,
        confident_misses=confident,
        bootstrap=Bootstrap(policy.resamples, policy.seed, "numpy PCG64", "percentile 2.5-97.5"),
        judge_problems=tuple(JudgeProblem(c.case_id, c.judge_status, c.judge_error)
                             for c in cases if c.judge_status != "scored"),
        verdict=verdict,
        reasons=tuple(reasons),
    )


def _sweep_point(threshold: float, y: np.ndarray, scores: np.ndarray, y_b: np.ndarray, s_b: np.ndarray) -> SweepPoint:
    """The judge at one threshold, on the cases (``y``, ``scores``) and on every resample (``y_b``, ``s_b``)."""
    predicted, predicted_b = scores >= threshold, s_b >= threshold
    return SweepPoint(
        threshold=threshold,
        mcc=_metric(float(mcc_rows(y, predicted)[0]), mcc_rows(y_b, predicted_b)),
        agreement=_metric(float(agreement_rows(y, predicted)[0]), agreement_rows(y_b, predicted_b)),
        tpr=float(predicted[y == 1].mean()) if (y == 1).any() else None,
        tnr=float((~predicted[y == 0]).mean()) if (y == 0).any() else None,
        predicted_supported_share=float(predicted.mean()),
    )


def _verdict(policy: VerdictPolicy, counts: CaseCounts, balance: ClassBalance, annotators: AnnotatorAgreement,
             judge: JudgeMetrics, confident: Sequence[ConfidentMiss], negatives: int
             ) -> tuple[CalibrationVerdict, list[str]]:
    """reject / admit-review / admit-block, with every reason that decided it."""
    used = counts.used
    if used < policy.min_cases:
        return CalibrationVerdict.reject, [
            f"only {used} usable case(s); at least {policy.min_cases} are needed for any decision"]
    auroc = judge.auroc
    if auroc is None or auroc.value is None:
        return CalibrationVerdict.reject, ["AUROC is undefined: the usable cases have one class only"]
    if auroc.low is None or auroc.low < policy.reject_auroc_lower:
        return CalibrationVerdict.reject, [
            f"AUROC {fmt(auroc)}: the lower bound is near 0.5 (< {policy.reject_auroc_lower:g}); "
            "the judge cannot be told apart from chance"]
    blockers: list[str] = []
    if used < policy.block_min_cases:
        blockers.append(f"{used} usable cases < {policy.block_min_cases} needed before a judge may block")
    if not balance.ok:
        blockers.append(f"minority class {balance.minority_share:.0%} < {policy.min_minority_share:.0%}")
    kappa = annotators.kappa
    if kappa.value is None:
        blockers.append("annotator kappa is undefined: the labels cannot show they are reliable")
    elif kappa.value < policy.block_min_kappa:
        blockers.append(f"annotator kappa {kappa.value:.3f} < {policy.block_min_kappa:g}: the labels are too "
                        "unreliable to certify a blocking judge")
    if auroc.low < policy.block_auroc_lower:
        blockers.append(f"AUROC lower bound {auroc.low:.3f} < {policy.block_auroc_lower:g}")
    mcc = judge.mcc
    mcc_low = None if mcc is None else mcc.low
    if mcc_low is None or mcc_low < policy.block_mcc_lower:
        low = "undefined" if mcc_low is None else f"{mcc_low:.3f}"
        blockers.append(f"MCC at {policy.threshold:g} lower bound {low} < {policy.block_mcc_lower:g}")
    miss_share = len(confident) / negatives if negatives else 0.0
    if miss_share > policy.block_max_confident_miss_share:
        blockers.append(f"confident misses {len(confident)}/{negatives} unsupported cases "
                        f"({miss_share:.0%} > {policy.block_max_confident_miss_share:.0%})")
    admitted = f"AUROC {fmt(auroc)} separates the classes (lower bound >= {policy.reject_auroc_lower:g})"
    if blockers:
        return CalibrationVerdict.admit_review, [admitted, *(f"not block: {b}" for b in blockers)]
    return CalibrationVerdict.admit_block, [
        admitted, f"MCC at {policy.threshold:g} {fmt(mcc)}",
        f"{used} usable cases, minority {balance.minority_share:.0%}, kappa {kappa.value:.3f}"]
