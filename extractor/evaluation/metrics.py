"""Precision, recall and F1 with bootstrap intervals over documents; the paired tests of ``compare --gold``.

Pure numbers, no database (docs/design.md#evaluation). Scores are micro-averaged: a group's counts are summed
over its documents, then precision = right / candidate values, recall = right / gold values and
F1 = 2 right / (gold + candidate values).

**Intervals** are 95% percentile bootstrap intervals over documents: ``resamples`` (default 1,000) resamples
of the documents drawn with replacement from ``numpy.random.default_rng(seed)`` (42 by default): the same runs,
gold and seed give the same intervals. One set of resamples serves every field, language and contract, so a
group's interval is that of the documents of the group within each resample (one matrix product per batch of
resamples, where ``scipy.stats.bootstrap`` would resample each group on its own). A resample in which a metric
is undefined (no candidate value: no precision) is counted and left out. tests/test_evaluation.py checks the
intervals by what they promise: on simulated documents whose true F1 is known, they cover it about 95% of the
time.

**Paired** (two runs on the same documents): the difference in F1 is bootstrapped with the same resample
indices for both sides; McNemar's exact test compares the documents each side got fully right (every gold
value right, normalised, and nothing gold does not have): the b documents right only in A and the c right
only in B are a two-sided binomial test of b successes in b + c trials at 1/2 (``scipy.stats.binomtest``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_RESAMPLES = 1_000
DEFAULT_SEED = 42
LEVEL = 0.95
BATCH = 100
"""Resamples drawn per call of the generator (memory: BATCH x documents integers at a time)."""

COUNT_COLUMNS = ("gold", "candidate", "exact", "normalised")
GOLD, CANDIDATE, EXACT, NORMALISED = range(4)


@dataclass(frozen=True)
class Interval:
    low: float | None
    high: float | None
    undefined: int = 0
    """Resamples in which the metric had no value (left out of the percentiles)."""

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "undefined_resamples": self.undefined}


@dataclass(frozen=True)
class Score:
    """Precision, recall and F1 of one match mode, each with its interval (None: undefined on these counts)."""

    precision: float | None
    recall: float | None
    f1: float | None
    precision_interval: Interval
    recall_interval: Interval
    f1_interval: Interval

    def to_json(self) -> dict[str, Any]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1,
                "precision_ci": self.precision_interval.to_json(), "recall_ci": self.recall_interval.to_json(),
                "f1_ci": self.f1_interval.to_json()}


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def f1(right: float, gold: float, candidate: float) -> float | None:
    return ratio(2 * right, gold + candidate)


def resample_weights(n: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """How often each document is drawn in each resample, ``BATCH`` resamples at a time: ``(batch, n)`` counts
    (each row sums to ``n``). Counting the draws per row lets one matrix product sum any column of per-document
    counts."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < resamples:
        batch = min(BATCH, resamples - done)
        indices = rng.integers(0, n, (batch, n))
        offsets = (np.arange(batch, dtype=np.int64) * n)[:, None]
        yield np.bincount((indices + offsets).ravel(), minlength=batch * n).reshape(batch, n)
        done += batch


def resampled_sums(counts: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """``(resamples, columns)``: each column of ``counts`` (documents x columns) summed over each resample."""
    n = counts.shape[0]
    if n == 0:
        return np.zeros((0, counts.shape[1]))
    values = counts.astype(np.float64)
    return np.vstack([weights.astype(np.float64) @ values for weights in resample_weights(n, resamples, seed)])


def percentile_interval(values: np.ndarray) -> Interval:
    """The central ``LEVEL`` percentile interval of a metric's resampled values (NaN: undefined, left out)."""
    defined = values[~np.isnan(values)]
    undefined = int(values.size - defined.size)
    if defined.size == 0:
        return Interval(None, None, undefined)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(defined, [tail, 100 - tail])
    return Interval(float(low), float(high), undefined)


def _divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def scores(total: Sequence[float], resampled: np.ndarray | None, right: int) -> Score:
    """The score of one match mode (``right`` = ``EXACT`` or ``NORMALISED``) from a group's summed counts
    (``total``) and its per-resample sums (``resampled``: resamples x 4 columns, or None for no intervals)."""
    gold, candidate, hits = total[GOLD], total[CANDIDATE], total[right]
    if resampled is None or resampled.shape[0] == 0:
        empty = Interval(None, None)
        return Score(ratio(hits, candidate), ratio(hits, gold), f1(hits, gold, candidate), empty, empty, empty)
    g, c, r = resampled[:, GOLD], resampled[:, CANDIDATE], resampled[:, right]
    return Score(ratio(hits, candidate), ratio(hits, gold), f1(hits, gold, candidate),
                 percentile_interval(_divide(r, c)), percentile_interval(_divide(r, g)),
                 percentile_interval(_divide(2 * r, g + c)))


def f1_of(sums: np.ndarray, right: int) -> np.ndarray:
    """F1 per row of summed counts (NaN where there is neither a gold nor a candidate value)."""
    return _divide(2 * sums[..., right], sums[..., GOLD] + sums[..., CANDIDATE])


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p: the discordant pairs as Binomial(only_a + only_b, 1/2) (1.0 with none)."""
    if only_a + only_b == 0:
        return 1.0
    from scipy.stats import binomtest  # scipy.stats takes a few hundred ms to import: only when asked

    return float(binomtest(only_a, only_a + only_b, 0.5).pvalue)
