"""Judge calibration reports: written once by ``extract judge calibrate``, read by the judge policy.

Reports are never updated, only superseded: the newest report for a judge model, rubric version and
threshold is the one that counts (``latest_calibration``).
"""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from extractor.calibration_report import CalibrationReport
from extractor.store.db import plain, transaction, utcnow
from extractor.store.info import CalibrationInfo
from extractor.store.models import JudgeCalibration


def save_calibration(engine: Engine, report: CalibrationReport) -> int:
    """Store one calibration report, with the columns it is looked up by taken from it; returns its id."""
    with transaction(engine) as session:
        row = JudgeCalibration(
            created_at=utcnow(), judge_model=report.judge_model, rubric_version=report.rubric_version,
            threshold=float(report.threshold), verdict=report.verdict.value, labels_sha256=report.labels_sha256,
            n_cases=report.cases.used, report=report.to_json(),
        )
        session.add(row)
        session.flush()
        return row.id


def calibrations(engine: Engine, *, judge_model: str | None = None, rubric_version: str | None = None,
                 limit: int | None = 50) -> list[CalibrationInfo]:
    """Stored calibration reports, newest first."""
    query = select(JudgeCalibration).order_by(JudgeCalibration.created_at.desc(), JudgeCalibration.id.desc())
    if judge_model is not None:
        query = query.where(JudgeCalibration.judge_model == judge_model)
    if rubric_version is not None:
        query = query.where(JudgeCalibration.rubric_version == rubric_version)
    if limit is not None:
        query = query.limit(limit)
    with transaction(engine, write=False) as session:
        return [_info(row) for row in session.scalars(query)]


def get_calibration(engine: Engine, calibration_id: int) -> CalibrationInfo | None:
    with transaction(engine, write=False) as session:
        row = session.get(JudgeCalibration, calibration_id)
        return None if row is None else _info(row)


def latest_calibration(engine: Engine, judge_model: str, rubric_version: str, threshold: float) -> CalibrationInfo | None:
    """The newest report for exactly this judge model, rubric version and threshold (any verdict)."""
    query = (
        select(JudgeCalibration)
        .where(
            JudgeCalibration.judge_model == judge_model,
            JudgeCalibration.rubric_version == rubric_version,
            func.abs(JudgeCalibration.threshold - float(threshold)) < 1e-9,
        )
        .order_by(JudgeCalibration.created_at.desc(), JudgeCalibration.id.desc())
        .limit(1)
    )
    with transaction(engine, write=False) as session:
        row = session.scalars(query).first()
        return None if row is None else _info(row)


def _info(row: JudgeCalibration) -> CalibrationInfo:
    """A stored row with its report JSON read back into a ``CalibrationReport`` (rows of any earlier version too)."""
    return plain(CalibrationInfo, row, report=CalibrationReport.from_json(row.report))
