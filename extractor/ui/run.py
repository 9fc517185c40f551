"""Terminal rendering for people: validation reports, run progress and run summaries (rich)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from extractor.document import Document
from extractor.engine.discover import Discovery
from extractor.engine.summary import DocumentOutcome, Progress, RunSummary
from extractor.errors import UsageError
from extractor.evidence.report import Report
from extractor.prices import Spend
from extractor.printable import printable
from extractor.ui.console import add_columns, open_console, print_table
from extractor.ui.styles import DECISION_STYLE, STATE_STYLE, findings_table
from extractor.vocab import GATE_EXIT_CODES, ExitCode, GateDecision, Outcome, SkipReason


def outcome_meaning(summary: RunSummary) -> str:
    """What the run's outcome asks of the reader, in the summary's last line: a review only when something
    waits for a person, a rerun when the model never answered; and why the exit code is 2 when an input could not
    be read (it outranks the outcome's own code, docs/design.md#exit-codes)."""
    decision = summary.outcome
    unread = summary.counts[Outcome.INPUT_ERROR]
    if decision is GateDecision.BLOCK:
        return "a critical finding: nothing of it is exported unless a person overrides the block"
    if decision is GateDecision.NOT_EVALUABLE:
        unanswered = len(summary.not_answered)
        if unanswered:
            meaning = (f"the model never answered {unanswered} of {len(summary.outcomes)} document(s): rerun the "
                       "same command to retry them")
        else:
            meaning = "no document was evaluated in this run"
    elif decision is GateDecision.MANUAL_REVIEW and summary.needs_person:
        meaning = f"{summary.needs_person} document(s) need a person: extract review"
    elif decision is GateDecision.MANUAL_REVIEW and not unread:
        meaning = "some inputs could not be evaluated (see above)"
    elif decision is GateDecision.MANUAL_REVIEW:
        meaning = "every document read passed every check; each still waits for a person's approval"
    else:
        meaning = "every document passed every check; each still waits for a person's approval"
    if summary.exit_code is ExitCode.USAGE and unread:
        return (f"exit 2, not {decision.value}'s {int(GATE_EXIT_CODES[decision])}: {unread} input(s) could not be "
                f"read (named above); {meaning}")
    return meaning


def print_report(report: Report, document: Document, console: Console | None = None) -> None:
    """Verdict line, findings, field states and sentence states as tables."""
    console = console or open_console()
    critical, errors = len(report.critical), len(report.errors) - len(report.critical)
    warnings = len(report.findings) - critical - errors
    verdict = Text("BLOCKED" if critical else "PASSED" if report.passed else "FAILED",
                   style="bold green" if report.passed else "bold red")
    console.print(Text.assemble(verdict, f"  {report.contract} v{report.contract_version}  validator "
                                f"{report.validator_version}  " + (f"{critical} critical, " if critical else "")
                                + f"{errors} error(s), {warnings} warning(s)"))
    if report.findings:
        print_table(console, findings_table(f.to_json() for f in report.findings))
    if report.fields:
        table = Table(title="fields")
        add_columns(table, ("field", "state", "because"))
        for path, state in report.fields.items():
            table.add_row(path, Text(state.state or "-", style=STATE_STYLE[state.state]), state.rule_id or "")
        print_table(console, table)
    if report.sentences:
        table = Table(title="sentences")
        add_columns(table, ("id", "state", "fields / reason", "text"), wrap=("fields / reason", "text"))
        for unit in report.sentences:
            sentence = document.sentence(unit.id)
            detail = ", ".join(unit.field_paths) or unit.reason or unit.rule_id or ""
            table.add_row(unit.id, Text(unit.state or (unit.rule_id or "-"), style=STATE_STYLE[unit.state]),
                          detail, printable(sentence.text) if sentence else "")
        print_table(console, table)


def cost_line(spend: Spend | None, documents: int) -> str:
    """``cost $0.0123 ($0.0041 per document)``, ``cost: local model, no API price``, or why it is unknown: a missing
    price is never a zero (``extractor.prices.spend_text``)."""
    from extractor.prices import spend_text

    if spend is None or not spend.calls:
        return "cost -"
    return ("cost: " if spend.all_in_process else "cost ") + spend_text(spend, documents)


PROGRESS_SECONDS_ENV = "EXTRACT_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 10.0
"""Without a terminal (a CI log, ``| tee``), a progress line this often instead of a bar."""


def progress_seconds() -> float:
    """``EXTRACT_PROGRESS_SECONDS``, else 10; anything but a positive number is a one-line usage error."""
    raw = os.environ.get(PROGRESS_SECONDS_ENV, "").strip()
    if not raw:
        return DEFAULT_PROGRESS_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise UsageError(f"{PROGRESS_SECONDS_ENV}={raw!r}: give the seconds between progress lines, e.g. 10")
    return seconds


def clock(seconds: float) -> str:
    """``1:02:03`` or ``2:03``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class _BarAndStatus(RichProgress):
    """rich's bar with a status line under it: the bar line alone has no room at 80 columns for what a person
    waiting on a slow model needs (calls in flight, tokens, the time left)."""

    def __init__(self, *columns: Any, status: Callable[[], Text], **options: Any) -> None:
        super().__init__(*columns, **options)
        self._status = status

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.tasks:
            yield self._status()


class RunProgress(Progress):
    """Progress on stderr, so JSON output stays clean. On a terminal: a bar with documents done, time elapsed and
    left, and under it the documents per state, model calls in flight and tokens so far, redrawn as they change.
    In a log (no terminal): one plain line every ``EXTRACT_PROGRESS_SECONDS`` (10 s) with the same facts.

    The time left is shown once a document needed work (skipped and unusable inputs take none): at the pace of
    those so far, for the documents not done yet."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.counts: Counter[str] = Counter()
        self.total = 0
        self.tokens = 0
        console = open_console(stderr=True)
        self.lines = enabled and not console.is_terminal
        self._progress = _BarAndStatus(
            TextColumn("[bold]extract run"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("{task.fields[left]}"), status=self._status_line, console=console,
            disable=not enabled or self.lines, transient=False,
        )
        self._task: TaskID | None = None
        self._in_flight: Callable[[], int] | None = None
        self._reading = ""  # a long document's windows or a scan's pages, as they are read
        self._tokens_from_calls = False  # answered() reports tokens: finished() adds none (a queued batch: it does)
        self._lock = threading.Lock()  # the counts are read by the thread printing the lines
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, args=(progress_seconds(),), name="progress lines",
                                        daemon=True) if self.lines else None

    def __enter__(self) -> RunProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        if self._ticker is not None and self._ticker.is_alive():
            self._ticker.join()
        self._progress.__exit__(kind, error, trace)

    def started(self, total: int) -> None:
        self.total = total
        self._started = time.monotonic()
        self._task = self._progress.add_task("", total=total, left="")
        if self._ticker is not None:
            self._ticker.start()

    def calls(self, in_flight: Callable[[], int]) -> None:
        self._in_flight = in_flight

    def answered(self, tokens: int) -> None:
        with self._lock:
            self._tokens_from_calls = True
            self.tokens += tokens

    def finished(self, outcome: DocumentOutcome) -> None:
        with self._lock:
            self.counts[outcome.state] += 1
            if not self._tokens_from_calls:
                self.tokens += outcome.tokens
            self._reading = ""
        if self._task is not None:
            left = self.left()
            self._progress.update(self._task, advance=1, left=f"{left} left" if left else "")
        if outcome.state in (Outcome.INPUT_ERROR, Outcome.ERROR):
            self._progress.console.print(Text.assemble((outcome.state, "red"), f" {problem_line(outcome)}"),
                                         markup=False, highlight=False)

    def note(self, line: str) -> None:
        self._progress.console.print(line, markup=False, highlight=False)

    def left(self) -> str | None:
        """The time left at the pace so far (``2:05``), once a document that needed work is done; else None."""
        with self._lock:
            done = sum(self.counts.values())
            worked = done - self.counts[Outcome.SKIPPED] - self.counts[Outcome.INPUT_ERROR]
        if not worked or done >= self.total:
            return None
        return clock((time.monotonic() - self._started) / worked * (self.total - done))

    def status(self) -> tuple[str, list[str]]:
        """The documents per state (``MANUAL_REVIEW 1, READY_FOR_REVIEW 2``), and the rest of what is going on:
        ``3 calls in flight``, ``12,345 tokens so far``, a long document's window or a scan's page being read."""
        with self._lock:
            counts = ", ".join(f"{state} {n}" for state, n in sorted(self.counts.items()))
            tokens, reading = self.tokens, self._reading
        rest = []
        if self._in_flight is not None:
            calls = self._in_flight()
            rest.append(f"{calls} call{'' if calls == 1 else 's'} in flight")
        rest.append(f"{tokens:,} tokens so far")
        if reading:
            rest.append(reading)
        return counts, rest

    def _status_line(self) -> Text:
        counts, rest = self.status()
        return Text("  " + " · ".join([counts, *rest] if counts else rest), overflow="ellipsis", no_wrap=True)

    def line(self) -> str:
        """``progress: 12/40 documents (MANUAL_REVIEW 3, READY_FOR_REVIEW 9), 4 calls in flight, 12,345 tokens so
        far, 1:02 elapsed, 3:27 left``."""
        with self._lock:
            done = sum(self.counts.values())
        counts, rest = self.status()
        parts = [f"progress: {done}/{self.total} documents" + (f" ({counts})" if counts else ""), *rest,
                 f"{clock(time.monotonic() - self._started)} elapsed"]
        left = self.left()
        if left:
            parts.append(f"{left} left")  # a duration: "ETA 17:42" reads as a time of day
        return ", ".join(parts)

    def _tick(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            self._progress.console.print(self.line(), markup=False, highlight=False)

    def window(self, path: str, done: int, total: int) -> None:
        """A long document's windows as they are answered, in the status."""
        with self._lock:
            self._reading = f"{printable(path)}: window {done}/{total}"

    def page(self, path: str, done: int, total: int) -> None:
        """A scan's pages as OCR reads them, in the status."""
        with self._lock:
            self._reading = f"{printable(path)}: OCR page {done}/{total}"


def problem_line(outcome: DocumentOutcome) -> str:
    """``path: cause`` of an input that ended ERROR or INPUT_ERROR (a cause that starts with the path keeps it once)."""
    cause = outcome.cause or "no cause recorded"
    return printable(cause if cause.startswith(outcome.path) else f"{outcome.path}: {cause}")


def print_nothing_found(discovery: Discovery, as_json: bool = False) -> None:
    """Why a run had nothing to read, on stderr (one line per path that matched nothing, then the reason);
    with ``as_json`` the same as a JSON summary with no run on stdout."""
    import json
    import sys

    for raw in discovery.missing:
        print(f"error: {printable(raw)}: no such file, folder or glob match", file=sys.stderr)
    reason = discovery.nothing_found()
    if discovery.folders or not discovery.missing:
        print(f"error: {printable(reason)}", file=sys.stderr)
    if as_json:
        print(json.dumps({"run_id": None, "documents": 0, "missing": discovery.missing,
                          "unsupported_files": dict(sorted(discovery.unsupported.items())), "nothing_found": reason},
                         ensure_ascii=False, indent=2))


SHOWN_PROBLEMS = 20
"""The summary names this many unreadable inputs, then says how to list the rest."""


def print_summary(summary: RunSummary, console: Console | None = None, title: str | None = None) -> None:
    """Documents per state, why any were skipped or retried, the rules that fired most, tokens and time.

    ``title`` replaces the first line (a queued batch names its batch and worker runs)."""
    console = console or open_console()
    console.print(title or f"run {summary.run_id}" + (" (interrupted)" if summary.interrupted else ""))
    table = Table()
    add_columns(table, ("state", "documents"), right=("documents",))
    for state, count in sorted(summary.counts.items()):
        table.add_row(Text(state, style=STATE_STYLE.get(state, "")), str(count))
    table.add_row("total", str(len(summary.outcomes)), style="bold")
    print_table(console, table)
    for reason, run, count in summary.skipped_because():
        what = (f"done before by run {run}" if reason == SkipReason.done and run else
                f"busy: run {run} is processing them" if reason == SkipReason.busy else "done before")
        console.print(f"skipped {count}: {what}" + (" (--force redoes them)" if reason == SkipReason.done else ""))
    if summary.retried_errors:
        console.print(f"retried {summary.retried_errors} document(s) that ended ERROR in an earlier run "
                      "(--no-retry-errors skips them)")
    if summary.unsupported:
        skipped = Discovery(unsupported=Counter(summary.unsupported)).skipped_files
        console.print(f"not documents, skipped in folders: {skipped}")
    if summary.top_rules:
        rules = Table(title="rule ids in final attempts")
        add_columns(rules, ("rule_id", "documents"), right=("documents",))
        for rule_id, count in summary.top_rules:
            rules.add_row(rule_id, str(count))
        print_table(console, rules)
    console.print(f"tokens {summary.tokens:,}   time {summary.seconds:.1f} s   {cost_line(summary.spend, summary.evaluated)}")
    if summary.stopped:
        console.print(f"stopped: {summary.stopped}; rerun (with a higher --max-cost) to finish", style="yellow")
    if summary.interrupted:
        left = summary.counts.get(Outcome.INTERRUPTED, 0)
        console.print(f"interrupted: {left} document(s) left; rerun the same command to finish them", style="yellow")
    unread = [outcome for outcome in summary.outcomes if outcome.state == Outcome.INPUT_ERROR]
    if unread:
        console.print(Text(f"could not be read: {len(unread)} input(s)", style="red"))
        for outcome in unread[:SHOWN_PROBLEMS]:
            console.print(Text(f"  {problem_line(outcome)}"), highlight=False)
        if len(unread) > SHOWN_PROBLEMS:
            console.print(f"  ... and {len(unread) - SHOWN_PROBLEMS} more: each was named on stderr as it failed, "
                          "and --format json lists every input with its cause")
    for outcome in summary.outcomes:
        if outcome.state == Outcome.BLOCKED:
            console.print(Text.assemble((Outcome.BLOCKED, "bold red"), f" {printable(outcome.path)}: {printable(outcome.cause)}"),
                          highlight=False)
    if summary.needs_person and summary.not_answered:  # both kinds: say which is which
        console.print(f"need a person: {summary.needs_person} document(s) (extract review)")
    for cause, count in summary.not_answered_causes():
        console.print(Text(f"not answered by the model: {count} document(s): {printable(cause)}", style="red"), highlight=False)
    decision = summary.outcome
    console.print(Text.assemble("outcome ", (decision.value, DECISION_STYLE[decision]),
                                f"   exit {int(summary.exit_code)}   ({outcome_meaning(summary)})"))
