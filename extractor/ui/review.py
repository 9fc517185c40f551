"""Terminal rendering (rich) for review, show, runs, stats and compare.

The data comes from ``extractor.review``, ``extractor.stats`` and ``extractor.compare``; ``--format json``
prints the same data without this module.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from extractor.printable import printable
from extractor.ui.console import add_columns, open_console, print_hanging, print_table
from extractor.ui.styles import DECISION_STYLE, STATE_STYLE, findings_table
from extractor.vocab import FINAL_STATES, CoverageStatus, DocumentState, SentenceMark

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.syntax import Syntax

    from extractor.compare import Comparison
    from extractor.evidence.report import Report
    from extractor.prices import Spend
    from extractor.review.decide import Approval, Rejection
    from extractor.review.view import DocumentView, RunView, SentenceView
    from extractor.stats import CorrectionGroup, RuleCount, RunRuleStats
    from extractor.store import RunInfo
    from extractor.store.evaluations import EvaluationInfo

SENTENCE_STYLE: dict[str, str] = {
    CoverageStatus.MAPPED: "green",
    CoverageStatus.UNMAPPED: "yellow",
    CoverageStatus.EXCLUDED: "bright_black",
    SentenceMark.UNACCOUNTED: "bold white on red",
    SentenceMark.NOT_EVALUATED: "",
}
EVIDENCE_STYLE = "bold underline"


SENTENCE_LEGEND = (
    (CoverageStatus.MAPPED, "a field holds it"),
    (CoverageStatus.UNMAPPED, "read, no field holds it (reason given)"),
    (CoverageStatus.EXCLUDED, "not content: title, heading"),
    (SentenceMark.UNACCOUNTED, "the candidate skipped it"),
    ("UNVERIFIED:<rule>", "the candidate's claim about it broke <rule>"),
    (SentenceMark.NOT_EVALUATED, "no candidate could be checked"),
)
"""Every label a sentence of ``show`` can carry (``extractor.review.view.sentence_label``), with its meaning."""
FIELD_LEGEND = ("field states: PRESENT has a value with evidence; NEEDS_INPUT null, with a question for a person; "
                "- neither (the rule under 'because' says why)")


def legend(*, plain: bool) -> Text:
    """The key to the source panel: every sentence label in its colour, and how evidence is marked."""
    out = Text("sentences: ")
    for label, meaning in SENTENCE_LEGEND:
        out.append(label, style=_sentence_style(label))
        out.append(f" {meaning}; ")
    out.append("evidence: ")
    out.append("[[like this]]" if plain else "underlined", style=EVIDENCE_STYLE)
    return out


def _sentence_style(label: str) -> str:
    return SENTENCE_STYLE.get(label, "red")  # UNVERIFIED:<rule> and anything unexpected stand out


def display_path(path: str) -> str:
    """A path relative to the current folder when it lies inside it (the run log keeps paths as given)."""
    if not os.path.isabs(path):
        return printable(path)
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return printable(path)
    return printable(path if relative.startswith("..") else relative)


def _short(sha: str | None, n: int = 12) -> str:
    return (sha or "")[:n]


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M}"


def _rules(counts: dict[str, int]) -> str:
    return ", ".join(f"{rule}x{n}" if n > 1 else rule for rule, n in counts.items())


# -- review queue ------------------------------------------------------------------------------------------


def _cause(item: Any) -> Text:
    """The cause, with a judge warning flagged first (a READY_FOR_REVIEW document the judge warned about)."""
    if "JUDGE_WARN" in (item.needs_person or ()):
        return Text.assemble(("JUDGE WARNING ", "bold yellow"), printable(item.cause or ""))
    return Text(printable(item.cause or ""))


def print_queue(items: list[Any], total: int, console: Console | None = None) -> None:
    """The first ``len(items)`` of ``total`` waiting documents."""
    console = console or open_console()
    if not items:
        console.print("nothing waits for review")
        return
    shown = f"{len(items)} of {total:,}" if len(items) < total else f"{total}"
    table = Table(title=f"{shown} document(s) waiting for review (READY_FOR_REVIEW first)")
    review = any(item.review_status() for item in items)  # approvals ("1 of 2 approvals"), who has it open
    add_columns(table, ("doc run", "state", "path", "sha256", "model / prompt", "errors", "warnings", "others",
                        *(("review",) if review else ()), "cause"),
                wrap=("errors", "warnings", "others", "review", "cause"), right=("doc run",))
    for item in items:
        table.add_row(
            str(item.document_run_id), Text(item.state, style=STATE_STYLE.get(item.state, "")), display_path(item.path),
            _short(item.sha256), f"{item.model} / {item.prompt_version}",
            Text(_rules(item.errors), style="red"), Text(_rules(item.warnings), style="yellow"),
            ", ".join(str(i) for i in item.alternatives), *((printable(item.review_status()),) if review else ()),
            _cause(item),
        )
    print_table(console, table)
    if len(items) < total:
        console.print(f"{total - len(items):,} more waiting: --limit N or --all to list them")
    console.print("next: extract show DOC_RUN   then   extract approve DOC_RUN --reviewer NAME  |  "
                  "extract reject DOC_RUN --reviewer NAME --reason TEXT")
    if any(item.state == DocumentState.BLOCKED for item in items):
        console.print("BLOCKED (a critical finding): reject it, or approve it over the block with "
                      "--override-block --reason TEXT (recorded and exported)")


# -- approve and reject ------------------------------------------------------------------------------------


def print_approval(result: Approval) -> None:
    """What ``approve`` wrote (or that nothing was written), the approval it replaced, warnings kept; on a contract
    that needs several people, how many approved so far ("1 of 2 approvals")."""
    a, d, standing = result.approved, result.document_run, result.approvals
    if a is None:
        assert standing is not None
        verb = "you signed it off already" if result.outcome == "already" else "signed off"
        print(f"{verb}: document run {d.id} ({printable(d.path)}) has {printable(standing.describe())}; it is "
              "approved, and exported, once another person approves the same record"
              + ("; nothing written" if result.outcome == "already" else ""))
        return
    when = f"{a.approved_at:%Y-%m-%d %H:%M:%S} UTC"
    by = ", ".join(entry["reviewer"] for entry in a.approvals) if a.approvals else a.reviewer
    if result.outcome == "already":
        print(f"already approved by {printable(by)} at {when} (record {a.id}); nothing written")
        return
    what = "an edited record" if a.edited else "the candidate"
    print(f"approved {what} of document run {d.id} ({printable(d.path)}, sha256 {d.sha256[:12]}) as record {a.id}, "
          f"by {printable(by)} at {when}")
    if a.block_override is not None:
        print(f"overrode the block ({', '.join(a.block_override['rule_ids']) or 'BLOCKED'}): "
              f"{printable(a.block_override['reason'])}")
    if result.previous is not None:
        print(f"replaced the approval by {result.previous.reviewer} at "
              f"{result.previous.approved_at:%Y-%m-%d %H:%M:%S} UTC")
    if result.report is not None and result.report.findings:
        print(f"note: {len(result.report.findings)} warning(s): "
              + ", ".join(sorted({f.rule_id for f in result.report.findings})))


def print_rejection(result: Rejection) -> None:
    """What ``reject`` recorded, and the approval it withdrew or the one this content keeps."""
    r, d = result.review, result.document_run
    when = f"{r.created_at:%Y-%m-%d %H:%M:%S} UTC"
    if result.outcome == "already":
        print(f"already rejected by {r.reviewer} at {when} for the same reason; nothing written")
        return
    print(f"rejected document run {d.id} ({printable(d.path)}) by {printable(r.reviewer)} at {when}: {printable(r.note)}")
    if result.withdrawn is not None:
        print(f"withdrew the approval by {result.withdrawn.reviewer} at "
              f"{result.withdrawn.approved_at:%Y-%m-%d %H:%M:%S} UTC; it will not be exported")
    elif result.kept is not None:
        print(f"note: this content keeps its approved record from run {(result.kept.run_id or '?')[:12]} "
              f"(approved by {result.kept.reviewer})")


def print_refused_findings(report: Report) -> None:
    """The findings that made ``approve --edited`` refuse, on stderr before the one-line error."""
    open_console(stderr=True).print(findings_table((f.to_json() for f in report.findings),
                                              title="findings of the edited candidate"))


# -- show ---------------------------------------------------------------------------------------------------


def source_text(view: DocumentView, plain: bool = False, sentences: list[SentenceView] | None = None) -> Text:
    """The source, each sentence tagged with its id and state and coloured by state, evidence underlined
    (``sentences``: as a record other than the model's candidate leaves them).

    ``plain`` (no colours available) wraps evidence in ``[[ ]]`` so it stays visible in a pipe.
    """
    text = view.text
    out = Text()
    previous_end, previous_block, previous_page = 0, -1, None
    for position, sentence in enumerate(view.sentences if sentences is None else sentences):
        start, end = sentence.start, sentence.end
        if text is not None:
            out.append(printable(text[previous_end:start], lines=True))
        elif position:
            out.append("\n\n" if sentence.block != previous_block else " ")
        if sentence.page is not None and sentence.page != previous_page:
            out.append(f"[page {sentence.page}] ", style="bold")
            previous_page = sentence.page
        if sentence.location is not None:
            out.append(f"[{sentence.location}] ", style="bold")
        style = _sentence_style(sentence.label)
        out.append(f"⟨{sentence.id} {sentence.label}⟩", style=f"{style} dim" if style else "dim")
        body = Text(printable(sentence.text, lines=True), style=style)
        marks: list[tuple[int, int]] = []
        for span in sentence.evidence:  # offsets into the text as drawn, escapes included
            relative = (len(printable(sentence.text[:span.start - start], lines=True)),
                        len(printable(sentence.text[:span.end - start], lines=True)))
            body.stylize(EVIDENCE_STYLE, *relative)
            marks.append(relative)
        if plain and marks:
            merged: list[list[int]] = []
            for s, e in sorted(marks):
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], e)
                else:
                    merged.append([s, e])
            for s, e in reversed(merged):
                body = body[:s] + Text("[[") + body[s:e] + Text("]]") + body[e:]
        out.append_text(body)
        previous_end, previous_block = end, sentence.block
    if text is not None:
        out.append(text[previous_end:])
    return out


def compact_json(value: Any) -> str:
    """JSON with one line per top-level field and per array item: a candidate fits on a screen or two."""
    if not isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, indent=2)
    lines = ["{"]
    for position, (key, item) in enumerate(value.items()):
        comma = "," if position < len(value) - 1 else ""
        name = json.dumps(key, ensure_ascii=False)
        if isinstance(item, list) and item:
            lines.append(f"  {name}: [")
            lines += [f"    {json.dumps(e, ensure_ascii=False)}{',' if i < len(item) - 1 else ''}" for i, e in enumerate(item)]
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {name}: {json.dumps(item, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines)


def print_request(request: dict[str, Any], fingerprint: str, console: Console, mode: str | None = None) -> None:
    """One request exactly as sent in ``mode``: every message verbatim, then the structured-output settings."""
    from extractor.generate import messages_as_sent

    for message in messages_as_sent(request.get("messages") or [], request.get("schema_at"), mode):
        console.print(Text(f"--- {message.get('role')} ---", style="bold cyan"))
        console.print(Text(str(message.get("content"))))
    console.print(Text(f"--- schema {request.get('schema_name')}, temperature {request.get('temperature')}, "
                       f"max_tokens {request.get('max_tokens')}, fingerprint {fingerprint} ---", style="bold cyan"))


def print_json_panel(console: Console, value: Any, title: str) -> None:
    """A record as JSON in a titled panel (highlighted on a terminal)."""
    text = compact_json(value)
    body: Text | Syntax = Text(text)
    if console.color_system is not None:  # highlighting takes pygments: only for a terminal's colours
        from rich.syntax import Syntax

        body = Syntax(text, "json", word_wrap=True, background_color="default")
    console.print(Panel(body, title=title, title_align="left", expand=console.is_terminal))


def print_document_view(view: DocumentView, console: Console | None = None, *, requests: bool = False) -> None:
    """The document run; with ``requests`` each attempt's request as sent, message by message."""
    console = console or open_console()
    document_run, run, document = view.document_run, view.run, view.document
    state = document_run.state
    judge_marks = [m for m in document_run.needs_person or [] if m.startswith("JUDGE_")]
    if judge_marks and document_run.cause:  # the judge's warning (or why it did not judge) comes first
        console.print(Panel(Text(printable(document_run.cause)), title=f"judge: {', '.join(judge_marks)}", title_align="left",
                            border_style="yellow", expand=False))
    header = Text.assemble(
        (f"document run {document_run.id}  ", "bold"), (state, STATE_STYLE.get(state, "")),
        f"  {display_path(document_run.path)}  sha256 {_short(document.sha256, 16)}\n",
        f"run {_short(run.id)}  {run.contract} v{run.contract_version}  prompt {run.prompt_version}  "
        f"model {run.model} ({run.provider})  validator {run.validator_version}  "
        f"finished {_when(document_run.finished_at)}",
    )
    if document_run.cause:
        header.append(f"\ncause: {printable(document_run.cause)}", style="yellow")
    if document_run.tags:
        header.append(f"\ntags: {', '.join(document_run.tags)}")
    console.print(Panel(header, expand=False))

    if view.source_status != "unchanged":
        console.print(Text(f"source {view.source_status}: {view.source_detail}; "
                           "showing the sentences as the run stored them", style="yellow"))
    console.print(legend(plain=console.color_system is None))
    from extractor.review.view import label_counts, record_sentences

    pending = view.pending
    sentences = view.sentences if pending is None else record_sentences(  # as the record shown below leaves them
        view.document, pending.record, list(pending.evidence_spans or []))
    counts = ", ".join(f"{label} {n}" for label, n in label_counts(sentences).items())
    console.print(Panel(source_text(view, console.color_system is None, sentences),
                        title=f"source ({document.sentence_count} sentences: {counts})", title_align="left",
                        expand=console.is_terminal))

    if any(excerpt.pages for excerpt in view.excerpts):
        table = Table(title="evidence on the pages", title_justify="left")
        add_columns(table, ("field", "page", "excerpt"))
        for excerpt in view.excerpts:
            table.add_row(excerpt.field_path, ", ".join(map(str, excerpt.pages)) or "-", printable(excerpt.text))
        print_table(console, table)
    if pending is not None:  # what approving it as it is signs off, in place of the model's candidate
        edited = (f", edited by {printable(pending.signed_by[0])} (changed: "
                  f"{', '.join(pending.changed_fields or ()) or 'no field'})" if pending.edited else ", as the model produced it")
        print_json_panel(console, pending.record, f"waiting for approval: the record {printable(', '.join(pending.signed_by))} "
                         f"signed off{edited}")
    elif view.candidate is not None and view.shown is not None:
        print_json_panel(console, view.candidate, f"candidate (attempt {view.shown_position})")
    if view.fields:
        table = Table(title="fields", title_justify="left", caption=FIELD_LEGEND, caption_justify="left")
        add_columns(table, ("field", "state", "because"))
        for path, field_state in view.fields.items():
            value = field_state.get("state")
            table.add_row(path, Text(value or "-", style=STATE_STYLE.get(value, "bold red")), field_state.get("rule_id") or "")
        print_table(console, table)
    missing = view.missing_fields
    if missing:
        console.print(Text("questions for a person (missingFields):", style="bold"))
        for question in missing:
            if isinstance(question, dict):
                console.print(f"  - {question.get('fieldPath')}: {question.get('question')}")
    from extractor.prices import dollars
    from extractor.review.view import latency

    for shown in view.attempts:
        attempt = shown.attempt
        cached = f" ({attempt.cached_tokens} cached)" if attempt.cached_tokens else ""
        tokens = (f"{attempt.prompt_tokens or 0}{cached}+{attempt.completion_tokens or 0} tokens, "
                  f"{'local model, no API price' if shown.in_process else dollars(shown.cost)}")
        took = latency(attempt.latency_ms)
        reused = f", {shown.reused.describe(document_run.id)}" if shown.reused else ""
        title = (f"attempt {shown.position} ({shown.label}{reused}{', final' if shown.final else ''}): "
                 f"{attempt.outcome}, {shown.errors} error(s), {shown.warnings} warning(s), {tokens}, {took}")
        print_hanging(console, Text(title, style="bold"))
        print_findings(console, shown.findings)
        if attempt.error:
            console.print(Text(f"  error: {attempt.error}", style="red"))
        raw = shown.raw_response
        if raw is not None:
            console.print(Text(f"  raw response ({len(raw)} chars): {raw[:500]!r}", style="bright_black"))
        if requests:
            print_request(attempt.request, attempt.request_hash, console, attempt.mode)
    approved = view.approved
    for review in view.reviews:
        if approved is not None and (review.reviewer, review.created_at) == (approved.reviewer, approved.approved_at):
            continue  # the approval of the record below: said once
        console.print(f"{review.decision} by {review.reviewer} at {_when(review.created_at)}"
                      + (f": {review.note}" if review.note else ""))
    if view.approvals is not None and view.approvals.pending:
        console.print(Text(f"{printable(view.approvals.describe())}: approved, and exported, once another person "
                           "approves the same record", style="yellow"))
    if view.claim is not None:
        console.print(Text(printable(view.claim.describe()), style="yellow"))
    approved = view.approved
    if approved is not None:
        same = "this candidate" if view.approved_same_as_candidate else "a different record"
        by = ", ".join(entry["reviewer"] for entry in approved.approvals) if approved.approvals else approved.reviewer
        console.print(Text(f"approved record: {same}{' (edited)' if approved.edited else ''}, by "
                           f"{printable(by)} at {_when(approved.approved_at)}"
                           + (f": {printable(approved.note)}" if approved.note else ""), style="green"))
    if view.others:
        console.print("other runs of this document: " + ", ".join(
            f"{o.id} ({o.state}, run {_short(o.run_id)})" for o in view.others))


SEVERITY_STYLE = {"critical": "bold red", "error": "red", "warning": "yellow"}
FINDING_INDENT = 6
"""How far a finding's message stands in under its ``severity RULE_ID`` line (its wrapped lines too)."""


@dataclass(frozen=True)
class FindingGroup:
    """The findings of one attempt with the same rule and severity: ``extract show`` prints them once."""

    rule_id: str
    severity: str
    entries: list[tuple[str, str]]
    """``(location, message)`` of each finding; of the first alone when the messages differ in one word only."""
    varying: list[str]
    """The word the other findings' messages have in that place (``s2``, ``s3``, ...), in order."""
    count: int
    locations: frozenset[str]
    """Where the group's findings point."""

    @property
    def location(self) -> str | None:
        """The one location of every finding of the group, if they share it."""
        return next(iter(self.locations)) if len(self.locations) == 1 else None


def group_findings(findings: Iterable[dict[str, Any]]) -> list[FindingGroup]:
    """Findings grouped by rule and severity, in order of first appearance. Eighteen SENTENCE_NOT_ACCOUNTED
    findings differ only in their sentence id: one message and the list of ids, not eighteen messages."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for finding in findings:
        grouped.setdefault((str(finding.get("rule_id")), str(finding.get("severity") or "")), []).append(finding)
    groups = []
    for (rule_id, severity), members in grouped.items():
        entries = [(str(f.get("location") or ""), str(f.get("message") or "")) for f in members]
        words = [message.split(" ") for _, message in entries]
        varying: list[str] = []
        if len(members) > 1 and len({len(w) for w in words}) == 1:
            differ = [i for i in range(len(words[0])) if len({w[i] for w in words}) > 1]
            if len(differ) == 1:
                varying = [w[differ[0]] for w in words[1:]]
                entries = entries[:1]
        groups.append(FindingGroup(rule_id, severity, entries, varying, len(members),
                                   frozenset(str(f.get("location") or "") for f in members)))
    return groups


def print_findings(console: Console, findings: Sequence[dict[str, Any]]) -> None:
    """An attempt's findings, grouped (``group_findings``): ``error SENTENCE_NOT_ACCOUNTED x18 at $.sentenceCoverage``,
    then the message and ``the same for s2, s3, ...``, indented, wrapped lines too."""
    from rich.padding import Padding

    for group in group_findings(findings):
        style = SEVERITY_STYLE.get(group.severity, "")
        head = Text("  ")
        head.append(group.severity, style=style)
        head.append(" ")
        head.append(group.rule_id, style=f"bold {style}".strip())
        if group.count > 1:
            head.append(f" x{group.count}")
        shared = group.location
        if shared is not None:
            head.append(f" at {printable(shared)}")
        print_hanging(console, head, indent=FINDING_INDENT)
        for location, message in group.entries:
            text = Text(printable(message if shared is not None else f"{location}: {message}"))
            console.print(Padding(text, (0, 0, 0, FINDING_INDENT), expand=False))
        if group.varying:
            console.print(Padding(Text(printable(f"the same for {', '.join(group.varying)}")), (0, 0, 0, FINDING_INDENT),
                                  expand=False))


def print_run_view(view: RunView, console: Console | None = None) -> None:
    console = console or open_console()
    print_table(console, runs_table([view.run], title=f"run {view.run.id}"))
    console.print(f"command: {view.run.command}")
    table = Table(title="documents")
    add_columns(table, ("doc run", "state", "path", "sha256", "tags", "rule ids", "cause"),
                wrap=("tags", "rule ids", "cause"), right=("doc run",))
    for entry in view.documents:
        d = entry.document_run
        table.add_row(str(d.id), Text(d.state, style=STATE_STYLE.get(d.state, "")), display_path(d.path),
                      _short(d.sha256), ", ".join(d.tags), ", ".join(entry.rule_ids), d.cause or "")
    print_table(console, table)
    if len(view.documents) < view.total:
        console.print(f"listed the first {len(view.documents):,} of {view.total:,} documents: --limit N or --all to list "
                      f"more, `extract review --run {view.run.id[:12]}` for those waiting for a person")


# -- runs and stats -----------------------------------------------------------------------------------------


STATE_COLUMNS = FINAL_STATES
"""A run's counts get a column per final state, in this order; the rest are summed as ``other``."""


def runs_table(runs: Iterable[RunInfo], title: str = "runs (newest first)",
               accuracy: Mapping[str, EvaluationInfo] | None = None, spend: Mapping[str, Spend] | None = None) -> Table:
    """Runs with their documents per state at the end of the run and how many of them people have decided since
    (approved or rejected); with ``accuracy``, each run's newest score against gold (F1 and its 95% interval,
    from ``extract eval``); with ``spend``, what its model calls cost, in all and per document."""
    from extractor.prices import dollars

    table = Table(title=title)
    add_columns(table, ("run", "started (UTC)", "status", "outcome", "contract", "prompt", "model", "validator", "docs",
                        "ready", "manual", "blocked", "error", "other", "decided",
                        *(("accuracy (F1)",) if accuracy else ()), *(("cost", "per doc") if spend else ())),
                right=("docs", "ready", "manual", "blocked", "error", "other", "decided", "cost", "per doc"))
    for run in runs:
        scored: tuple[str, ...] = (accuracy_cell(accuracy.get(run.id)),) if accuracy else ()
        if spend:
            found = spend.get(run.id)
            scored += (("local", "-") if found is not None and found.all_in_process else
                       (dollars(found.known), dollars(found.per(sum(run.counts.values()))))
                       if found is not None and found.calls else ("-", "-"))
        counts = run.counts
        other = sum(n for state, n in counts.items() if state not in STATE_COLUMNS)
        outcome = run.outcome
        table.add_row(
            _short(run.id), _when(run.started_at), run.status,
            Text(outcome or "-", style=DECISION_STYLE.get(outcome or "", "")),
            printable(f"{run.contract} v{run.contract_version}"),
            printable(f"{run.contract} v{run.contract_version}"),
            printable(run.prompt_version), printable(run.model), run.validator_version, str(sum(counts.values())),
            *(Text(str(counts.get(state, 0)), style=STATE_STYLE[state] if counts.get(state) else "") for state in STATE_COLUMNS),
            str(other), str(run.decided), *scored,
        )
    return table


def accuracy_cell(evaluation: EvaluationInfo | None) -> str:
    """``0.912 [0.870, 0.951]`` of the newest evaluation (``-`` for a run never scored against gold)."""
    if evaluation is None or evaluation.summary.get("f1") is None:
        return "-"
    interval = evaluation.summary.get("f1_ci") or {}
    low, high = interval.get("low"), interval.get("high")
    shown = f"{evaluation.summary['f1']:.3f}"
    return shown + (f" [{low:.3f}, {high:.3f}]" if low is not None and high is not None else "")


def print_runs(runs: Sequence[RunInfo], console: Console | None = None,
               accuracy: Mapping[str, EvaluationInfo] | None = None, spend: Mapping[str, Spend] | None = None) -> None:
    console = console or open_console()
    if not runs:
        console.print("no run matches")
        return
    print_table(console, runs_table(runs, accuracy=accuracy, spend=spend))


def _pct(count: RuleCount) -> str:
    return "-" if count.rate is None else f"{count.failed}/{count.evaluated} {count.rate:.0%}"


def print_stats(stats: Sequence[RunRuleStats], console: Console | None = None) -> None:
    """Rows: rule ids; columns: runs oldest to newest. A final-attempt rate that rose since the previous
    column is red, one that fell is green."""
    console = console or open_console()
    if not stats:
        console.print("no run matches")
        return
    ordered = list(reversed(stats))  # oldest first, so a regression reads left to right
    table = Table(title="error findings per rule: final attempt (first attempt), documents failing / evaluated")
    table.add_column("rule_id", no_wrap=True)
    for entry in ordered:
        run = entry.run
        table.add_column(f"{_short(run.id, 8)}\n{run.model}\n{run.prompt_version} {run.started_at:%Y-%m-%d}",
                         justify="right", overflow="fold")
    rules = sorted({rule for entry in ordered for rule in entry.rules})
    for rule in rules:
        cells: list[Text] = []
        previous: float | None = None
        for entry in ordered:
            counts = entry.rule(rule)
            final, first, warning = counts["final"], counts["first"], counts["warning"].failed
            rate = final.rate
            style = ""
            if previous is not None and rate is not None:
                style = "red" if rate > previous else "green" if rate < previous else ""
            cell = Text(_pct(final), style=style)
            cell.append(f" ({_pct(first)})", style="bright_black")
            if warning:
                cell.append(f" w{warning}", style="yellow")
            cells.append(cell)
            previous = rate if rate is not None else previous
        table.add_row(rule, *cells)
    table.add_row("documents evaluated", *(f"{e.evaluated_final} of {e.documents}" for e in ordered), style="bold")
    print_table(console, table)


def print_corrections(groups: Sequence[CorrectionGroup], console: Console | None = None) -> None:
    """Rows: field paths; columns: model, prompt and contract version; cells: approvals a person edited it in."""
    console = console or open_console()
    if not groups:
        console.print("no approved record of the selected runs")
        return
    table = Table(title="reviewer corrections: approved records whose value a person changed / approved records")
    table.add_column("field", no_wrap=True)
    for group in groups:
        table.add_column(f"{group.model}\nprompt {group.prompt_version}\n{group.contract}", justify="right")
    fields = sorted({name for group in groups for name in group.edited if name})
    for name in fields:
        cells = []
        for group in groups:
            share = group.share(name)
            count = group.edited.get(name, 0)
            cells.append(Text("-" if share is None else f"{count}/{group.approved} {share:.0%}",
                              style="red" if share and share >= 0.2 else ""))
        table.add_row(name, *cells)
    table.add_row("approved as produced", *(f"{g.edited.get('', 0)}/{g.approved}" for g in groups), style="bold")
    print_table(console, table)
    unrecorded = sum(group.not_recorded for group in groups)
    if unrecorded:
        console.print(f"{unrecorded} approval(s) made before changes were recorded are left out")


# -- compare ------------------------------------------------------------------------------------------------


def _interval(low_high: tuple[float, float] | list[float]) -> str:
    low, high = low_high
    return f"[{low:.3f}, {high:.3f}]"


def _side_tally(documents: Iterable[Any]) -> str:
    """`` (ready 5, need a person 2, never answered 1)``: a side's documents by what they ask of people."""
    states = Counter(document.state for document in documents)
    parts = [(DocumentState.READY_FOR_REVIEW, "ready"), (DocumentState.MANUAL_REVIEW, "need a person"),
             (DocumentState.BLOCKED, "blocked"), (DocumentState.ERROR, "never answered")]
    shown = [f"{label} {states[state]}" for state, label in parts if states[state]]
    return f" ({', '.join(shown)})" if shown else ""


def print_comparison(comparison: Comparison, console: Console | None = None) -> None:
    """Both sides, the posteriors per category, rho and the decision, and the documents behind them."""
    from extractor.gate import Posterior

    console = console or open_console()
    for name, side in (("baseline", comparison.baseline), ("candidate", comparison.candidate)):
        runs = ", ".join(f"{_short(r.id)} ({r.model}, prompt {r.prompt_version}, contract "
                         f"{((r.config or {}).get('contract_hash') or '?')[:12]})" for r in side.runs[:4])
        more = f" +{len(side.runs) - 4} more" if len(side.runs) > 4 else ""
        console.print(f"{name:>9}: {side.spec}  ->  {len(side.runs)} run(s): {runs}{more}; "
                      f"{len(side.documents)} document(s){_side_tally(side.documents.values())}")
    console.print(f"  matched: {len(comparison.paired) + len(comparison.unevaluable)} by content sha256, compared "
                  f"(evaluable on both sides): {len(comparison.paired)}")
    gate, settings = comparison.gate, comparison.gate.settings
    if gate.categories:
        table = Table(title=f"pass rate posteriors Beta(1+k, 1+n-k), {settings.level:.0%} intervals")
        columns = ("category", "weight", "baseline k/n", "mean", "interval", "candidate k/n", "mean", "interval")
        add_columns(table, columns, right=columns[1:])
        for c in gate.categories:
            a, b = Posterior(c.passed_a, c.n_a, settings.level), Posterior(c.passed_b, c.n_b, settings.level)
            table.add_row(c.name, f"{c.weight:.3f}", f"{a.passed}/{a.n}", f"{a.mean:.3f}", _interval(a.interval),
                          f"{b.passed}/{b.n}", f"{b.mean:.3f}", _interval(b.interval))
        if gate.rate_a and gate.rate_b:
            ra, rb = gate.rate_a, gate.rate_b
            table.add_row("weighted (MC)", "1.000", "", f"{ra['mean']:.3f}", _interval(ra["interval"]), "",
                          f"{rb['mean']:.3f}", _interval(rb["interval"]), style="bold")
        print_table(console, table)
    if gate.rho is not None and gate.difference is not None:
        diff = gate.difference
        console.print(f"rho = P(rate_B < rate_A - {settings.delta:g}) = {gate.rho:.4f}   "
                      f"(Monte Carlo {settings.samples:,} samples, seed {settings.seed}; "
                      f"block >= {settings.block:g}, review >= {settings.review:g}); "
                      f"rate_B - rate_A {diff['mean']:+.3f} {_interval(diff['interval'])}")
    if comparison.new_critical:
        table = Table(title=f"{len(comparison.new_critical)} candidate document(s) with a critical finding "
                            "the baseline does not have: BLOCK", title_style="bold red")
        for column in ("path", "candidate doc run", "rule id", "location", "message"):
            table.add_column(column, overflow="fold")
        for d in comparison.new_critical:
            for f in d.findings:
                table.add_row(display_path(d.path), str(d.document_run_id), Text(f.rule_id, style="bold red"),
                              f.location or "", f.message or "")
        console.print(table)
    if comparison.regressions:
        table = Table(title=f"{len(comparison.regressions)} regression(s): passed in baseline, fail in candidate")
        add_columns(table, ("path", "sha256", "candidate doc run", "state", "new rule ids"), wrap=("new rule ids",),
                    right=("candidate doc run",))
        for r in comparison.regressions:
            table.add_row(display_path(r.path), _short(r.sha256), str(r.candidate_document_run_id),
                          Text(r.candidate_state, style=STATE_STYLE.get(r.candidate_state, "")),
                          Text(", ".join(r.new_rule_ids) or "(none new)", style="red"))
        print_table(console, table)
    if comparison.improvements:
        console.print(Text(f"{len(comparison.improvements)} improvement(s): failed in baseline, pass in candidate",
                           style="green"))
    changed = [rate for rate in comparison.rule_rates if rate.change != 0]
    if changed:
        table = Table(title="error rule failure rates on the compared documents")
        add_columns(table, ("rule_id", "baseline", "candidate", "change"), right=("baseline", "candidate", "change"))
        for rate in changed:
            table.add_row(rate.rule_id, f"{rate.baseline_failed}/{rate.evaluated}",
                          f"{rate.candidate_failed}/{rate.evaluated}",
                          Text(f"{rate.change:+.0%}", style="red" if rate.change > 0 else "green"))
        print_table(console, table)
    before, after = comparison.baseline.documents, comparison.candidate.documents
    if comparison.unevaluable:
        console.print(Text(f"{len(comparison.unevaluable)} matched document(s) not evaluable on a side (left out of "
                           "both rates):", style="yellow"))
        for sha in comparison.unevaluable[:20]:
            console.print(f"  {_short(sha)} {display_path(before[sha].path)}: baseline {before[sha].why_unevaluable}, "
                          f"candidate {after[sha].why_unevaluable}")
    for label, only, documents in (("baseline only", comparison.only_baseline, before),
                                   ("candidate only", comparison.only_candidate, after)):
        if only:
            console.print(Text(f"{len(only)} document(s) {label} (not compared):", style="yellow"))
            for sha in only[:50]:
                console.print(f"  {_short(sha)} {display_path(documents[sha].path)} ({documents[sha].state})")
            if len(only) > 50:
                console.print(f"  ... {len(only) - 50} more (--format json lists all)")
    from extractor.prices import dollars

    for name, cost in comparison.cost.items():
        if cost.get("calls") and cost.get("calls_in_process") == cost["calls"]:
            console.print(f"cost {name}: local model, no API price ({cost['documents']} matched document(s))")
        elif cost.get("calls"):
            console.print(f"cost {name}: {dollars(cost['cost_usd'])} for {cost['documents']} matched document(s), "
                          f"{dollars(cost['per_document_usd'])} per document")
    if comparison.accuracy is not None:
        from extractor.ui.evaluation import print_accuracy_comparison

        print_accuracy_comparison(comparison.accuracy, console)
    console.print(Text.assemble(("decision: ", "bold"), (gate.decision, DECISION_STYLE[gate.decision]),
                                f"  ({gate.reason})"))


class DoctorProgress:
    """``extract doctor``'s bar (``extractor.store.integrity.Progress``): the check it is at, of how many, and the
    rows read by a check that reads row by row."""

    def __init__(self, bar: RichProgress) -> None:
        self.bar = bar
        self.task = bar.add_task("", total=None)

    def check(self, name: str, number: int, of: int) -> None:
        self.name = name
        self.bar.update(self.task, total=of, completed=number - 1, description=name)

    def rows(self, done: int, total: int | None) -> None:
        self.bar.update(self.task, description=f"{self.name}: {done:,}{f'/{total:,}' if total else ''} rows")
