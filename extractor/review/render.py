"""Terminal rendering of validation reports for people (``validate --format text``, ``show``, ``review``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from extractor.document import Document
from extractor.validate.report import Report

STATE_STYLE = {
    "MAPPED": "green",
    "UNMAPPED": "yellow",
    "EXCLUDED": "dim",
    "PRESENT": "green",
    "NEEDS_INPUT": "yellow",
    None: "bold red",
}


def findings_table(report: Report, title: str = "findings") -> Table:
    table = Table(title=title, show_lines=False)
    for column in ("rule_id", "severity", "location", "message"):
        table.add_column(column, overflow="fold")
    for finding in report.findings:
        style = "red" if finding.severity.value == "error" else "yellow"
        table.add_row(Text(finding.rule_id, style=style), finding.severity.value, finding.location, finding.message)
    return table


def print_report(report: Report, document: Document, console: Console | None = None) -> None:
    """Verdict line, findings, field states and sentence states as tables."""
    console = console or Console()
    errors = len(report.errors)
    warnings = len(report.findings) - errors
    verdict = Text("PASSED" if report.passed else "FAILED", style="bold green" if report.passed else "bold red")
    console.print(Text.assemble(verdict, f"  {report.contract} v{report.contract_version}  validator "
                                f"{report.validator_version}  {errors} error(s), {warnings} warning(s)"))
    if report.findings:
        console.print(findings_table(report))
    if report.fields:
        table = Table(title="fields")
        table.add_column("field")
        table.add_column("state")
        table.add_column("because")
        for path, state in report.fields.items():
            table.add_row(path, Text(state.state or "-", style=STATE_STYLE[state.state]), state.rule_id or "")
        console.print(table)
    if report.sentences:
        table = Table(title="sentences")
        for column in ("id", "state", "fields / reason", "text"):
            table.add_column(column, overflow="fold")
        for state in report.sentences:
            sentence = document.sentence(state.id)
            detail = ", ".join(state.field_paths) or state.reason or state.rule_id or ""
            table.add_row(state.id, Text(state.state or (state.rule_id or "-"), style=STATE_STYLE[state.state]),
                          detail, sentence.text if sentence else "")
        console.print(table)
