"""Reading a labels CSV for calibration, and scoring its cases with a judge.

Columns: ``case_id``, ``human_label_1``, ``human_label_2`` (1 = the excerpt supports the value, 0 = it does
not) or one ``label`` column (one annotator: both labels are that one, so kappa says nothing about
reliability and block is never admitted on it), optionally ``adjudicated_label`` (the final word on a
disagreement) and ``language`` (per-language figures), and either a judge score
column (``--scores-column``; an empty cell means the judge gave no score) or ``value`` + ``excerpt``
(optionally ``field``, ``source``) to run the judge on. Anything else is refused with one line naming the
file, the row and the problem: a calibration built on a silently "fixed" label would certify nothing.
"""

from __future__ import annotations

import asyncio
import csv
import io
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from extractor.errors import ExtractorError
from extractor.generate import Provider
from extractor.judge.calibration import Case
from extractor.judge.stage import JudgeLink, Rubric, run_judge
from extractor.vocab import ExitCode

REQUIRED = ("case_id", "human_label_1", "human_label_2")
TEXT_COLUMNS = ("value", "excerpt")


class LabelsError(ExtractorError):
    """The labels file cannot be used; ``str(error)`` is the one line the CLI prints."""

    exit_code = ExitCode.USAGE


def _label(raw: str | None, column: str, where: str, *, optional: bool = False) -> int | None:
    text = (raw or "").strip()
    if optional and not text:
        return None
    if text not in ("0", "1"):
        shown = repr(text) if text else "empty"
        raise LabelsError(f"{where}: {column} is {shown}, expected 0 or 1")
    return int(text)


def _score(raw: str | None, column: str, where: str) -> float | None:
    text = (raw or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise LabelsError(f"{where}: {column} is {text!r}, expected a number from 0 to 1 (or empty for no score)") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise LabelsError(f"{where}: {column} is {text!r}, outside [0, 1]")
    return value


def read_labels(path: Path, scores_column: str | None = None, *, need_texts: bool = False) -> tuple[list[Case], str | None]:
    """The cases of ``path`` and the judge model named in its ``judge_model`` column (if it has one, single-valued)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise LabelsError(f"{path}: cannot read ({error.strerror or error})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise LabelsError(f"{path}: not UTF-8 text (byte {error.start})") from None
    if not text.strip():
        raise LabelsError(f"{path}: empty file")
    delimiter = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = [name.strip() for name in reader.fieldnames or []]
    reader.fieldnames = header
    single = "label" in header and not {"human_label_1", "human_label_2"} & set(header)
    labels = ("case_id", "label") if single else REQUIRED
    wanted = [*labels, *([scores_column] if scores_column else []), *(TEXT_COLUMNS if need_texts else ())]
    missing = [name for name in wanted if name not in header]
    if missing:
        raise LabelsError(f"{path}: missing column(s) {', '.join(missing)} (has: {', '.join(header) or 'none'})")
    cases: list[Case] = []
    seen: dict[str, int] = {}
    models: set[str] = set()
    for row in reader:
        where = f"{path}: row {reader.line_num}"
        if None in row:
            raise LabelsError(f"{where}: more cells than columns")
        if not any((value or "").strip() for value in row.values()):
            continue
        case_id = (row.get("case_id") or "").strip()
        if not case_id:
            raise LabelsError(f"{where}: case_id is empty")
        if case_id in seen:
            raise LabelsError(f"{where}: case_id {case_id!r} repeats row {seen[case_id]}")
        seen[case_id] = reader.line_num
        score = _score(row.get(scores_column), scores_column, where) if scores_column else None
        value, excerpt = (row.get("value") or "").strip(), (row.get("excerpt") or "").strip()
        if need_texts and not value:
            raise LabelsError(f"{where}: value is empty (the judge needs a value and an excerpt)")
        if (row.get("judge_model") or "").strip():
            models.add(row["judge_model"].strip())
        first, second = ("label", "label") if single else ("human_label_1", "human_label_2")
        cases.append(Case(
            case_id=case_id,
            label_1=_label(row.get(first), first, where),  # type: ignore[arg-type]
            label_2=_label(row.get(second), second, where),  # type: ignore[arg-type]
            adjudicated=_label(row.get("adjudicated_label"), "adjudicated_label", where, optional=True),
            score=score,
            value=value,
            excerpt=excerpt,
            source=(row.get("source") or "").strip(),
            language=(row.get("language") or "").strip(),
            judge_status="scored" if score is not None or not scores_column else "missing",
            judge_error=None if score is not None or not scores_column else f"empty {scores_column} cell",
        ))
    if not cases:
        raise LabelsError(f"{path}: no cases (only a header)")
    if len(models) > 1:
        raise LabelsError(f"{path}: judge_model column names several models ({', '.join(sorted(models))}); "
                          "calibrate one model at a time")
    return cases, next(iter(models), None)


class JudgeUnavailable(ExtractorError):
    """A judge call failed in transport: the calibration would be incomplete, so none is made."""

    exit_code = ExitCode.USAGE


async def score_cases(cases: list[Case], provider: Provider, rubric: Rubric, *, concurrency: int = 4,
                      on_case: Callable[[Case], None] | None = None) -> list[Case]:
    """Every case judged by one single-link call with the run's rubric; protocol errors are kept as such.

    A protocol error or a null score is no score: the case is reported and left out of the metrics (at run
    time it would go to a person). A transport failure stops the calibration (``JudgeUnavailable``).
    """
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(case: Case) -> Case:
        link = JudgeLink(0, "value", case.value, case.excerpt, case.case_id)
        async with gate:
            outcome = await run_judge(provider, rubric, "calibration", [link] if case.excerpt else [])
        if outcome.kind == "transport_error":
            raise JudgeUnavailable(f"judge call failed, nothing stored: case {case.case_id}: {outcome.error}")
        if outcome.kind == "judged" and outcome.verdict is not None:
            score = outcome.verdict.score(0)
            status, error = ("scored", None) if score is not None else ("not_evaluable", "the judge scored null")
        else:
            score, status, error = None, outcome.kind, outcome.error
        scored = replace(case, score=score, judge_status=status, judge_error=error)
        if on_case is not None:
            on_case(scored)
        return scored

    tasks = [asyncio.create_task(one(case)) for case in cases]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
