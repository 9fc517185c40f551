"""Calibrating a lexical-support rule's threshold and "route to judge" band on labelled rows (docs/design.md#judge-calibration).

Each row is a value, an excerpt and a label (1 = the excerpt supports the value). The rule's score
(``extractor.evidence.support.support_score``) is the instrument; the judge calibration machinery
(``extractor.judge.calibration``: AUROC, threshold sweep, 1,000-resample bootstrap intervals, verdict) measures
it exactly as it measures a judge. On top, this module fits what the rule needs:

- ``threshold``: the score with the best MCC on the rows (ties: the middle of the best run);
- the band ``[lower, upper]``: below ``lower`` at most ``max_miss`` (default 10%) of the rows are supported
  (safe to fail), from ``upper`` up at most ``max_miss`` are unsupported (safe to pass); between them the
  rule routes to a judge instead of deciding (docs/design.md#judge-calibration: borderline cases go to the judge).

The result is written into the contract settings section of the rule (``weak_support`` or
``lexical_support``), which is part of every run's configuration hash: a recalibrated rule is a new
configuration, and a rerun does not take the old results for the new thresholds.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from extractor.calibration_report import CalibrationReport, VerdictPolicy
from extractor.contracts.settings import CALIBRATED_RULES
from extractor.errors import UsageError
from extractor.evidence.support import TOKENIZER, support_score
from extractor.judge.calibration import (
    CalibrationInput,
    Case,
    auroc_rows,
    bootstrap_indices,
    calibrate,
    mcc_rows,
    percentile_interval,
    sha256_of,
)
from extractor.judge.labels import read_labels
from extractor.vocab import CalibrationVerdict

GRID = np.round(np.arange(0.01, 1.0, 0.01), 2)
BAND_KEYS = {"EVIDENCE_WEAK_SUPPORT": "threshold", "CLAIM_LOW_LEXICAL_SUPPORT": "minimum_overlap",
             "EVIDENCE_LOW_OCR_CONFIDENCE": "threshold"}
"""The settings key each rule reads as the upper edge of its band (at or above it the rule passes)."""
DEFAULT_MIN_WORD_LENGTH = {"EVIDENCE_WEAK_SUPPORT": 3, "CLAIM_LOW_LEXICAL_SUPPORT": 4}
SCORE_COLUMNS = {"EVIDENCE_LOW_OCR_CONFIDENCE": "confidence"}
"""Rules whose score is a column of the labels file, not computed from value and excerpt: an OCR'd word's
confidence (0-1), labelled 1 when OCR read the word as it is printed (``bench/ocr_confidence_labels.py``)."""


def score_rows(cases: list[Case], min_word_length: int) -> list[Case]:
    """Each case scored by the rule's support score; a value with no checkable token has no score."""
    scored = []
    for case in cases:
        score = support_score(case.value, case.excerpt, min_word_length)
        scored.append(replace(case, score=score, judge_status="scored" if score is not None else "not_evaluable",
                              judge_error=None if score is not None else "the value has no checkable token"))
    return scored


def fit_threshold(y: np.ndarray, scores: np.ndarray) -> float:
    """The grid threshold with the best MCC (predicting supported when score >= t); the middle of a tie run."""
    predicted = scores[None, :] >= GRID[:, None]
    mcc = mcc_rows(np.broadcast_to(y, predicted.shape), predicted)
    best = np.flatnonzero(np.isclose(mcc, mcc.max()))
    return float(GRID[best[len(best) // 2]])


def fit_band(y: np.ndarray, scores: np.ndarray, threshold: float, max_miss: float) -> tuple[float, float]:
    """``(lower, upper)`` around ``threshold``: the highest grid point below which at most ``max_miss`` of the
    rows are supported (safe to fail), and the lowest from which at most ``max_miss`` are unsupported (safe
    to pass). With no safe zone on a side, its edge is 0 (nothing fails) or 1 (only a full score passes)."""
    below = scores[None, :] < GRID[:, None]
    above = ~below
    n_below, n_above = below.sum(axis=1), above.sum(axis=1)
    supported_below = (below & (y == 1)[None, :]).sum(axis=1)
    unsupported_above = (above & (y == 0)[None, :]).sum(axis=1)
    safe_fail = (n_below > 0) & (supported_below <= max_miss * n_below)
    safe_pass = (n_above > 0) & (unsupported_above <= max_miss * n_above)
    lower = float(GRID[safe_fail].max()) if safe_fail.any() else 0.0
    upper = float(GRID[safe_pass].min()) if safe_pass.any() else 1.0
    return min(lower, threshold), max(upper, threshold)


@dataclass(frozen=True)
class LanguageAuroc:
    """The score's AUROC on one language's rows, with its bootstrap interval: a rule may work for one language only."""

    n: int
    supported: int
    auroc: float | None
    low: float | None
    high: float | None

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "supported": self.supported, "auroc": self.auroc, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class RuleCalibration:
    """A rule's calibration: the judge calibration report of its score, the fitted threshold and band, and
    ``settings``, the section written into the contract folder's calibration file (plain JSON, laid over the
    contract settings as any settings file is)."""

    report: CalibrationReport
    rule_id: str
    fitted_threshold: float
    band: tuple[float, float]
    by_language: dict[str, LanguageAuroc]
    settings: dict[str, Any]

    @property
    def settings_section(self) -> str:
        """The contract settings section the rule reads its threshold from."""
        return CALIBRATED_RULES[self.rule_id]

    def to_json(self) -> dict[str, Any]:
        return {**self.report.to_json(), "rule_id": self.rule_id, "settings_section": self.settings_section,
                "fitted_threshold": self.fitted_threshold, "band": list(self.band),
                "by_language": {language: figures.to_json() for language, figures in self.by_language.items()},
                "settings": self.settings}


def by_language(cases: list[Case], resamples: int, seed: int) -> dict[str, LanguageAuroc]:
    """AUROC with its bootstrap interval per ``language`` column value (when the rows have one)."""
    out: dict[str, LanguageAuroc] = {}
    for language in sorted({c.language for c in cases if c.language}):
        used = [c for c in cases if c.language == language and c.gold is not None and c.score is not None]
        y = np.array([c.gold for c in used], dtype=np.int64)
        s = np.array([c.score for c in used], dtype=np.float64)
        point = float(auroc_rows(y, s)[0]) if used else float("nan")
        idx = bootstrap_indices(len(used), resamples, seed) if used else np.zeros((0, 0), dtype=np.int64)
        interval = percentile_interval(auroc_rows(y[idx], s[idx])) if used else None
        out[language] = LanguageAuroc(len(used), int(y.sum()), None if np.isnan(point) else point,
                                      interval[0] if interval else None, interval[1] if interval else None)
    return out


def calibrated_rule(rule_id: str) -> str:
    """``rule_id`` as registered (upper case), if it has a calibrated threshold; else a one-line ``UsageError``."""
    rule_id = rule_id.upper()
    if rule_id not in CALIBRATED_RULES:
        raise UsageError(f"{rule_id} has no calibrated threshold (calibratable: {', '.join(sorted(CALIBRATED_RULES))})")
    return rule_id


def calibrate_rule(rule_id: str, files: list[Path], *, max_miss: float = 0.1, min_word_length: int | None = None,
                   resamples: int = 1000, seed: int = 42) -> RuleCalibration:
    """The judge calibration report of the score, plus the fitted threshold, band and the settings section to write."""
    rule_id = calibrated_rule(rule_id)
    if not 0.0 < max_miss < 0.5:
        raise UsageError(f"--max-miss must be between 0 and 0.5, not {max_miss:g}")
    length = min_word_length if min_word_length is not None else DEFAULT_MIN_WORD_LENGTH.get(rule_id, 0)
    if not files:
        raise UsageError("no labels file given")
    column = SCORE_COLUMNS.get(rule_id)
    cases = []
    for path in files:
        cases += read_labels(path, column, need_texts=column is None)[0]
    repeated = sorted(case_id for case_id, n in Counter(c.case_id for c in cases).items() if n > 1)
    if repeated:
        raise UsageError(f"case_id {repeated[0]!r} appears in more than one labels file")
    if column is None:
        cases = score_rows(cases, length)
    used = [c for c in cases if c.gold is not None and c.score is not None]
    y = np.array([c.gold for c in used], dtype=np.int64)
    scores = np.array([c.score for c in used], dtype=np.float64)
    if len(set(y.tolist())) < 2:
        raise UsageError(f"{', '.join(map(str, files))}: the usable rows have one label only; a threshold needs both "
                         "classes")
    threshold = fit_threshold(y, scores)
    lower, upper = fit_band(y, scores, threshold, max_miss)
    digest = sha256_of(str(files[0])) if len(files) == 1 else hashlib.sha256(
        "".join(sha256_of(str(path)) for path in files).encode()).hexdigest()
    names = ", ".join(str(path) for path in files)
    band = f"band: fail below {lower:g}, judge in [{lower:g}, {upper:g}), pass from {upper:g}"
    if column is not None:
        band = f"a person looks below {upper:g} (at most {max_miss:.0%} of the words read from there on are misread)"
    report = calibrate(CalibrationInput(cases, f"rule:{rule_id}", TOKENIZER if column is None else "tesseract",
                                        names, digest, column or "support_score", [band]),
                       VerdictPolicy(threshold=threshold, resamples=resamples, seed=seed))
    if report.verdict is CalibrationVerdict.admit_block and any(_one_annotator(path) for path in files):
        report = replace(report, verdict=CalibrationVerdict.admit_review, reasons=(
            *report.reasons, "not block: one annotator (a label column): kappa 1.0 is by construction and says "
                             "nothing about the labels' reliability; label twice to admit block"))
    languages = by_language(cases, resamples, seed)
    auroc, mcc = report.judge.auroc, report.judge.mcc
    assert auroc is not None and mcc is not None  # both classes are among the usable rows (checked above)
    section = {
        BAND_KEYS[rule_id]: upper,
        "judge_band_lower": lower,
        **({"min_word_length": length} if column is None else {}),
        "calibration": {
            "verdict": report.verdict.value, "fitted_threshold": threshold, "band": [lower, upper], "max_miss": max_miss,
            "n": report.cases.used, "auroc": auroc.value, "auroc_95ci": [auroc.low, auroc.high],
            "mcc": mcc.value, "mcc_95ci": [mcc.low, mcc.high],
            "by_language": {k: {"n": v.n, "auroc": v.auroc, "auroc_95ci": [v.low, v.high]} for k, v in languages.items()},
            "labels_files": [path.name for path in files], "labels_sha256": report.labels_sha256,
            **({"tokenizer": TOKENIZER} if column is None else {"score": column}),
            "calibrated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
    return RuleCalibration(report, rule_id, threshold, (lower, upper), languages, section)


def _one_annotator(path: Path) -> bool:
    """Whether the labels file has one ``label`` column instead of two annotators' labels."""
    with path.open(encoding="utf-8-sig", newline="") as handle:
        header = next(csv.reader(handle, delimiter="\t" if path.suffix.lower() in (".tsv", ".tab") else ","), [])
    names = {name.strip() for name in header}
    return "label" in names and not {"human_label_1", "human_label_2"} <= names


def _rounded(value: Any) -> Any:
    """Figures as a person reads them in a settings file (4 decimals); thresholds are on a 0.01 grid anyway."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def write_settings(path: Path, section: str, values: dict[str, Any]) -> dict[str, Any]:
    """Merge ``values`` into ``section`` of the calibration file at ``path`` (made if missing; other keys
    kept); what the file now holds."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (OSError, ValueError) as error:
        raise UsageError(f"{path}: cannot read the calibration file ({error})") from None
    settings[section] = {**settings.get(section, {}), **_rounded(values)}
    path.write_text(json.dumps(settings, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return dict(settings)
