"""Judge calibration reports: written once by ``extract judge calibrate``, read by the judge policy.

Reports are never updated, only superseded: the newest report for a judge model, rubric version and
threshold is the one that counts (``latest_calibration``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Row, func, insert, select

from extractor.store.db import plain, utcnow, write_connection
from extractor.store.info import CalibrationInfo
from extractor.store.tables import judge_calibrations

if TYPE_CHECKING:
    from extractor.calibration_report import CalibrationReport


def save_calibration(engine: Engine, report: CalibrationReport) -> int:
    """Store one calibration report, with the columns it is looked up by taken from it; returns its id."""
    with write_connection(engine) as connection:
        inserted = connection.execute(insert(judge_calibrations).values(
            created_at=utcnow(), judge_model=report.judge_model, rubric_version=report.rubric_version,
            threshold=float(report.threshold), verdict=report.verdict.value, labels_sha256=report.labels_sha256,
            n_cases=report.cases.used, report=report.to_json(),
        )).inserted_primary_key
        assert inserted is not None
        return int(inserted[0])


def calibrations(engine: Engine, *, judge_model: str | None = None, rubric_version: str | None = None,
                 limit: int | None = 50) -> list[CalibrationInfo]:
    """Stored calibration reports, newest first."""
    query = select(judge_calibrations).order_by(judge_calibrations.c.created_at.desc(), judge_calibrations.c.id.desc())
    if judge_model is not None:
        query = query.where(judge_calibrations.c.judge_model == judge_model)
    if rubric_version is not None:
        query = query.where(judge_calibrations.c.rubric_version == rubric_version)
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as connection:
        return [_info(row) for row in connection.execute(query)]


def get_calibration(engine: Engine, calibration_id: int) -> CalibrationInfo | None:
    with engine.connect() as connection:
        row = connection.execute(select(judge_calibrations).where(judge_calibrations.c.id == calibration_id)).first()
        return None if row is None else _info(row)


def latest_calibration(engine: Engine, judge_model: str, rubric_version: str, threshold: float) -> CalibrationInfo | None:
    """The newest report for exactly this judge model, rubric version and threshold (any verdict)."""
    query = (
        select(judge_calibrations)
        .where(
            judge_calibrations.c.judge_model == judge_model,
            judge_calibrations.c.rubric_version == rubric_version,
            func.abs(judge_calibrations.c.threshold - float(threshold)) < 1e-9,
        )
        .order_by(judge_calibrations.c.created_at.desc(), judge_calibrations.c.id.desc())
        .limit(1)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
        return None if row is None else _info(row)


def _info(row: Row[Any]) -> CalibrationInfo:
    """A stored row with its report JSON read back into a ``CalibrationReport`` (rows of any earlier version too)."""
    from extractor.calibration_report import CalibrationReport  # not for read-only commands (docs/design.md#data-flow)

    return plain(CalibrationInfo, row, report=CalibrationReport.from_json(row.report))
