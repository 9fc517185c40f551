"""A real stored calibration report, for tests that need one on record.

``tests/corpus/judge/stored_report_v1.json`` is the ``report`` column exactly as ``extract judge calibrate``
stored it (``samples/judge/labels.csv``, ``--scores-column judge_score --model-id openai:sample-judge``) before
the report had typed views; it proves old rows still load.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from extractor.calibration_report import CalibrationReport
from extractor.vocab import CalibrationVerdict

STORED_REPORT = Path(__file__).resolve().parents[1] / "corpus" / "judge" / "stored_report_v1.json"


def stored_report(model: str = "openai:judge", verdict: str = "admit-block", threshold: float = 0.8) -> CalibrationReport:
    """The stored report, for ``model`` at ``threshold`` with ``verdict`` (what the judge policy looks up)."""
    report = CalibrationReport.from_json(json.loads(STORED_REPORT.read_text(encoding="utf-8")))
    return replace(report, judge_model=model, verdict=CalibrationVerdict(verdict),
                   policy=replace(report.policy, threshold=threshold))
