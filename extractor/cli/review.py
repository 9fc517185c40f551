"""The human decision: ``review``, ``show``, ``approve``, ``reject`` and ``export`` of approved records.

Only these commands write approved records (``extractor.store.approved``). Exit codes: 0 done (also
"already approved"), 1 refused (errors in an edited candidate, changed source, wrong state), 2 bad usage
or nothing found.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from extractor.cli.app import Format, FormatOption, app, emit_json, fail, read_candidate
from extractor.vocab import DEFAULT_REVIEW_PAGE

DatabaseOption = Annotated[str | None, typer.Option(
    "--database", help="run-log database URL [env EXTRACT_DATABASE_URL; default sqlite:///extract.db]")]
ApprovedDatabaseOption = Annotated[str | None, typer.Option(
    "--approved-database", help="database of approved records [env EXTRACT_APPROVED_DATABASE_URL; "
    "default: the run-log database]")]
ReviewerOption = Annotated[str, typer.Option("--reviewer", envvar="EXTRACT_REVIEWER",
                                             help="who decides [env EXTRACT_REVIEWER]")]
DocArgument = Annotated[str, typer.Argument(
    metavar="DOC", help="document run id, content sha256 (or unique prefix), or the path given to `extract run`")]


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    csv = "csv"


class QueueState(StrEnum):
    ready = "ready"
    manual = "manual"
    all = "all"


def open_run_log(database: str | None) -> Any:
    """The run log, refusing to create an empty SQLite file for a command that only reads or reviews."""
    from extractor.store import open_store

    return open_store(database, create=False)


def open_stores(database: str | None, approved_database: str | None) -> tuple[Any, Any]:
    from extractor.store.approved import open_approved

    store = open_run_log(database)
    return store, open_approved(store, approved_database)


@app.command()
def review(
    contract: Annotated[str | None, typer.Option(help="only this contract")] = None,
    run: Annotated[str | None, typer.Option(help="only this run (id or unique prefix)")] = None,
    model: Annotated[str | None, typer.Option(help="only results of this model id")] = None,
    prompt_version: Annotated[str | None, typer.Option("--prompt-version", "--prompt",
                                                       help="only results of this prompt version")] = None,
    state: Annotated[QueueState, typer.Option(help="which states to list")] = QueueState.all,
    every_result: Annotated[bool, typer.Option(help="list every configuration's result of a document, "
                                               "not one per document")] = False,
    limit: Annotated[int, typer.Option(min=1, help="list at most this many")] = DEFAULT_REVIEW_PAGE,
    all_: Annotated[bool, typer.Option("--all", help="list every waiting document (no --limit)")] = False,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Documents waiting for a person: READY_FOR_REVIEW first, then MANUAL_REVIEW, with their findings.

    One line per document (its READY_FOR_REVIEW result if any configuration produced one, else the newest);
    other waiting results of the same document are counted under "others" (--every-result lists them).
    The first --limit of them are listed, with how many wait in all (a note on stderr with --format json).
    """
    from extractor.review.queue import waiting
    from extractor.runfilter import RunFilter

    store, records = open_stores(database, approved_database)
    run_ids = None
    if run is not None or model is not None or prompt_version is not None:
        selection = RunFilter(run=run.lower() if run else None, model=model, prompt_version=prompt_version)
        runs = selection.select(store)
        if not runs:
            fail(f"no run matches {selection.describe()}")
        run_ids = [r.id for r in runs]
    from extractor.vocab import REVIEWABLE, DocumentState

    states = {QueueState.ready: (DocumentState.READY_FOR_REVIEW,), QueueState.manual: (DocumentState.MANUAL_REVIEW,),
              QueueState.all: REVIEWABLE}[state]
    page = waiting(store, records, contract=contract, run_ids=run_ids, states=states, limit=None if all_ else limit,
                   every_result=every_result)
    if format is Format.json:
        emit_json([item.to_json() for item in page.items])
        if len(page.items) < page.total:
            typer.echo(f"note: listed {len(page.items)} of {page.total} waiting; --limit N or --all for more", err=True)
        return
    from extractor.render_review import print_queue

    print_queue(page.items, page.total)


@app.command()
def show(
    ref: Annotated[str, typer.Argument(metavar="RUN_OR_DOC", help="a run id (or prefix), or DOC: document run id, "
                                       "content sha256 (or prefix), or path")],
    requests: Annotated[bool, typer.Option("--requests", help="also print every attempt's request exactly as "
                                           "sent (always in --format json)")] = False,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """One document run (source with sentence states and evidence, candidate, fields, questions, findings), or one run.

    For a document run: the source with every sentence marked MAPPED / UNMAPPED / EXCLUDED / UNACCOUNTED and
    the evidence spans highlighted, the candidate, field states, the missingFields questions, every attempt's
    findings (with --requests, its request as sent) and the decisions taken. For a run: its configuration and
    documents.
    """
    from extractor.review import resolve, resolve_run
    from extractor.review.resolve import candidates
    from extractor.review.view import document_view, run_view

    store, records = open_stores(database, approved_database)
    run = resolve_run(store, ref)
    documents = candidates(store, ref)
    if run is not None and documents:
        fail(f"{ref!r} is ambiguous: run {run.id} and document(s) "
             + ", ".join(sha[:12] for sha in documents) + "; give more characters")
    if run is not None:
        view = run_view(store, run)
    else:
        resolved = resolve(store, ref)
        view = document_view(store, records, resolved.document_run, resolved.others)
    if format is Format.json:
        emit_json(view)
        return
    from extractor.render_review import print_document_view, print_run_view

    if view["kind"] == "run":
        print_run_view(view)
    else:
        print_document_view(view, requests=requests)


@app.command()
def approve(
    doc: DocArgument,
    reviewer: ReviewerOption,
    note: Annotated[str | None, typer.Option(help="why, or what was checked")] = None,
    edited: Annotated[Path | None, typer.Option(help="a corrected candidate (JSON); re-validated against the "
                                                "same source and refused while it has error findings")] = None,
    source: Annotated[Path | None, typer.Option(help="the source file, if it moved since the run "
                                                "(its sha256 must still match)")] = None,
    replace: Annotated[bool, typer.Option(help="replace an approved record of this document that differs")] = False,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Approve a document's candidate (or an edited one); the reviewer and time are recorded."""
    from extractor.review import resolve
    from extractor.review.decide import Refused, approve_document

    store, records = open_stores(database, approved_database)
    resolved = resolve(store, doc, for_decision=True)
    text = read_candidate(edited) if edited is not None else None
    try:
        result = approve_document(store, records, resolved.document_run, reviewer=reviewer, note=note, edited=text,
                                  source=source, replace=replace)
    except Refused as refused:  # the findings of a refused edit are shown before the one-line error
        if format is Format.json:
            emit_json({"refused": refused.reason,
                       "findings": [] if refused.report is None else [f.to_json() for f in refused.report.findings]})
            raise typer.Exit(refused.exit_code) from None
        if refused.report is not None and refused.report.findings:
            from rich.console import Console

            from extractor.render import findings_table

            Console(stderr=True).print(findings_table((f.to_json() for f in refused.report.findings),
                                                      title="findings of the edited candidate"))
        raise
    if format is Format.json:
        emit_json(result.to_json())
        return
    a, d = result.approved, result.document_run
    when = f"{a.approved_at:%Y-%m-%d %H:%M:%S} UTC"
    if result.outcome == "already":
        typer.echo(f"already approved by {a.reviewer} at {when} (record {a.id}); nothing written")
        return
    what = "an edited record" if a.edited else "the candidate"
    typer.echo(f"approved {what} of document run {d.id} ({d.path}, sha256 {d.sha256[:12]}) as record {a.id}, "
               f"by {a.reviewer} at {when}")
    if result.previous is not None:
        typer.echo(f"replaced the approval by {result.previous.reviewer} at "
                   f"{result.previous.approved_at:%Y-%m-%d %H:%M:%S} UTC")
    if result.report is not None and result.report.findings:
        typer.echo(f"note: {len(result.report.findings)} warning(s): "
                   + ", ".join(sorted({f.rule_id for f in result.report.findings})))


@app.command()
def reject(
    doc: DocArgument,
    reviewer: ReviewerOption,
    reason: Annotated[str, typer.Option(help="what is wrong")],
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Reject a document's candidate; withdraws an approval that came from the same document run."""
    from extractor.review import resolve
    from extractor.review.decide import reject_document

    store, records = open_stores(database, approved_database)
    resolved = resolve(store, doc, for_decision=True)
    result = reject_document(store, records, resolved.document_run, reviewer=reviewer, reason=reason)
    if format is Format.json:
        emit_json(result.to_json())
        return
    r, d = result.review, result.document_run
    when = f"{r.created_at:%Y-%m-%d %H:%M:%S} UTC"
    if result.outcome == "already":
        typer.echo(f"already rejected by {r.reviewer} at {when} for the same reason; nothing written")
        return
    typer.echo(f"rejected document run {d.id} ({d.path}) by {r.reviewer} at {when}: {r.note}")
    if result.withdrawn is not None:
        typer.echo(f"withdrew the approval by {result.withdrawn.reviewer} at "
                   f"{result.withdrawn.approved_at:%Y-%m-%d %H:%M:%S} UTC; it will not be exported")
    elif result.kept is not None:
        typer.echo(f"note: this content keeps its approved record from run {(result.kept.run_id or '?')[:12]} "
                   f"(approved by {result.kept.reviewer})")


@app.command()
def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="file to write (atomically: temporary file, then rename)")],
    format: Annotated[ExportFormat, typer.Option("--format", "-f", help="jsonl or csv")] = ExportFormat.jsonl,
    contract: Annotated[str | None, typer.Option(help="only records of this contract")] = None,
    contract_version: Annotated[int | None, typer.Option(help="only this contract version")] = None,
    since: Annotated[str | None, typer.Option(help="approved at or after: 2026-05-01, 2026-05-01T12:00, 7d, 12h")] = None,
    explode: Annotated[str | None, typer.Option(help="CSV: one row per item of this list field (e.g. lineItems), "
                                                "its fields as FIELD.<name> columns")] = None,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
) -> None:
    """Write approved records (only those) with provenance, atomically (temporary file, then rename).

    CSV: one row per record, nested objects as dotted columns, lists as JSON text (or --explode FIELD);
    a cell starting with = + - @ tab or carriage return gets a leading apostrophe so no spreadsheet runs it.

    Provenance: document path and sha256, contract and version, run and attempt (model, prompt, validator),
    evidence spans, whether it was edited, reviewer, approval time and note.
    """
    from extractor.export import export as write_export
    from extractor.runfilter import parse_when

    when = parse_when(since) if since else None
    if explode is not None and format is not ExportFormat.csv:
        fail("--explode FIELD needs --format csv")
    if out.is_dir():
        fail(f"{out} is a folder; give a file name")
    if not out.parent.exists():
        fail(f"folder {out.parent} does not exist")
    store, records = open_stores(database, approved_database)
    try:
        result = write_export(records, out, format.value, contract=contract, contract_version=contract_version,
                              since=when, run_log=store, explode=explode)
    except OSError as error:
        fail(f"cannot write {out}: {error.strerror or error}")
    typer.echo(f"wrote {result.records} approved record(s) to {out} ({format.value})")
    if not result.records:
        typer.echo("note: no approved record matched; approve with `extract approve DOC --reviewer NAME`", err=True)
