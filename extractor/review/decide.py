"""A person's decision: approve (as produced, or an edited candidate) or reject, with who and when.

Approval rules:

- only READY_FOR_REVIEW, MANUAL_REVIEW and BLOCKED document runs can be approved or rejected;
- a BLOCKED one (a critical finding: leaked secret, invented personal data, prompt echo, forbidden phrase, or a
  judge failure in block mode) is approved only with ``override_block`` and a reason; the override (who, when,
  why, which critical rules) is recorded with the review and the approved record, and export carries it;
- the source file is read again and must have the sha256 the run saw, else the approval is refused
  (the record would describe a text that no longer exists); a document submitted to the queue or the API is
  read from its upload in the run log, never from the name its submitter gave it (``reingest``);
- without ``--edited`` the record is the final attempt's parsed candidate, refused when that attempt has
  error findings or nothing parseable (a person must supply a corrected candidate); but while sign-offs are
  pending (a contract that needs several people) it is the record they signed off, edited or not: what the next
  person is shown and asked to approve (``extractor.store.approved.pending_record``);
- an edited candidate is validated against the same source, re-segmented with the same segmenter (same
  sentence ids), and refused while it has any error finding; warnings are the reviewer's call;
- approving the same record again is idempotent (nothing is written); overriding an earlier decision needs
  ``force`` and says what it overrides: approving a document run a person rejected, rejecting one a person
  approved, or approving a different record over an existing approval of the same document;
- a contract may need several people (``[review] approvals = 2`` in checks.toml, as the run recorded it): each
  approval signs the record off, and the record counts as approved, and is exported, only once that many
  distinct people signed off the same record (``Approval.approvals``: "1 of 2 approvals"); a sign-off of another
  record (an edit) or a rejection starts the count again;
- decisions are compare-and-set: one is written only if no other was taken on the document run since the
  decider read it (``DocumentRunInfo.review_version``), and not while another person has it open to review
  (``extractor.store.review_claims``); otherwise it is refused (``Conflict``, 409) naming the other decision or
  who has it open.

A rejection withdraws an approved record that came from the same document run (the newest decision wins;
the reviews table keeps every decision).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.review.resolve import ReviewError
from extractor.store import DocumentRunInfo, RunInfo, Store
from extractor.vocab import REVIEWABLE, DocumentState, ExitCode, ReviewDecision

if TYPE_CHECKING:
    from extractor.document import Document
    from extractor.evidence.report import Report
    from extractor.queue.uploads import Source
    from extractor.store.approved import Approvals, ApprovedRecordInfo, ReviewInfo


class Refused(ReviewError):
    """The decision is refused (exit 1); ``report`` holds the findings of a refused edited candidate."""

    exit_code = ExitCode.FAILED

    def __init__(self, message: str, report: Report | None = None) -> None:
        super().__init__(f"refused: {message}")
        self.reason = message
        self.report = report


class Conflict(Refused):
    """Another decision came first, or another person has the document open (the API answers 409 naming it)."""


@dataclass(frozen=True)
class Overrides:
    """What an approval may override: an earlier decision on the document (``force``: a rejection, or an approved
    record that differs), and a BLOCKED result's critical finding (``override_block``, with the reviewer's
    ``reason``; docs/design.md#rules)."""

    force: bool = False
    override_block: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class Approval:
    outcome: str  # "approved", "replaced", "signed" (more approvals needed) or "already"
    approved: ApprovedRecordInfo | None
    """The approved record (None while the approvals a contract needs are incomplete)."""
    previous: ApprovedRecordInfo | None
    document_run: DocumentRunInfo
    report: Report | None = None
    changed_fields: list[str] | None = None
    """The field paths the person changed from the model's candidate (None: not a new approval)."""
    approvals: Approvals | None = None
    """Where the approvals stand when the contract needs several (``[review] approvals``)."""

    def to_json(self) -> dict[str, Any]:
        a = self.approved
        out: dict[str, Any] = {
            "outcome": self.outcome,
            "document_run_id": self.document_run.id,
            "approvals": None if self.approvals is None else self.approvals.to_json(),
            "approved_record_id": None,
        }
        if a is not None:
            out |= {
                "approved_record_id": a.id,
                "document_sha256": a.document_sha256,
                "contract": a.contract,
                "contract_version": a.contract_version,
                "reviewer": a.reviewer,
                "approved_at": a.approved_at.isoformat(timespec="seconds"),
                "approved_by": [entry["reviewer"] for entry in a.approvals] if a.approvals else [a.reviewer],
                "note": a.note,
                "edited": a.edited,
                "attempt_id": a.attempt_id,
                "run_id": a.run_id,
                "block_override": a.block_override,
            }
        return out | {
            "previous": None if self.previous is None else {
                "reviewer": self.previous.reviewer,
                "approved_at": self.previous.approved_at.isoformat(timespec="seconds"),
            },
            "warnings": [] if self.report is None else [f.to_json() for f in self.report.findings],
            "changed_fields": self.changed_fields,
        }


@dataclass(frozen=True)
class Rejection:
    outcome: str  # "rejected" or "already"
    review: ReviewInfo
    document_run: DocumentRunInfo
    withdrawn: ApprovedRecordInfo | None = None
    kept: ApprovedRecordInfo | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "document_run_id": self.document_run.id,
            "reviewer": self.review.reviewer,
            "reason": self.review.note,
            "rejected_at": self.review.created_at.isoformat(timespec="seconds"),
            "withdrawn_approval": None if self.withdrawn is None else {
                "reviewer": self.withdrawn.reviewer,
                "approved_at": self.withdrawn.approved_at.isoformat(timespec="seconds"),
            },
            "approved_record_kept_from_run": None if self.kept is None else self.kept.run_id,
        }


def _run_of(store: Store, document_run: DocumentRunInfo) -> RunInfo:
    run = store.get_run(document_run.run_id)
    if run is None:
        raise ReviewError(f"document run {document_run.id} refers to missing run {document_run.run_id}")
    return run


def _require_reviewable(document_run: DocumentRunInfo, verb: str) -> None:
    if document_run.state not in REVIEWABLE:
        cause = f" ({document_run.cause})" if document_run.cause else ""
        raise Refused(f"document run {document_run.id} is {document_run.state}{cause}; only READY_FOR_REVIEW and "
                      f"MANUAL_REVIEW results can be {verb}")


def reingest(store: Store, document_run: DocumentRunInfo, source: Path | None = None) -> Document:
    """The source read again and segmented, by a sandboxed reader (``Source.document``); refused unless its bytes
    are exactly what the run read.

    ``source`` (``--source``) when given; else the document's upload in the run log (a document submitted to
    the queue or the API: its path is only the name a submitter gave it, never opened), else the path the run
    read (``extractor.queue.uploads.source_of``)."""
    from extractor.queue.uploads import Source, source_of

    if source is not None:
        return _read_again(document_run, Source(str(source), path=source), hint="")
    found = source_of(store, document_run)
    if found is None:
        raise Refused(f"cannot re-read the source to check it: {document_run.path} was submitted to the queue "
                      "and its upload is not in the run log; pass --source FILE with the same content")
    return _read_again(document_run, found, hint="; if the file moved, pass --source FILE")


def _read_again(document_run: DocumentRunInfo, source: Source, *, hint: str) -> Document:
    from extractor.errors import InputError

    try:
        document = source.document()
    except InputError as error:
        raise Refused(f"cannot re-read the source to check it: {error}{hint}") from None
    if document.sha256 != document_run.sha256:
        raise Refused(f"{source.name} changed since run {document_run.run_id[:12]} read it (sha256 "
                      f"{document.sha256[:12]} now, {document_run.sha256[:12]} then); run it again before approving")
    return document


def check_edited(store: Store, document_run: DocumentRunInfo, run: RunInfo, text: str,
                 source: Path | None = None, *, override_block: bool = False) -> Report:
    """Validate an edited candidate against the document exactly as the run segmented it."""
    from extractor.contracts.recorded import ContractNotAsRecorded, contract_of_run
    from extractor.validate import validate

    document = reingest(store, document_run, source)
    stored = store.get_document(document_run.document_id)
    if stored is None:
        raise ReviewError(f"document run {document_run.id} refers to a missing document")
    if document.segmenter != stored.segmenter:
        raise Refused(f"the segmenter changed since the run ({document.segmenter!r} now, {stored.segmenter!r} then): "
                      "sentence ids may differ; run the document again and review the new result")
    if [s.to_json() for s in document.sentences] != stored.sentences:
        raise Refused("re-segmenting the source gave different sentences than the run stored; "
                      "run the document again and review the new result")
    try:
        contract = contract_of_run(run)  # the contract as the run used it (an edit is checked by the same rules)
    except ContractNotAsRecorded as error:
        raise ReviewError(str(error)) from None
    report = validate(text, document, contract)
    failing = [f for f in report.errors if not (override_block and f in report.critical)]
    if failing:
        rules = sorted({f.rule_id for f in failing})
        raise Refused(f"edited candidate has {len(failing)} error finding(s) ({', '.join(rules)}); "
                      "fix them and approve again", report=report)
    return report


def _block_override(document_run: DocumentRunInfo, override_block: bool, reason: str | None) -> str | None:
    """The override's reason when a BLOCKED result may be approved; refuses a BLOCKED one without it."""
    blocked = document_run.state == DocumentState.BLOCKED
    if override_block and not blocked:
        raise ReviewError(f"--override-block is for BLOCKED results; document run {document_run.id} is "
                          f"{document_run.state}")
    if not blocked:
        return None
    if not override_block:
        raise Refused(f"document run {document_run.id} is BLOCKED ({document_run.cause or 'a critical finding'}); "
                      "it is never approved as it is: approve it over the block with --override-block --reason TEXT, "
                      "or reject it")
    if reason is None or not reason.strip():
        raise ReviewError("--override-block needs --reason: why this critical finding may be released")
    return reason.strip()


def _check_turn(store: Store, document_run: DocumentRunInfo) -> None:
    """``Conflict`` when a decision was taken since the caller read the document run (a stale page): refused even
    where the same decision again would be a no-op, so of two concurrent deciders exactly one succeeds."""
    from extractor.store.approved import DecisionConflict, check_turn

    try:
        check_turn(store, document_run.id, document_run.review_version)
    except DecisionConflict as error:
        raise Conflict(str(error)) from None


CORRECTED = "Edit on the review page, or extract approve --edited FILE"
"""Where a person supplies a corrected candidate: the refusal reaches the API and the browser as well as the CLI."""


def approvals_required(run: RunInfo) -> int:
    """How many distinct people must approve a record of ``run``: its contract's ``[review] approvals`` as the run
    recorded it (a run recorded before contracts could ask for more: 1)."""
    return int((run.config or {}).get("approvals") or 1)


def approvals_of(store: Store, document_run: DocumentRunInfo, run: RunInfo) -> Approvals:
    """Where the approvals of this document run stand."""
    from extractor.store.approved import Approvals, pending_signoffs

    required = approvals_required(run)
    pending = pending_signoffs(store, [document_run.id]).get(document_run.id, []) if required > 1 else []
    return Approvals(required, tuple(pending))


def approve_document(store: Store, records: Store, document_run: DocumentRunInfo, *, reviewer: str,
                     note: str | None = None, edited: str | None = None, source: Path | None = None,
                     overrides: Overrides = Overrides()) -> Approval:
    """Approve (or sign off, when the contract needs several people) the final candidate, the record others signed
    off, or the edited one, of a document run; see the module docstring. Compared and set against
    ``document_run.review_version``."""
    from extractor.canonical import canonical_sha256
    from extractor.store.approved import (
        DecisionConflict,
        NewApproval,
        approve,
        approved_record_for,
        latest_reviews,
        pending_record,
    )

    if not reviewer.strip():
        raise ReviewError("--reviewer must name a person")
    reviewer = reviewer.strip()
    _require_reviewable(document_run, "approved")
    _check_turn(store, document_run)
    latest = latest_reviews(store, [document_run.id]).get(document_run.id)
    if latest is not None and latest.decision == ReviewDecision.rejected and not overrides.force:
        raise Refused(f"document run {document_run.id} was rejected by {latest.reviewer} at "
                      f"{latest.created_at:%Y-%m-%d %H:%M} UTC ({latest.note}); approving it reverses that decision: "
                      "add --force")
    why = _block_override(document_run, overrides.override_block, overrides.reason)
    run = _run_of(store, document_run)
    final = store.get_attempt(document_run.final_attempt_id) if document_run.final_attempt_id else None
    standing = approvals_of(store, document_run, run)
    waiting = pending_record(store, document_run.id) if standing.pending else None
    report = None
    overridden: list[str] = []
    if edited is not None:
        report = check_edited(store, document_run, run, edited, source, override_block=why is not None)
        record, spans = report.candidate, report.to_json()["evidence_spans"]
        is_edit = final is None or record != final.parsed
        overridden = [f.rule_id for f in report.critical]
    elif waiting is not None:  # the record the others signed off, checked when the first of them approved it
        reingest(store, document_run, source)
        record, spans, is_edit = waiting.record, waiting.evidence_spans, waiting.edited
        overridden = list((waiting.block_override or {}).get("rule_ids") or ())
    else:
        if final is None or final.parsed is None:
            raise Refused(f"document run {document_run.id} has no parseable candidate "
                          f"({document_run.cause or 'no final attempt'}); supply a corrected one ({CORRECTED})")
        errors = sorted({f["rule_id"] for f in final.findings or () if f.get("severity") == "error"})
        if errors:
            raise Refused(f"the final candidate of document run {document_run.id} has error findings "
                          f"({', '.join(errors)}); a person must supply a corrected candidate ({CORRECTED})")
        reingest(store, document_run, source)
        record, spans, is_edit = final.parsed, final.evidence_spans, False
        overridden = [f["rule_id"] for f in final.findings or () if f.get("severity") == "critical"]
    existing = approved_record_for(records, document_run.sha256, run.contract, run.contract_version)
    if existing is not None and existing.record == record:
        _check_turn(store, document_run)  # approved before the caller read it, not by a decision racing this one
        return Approval("already", existing, existing, document_run, report, approvals=standing)
    if existing is not None and not overrides.force:
        raise Refused(f"already approved by {existing.reviewer} at {existing.approved_at:%Y-%m-%d %H:%M:%S} UTC with a "
                      f"different record (from run {(existing.run_id or '?')[:12]}"
                      f"{', edited' if existing.edited else ''}); replacing it overrides that decision: add --force")
    digest = canonical_sha256(record)
    if any(s.reviewer == reviewer and s.record_sha256 == digest for s in standing.pending):
        _check_turn(store, document_run)
        return Approval("already", None, existing, document_run, report, approvals=standing)
    block_override = None if why is None else {
        "reviewer": reviewer, "reason": why, "document_run_id": document_run.id,
        "blocked_because": document_run.cause, "rule_ids": sorted(set(overridden) | set(document_run.needs_person or ())),
    }
    changed = changed_fields(run, final.parsed if final is not None else None, record) if is_edit else []
    try:
        approved_id, standing = approve(store, NewApproval(
            document_run.id, record, reviewer, evidence_spans=spans, attempt_id=final.id if final is not None else None,
            note=note, edited=is_edit, block_override=block_override, changed_fields=changed,
            required=standing.required), records=records, seen_version=document_run.review_version)
    except DecisionConflict as error:
        raise Conflict(str(error)) from None
    if approved_id is None:
        return Approval("signed", None, existing, document_run, report, changed, approvals=standing)
    approved = approved_record_for(records, document_run.sha256, run.contract, run.contract_version)
    if approved is None:  # withdrawn by a concurrent rejection between the two statements
        raise ReviewError("the approval was withdrawn concurrently; check `extract show` and retry")
    return Approval("replaced" if existing is not None else "approved", approved, existing, document_run, report,
                    changed, approvals=standing)


def changed_fields(run: RunInfo, candidate: Any, record: dict[str, Any]) -> list[str]:
    """The field paths a person changed: the approved record against the model's final candidate, list items
    aligned as ``extract eval`` aligns them (a candidate that is not a record counts every value as changed)."""
    from extractor.evaluation.align import Scorer
    from extractor.evaluation.evaluate import contract_of

    return Scorer(contract_of(run)).changed_fields(candidate if isinstance(candidate, dict) else {}, record)


def reject_document(store: Store, records: Store, document_run: DocumentRunInfo, *, reviewer: str,
                    reason: str, force: bool = False) -> Rejection:
    """Record a rejection; withdraw the approved record if it came from this document run."""
    from extractor.store.approved import (
        DecisionConflict,
        approved_record_for,
        latest_reviews,
        reject,
        reviews_for,
        withdraw,
    )

    if not reviewer.strip():
        raise ReviewError("--reviewer must name a person")
    if not reason.strip():
        raise ReviewError("--reason must say why")
    _require_reviewable(document_run, "rejected")
    _check_turn(store, document_run)
    run = _run_of(store, document_run)
    latest = latest_reviews(store, [document_run.id]).get(document_run.id)
    existing = approved_record_for(records, document_run.sha256, run.contract, run.contract_version)
    from_here = existing is not None and existing.run_id == document_run.run_id
    if (latest is not None and latest.decision == ReviewDecision.rejected and latest.reviewer == reviewer.strip()
            and latest.note == reason.strip() and not from_here):
        _check_turn(store, document_run)
        return Rejection("already", latest, document_run, kept=existing)
    if latest is not None and latest.decision == ReviewDecision.approved and from_here and not force:
        raise Refused(f"document run {document_run.id} was approved by {latest.reviewer} at "
                      f"{latest.created_at:%Y-%m-%d %H:%M} UTC; rejecting it withdraws that approval: add --force")
    try:
        review_id = reject(store, document_run.id, reviewer=reviewer.strip(), reason=reason.strip(),
                           seen_version=document_run.review_version)
    except DecisionConflict as error:
        raise Conflict(str(error)) from None
    withdrawn = existing if from_here and existing is not None and withdraw(records, existing) else None
    review = next(r for r in reviews_for(store, document_run.id) if r.id == review_id)
    return Rejection("rejected", review, document_run, withdrawn=withdrawn,
                     kept=existing if existing is not None and withdrawn is None else None)
