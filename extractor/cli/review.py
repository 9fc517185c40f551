"""The human decision: ``review``, ``show``, ``approve``, ``reject`` and ``export`` of approved records.

Only these commands write approved records (``extractor.store.approved``). Exit codes: 0 done (also
"already approved"), 1 refused (errors in an edited candidate, changed source, wrong state), 2 bad usage
or nothing found.
"""


import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from extractor.cli.app import (
    OUTPUT,
    ContractsOption,
    Format,
    FormatOption,
    app,
    emit_json,
    fail,
    search_contracts,
)
from extractor.vocab import DEFAULT_REVIEW_PAGE, MIN_ID_PREFIX

DatabaseOption = Annotated[str | None, typer.Option(
    "--database", metavar="URL", rich_help_panel=OUTPUT,
    help="the run log [env EXTRACT_DATABASE_URL; default sqlite:///extract.db]")]
ApprovedDatabaseOption = Annotated[str | None, typer.Option(
    "--approved-database", metavar="URL", rich_help_panel=OUTPUT,
    help="database of approved records [env EXTRACT_APPROVED_DATABASE_URL; default: the run log]")]
ReviewerOption = Annotated[str, typer.Option("--reviewer", envvar="EXTRACT_REVIEWER",
                                             help="who decides [env EXTRACT_REVIEWER]")]
DocArgument = Annotated[str, typer.Argument(
    metavar="DOC", help=f"document run id, content sha256 (or a unique prefix of {MIN_ID_PREFIX}+ characters), or the "
    "path given to `extract run`")]


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    csv = "csv"


class QueueState(StrEnum):
    ready = "ready"
    manual = "manual"
    blocked = "blocked"
    all = "all"


def open_run_log(database: str | None, *, reads_only: bool = True) -> Any:
    """The run log, refusing to create an empty SQLite file for a command that only reads or reviews. A command
    that ``reads_only`` works on a run log in a read-only folder (opened read-only, with a note saying so); one
    that writes (a decision) is refused there with one line before it starts."""
    from extractor.store import open_store

    store = open_store(database, create=False, reads_only=reads_only)
    if store.read_only is not None:
        typer.echo(f"note: {store.read_only} is read-only: the run log is opened read-only", err=True)
    return store


def open_stores(database: str | None, approved_database: str | None, *, reads_only: bool = True) -> tuple[Any, Any]:
    from extractor.store.approved import open_approved

    store = open_run_log(database, reads_only=reads_only)
    return store, open_approved(store, approved_database, reads_only=reads_only)


@dataclass(frozen=True)
class Waiting:
    """Which waiting documents ``review`` lists."""

    contract: Annotated[str | None, typer.Option(help="only this contract")] = None
    run: Annotated[str | None, typer.Option(help=f"only this run (id or a unique prefix of {MIN_ID_PREFIX}+ "
                                            "characters)")] = None
    model: Annotated[str | None, typer.Option(help="only results of this model id")] = None
    prompt_version: Annotated[str | None, typer.Option("--prompt-version", "--prompt",
                                                       help="only results of this prompt version")] = None
    state: Annotated[QueueState, typer.Option(help="which states to list")] = QueueState.all
    every_result: Annotated[bool, typer.Option(help="list every configuration's result of a document, "
                                               "not one per document")] = False
    limit: Annotated[int, typer.Option(min=1, help="list at most this many")] = DEFAULT_REVIEW_PAGE
    all_: Annotated[bool, typer.Option("--all", help="list every waiting document (no --limit)")] = False


@dataclass(frozen=True)
class WebReview:
    """``review --web``: the review pages served on this machine."""

    web: Annotated[bool, typer.Option("--web", help="review in the browser: serve the review pages on 127.0.0.1 "
                                      "and print the address to open (with a one-time login token)")] = False
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="port for --web [default 8765, or a free "
                                             "port when 8765 is taken; 0: any free port]")] = None


@app.command()
def review(
    wanted: Waiting = Waiting(),
    served: WebReview = WebReview(),
    contracts: ContractsOption = None,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Documents waiting for a person: READY_FOR_REVIEW first, then MANUAL_REVIEW, then BLOCKED, with their findings.

    One line per document (its READY_FOR_REVIEW result if any configuration produced one, else the newest);
    other waiting results of the same document are counted under "others" (--every-result lists them).
    The first --limit of them are listed, with how many wait in all (a note on stderr with --format json).
    With --web the same queue (and each document's source, evidence, findings and decisions) is served in
    the browser for the user who started it; decisions are recorded under that OS user's name.
    """
    from extractor.review.queue import QUEUE_STATES, QueueQuery, runs_matching, waiting
    from extractor.runfilter import RunFilter

    search_contracts(contracts)  # the web review's forms and checks need each run's contract
    store, records = open_stores(database, approved_database, reads_only=not served.web)  # the page records decisions
    if served.web:
        _serve_web(store, records, served.port)
        return
    selection = RunFilter(run=wanted.run.lower() if wanted.run else None, model=wanted.model,
                          prompt_version=wanted.prompt_version)
    query = QueueQuery(contract=wanted.contract, run_ids=runs_matching(store, selection),
                       states=QUEUE_STATES[wanted.state.value], every_result=wanted.every_result)
    page = waiting(store, records, query, limit=None if wanted.all_ else wanted.limit)
    if format is Format.json:
        emit_json([item.to_json() for item in page.items])
        if len(page.items) < page.total:
            typer.echo(f"note: listed {len(page.items)} of {page.total} waiting; --limit N or --all for more", err=True)
        return
    from extractor.ui.review import print_queue

    print_queue(page.items, page.total)


def _serve_web(store: Any, records: Any, port: int | None) -> None:
    from extractor.web.local import serve

    def announce(address: str) -> None:
        typer.echo(f"review in the browser: {address}")
        typer.echo("(the address works once and signs you in; decisions are recorded as this OS user; Ctrl-C stops)")
        sys.stdout.flush()

    try:
        serve(lambda: (store, records), port=port, announce=announce)
    except OSError as error:
        fail(f"cannot listen on 127.0.0.1:{port}: {error.strerror or error}")
    except KeyboardInterrupt:
        typer.echo("stopped")


@app.command()
def show(
    ref: Annotated[str, typer.Argument(metavar="RUN_OR_DOC", help=f"a run id, or DOC: document run id, content "
                                       f"sha256 or path (ids and hashes may be cut to {MIN_ID_PREFIX}+ characters)")],
    requests: Annotated[bool, typer.Option("--requests", help="also print every attempt's request exactly as "
                                           "sent (always in --format json)")] = False,
    limit: Annotated[int, typer.Option(min=1, help="a run: list its first this many documents")] = DEFAULT_REVIEW_PAGE,
    all_: Annotated[bool, typer.Option("--all", help="a run: list every document (no --limit)")] = False,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """One document run (source with sentence states and evidence, candidate, fields, questions, findings), or one run.

    For a document run: the source with every sentence marked MAPPED / UNMAPPED / EXCLUDED / UNACCOUNTED and
    the evidence spans highlighted, the candidate, field states, the missingFields questions, every attempt's
    findings (with --requests, its request as sent) and the decisions taken. For a run: its configuration and
    first --limit documents, with how many it processed (a note on stderr with --format json).
    """
    from extractor.review.resolve import Resolved, resolve_shown
    from extractor.review.view import DocumentView, RunView, document_view, run_view

    store, records = open_stores(database, approved_database)
    shown = resolve_shown(store, ref)
    view: DocumentView | RunView = (document_view(store, records, shown.document_run, shown.others)
                                    if isinstance(shown, Resolved) else run_view(store, shown, None if all_ else limit))
    if format is Format.json:
        emit_json(view.to_json())
        if isinstance(view, RunView) and len(view.documents) < view.total:
            typer.echo(f"note: listed {len(view.documents)} of {view.total} documents; --limit N or --all for more",
                       err=True)
        return
    from extractor.ui.review import print_document_view, print_run_view

    if isinstance(view, RunView):
        print_run_view(view)
    else:
        print_document_view(view, requests=requests)


@dataclass(frozen=True)
class Approval:
    """What ``approve`` records beside the reviewer: a note, an edited candidate, and what it may override."""

    note: Annotated[str | None, typer.Option(help="why, or what was checked")] = None
    edited: Annotated[Path | None, typer.Option(help="a corrected candidate (JSON); re-validated against the "
                                                "same source and refused while it has error findings")] = None
    source: Annotated[Path | None, typer.Option(help="the source file, if it moved since the run "
                                                "(its sha256 must still match)")] = None
    force: Annotated[bool, typer.Option("--force", "--replace", help="override an earlier decision on this "
                                        "document: a rejection, or an approved record that differs")] = False
    override_block: Annotated[bool, typer.Option(help="approve a BLOCKED result over its critical finding "
                                                 "(needs --reason; recorded and exported as provenance)")] = False
    reason: Annotated[str | None, typer.Option(help="why the block may be overridden (with --override-block)")] = None


@app.command()
def approve(
    doc: DocArgument,
    reviewer: ReviewerOption,
    approval: Approval = Approval(),
    contracts: ContractsOption = None,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Approve a document's candidate (or an edited one); the reviewer and time are recorded.

    DOC given as a path or sha256 means the document run `extract show DOC` shows. When its contract needs
    several people and someone signed it off already, approving without --edited signs off the record they signed
    (the one `extract show DOC` shows as waiting for approval), not the model's candidate. A BLOCKED result (a
    critical finding) is refused unless --override-block --reason TEXT is given; overriding an earlier
    decision (a rejection, a different approved record) needs --force.
    """
    from extractor.review import resolve
    from extractor.review.decide import Overrides, Refused, approve_document
    from extractor.rules.structure import read_candidate

    search_contracts(contracts)  # an edit is checked by the contract as the run used it
    store, records = open_stores(database, approved_database, reads_only=False)
    resolved = resolve(store, doc, for_decision=True)
    text = read_candidate(approval.edited) if approval.edited is not None else None
    try:
        result = approve_document(store, records, resolved.document_run, reviewer=reviewer, note=approval.note,
                                  edited=text, source=approval.source, overrides=Overrides(
                                      approval.force, approval.override_block, approval.reason))
    except Refused as refused:  # the findings of a refused edit are shown before the one-line error
        if format is Format.json:
            emit_json({"refused": refused.reason,
                       "findings": [] if refused.report is None else [f.to_json() for f in refused.report.findings]})
            raise typer.Exit(refused.exit_code) from None
        if refused.report is not None and refused.report.findings:
            from extractor.ui.review import print_refused_findings

            print_refused_findings(refused.report)
        raise
    if format is Format.json:
        emit_json(result.to_json())
        return
    from extractor.ui.review import print_approval

    print_approval(result)


@app.command()
def reject(
    doc: DocArgument,
    reviewer: ReviewerOption,
    reason: Annotated[str, typer.Option(help="what is wrong")],
    force: Annotated[bool, typer.Option("--force", help="reject a document run a person approved (withdraws the "
                                        "approval)")] = False,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Reject a document's candidate; withdraws an approval that came from the same document run (--force)."""
    from extractor.review import resolve
    from extractor.review.decide import reject_document

    store, records = open_stores(database, approved_database, reads_only=False)
    resolved = resolve(store, doc, for_decision=True)
    result = reject_document(store, records, resolved.document_run, reviewer=reviewer, reason=reason, force=force)
    if format is Format.json:
        emit_json(result.to_json())
        return
    from extractor.ui.review import print_rejection

    print_rejection(result)


@dataclass(frozen=True)
class Approved:
    """Which approved records ``export`` writes."""

    contract: Annotated[str | None, typer.Option(help="only records of this contract")] = None
    contract_version: Annotated[int | None, typer.Option(help="only this contract version")] = None
    since: Annotated[str | None, typer.Option(help="approved at or after: 2026-05-01, 2026-05-01T12:00, 7d, 12h")] = None


@app.command()
def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="file to write (atomically: temporary file, then rename)")],
    format: Annotated[ExportFormat, typer.Option("--format", "-f", help="jsonl or csv")] = ExportFormat.jsonl,
    selection: Approved = Approved(),
    explode: Annotated[str | None, typer.Option(help="CSV: one row per item of this list field (e.g. lineItems), "
                                                "its fields as FIELD.<name> columns")] = None,
    owner: Annotated[str | None, typer.Option(help="only the records of documents this owner (an API token's "
                                              "--owner) submitted")] = None,
    contracts: ContractsOption = None,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
) -> None:
    """Write approved records (only those) with provenance, atomically (temporary file, then rename).

    CSV: one row per record, nested objects as dotted columns, lists as JSON text (or --explode FIELD);
    a cell starting with = + - @ tab or carriage return gets a leading apostrophe so no spreadsheet runs it.

    Provenance: document path and sha256, contract and version, run and attempt (model, prompt, validator),
    evidence spans, whether it was edited, reviewer (every approver when the contract needs several), approval
    time and note.
    """
    import gc

    # The collector is off while the command imports (a tenth of their time went to collections walking what they
    # made) and on while records stream (the stream makes cycles: without it a JSONL export of a million records
    # grew by 250 MB). What the imports made lives until the process ends: frozen, no collection walks it again.
    gc.disable()
    try:
        from extractor.export import Wanted
        from extractor.export import export as write_export
        from extractor.runfilter import parse_when
        from extractor.ui.console import progress_bar

        when = parse_when(selection.since) if selection.since else None
        if explode is not None and format is not ExportFormat.csv:
            fail("--explode FIELD needs --format csv")
        if out.is_dir():
            fail(f"{out} is a folder; give a file name")
        if not out.parent.exists():
            fail(f"folder {out.parent} does not exist")
        search_contracts(contracts)  # for records whose run recorded no masking setting
        store, records = open_stores(database, approved_database)
    finally:
        gc.freeze()
        gc.enable()
    with progress_bar("extract export") as bar:  # drawn on a terminal only
        task = bar.add_task("records", total=None)
        try:
            result = write_export(records, out, format.value, run_log=store, explode=explode,
                                  wanted=Wanted(selection.contract, selection.contract_version, when, owner),
                                  progress=None if bar.disable else
                                  lambda done, total: bar.update(task, completed=done, total=total))
        except OSError as error:
            fail(f"cannot write {out}: {error.strerror or error}")
    typer.echo(f"wrote {result.records} approved record(s) to {out} ({format.value})")
    if not result.records:
        typer.echo("note: no approved record matched; approve with `extract approve DOC --reviewer NAME`", err=True)
