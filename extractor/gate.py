"""The regression gate between two versions: Beta posteriors per category, rho by Monte Carlo, a decision.

Pure math and decision rules, no database: ``extractor.compare`` collects the counts from the run log.

Per category ``c`` a side has ``n_c`` evaluable documents of which ``k_c`` passed. Its pass rate has the
posterior ``Beta(1 + k_c, 1 + n_c - k_c)`` (uniform prior). A side's rate is the weighted sum
``sum_c w_c * theta_c`` (weights: the categories' shares of the documents by default, or traffic shares
given by the user), and

    rho = P(rate_B < rate_A - delta)

is estimated with ``samples`` draws from ``numpy.random.Generator(PCG64(seed))`` (10,000 and 42 by
default), so the same counts and seed always give the same rho. Decision:
``BLOCK`` if rho >= block, ``MANUAL_REVIEW`` if rho >= review, else ``PROMOTE``; ``NOT_EVALUABLE`` when
either side has no evaluable document (no data is an outcome of its own, never a rate of zero).

The 95% intervals are exact equal-tailed Beta quantiles (regularised incomplete beta inverted by
bisection), not Monte Carlo percentiles, so they are reproducible to 1e-10 whatever the seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from extractor.errors import UsageError
from extractor.vocab import GATE_EXIT_CODES, GateDecision

DEFAULT_SAMPLES = 10_000
DEFAULT_SEED = 42
DEFAULT_DELTA = 0.03
DEFAULT_BLOCK = 0.8
DEFAULT_REVIEW = 0.5
DEFAULT_LEVEL = 0.95


# -- the Beta distribution without scipy ----------------------------------------------------------------


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), converging for x < (a+1)/(a+b+2)."""
    tiny, epsilon = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        numerator = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + numerator / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        numerator = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + numerator / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < epsilon:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b): P(theta <= x) for theta ~ Beta(a, b)."""
    if a <= 0 or b <= 0:
        raise ValueError(f"Beta parameters must be positive, not ({a}, {b})")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def beta_ppf(q: float, a: float, b: float) -> float:
    """The quantile of Beta(a, b): the x with I_x(a, b) = q, by bisection to 1e-13 (the cdf is monotone)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level must be in [0, 1], not {q}")
    if q == 0.0:
        return 0.0
    if q == 1.0:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        if beta_cdf(middle, a, b) < q:
            low = middle
        else:
            high = middle
        if high - low < 1e-13:
            break
    return (low + high) / 2


def beta_pdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """The Beta(a, b) density on a grid (for plots)."""
    x = np.clip(np.asarray(x, dtype=float), 1e-12, 1 - 1e-12)
    return np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - _log_beta(a, b))


# -- posteriors, rho and the decision ------------------------------------------------------------------------


@dataclass(frozen=True)
class Posterior:
    """Beta(1 + k, 1 + n - k): the pass rate after ``passed`` of ``n`` evaluable documents."""

    passed: int
    n: int
    level: float = DEFAULT_LEVEL

    def __post_init__(self) -> None:
        if self.n < 0 or not 0 <= self.passed <= self.n:
            raise ValueError(f"need 0 <= passed <= n, not passed={self.passed}, n={self.n}")

    @property
    def a(self) -> float:
        return 1.0 + self.passed

    @property
    def b(self) -> float:
        return 1.0 + self.n - self.passed

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    @property
    def interval(self) -> tuple[float, float]:
        tail = (1.0 - self.level) / 2
        return beta_ppf(tail, self.a, self.b), beta_ppf(1.0 - tail, self.a, self.b)

    def to_json(self) -> dict[str, Any]:
        low, high = self.interval
        return {
            "passed": self.passed,
            "n": self.n,
            "alpha": self.a,
            "beta": self.b,
            "mean": self.mean,
            "interval": [low, high],
            "level": self.level,
        }


@dataclass(frozen=True)
class Category:
    """One category's pass counts on both sides (paired: the same documents) and its weight."""

    name: str
    passed_a: int
    n_a: int
    passed_b: int
    n_b: int
    weight: float

    @property
    def a(self) -> Posterior:
        return Posterior(self.passed_a, self.n_a)

    @property
    def b(self) -> Posterior:
        return Posterior(self.passed_b, self.n_b)


@dataclass(frozen=True)
class GateSettings:
    delta: float = DEFAULT_DELTA
    block: float = DEFAULT_BLOCK
    review: float = DEFAULT_REVIEW
    samples: int = DEFAULT_SAMPLES
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL

    def __post_init__(self) -> None:
        if not 0.0 <= self.delta < 1.0:
            raise UsageError(f"delta must be in [0, 1), not {self.delta}")
        if not 0.0 <= self.review <= self.block <= 1.0:
            raise UsageError(f"need 0 <= review <= block <= 1, not review={self.review}, block={self.block}")
        if self.samples < 1:
            raise UsageError(f"samples must be positive, not {self.samples}")
        if not 0.0 < self.level < 1.0:
            raise UsageError(f"interval level must be in (0, 1), not {self.level}")


@dataclass(frozen=True)
class GateResult:
    decision: GateDecision
    rho: float | None
    categories: list[Category]
    settings: GateSettings
    reason: str
    rate_a: dict[str, Any] | None = None
    rate_b: dict[str, Any] | None = None
    difference: dict[str, Any] | None = None
    samples_a: np.ndarray | None = field(default=None, repr=False, compare=False)
    samples_b: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def exit_code(self) -> int:
        return int(GATE_EXIT_CODES[self.decision])

    def to_json(self) -> dict[str, Any]:
        s = self.settings
        return {
            "decision": self.decision.value,
            "reason": self.reason,
            "rho": self.rho,
            "settings": {"delta": s.delta, "block": s.block, "review": s.review, "samples": s.samples,
                         "seed": s.seed, "level": s.level},
            "categories": [
                {"name": c.name, "weight": c.weight,
                 "a": Posterior(c.passed_a, c.n_a, s.level).to_json(),
                 "b": Posterior(c.passed_b, c.n_b, s.level).to_json()}
                for c in self.categories
            ],
            "rate_a": self.rate_a,
            "rate_b": self.rate_b,
            "difference_b_minus_a": self.difference,
        }


def default_weights(counts: Mapping[str, int]) -> dict[str, float]:
    """Each category's share of the documents (the default when traffic shares are not known)."""
    total = sum(counts.values())
    if total <= 0:
        return {name: 0.0 for name in counts}
    return {name: n / total for name, n in counts.items()}


def normalise_weights(weights: Mapping[str, float], categories: Sequence[str]) -> dict[str, float]:
    """User weights (traffic shares) checked against the categories and scaled to sum to 1.

    Raises ``ValueError`` naming what is wrong: a weight for an unknown category, a category without a
    weight, a negative weight, or weights summing to zero.
    """
    unknown = sorted(set(weights) - set(categories))
    if unknown:
        raise UsageError(f"weights name categories with no evaluable document: {', '.join(unknown)} "
                         f"(categories: {', '.join(categories)})")
    missing = [name for name in categories if name not in weights]
    if missing:
        raise UsageError(f"no weight for categor{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}")
    negative = [name for name, value in weights.items() if value < 0 or not math.isfinite(value)]
    if negative:
        raise UsageError(f"weights must be finite and >= 0: {', '.join(negative)}")
    total = sum(weights.values())
    if total <= 0:
        raise UsageError("weights sum to zero")
    return {name: weights[name] / total for name in categories}


def _summary(samples: np.ndarray, level: float) -> dict[str, Any]:
    tail = (1.0 - level) / 2
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return {"mean": float(samples.mean()), "interval": [float(low), float(high)], "level": level,
            "method": "monte carlo"}


def sample_rates(categories: Sequence[Category], settings: GateSettings) -> tuple[np.ndarray, np.ndarray]:
    """Draws of the weighted pass rate of side A and side B.

    One ``Generator(PCG64(seed))``; categories in the given order, for each category A's draws then B's:
    the same counts, order and seed always give the same draws.
    """
    rng = np.random.Generator(np.random.PCG64(settings.seed))
    rate_a = np.zeros(settings.samples)
    rate_b = np.zeros(settings.samples)
    for category in categories:
        draws_a = rng.beta(category.a.a, category.a.b, size=settings.samples)
        draws_b = rng.beta(category.b.a, category.b.b, size=settings.samples)
        rate_a += category.weight * draws_a
        rate_b += category.weight * draws_b
    return rate_a, rate_b


def rho(categories: Sequence[Category], settings: GateSettings = GateSettings()) -> float:
    """P(rate_B < rate_A - delta), Monte Carlo."""
    rate_a, rate_b = sample_rates(categories, settings)
    return float(np.mean(rate_b < rate_a - settings.delta))


def decide_release(categories: Sequence[Category], settings: GateSettings = GateSettings()) -> GateResult:
    """The gate: NOT_EVALUABLE without evaluable documents on a side, else rho against the thresholds."""
    categories = list(categories)
    total_a = sum(c.n_a for c in categories)
    total_b = sum(c.n_b for c in categories)
    if total_a == 0 or total_b == 0:
        empty = [side for side, total in (("baseline", total_a), ("candidate", total_b)) if total == 0]
        return GateResult(GateDecision.NOT_EVALUABLE, None, categories, settings,
                          f"no evaluable document on the {' and '.join(empty)} side")
    empty_categories = [c.name for c in categories if c.weight > 0 and (c.n_a == 0 or c.n_b == 0)]
    if empty_categories:
        return GateResult(GateDecision.NOT_EVALUABLE, None, categories, settings,
                          f"weighted categor{'y' if len(empty_categories) == 1 else 'ies'} "
                          f"{', '.join(empty_categories)} without evaluable documents on a side")
    weight = sum(c.weight for c in categories)
    if not math.isclose(weight, 1.0, abs_tol=1e-9):
        raise ValueError(f"category weights must sum to 1, not {weight}")
    rate_a, rate_b = sample_rates(categories, settings)
    value = float(np.mean(rate_b < rate_a - settings.delta))
    passed_a, passed_b = sum(c.passed_a for c in categories), sum(c.passed_b for c in categories)
    counts = f"the candidate passes {passed_b} of {total_b} document(s), the baseline {passed_a} of {total_a}"
    if value >= settings.block:
        decision, reason = GateDecision.BLOCK, (f"rho {value:.3f} >= block threshold {settings.block:g}: the candidate "
                                                f"very likely passes fewer documents than the baseline ({counts})")
    elif value >= settings.review:
        decision, reason = GateDecision.MANUAL_REVIEW, (f"rho {value:.3f} >= review threshold {settings.review:g}: "
                                                        f"the candidate may pass fewer documents ({counts})")
    else:
        decision, reason = GateDecision.PROMOTE, (f"rho {value:.3f} < review threshold {settings.review:g}: no sign the "
                                                  f"candidate passes fewer documents than the baseline ({counts})")
        if passed_b == 0:
            reason += "; PROMOTE says it is not worse, not that it is good: it passes none"
    return GateResult(decision, value, categories, settings, reason,
                      rate_a=_summary(rate_a, settings.level), rate_b=_summary(rate_b, settings.level),
                      difference=_summary(rate_b - rate_a, settings.level), samples_a=rate_a, samples_b=rate_b)
