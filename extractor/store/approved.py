"""Approved records and the review decision history: written only by the review commands.

The pipeline never imports this module, so nothing it does can create or change an approved record;
only a person's decision (``approve`` / ``reject``) does. Export reads ``approved_records`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from extractor.store.db import StoreError, plain, transaction, utcnow
from extractor.store.models import ApprovedRecord, Document, DocumentRun, Review, Run
from extractor.store.runlog import Store


@dataclass(frozen=True)
class ApprovedRecordInfo:
    id: int
    document_sha256: str
    document_path: str
    contract: str
    contract_version: int
    record: dict[str, Any]
    evidence_spans: Any
    attempt_id: int | None
    run_id: str | None
    reviewer: str
    note: str | None
    edited: bool
    approved_at: datetime


@dataclass(frozen=True)
class ReviewInfo:
    id: int
    document_run_id: int
    decision: str
    reviewer: str
    note: str | None
    created_at: datetime


def approve(
    store: Store,
    document_run_id: int,
    record: dict[str, Any],
    *,
    reviewer: str,
    evidence_spans: Any = None,
    attempt_id: int | None = None,
    note: str | None = None,
    edited: bool = False,
) -> int:
    """Make ``record`` the approved record of this document's content under the run's contract version.

    An earlier approval of the same content and contract version is replaced (the reviews table keeps
    every decision). Returns the approved record's id. Edited records must be re-validated by the caller.
    """
    if not reviewer:
        raise ValueError("an approval needs a reviewer")
    for _ in range(2):  # a concurrent first approval of the same document wins the insert; then update it
        try:
            return _approve_once(
                store, document_run_id, record, reviewer, evidence_spans, attempt_id, note, edited
            )
        except IntegrityError:
            continue
    raise StoreError(f"document run {document_run_id} is being approved concurrently; retry")


def _approve_once(
    store: Store,
    document_run_id: int,
    record: dict[str, Any],
    reviewer: str,
    evidence_spans: Any,
    attempt_id: int | None,
    note: str | None,
    edited: bool,
) -> int:
    now = utcnow()
    with transaction(store.engine) as session:
        source = session.execute(
            select(DocumentRun.run_id, DocumentRun.path, Document.sha256, Run.contract, Run.contract_version)
            .join(Document, Document.id == DocumentRun.document_id)
            .join(Run, Run.id == DocumentRun.run_id)
            .where(DocumentRun.id == document_run_id)
        ).first()
        if source is None:
            raise StoreError(f"no document run {document_run_id}")
        session.add(
            Review(
                document_run_id=document_run_id,
                decision="approved",
                reviewer=reviewer,
                note=note,
                created_at=now,
            )
        )
        approved = session.scalar(
            select(ApprovedRecord).where(
                ApprovedRecord.document_sha256 == source.sha256,
                ApprovedRecord.contract == source.contract,
                ApprovedRecord.contract_version == source.contract_version,
            )
        )
        if approved is None:
            approved = ApprovedRecord(
                document_sha256=source.sha256,
                contract=source.contract,
                contract_version=source.contract_version,
            )
            session.add(approved)
        approved.document_path = source.path
        approved.record = record
        approved.evidence_spans = evidence_spans
        approved.attempt_id = attempt_id
        approved.run_id = source.run_id
        approved.reviewer = reviewer
        approved.note = note
        approved.edited = edited
        approved.approved_at = now
        session.flush()
        return approved.id


def reject(store: Store, document_run_id: int, *, reviewer: str, reason: str) -> int:
    """Record that a person rejected this document run's result; returns the review id."""
    if not reviewer or not reason:
        raise ValueError("a rejection needs a reviewer and a reason")
    with transaction(store.engine) as session:
        if session.get(DocumentRun, document_run_id) is None:
            raise StoreError(f"no document run {document_run_id}")
        review = Review(
            document_run_id=document_run_id,
            decision="rejected",
            reviewer=reviewer,
            note=reason,
            created_at=utcnow(),
        )
        session.add(review)
        session.flush()
        return review.id


def approved_records(
    store: Store, contract: str | None = None, contract_version: int | None = None
) -> list[ApprovedRecordInfo]:
    """What export writes: approved records only, oldest approval first."""
    query = select(ApprovedRecord).order_by(ApprovedRecord.approved_at, ApprovedRecord.id)
    if contract is not None:
        query = query.where(ApprovedRecord.contract == contract)
    if contract_version is not None:
        query = query.where(ApprovedRecord.contract_version == contract_version)
    with transaction(store.engine, write=False) as session:
        return [plain(ApprovedRecordInfo, row) for row in session.scalars(query)]


def reviews_for(store: Store, document_run_id: int) -> list[ReviewInfo]:
    """Every decision on a document run, oldest first."""
    query = (
        select(Review).where(Review.document_run_id == document_run_id).order_by(Review.created_at, Review.id)
    )
    with transaction(store.engine, write=False) as session:
        return [plain(ReviewInfo, row) for row in session.scalars(query)]
