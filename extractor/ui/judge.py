"""A calibration report for people (rich tables, ordered as docs/design.md#judge-calibration says) and the sweep plot.

Order matters: the class-balance warning comes before any number, because every metric on a lopsided set
is fragile; annotator agreement comes before the judge, because people's agreement is the ceiling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from extractor.calibration_report import fmt
from extractor.ui.console import add_columns, open_console, print_table
from extractor.vocab import CalibrationVerdict

if TYPE_CHECKING:
    from extractor.calibration_report import CalibrationReport
    from extractor.engine.judge_afterwards import Afterwards
    from extractor.judge.modes import Judge
    from extractor.store.info import CalibrationInfo

VERDICT_STYLE: dict[str, str] = {CalibrationVerdict.admit_block: "bold green",
                                 CalibrationVerdict.admit_review: "bold yellow", CalibrationVerdict.reject: "bold red"}


def _short(text: str, limit: int = 70) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def print_calibration(report: CalibrationReport, console: Console | None = None, *, calibration_id: int | None = None,
                      plot: Path | None = None) -> None:
    console = console or open_console()
    counts = report.cases
    boot = report.bootstrap
    header = (f"judge {report.judge_model}  rubric {report.rubric_version}  threshold {report.threshold:g}  "
              f"scores: {report.score_source}")
    console.print(Text(header, style="bold"))
    console.print(f"labels {report.labels_file}  sha256 {report.labels_sha256[:12]}  {counts.total} cases, "
                  f"{counts.used} used for the judge  (95% CI: {boot.resamples} bootstrap resamples, seed "
                  f"{boot.seed}, {boot.interval})")
    for note in report.notes:
        console.print(Text.assemble(("note:", "yellow"), f" {note}"))

    balance = report.balance
    if balance.warning:
        console.print(Text.assemble(("warning:", "bold yellow"), f" {balance.warning}"))
    console.print(f"class balance: {balance.supported} supported / {balance.unsupported} unsupported "
                  f"(minority {balance.minority_share:.0%})")

    annotators = report.annotators
    table = Table(title="annotators (the ceiling: a judge cannot be more reliable than people)")
    add_columns(table, ("metric", "value [95% CI]"), wrap=("value [95% CI]",))
    table.add_row("raw agreement", fmt(annotators.raw_agreement))
    kappa = annotators.kappa
    table.add_row("Cohen's kappa", fmt(kappa) if kappa.value is not None else f"undefined: {kappa.undefined_reason}")
    print_table(console, table)
    disagreements = annotators.disagreements
    if disagreements:
        table = Table(title=f"disagreements for adjudication ({len(disagreements)}; "
                            f"{counts.unresolved_disagreements} unresolved, left out of the judge's metrics)")
        add_columns(table, ("case_id", "label 1", "label 2", "adjudicated", "value", "excerpt"),
                    wrap=("value", "excerpt"))
        for row in disagreements:
            table.add_row(row.case_id, str(row.label_1), str(row.label_2),
                          "-" if row.adjudicated is None else str(row.adjudicated), _short(row.value, 40),
                          _short(row.excerpt, 50))
        print_table(console, table)

    judge = report.judge
    table = Table(title=f"judge against the gold labels ({counts.used} cases)")
    add_columns(table, ("metric", "value [95% CI]"), wrap=("value [95% CI]",))
    auroc = judge.auroc
    table.add_row("AUROC (raw scores)", fmt(auroc) if auroc and auroc.value is not None
                  else f"undefined: {auroc.undefined_reason if auroc else 'no scored case'}")
    table.add_row(f"MCC at {report.threshold:g}", fmt(judge.mcc))
    table.add_row(f"agreement at {report.threshold:g}", fmt(judge.agreement))
    if counts.without_score:
        table.add_row("cases without a score", f"{counts.without_score} (protocol errors: {counts.protocol_errors})")
    print_table(console, table)

    if judge.sweep:
        table = Table(title="threshold sweep (supported when score >= threshold)")
        columns = ("threshold", "MCC [95% CI]", "agreement [95% CI]", "TPR", "TNR", "predicted supported")
        add_columns(table, columns, right=columns)
        for point in judge.sweep:
            mark = " *" if abs(point.threshold - report.threshold) < 1e-9 else ""
            table.add_row(f"{point.threshold:.1f}{mark}", fmt(point.mcc), fmt(point.agreement),
                          "-" if point.tpr is None else f"{point.tpr:.2f}",
                          "-" if point.tnr is None else f"{point.tnr:.2f}", f"{point.predicted_supported_share:.0%}")
        print_table(console, table)

    misses = report.confident_misses
    title = f"confident misses: score >= {report.policy.confident_score:g} on a case people labelled unsupported"
    if misses:
        table = Table(title=f"{title} ({len(misses)})")
        add_columns(table, ("case_id", "score", "value", "excerpt", "source"), wrap=("value", "excerpt", "source"))
        for miss in misses:
            table.add_row(miss.case_id, f"{miss.score:.2f}", _short(miss.value, 40), _short(miss.excerpt, 50),
                          _short(miss.source, 20))
        print_table(console, table)
    else:
        console.print(f"{title}: none")
    problems = report.judge_problems
    if problems:
        console.print(Text.assemble((f"{len(problems)} case(s) without a judge score", "yellow"),
                                    " (never counted as a score): "
                                    + ", ".join(f"{p.case_id} ({p.status})" for p in problems[:10])
                                    + (" …" if len(problems) > 10 else "")))

    verdict = report.verdict
    console.print(Text.assemble("verdict: ", Text(verdict.value, style=VERDICT_STYLE[verdict])))
    for reason in report.reasons:
        console.print(f"  - {reason}")
    if calibration_id is not None:
        console.print(f"stored as calibration #{calibration_id} for {report.judge_model} + rubric "
                      f"{report.rubric_version} + threshold {report.threshold:g}")
    if plot is not None:
        console.print(f"sweep plot: {plot}")


def print_reports(found: Sequence[CalibrationInfo], model: str | None, console: Console | None = None) -> None:
    """Stored calibration reports, one row each, newest first."""
    console = console or open_console()
    if not found:
        console.print("no calibration reports" + (f" for {model}" if model else ""))
        return
    table = Table(title="judge calibrations (only the newest per model + rubric + threshold counts)")
    add_columns(table, ("id", "created (UTC)", "judge model", "rubric", "threshold", "verdict", "cases",
                        "AUROC [95% CI]", "MCC [95% CI]", "labels sha256"), right=("id", "threshold", "cases"))
    for info in found:
        judge = info.report.judge
        table.add_row(str(info.id), f"{info.created_at:%Y-%m-%d %H:%M}", info.judge_model, info.rubric_version,
                      f"{info.threshold:g}", Text(info.verdict, style=VERDICT_STYLE.get(info.verdict, "")),
                      str(info.n_cases), fmt(judge.auroc), fmt(judge.mcc), info.labels_sha256[:12])
    print_table(console, table)


@contextmanager
def judging_progress(model: str, total: int, *, enabled: bool) -> Iterator[Callable[[], None]]:
    """A transient progress bar on stderr while ``calibrate --judge`` scores the cases; yields "one more done"."""
    with Progress(console=open_console(stderr=True), disable=not enabled, transient=True) as progress:
        task = progress.add_task(f"judging with {model}", total=total)
        yield lambda: progress.advance(task)


def print_afterwards(results: Sequence[Afterwards], judge: Judge, console: Console | None = None) -> None:
    """What ``extract judge run`` did, a line per document run, then the judge's summary line."""
    console = console or open_console()
    for result in results:
        why = f" ({result.why})" if result.why else ""
        console.print(f"{result.document_run_id}  {result.path}: {result.result or 'skipped'}, {result.before} -> "
                      f"{result.state}{why}", highlight=False, soft_wrap=True)
    print_judge_summary(judge, console)


def print_judge_summary(judge: Judge, console: Console | None = None) -> None:
    """The judge's line under a run's summary: its policy and how many documents got each result."""
    console = console or open_console()
    counts = ", ".join(f"{name} {count}" for name, count in sorted(judge.counts.items())) or "no document judged"
    policy = judge.policy
    regenerated = f", {judge.regenerations} regenerated after a fail" if judge.regenerations else ""
    console.print(f"judge {judge.model} ({policy.mode.value} mode, threshold {policy.threshold:g}, rubric "
                  f"{policy.rubric_version}): {counts}{regenerated}", highlight=False, markup=False)


def write_sweep_plot(report: CalibrationReport, path: Path) -> Path:
    """MCC and agreement against the threshold, with their 95% bands, the operating threshold marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = report.judge.sweep
    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
    try:
        thresholds = [point.threshold for point in sweep]
        for metrics, label, color in (([p.mcc for p in sweep], "MCC", "tab:blue"),
                                      ([p.agreement for p in sweep], "agreement", "tab:green")):
            values = [math.nan if m.value is None else m.value for m in metrics]  # nan: a gap in the line
            low = [value if m.low is None else m.low for m, value in zip(metrics, values, strict=True)]
            high = [value if m.high is None else m.high for m, value in zip(metrics, values, strict=True)]
            axis.plot(thresholds, values, marker="o", color=color, label=label)
            axis.fill_between(thresholds, low, high, color=color, alpha=0.15, label=f"{label} 95% CI")
        axis.axvline(report.threshold, color="grey", linestyle="--", label=f"threshold {report.threshold:g}")
        axis.axhline(0.0, color="black", linewidth=0.5)
        axis.set_xlabel("threshold (supported when score >= threshold)")
        axis.set_ylabel("value")
        axis.set_xlim(0.05, 0.95)
        axis.set_ylim(-1.0, 1.0)
        auroc = fmt(report.judge.auroc)
        axis.set_title(f"{report.judge_model} · rubric {report.rubric_version} · AUROC {auroc} · "
                       f"{report.verdict.value}", fontsize=9)
        axis.legend(fontsize=7, loc="lower left")
        axis.grid(alpha=0.3)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
