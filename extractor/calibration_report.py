"""The judge calibration report as typed, frozen views (``extractor.judge.calibration.calibrate`` makes one).

Standard library only: the store reads reports back (``CalibrationInfo.report``) and must not pull numpy to
do so. ``to_json`` is the stored and printed form, key for key and in order the ``judge-calibration/1``
schema; ``from_json`` reads it back, so rows stored before these classes existed still load. Figures that
the report repeats (the headline ``summary``, the top-level ``threshold``, the bootstrap's undefined-resample
counts) are derived from the one place that holds them instead of being stored twice.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Self

from extractor.errors import UsageError
from extractor.vocab import CalibrationVerdict

REPORT_SCHEMA = "judge-calibration/1"


class FlatJSON:
    """A dataclass whose JSON is its fields by name, in order (no nested report parts): written and read here once."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(**data)


@dataclass(frozen=True)
class VerdictPolicy(FlatJSON):
    """When a judge is rejected, admitted to review, or admitted to block. Every bound is settable.

    Defaults (docs/design.md#judge-calibration): 30 cases minimum, 100+ before a judge may block, minority class >= 30%,
    reject when the AUROC interval's lower bound is near 0.5 (below 0.6), block only with a clearly
    discriminating judge (AUROC lower bound >= 0.75, MCC lower bound at the threshold >= 0.4), reliable
    labels (kappa >= 0.6) and few confident misses (<= 10% of the unsupported cases).
    """

    threshold: float = 0.8
    min_cases: int = 30
    block_min_cases: int = 100
    min_minority_share: float = 0.30
    reject_auroc_lower: float = 0.60
    block_auroc_lower: float = 0.75
    block_mcc_lower: float = 0.40
    block_min_kappa: float = 0.60
    block_max_confident_miss_share: float = 0.10
    confident_score: float = 0.9
    resamples: int = 1000
    seed: int = 42

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise UsageError(f"threshold must be between 0 and 1 (exclusive), not {self.threshold}")
        if self.resamples < 1:
            raise UsageError("resamples must be at least 1")


@dataclass(frozen=True)
class Metric:
    """A point estimate with its 95% bootstrap interval; an undefined point is ``None`` with the reason, never a
    number. ``undefined_resamples`` counts the resamples where the metric had no value (left out of the interval)."""

    value: float | None
    low: float | None
    high: float | None
    undefined_reason: str | None
    undefined_resamples: int

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "undefined": self.undefined_reason,
                "undefined_resamples": self.undefined_resamples}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Metric:
        return cls(data["value"], data["low"], data["high"], data["undefined"], data["undefined_resamples"])


def fmt(metric: Metric | None, digits: int = 3) -> str:
    """``0.871 [0.774, 0.951]``; ``undefined`` (with no number) when the metric is undefined; ``n/a`` when absent."""
    if metric is None:
        return "n/a"
    if metric.value is None:
        return "undefined"
    value = f"{metric.value:.{digits}f}"
    if metric.low is None or metric.high is None:
        return value
    return f"{value} [{metric.low:.{digits}f}, {metric.high:.{digits}f}]"


def _metric_or_none(data: dict[str, Any] | None) -> Metric | None:
    return None if data is None else Metric.from_json(data)


@dataclass(frozen=True)
class Disagreement(FlatJSON):
    """A case the two annotators labelled differently: listed for adjudication."""

    case_id: str
    label_1: int
    label_2: int
    adjudicated: int | None
    value: str
    excerpt: str
    source: str


@dataclass(frozen=True)
class AnnotatorAgreement:
    """How far the two people agree on every case: the ceiling a judge is measured against."""

    cases: int
    raw_agreement: Metric
    kappa: Metric
    disagreements: tuple[Disagreement, ...]

    def to_json(self) -> dict[str, Any]:
        return {"cases": self.cases, "raw_agreement": self.raw_agreement.to_json(), "kappa": self.kappa.to_json(),
                "disagreements": [d.to_json() for d in self.disagreements]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AnnotatorAgreement:
        return cls(data["cases"], Metric.from_json(data["raw_agreement"]), Metric.from_json(data["kappa"]),
                   tuple(Disagreement.from_json(d) for d in data["disagreements"]))


@dataclass(frozen=True)
class CaseCounts(FlatJSON):
    """Where the cases went: ``used`` is how many had a gold label and a score, so entered the judge's metrics."""

    total: int
    agreed: int
    disagreements: int
    adjudicated: int
    unresolved_disagreements: int
    without_score: int
    used: int
    protocol_errors: int


@dataclass(frozen=True)
class ClassBalance(FlatJSON):
    """The gold classes among the used cases; ``warning`` is set when the minority is too small to trust a metric."""

    supported: int
    unsupported: int
    minority_share: float
    ok: bool
    warning: str | None


@dataclass(frozen=True)
class SweepPoint:
    """The judge at one threshold (supported when score >= threshold); a rate is ``None`` when its class is absent."""

    threshold: float
    mcc: Metric
    agreement: Metric
    tpr: float | None
    tnr: float | None
    predicted_supported_share: float

    def to_json(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "mcc": self.mcc.to_json(), "agreement": self.agreement.to_json(),
                "tpr": self.tpr, "tnr": self.tnr, "predicted_supported_share": self.predicted_supported_share}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepPoint:
        return cls(data["threshold"], Metric.from_json(data["mcc"]), Metric.from_json(data["agreement"]),
                   data["tpr"], data["tnr"], data["predicted_supported_share"])


@dataclass(frozen=True)
class JudgeMetrics:
    """The judge against the gold labels: AUROC on raw scores, MCC and agreement at the operating threshold, and
    the sweep over the fixed thresholds. The metrics are ``None`` (and the sweep empty) when no case was usable."""

    auroc: Metric | None
    mcc: Metric | None
    agreement: Metric | None
    sweep: tuple[SweepPoint, ...]

    def to_json(self) -> dict[str, Any]:
        return {"auroc": None if self.auroc is None else self.auroc.to_json(),
                "mcc": None if self.mcc is None else self.mcc.to_json(),
                "agreement": None if self.agreement is None else self.agreement.to_json(),
                "sweep": [point.to_json() for point in self.sweep]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JudgeMetrics:
        return cls(_metric_or_none(data["auroc"]), _metric_or_none(data["mcc"]), _metric_or_none(data["agreement"]),
                   tuple(SweepPoint.from_json(point) for point in data["sweep"]))


@dataclass(frozen=True)
class ConfidentMiss(FlatJSON):
    """A case people labelled unsupported that the judge scored at or above the confident score."""

    case_id: str
    score: float
    value: str
    excerpt: str
    source: str


@dataclass(frozen=True)
class JudgeProblem(FlatJSON):
    """A case the judge gave no score for (never counted as a score)."""

    case_id: str
    status: str
    error: str | None


@dataclass(frozen=True)
class Bootstrap:
    """How the intervals were drawn, so a reader can reproduce them."""

    resamples: int
    seed: int
    generator: str
    interval: str


@dataclass(frozen=True)
class CalibrationReport:
    """One calibration of a judge (or a rule's score) against human labels, and the verdict it earns."""

    judge_model: str
    rubric_version: str
    labels_file: str
    labels_sha256: str
    score_source: str
    notes: tuple[str, ...]
    policy: VerdictPolicy
    cases: CaseCounts
    balance: ClassBalance
    annotators: AnnotatorAgreement
    judge: JudgeMetrics
    confident_misses: tuple[ConfidentMiss, ...]
    bootstrap: Bootstrap
    judge_problems: tuple[JudgeProblem, ...]
    verdict: CalibrationVerdict
    reasons: tuple[str, ...]

    @property
    def threshold(self) -> float:
        """The operating threshold the report (and so its verdict) is tied to."""
        return self.policy.threshold

    @property
    def summary(self) -> str:
        """One line: the headline numbers the verdict rests on."""
        return f"AUROC {fmt(self.judge.auroc)}, MCC {fmt(self.judge.mcc)}, n={self.cases.used}"

    def to_json(self) -> dict[str, Any]:
        undefined_resamples = {} if self.judge.auroc is None else {"auroc": self.judge.auroc.undefined_resamples}
        undefined_resamples["kappa"] = self.annotators.kappa.undefined_resamples
        return {
            "schema": REPORT_SCHEMA,
            "judge_model": self.judge_model,
            "rubric_version": self.rubric_version,
            "threshold": self.threshold,
            "labels_file": self.labels_file,
            "labels_sha256": self.labels_sha256,
            "score_source": self.score_source,
            "notes": list(self.notes),
            "policy": self.policy.to_json(),
            "cases": self.cases.to_json(),
            "balance": self.balance.to_json(),
            "annotators": self.annotators.to_json(),
            "judge": self.judge.to_json(),
            "confident_misses": [miss.to_json() for miss in self.confident_misses],
            "bootstrap": {**asdict(self.bootstrap), "undefined_resamples": undefined_resamples},
            "judge_problems": [problem.to_json() for problem in self.judge_problems],
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "summary": self.summary,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CalibrationReport:
        """A report from its stored JSON; another schema is refused rather than misread."""
        if data.get("schema") != REPORT_SCHEMA:
            raise ValueError(f"calibration report schema {data.get('schema')!r} is not {REPORT_SCHEMA}")
        boot = data["bootstrap"]
        return cls(
            judge_model=data["judge_model"],
            rubric_version=data["rubric_version"],
            labels_file=data["labels_file"],
            labels_sha256=data["labels_sha256"],
            score_source=data["score_source"],
            notes=tuple(data["notes"]),
            policy=VerdictPolicy.from_json(data["policy"]),
            cases=CaseCounts.from_json(data["cases"]),
            balance=ClassBalance.from_json(data["balance"]),
            annotators=AnnotatorAgreement.from_json(data["annotators"]),
            judge=JudgeMetrics.from_json(data["judge"]),
            confident_misses=tuple(ConfidentMiss.from_json(miss) for miss in data["confident_misses"]),
            bootstrap=Bootstrap(boot["resamples"], boot["seed"], boot["generator"], boot["interval"]),
            judge_problems=tuple(JudgeProblem.from_json(problem) for problem in data["judge_problems"]),
            verdict=CalibrationVerdict(data["verdict"]),
            reasons=tuple(data["reasons"]),
        )
