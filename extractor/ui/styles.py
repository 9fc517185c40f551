"""Colours of states and decisions, and the findings table: what ``run``'s output and ``review``'s share.

Kept apart from ``extractor.ui.run``, which reads the engine's types: ``review``, ``show``, ``runs`` and ``stats``
only read the run log and must not import the engine (and through it every parser and segmenter) to start.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text

from extractor.ui.console import add_columns
from extractor.vocab import CoverageStatus, FieldPresence, GateDecision, Outcome

STATE_STYLE: dict[str | None, str] = {
    CoverageStatus.MAPPED: "green",
    CoverageStatus.UNMAPPED: "yellow",
    CoverageStatus.EXCLUDED: "dim",
    FieldPresence.PRESENT: "green",
    FieldPresence.NEEDS_INPUT: "yellow",
    Outcome.READY_FOR_REVIEW: "green",
    Outcome.MANUAL_REVIEW: "yellow",
    Outcome.ERROR: "red",
    Outcome.BLOCKED: "bold red",
    Outcome.INPUT_ERROR: "red",
    Outcome.SKIPPED: "dim",
    Outcome.INTERRUPTED: "magenta",
    None: "bold red",
}


DECISION_STYLE: dict[str, str] = {GateDecision.PROMOTE: "bold green", GateDecision.MANUAL_REVIEW: "bold yellow",
                  GateDecision.BLOCK: "bold red", GateDecision.NOT_EVALUABLE: "bold magenta"}


def findings_table(findings: Iterable[dict[str, Any]], title: str = "findings") -> Table:
    """Findings as stored and reported (``Finding.to_json()``): critical bold red, errors red, warnings yellow."""
    table = Table(title=title, title_justify="left")
    add_columns(table, ("rule_id", "severity", "location", "message"), wrap=("message",))
    for finding in findings:
        style = {"critical": "bold red", "error": "red"}.get(finding.get("severity", ""), "yellow")
        table.add_row(Text(finding["rule_id"], style=style), finding.get("severity", ""), finding.get("location", ""),
                      finding.get("message", ""))
    return table
