"""Approved records and the review decision history: written only by the review commands.

The pipeline never imports this module, so nothing it does can create or change an approved record;
only a person's decision (``approve`` / ``reject``) does. Export reads ``approved_records`` alone.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    Integer,
    Text,
    and_,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    true,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError

from extractor.canonical import canonical_sha256
from extractor.errors import StoreError
from extractor.store.cells import CURRENT, record_cells
from extractor.store.db import compact_json, plain, utcnow, write_connection
from extractor.store.review_claims import end_claim, held_by_another
from extractor.store.runlog import Store, open_store
from extractor.store.tables import (
    NulFreeText,
    UTF8Bytes,
    document_runs,
    documents,
    review_fields,
    reviews,
    runs,
    signoffs,
)
from extractor.store.tables import approved_records as approved_table
from extractor.vocab import ReviewDecision, SignoffState

APPROVED_DATABASE_URL_ENV = "EXTRACT_APPROVED_DATABASE_URL"
"""Where approved records live when they are kept apart from the run log (default: the run-log database)."""


def open_approved(run_log: Store, url: str | None = None, *, reads_only: bool = False) -> Store:
    """The store holding ``approved_records``: ``url``, else ``EXTRACT_APPROVED_DATABASE_URL``, else ``run_log``.

    A separate database is migrated like any other (the run-log tables there stay empty). The review
    history (``reviews``) always stays in the run log, beside the document runs it refers to. ``reads_only``:
    as ``open_store``'s.
    """
    url = url or os.environ.get(APPROVED_DATABASE_URL_ENV) or None
    if url is None or url == run_log.engine.url.render_as_string(hide_password=False):
        return run_log
    return open_store(url, reads_only=reads_only)


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
    block_override: dict[str, Any] | None = None
    """Set when a person approved a BLOCKED result over its block: reviewer, at, reason, rule_ids."""
    approvals: list[dict[str, Any]] | None = None
    """Every person who signed it off (``{"reviewer", "at"}``) when its contract needs several; else None."""


@dataclass(frozen=True)
class ReviewInfo:
    id: int
    document_run_id: int
    decision: str
    reviewer: str
    note: str | None
    created_at: datetime
    block_override: dict[str, Any] | None = None
    changed_fields: list[str] | None = None


class DecisionConflict(StoreError):
    """Nothing was written: another decision came first (compare-and-set), or another person has the document run
    open to review it (``extractor.store.review_claims``). The message names the other decision or the claim."""


@dataclass(frozen=True)
class SignoffInfo:
    """One person's approval of a record whose contract needs several (``signoffs``)."""

    id: int
    document_run_id: int
    reviewer: str
    record_sha256: str
    edited: bool
    note: str | None
    created_at: datetime
    state: str

    def to_json(self) -> dict[str, Any]:
        return {"reviewer": self.reviewer, "at": self.created_at.isoformat(timespec="seconds"), "note": self.note,
                "edited": self.edited, "record_sha256": self.record_sha256}


@dataclass(frozen=True)
class Approvals:
    """Where the approvals of one document run stand: ``required`` distinct people, ``given`` of them so far for
    the record they approved (``pending`` sign-offs, or, once the record is approved, ``approved_by``: the people
    whose approvals made it)."""

    required: int
    pending: tuple[SignoffInfo, ...] = ()
    approved_by: tuple[str, ...] = ()

    @property
    def given(self) -> int:
        return len(self.reviewers)

    @property
    def reviewers(self) -> list[str]:
        return list(self.approved_by) or list(dict.fromkeys(signoff.reviewer for signoff in self.pending))

    def describe(self) -> str:
        """``1 of 2 approvals (kim)``."""
        by = f" ({', '.join(self.reviewers)})" if self.reviewers else ""
        return f"{self.given} of {self.required} approvals{by}"

    def to_json(self) -> dict[str, Any]:
        return {"required": self.required, "given": self.given, "approved_by": list(self.approved_by),
                "pending": [s.to_json() for s in self.pending]}


def approve(store: Store, decision: NewApproval, *, records: Store | None = None,
            seen_version: int | None = None) -> tuple[int | None, Approvals]:
    """Make ``decision.record`` the approved record of this document's content under the run's contract version, or,
    when ``decision.required`` people must approve it, sign it off for its reviewer and approve it once that many
    distinct people signed off the same record. Returns the approved record's id (None while sign-offs are missing)
    and where the approvals stand.

    An earlier approval of the same content and contract version is replaced (the reviews table keeps every
    decision). Edited records must be re-validated by the caller. ``seen_version`` is the document run's
    ``review_version`` the caller read (None: whatever it is now): when another decision was taken since, or
    another person holds the document run's claim, nothing is written and ``DecisionConflict`` names it.
    ``records`` is the store holding approved records when it is not the run log (``open_approved``); it is written
    inside the run log's transaction, so a failure there leaves no decision behind.
    """
    if not decision.reviewer:
        raise ValueError("an approval needs a reviewer")
    records = records or store
    for _ in range(2):  # a concurrent first approval of the same content wins the insert; then update it
        try:
            with write_connection(store.engine) as connection:
                _take_turn(connection, decision.document_run_id, decision.reviewer, seen_version)
                return decision.write(connection, records)
        except IntegrityError:
            continue
    raise StoreError(f"document run {decision.document_run_id} is being approved concurrently; retry")


@dataclass(frozen=True)
class NewApproval:
    """A person's approval of ``record`` for a document run, as ``approve`` records it: the evidence spans and the
    attempt it came from, the person's note, whether they edited it (the caller re-validated it), ``block_override``
    (a BLOCKED result approved over its block: reviewer, reason, rule ids; stored with the review and the record,
    the approval time added), ``changed_fields`` (the field paths the person changed, kept with the review), and how
    many distinct people must approve it (``required``)."""

    document_run_id: int
    record: dict[str, Any]
    reviewer: str
    evidence_spans: Any = None
    attempt_id: int | None = None
    note: str | None = None
    edited: bool = False
    block_override: dict[str, Any] | None = None
    changed_fields: list[str] | None = None
    required: int = 1

    def write(self, connection: Connection, records: Store) -> tuple[int | None, Approvals]:
        """In the run log's transaction ``connection``: the sign-off (if several are needed), the review and the
        approved record once enough people approved."""
        now = utcnow()
        override = None if self.block_override is None else self.block_override | {
            "at": now.isoformat(timespec="microseconds")}
        source = _source_of(connection, self.document_run_id)
        end_claim(connection, self.document_run_id)
        signed: list[SignoffInfo] = []
        if self.required > 1:
            signed = self._sign(connection, now, override)
            if len({signoff.reviewer for signoff in signed}) < self.required:
                return None, Approvals(self.required, tuple(signed))
        review_id = _add_review(connection, dict(
            document_run_id=self.document_run_id, decision=ReviewDecision.approved, reviewer=self.reviewer,
            note=self.note, created_at=now, block_override=override, changed_fields=self.changed_fields))
        values = dict(record=self.record, evidence_spans=self.evidence_spans, attempt_id=self.attempt_id,
                      reviewer=self.reviewer, note=self.note, edited=self.edited or any(s.edited for s in signed),
                      approved_at=now, block_override=override,
                      approvals=[{"reviewer": s.reviewer, "at": s.created_at.isoformat(timespec="seconds")}
                                 for s in signed] or None)
        if signed:
            connection.execute(update(signoffs).where(signoffs.c.id.in_([s.id for s in signed]))
                               .values(state=SignoffState.approved, review_id=review_id))
        made = Approvals(self.required, approved_by=tuple(dict.fromkeys(s.reviewer for s in signed)) or (self.reviewer,))
        if records.engine is connection.engine:
            return _upsert(connection, source, values), made
        with write_connection(records.engine) as other:
            return _upsert(other, source, values), made

    def _sign(self, connection: Connection, now: datetime, override: dict[str, Any] | None) -> list[SignoffInfo]:
        """This person's sign-off; the pending sign-offs of another record are superseded. Returns the pending
        sign-offs of this record, this one included, oldest first."""
        digest = canonical_sha256(self.record)
        connection.execute(update(signoffs).where(signoffs.c.document_run_id == self.document_run_id,
                                                  signoffs.c.state == SignoffState.pending,
                                                  signoffs.c.record_sha256 != digest)
                           .values(state=SignoffState.superseded))
        if any(s.reviewer == self.reviewer for s in _pending(connection, self.document_run_id)):
            raise DecisionConflict(f"{self.reviewer} signed off this record of document run {self.document_run_id} "
                                   "already: another person must approve it")
        connection.execute(insert(signoffs).values(
            document_run_id=self.document_run_id, reviewer=self.reviewer, record=self.record, record_sha256=digest,
            evidence_spans=self.evidence_spans, attempt_id=self.attempt_id, edited=self.edited, note=self.note,
            block_override=override, changed_fields=self.changed_fields, created_at=now, state=SignoffState.pending))
        return _pending(connection, self.document_run_id)


def _take_turn(connection: Connection, document_run_id: int, reviewer: str, seen_version: int | None) -> None:
    """Compare-and-set, in the decision's transaction: refuse (``DecisionConflict``) when another person holds
    the document run's claim, or when a decision was taken since the caller read ``seen_version``; else count
    this decision (``document_runs.review_version``)."""
    held = held_by_another(connection, document_run_id, reviewer)
    if held is not None:
        raise DecisionConflict(f"document run {document_run_id} is being reviewed: {held.describe()}; it can be "
                               "decided once they decide, leave it, or the claim expires")
    version = document_runs.c.review_version
    condition = document_runs.c.id == document_run_id
    if seen_version is not None:
        condition = condition & (version == seen_version)
    done = connection.execute(update(document_runs).where(condition).values(review_version=version + 1))
    if done.rowcount == 1:
        return
    if connection.execute(select(document_runs.c.id).where(document_runs.c.id == document_run_id)).first() is None:
        raise StoreError(f"no document run {document_run_id}")
    raise DecisionConflict(_overtaken(connection, document_run_id))


def _overtaken(connection: Connection, document_run_id: int) -> str:
    return (f"{_newest_decision(connection, document_run_id)}, after this decision's page or request read the document "
            "run; nothing was written: look at it again and decide")


def check_turn(store: Store, document_run_id: int, seen_version: int) -> None:
    """``DecisionConflict`` naming the newest decision when one was taken since ``seen_version`` was read: the
    early refusal of a stale page or request (before any re-reading or checking), which ``approve`` and ``reject``
    make again, atomically, when they write."""
    with store.engine.connect() as connection:
        current = connection.execute(select(document_runs.c.review_version)
                                     .where(document_runs.c.id == document_run_id)).scalar()
        if current is not None and current != seen_version:
            raise DecisionConflict(_overtaken(connection, document_run_id))


def _newest_decision(connection: Connection, document_run_id: int) -> str:
    """The decision on the document run that came last, in words (a review or a sign-off)."""
    review = connection.execute(select(reviews).where(reviews.c.document_run_id == document_run_id)
                                .order_by(reviews.c.created_at.desc(), reviews.c.id.desc()).limit(1)).first()
    signoff = connection.execute(select(signoffs).where(signoffs.c.document_run_id == document_run_id)
                                 .order_by(signoffs.c.created_at.desc(), signoffs.c.id.desc()).limit(1)).first()
    if signoff is not None and (review is None or signoff.created_at > review.created_at):
        return (f"{signoff.reviewer} signed off a record of document run {document_run_id} at "
                f"{signoff.created_at:%Y-%m-%d %H:%M:%S} UTC")
    if review is None:
        return f"document run {document_run_id} changed"
    why = f" ({review.note})" if review.decision == ReviewDecision.rejected and review.note else ""
    return (f"{review.reviewer} {review.decision} document run {document_run_id} at "
            f"{review.created_at:%Y-%m-%d %H:%M:%S} UTC{why}")


def _pending(connection: Connection, document_run_id: int) -> list[SignoffInfo]:
    query = (select(*_SIGNOFF_COLUMNS).where(signoffs.c.document_run_id == document_run_id,
                                             signoffs.c.state == SignoffState.pending)
             .order_by(signoffs.c.created_at, signoffs.c.id))
    return [SignoffInfo(*row) for row in connection.execute(query)]


_SIGNOFF_COLUMNS = [signoffs.c[f.name] for f in fields(SignoffInfo)]


def pending_signoffs(store: Store, document_run_ids: Iterable[int]) -> dict[int, list[SignoffInfo]]:
    """The pending sign-offs of these document runs (those with none are left out), oldest first."""
    wanted = sorted(set(document_run_ids))
    found: dict[int, list[SignoffInfo]] = {}
    with store.engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            query = (select(*_SIGNOFF_COLUMNS).where(signoffs.c.document_run_id.in_(wanted[start : start + 500]),
                                                     signoffs.c.state == SignoffState.pending)
                     .order_by(signoffs.c.created_at, signoffs.c.id))
            for row in connection.execute(query):
                found.setdefault(row.document_run_id, []).append(SignoffInfo(*row))
    return found


@dataclass(frozen=True)
class PendingRecord:
    """The record a document run's pending sign-offs approved: what the next person is asked to approve. They all
    share one record (a sign-off of another record supersedes them), so it is the oldest one's, with its evidence,
    whether it differs from the model's candidate (``edited``: the first to sign it off, ``signed_by[0]``, made it)
    and the field paths changed from it."""

    record: dict[str, Any]
    record_sha256: str
    evidence_spans: Any
    attempt_id: int | None
    edited: bool
    changed_fields: list[str] | None
    block_override: dict[str, Any] | None
    signed_by: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"record": self.record, "record_sha256": self.record_sha256, "evidence_spans": self.evidence_spans,
                "edited": self.edited, "edited_by": self.signed_by[0] if self.edited else None,
                "changed_fields": self.changed_fields, "signed_by": list(self.signed_by)}


def pending_record(store: Store, document_run_id: int) -> PendingRecord | None:
    """The record the pending sign-offs of this document run approved (None when none is pending)."""
    query = (select(signoffs.c.record, signoffs.c.record_sha256, signoffs.c.evidence_spans, signoffs.c.attempt_id,
                    signoffs.c.edited, signoffs.c.changed_fields, signoffs.c.block_override, signoffs.c.reviewer)
             .where(signoffs.c.document_run_id == document_run_id, signoffs.c.state == SignoffState.pending)
             .order_by(signoffs.c.created_at, signoffs.c.id))
    with store.engine.connect() as connection:
        rows = connection.execute(query).all()
    if not rows:
        return None
    first = rows[0]
    return PendingRecord(dict(first.record), first.record_sha256, first.evidence_spans, first.attempt_id,
                         bool(first.edited), first.changed_fields, first.block_override,
                         tuple(dict.fromkeys(row.reviewer for row in rows)))


def _add_review(connection: Connection, review: dict[str, Any]) -> int:
    """A decision, and its document run marked decided in the same transaction (the review queue skips it);
    returns the review's id.

    The decision becomes its document run's current one: earlier ones are no longer current and lose their
    ``review_fields``; an approval's changed field paths are written with it (``changed_fields``, ``changes`` and
    a row each), so ``extract stats --corrections`` counts them without reading a record. The document run's row
    is locked first (PostgreSQL): two decisions on it at once are recorded one after the other.
    """
    document_run_id = review["document_run_id"]
    connection.execute(update(document_runs).where(document_runs.c.id == document_run_id).values(decided=True))
    run_id = connection.execute(select(document_runs.c.run_id).where(document_runs.c.id == document_run_id)).scalar()
    earlier = select(reviews.c.id).where(reviews.c.document_run_id == document_run_id, reviews.c.current.is_(True))
    connection.execute(delete(review_fields).where(review_fields.c.review_id.in_(earlier)))
    connection.execute(update(reviews).where(reviews.c.document_run_id == document_run_id, reviews.c.current.is_(True))
                       .values(current=False))
    changed = review.get("changed_fields")
    approval = review["decision"] == ReviewDecision.approved
    inserted = connection.execute(insert(reviews).values(
        **review, run_id=run_id, current=True, changes=len(set(changed)) if approval and changed is not None else None,
    )).inserted_primary_key
    assert inserted is not None
    review_id = int(inserted[0])
    if approval and changed and run_id is not None:
        connection.execute(insert(review_fields), [{"review_id": review_id, "field_path": path, "run_id": run_id}
                                                   for path in sorted(set(changed))])
    return review_id


def _source_of(connection: Connection, document_run_id: int) -> Any:
    source = connection.execute(
        select(document_runs.c.run_id, document_runs.c.path, documents.c.sha256, runs.c.contract,
               runs.c.contract_version)
        .join(documents, documents.c.id == document_runs.c.document_id)
        .join(runs, runs.c.id == document_runs.c.run_id)
        .where(document_runs.c.id == document_run_id)
    ).first()
    if source is None:
        raise StoreError(f"no document run {document_run_id}")
    return source


def _upsert(connection: Connection, source: Any, values: dict[str, Any]) -> int:
    """The approved record of the source's content and contract version, replaced if there is one."""
    existing = connection.execute(
        select(approved_table.c.id).where(
            approved_table.c.document_sha256 == source.sha256,
            approved_table.c.contract == source.contract,
            approved_table.c.contract_version == source.contract_version,
        )
    ).scalar()
    evidence = values.get("evidence_spans")
    values = values | {"document_path": source.path, "run_id": source.run_id, "record_cells": record_cells(
        compact_json(values["record"]), None if evidence is None else compact_json(evidence))}
    if existing is not None:
        connection.execute(update(approved_table).where(approved_table.c.id == existing).values(**values))
        return int(existing)
    inserted = connection.execute(insert(approved_table).values(
        document_sha256=source.sha256, contract=source.contract, contract_version=source.contract_version, **values,
    )).inserted_primary_key
    assert inserted is not None
    return int(inserted[0])


def reject(store: Store, document_run_id: int, *, reviewer: str, reason: str, seen_version: int | None = None) -> int:
    """Record that a person rejected this document run's result; returns the review id. Pending sign-offs of it
    are superseded, and ``seen_version`` is compared and set as ``approve`` does."""
    if not reviewer or not reason:
        raise ValueError("a rejection needs a reviewer and a reason")
    with write_connection(store.engine) as connection:
        _take_turn(connection, document_run_id, reviewer, seen_version)
        end_claim(connection, document_run_id)
        connection.execute(update(signoffs).where(signoffs.c.document_run_id == document_run_id,
                                                  signoffs.c.state == SignoffState.pending)
                           .values(state=SignoffState.superseded))
        return _add_review(connection, dict(document_run_id=document_run_id, decision=ReviewDecision.rejected,
                                            reviewer=reviewer, note=reason, created_at=utcnow()))


def _approved_query(contract: str | None, contract_version: int | None, since: datetime | None) -> Any:
    """Approved records, oldest approval first (``ix_approved_records_approved_at``; ``since``: a range of it).

    Filters are equalities before the approval time, so that one with an index on (its column, approved_at, id), an
    owner's records for one, is a single range read in this order."""
    query = select(approved_table).order_by(approved_table.c.approved_at, approved_table.c.id)
    if contract is not None:
        query = query.where(approved_table.c.contract == contract)
    if contract_version is not None:
        query = query.where(approved_table.c.contract_version == contract_version)
    if since is not None:
        query = query.where(approved_table.c.approved_at >= since)
    return query


def approved_records(
    store: Store, contract: str | None = None, contract_version: int | None = None, since: datetime | None = None
) -> list[ApprovedRecordInfo]:
    """What export writes: approved records only, oldest approval first (``since``: approved at or after)."""
    query = _approved_query(contract, contract_version, since).with_only_columns(
        *[approved_table.c[f.name] for f in fields(ApprovedRecordInfo)])  # (not the stored CSV cells)
    with store.engine.connect() as connection:
        return [plain(ApprovedRecordInfo, row) for row in connection.execute(query)]


class StoredApproval(NamedTuple):
    """An approved record as export streams it: its JSON columns as the text stored (``record_json``,
    ``evidence_spans_json``, ``block_override_json``), decoded only by what needs them, and its approval time as the
    text export writes (``approved_at``: ISO 8601, microseconds, ``+00:00``). ``record_cells``: the record's CSV cells
as its approval stored them, read only for a CSV export (else None); where they are of this version
(``extractor.store.cells.CURRENT``) the record's and the evidence spans' JSON are not read (None: ``with_texts``
reads them), as a CSV row is written from the cells."""

    id: int
    document_sha256: str
    document_path: str
    contract: str
    contract_version: int
    record_json: str | None
    evidence_spans_json: str | None
    attempt_id: int | None
    run_id: str | None
    reviewer: str
    note: str | None
    edited: bool
    block_override_json: str | None
    approvals_json: str | None
    record_cells: bytes | None
    approved_at: str


def approved_batches(store: Store, contract: str | None = None, contract_version: int | None = None,
                     since: datetime | None = None, *, size: int = 1000,
                     cells: bool = False) -> Iterator[list[StoredApproval]]:
    """What ``approved_records`` selects, streamed in batches of ``size`` with the JSON left as stored (``cells``:
    and the stored CSV cells): the database sends rows as they are read (a server-side cursor on PostgreSQL), and no
    record becomes Python objects until its writer needs them, so memory stays flat however many records there are."""
    with store.engine.connect() as connection:
        query = _stored(_approved_query(contract, contract_version, since), connection.dialect, cells=cells)
        stored = _reader(connection.dialect)
        result = connection.execution_options(stream_results=True, yield_per=size).execute(query)
        for rows in result.partitions():
            yield stored(rows)


_JSON_COLUMNS = ("record", "evidence_spans", "block_override", "approvals")


def _stored(query: Any, dialect: Dialect, *, cells: bool = False) -> Any:
    """``query`` over approved records selecting ``StoredApproval``'s columns, in its order (JSON as stored, the
    approval time as text: as SQLite stores it, and as PostgreSQL writes it in the same form, so that ``_reader``
    makes the export's text of it without a datetime per record). With ``cells``, the stored CSV cells, and the
    record's and evidence spans' JSON only where the cells are not of this version: a CSV row is written from them,
    and the server sends (and PostgreSQL reads from its TOAST) half the bytes."""
    by_name = {column.name: column for column in approved_table.columns}
    at = by_name["approved_at"]
    at_text = (func.to_char(func.timezone("UTC", at), "YYYY-MM-DD HH24:MI:SS.US") if dialect.name == "postgresql"
               else type_coerce(at, Text))
    stored = by_name["record_cells"]
    current = func.substr(stored, 1, len(CURRENT)) == literal(CURRENT, UTF8Bytes)

    def json_text(name: str) -> Any:
        text = cast(by_name[name], Text)
        return case((current, null()), else_=text) if cells and name in ("record", "evidence_spans") else text

    return query.with_only_columns(*[
        json_text(name.removesuffix("_json")).label(name) if name.removesuffix("_json") in _JSON_COLUMNS
        and name.endswith("_json") else at_text.label(name) if name == "approved_at"
        else null().label(name) if name == "record_cells" and not cells
        else by_name[name] for name in StoredApproval._fields])


def with_texts(store: Store, batch: list[StoredApproval]) -> list[StoredApproval]:
    """``batch`` with the record's and the evidence spans' JSON of every record read without them (``_stored``):
    what masking personal data needs. One query for the batch."""
    missing = [approved.id for approved in batch if approved.record_json is None]
    if not missing:
        return batch
    query = select(approved_table.c.id, cast(approved_table.c.record, Text), cast(approved_table.c.evidence_spans, Text))
    with store.engine.connect() as connection:
        texts = {row[0]: row[1:] for row in connection.execute(query.where(approved_table.c.id.in_(missing)))}
    return [approved if approved.record_json is not None  # (a record withdrawn since it was read is left out)
            else approved._replace(record_json=texts[approved.id][0], evidence_spans_json=texts[approved.id][1])
            for approved in batch if approved.record_json is not None or approved.id in texts]


_SQLITE_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}")
"""How SQLAlchemy writes a UTC time into SQLite (``UTCDateTime``): read back, it is the export's text but for the
``T`` and the offset."""


def _reader(dialect: Dialect) -> Callable[[Iterable[Sequence[Any]]], list[StoredApproval]]:
    """What makes rows of ``_stored`` ``StoredApproval``s: the approval time, which the query gives as the text SQLite
    stores (``_SQLITE_UTC``; PostgreSQL writes it in that form), written as export writes it. Reading it as a
    datetime to write it back as text cost more than this; a value in another form is read as ``UTCDateTime`` reads
    it. A batch is made in one comprehension, without a call per row, for the same reason."""
    processor = approved_table.c.approved_at.type.dialect_impl(dialect).result_processor(dialect, None)
    assert processor is not None  # UTCDateTime's own (process_result_value)
    as_datetime, utc, new = processor, _SQLITE_UTC.fullmatch, tuple.__new__

    def text(at: Any) -> str:
        when = as_datetime(at)
        assert isinstance(when, datetime)
        return when.isoformat(timespec="microseconds")

    def stored(rows: Iterable[Sequence[Any]]) -> list[StoredApproval]:
        return [new(StoredApproval, (*row[:-1], f"{at[:10]}T{at[11:]}+00:00" if at.__class__ is str and utc(at)
                                     else text(at))) for row in rows for at in (row[-1],)]

    return stored


def count_approved(store: Store, contract: str | None = None, contract_version: int | None = None,
                   since: datetime | None = None) -> int:
    """How many records ``approved_batches`` gives (for progress)."""
    query = _approved_query(contract, contract_version, since).order_by(None).with_only_columns(func.count())
    with store.engine.connect() as connection:
        return int(connection.execute(query).scalar() or 0)


def approved_after(store: Store, after: tuple[datetime, int] | None, limit: int, *, contract: str | None = None,
                   contract_version: int | None = None) -> list[StoredApproval]:
    """At most ``limit`` approved records, as ``approved_batches`` gives them, in approval order (approval time, then
    id) after ``after`` (the last one of the previous page): a page of ``GET /v1/approved``. A record approved again
    (replaced) moves to the end, so a reader that follows the pages sees it again."""
    with store.engine.connect() as connection:
        query = _stored(_approved_query(contract, contract_version, None), connection.dialect).limit(limit)
        if after is not None:
            at, last = after
            query = query.where(or_(approved_table.c.approved_at > at,
                                    and_(approved_table.c.approved_at == at, approved_table.c.id > last)))
        return _reader(connection.dialect)(connection.execute(query))


def decision_counts(store: Store) -> dict[str, int]:
    """Every decision people took, by kind: ``approved`` and ``rejected`` (``reviews``; an approval that needed
    several people counts once) and ``signed_off`` (each person's approval of a record that needs several:
    ``signoffs``). They only grow (nothing deletes a decision), so they are counters."""
    counts = {str(decision): 0 for decision in ReviewDecision} | {"signed_off": 0}
    with store.engine.connect() as connection:
        for decision, count in connection.execute(select(reviews.c.decision, func.count()).group_by(reviews.c.decision)):
            counts[decision] = int(count)
        counts["signed_off"] = int(connection.execute(select(func.count()).select_from(signoffs)).scalar() or 0)
    return counts


def reviews_for(store: Store, document_run_id: int) -> list[ReviewInfo]:
    """Every decision on a document run, oldest first."""
    query = (
        select(reviews).where(reviews.c.document_run_id == document_run_id)
        .order_by(reviews.c.created_at, reviews.c.id)
    )
    with store.engine.connect() as connection:
        return [plain(ReviewInfo, row) for row in connection.execute(query)]


def approved_record_for(records: Store, sha256: str, contract: str, contract_version: int) -> ApprovedRecordInfo | None:
    """The approved record of this content under this contract version, if a person approved one."""
    query = select(approved_table).where(
        approved_table.c.document_sha256 == sha256,
        approved_table.c.contract == contract,
        approved_table.c.contract_version == contract_version,
    )
    with records.engine.connect() as connection:
        row = connection.execute(query).first()
        return None if row is None else plain(ApprovedRecordInfo, row)


def approved_among(records: Store, keys: Iterable[tuple[str, str, int]]) -> set[tuple[str, str, int]]:
    """Which of these ``(sha256, contract, contract_version)`` have an approved record (for the review queue:
    only the keys of what may wait are looked up, never every approved record)."""
    wanted = sorted(set(keys))
    found: set[tuple[str, str, int]] = set()
    with records.engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            chunk = set(wanted[start : start + 500])
            query = select(approved_table.c.document_sha256, approved_table.c.contract,
                           approved_table.c.contract_version).where(
                approved_table.c.document_sha256.in_({sha for sha, _, _ in chunk}))
            found.update(key for sha, contract, version in connection.execute(query)
                         if (key := (sha, contract, version)) in chunk)
    return found


def withdraw(records: Store, approved: ApprovedRecordInfo) -> bool:
    """Delete this approved record if nobody changed it since it was read; returns whether it was deleted."""
    with write_connection(records.engine) as connection:
        deleted = connection.execute(
            delete(approved_table).where(
                approved_table.c.id == approved.id, approved_table.c.approved_at == approved.approved_at
            )
        )
        return deleted.rowcount == 1


def latest_reviews(store: Store, document_run_ids: Iterable[int]) -> dict[int, ReviewInfo]:
    """The newest decision per document run, for those that have one."""
    wanted = sorted(set(document_run_ids))
    latest: dict[int, ReviewInfo] = {}
    with store.engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            query = (
                select(reviews)
                .where(reviews.c.document_run_id.in_(wanted[start : start + 500]))
                .order_by(reviews.c.created_at, reviews.c.id)
            )
            for row in connection.execute(query):
                latest[row.document_run_id] = plain(ReviewInfo, row)
    return latest


CorrectionCount = tuple[str, str, str, int, str | None, int | None, int]
"""``(model, prompt_version, contract, contract_version, field_path, changes, count)``: with ``field_path`` None,
``count`` current approvals that changed ``changes`` field paths (None: approved before changes were recorded);
else ``count`` current approvals that changed ``field_path``."""


def correction_counts(store: Store, run_ids: Sequence[str] | None = None) -> list[CorrectionCount]:
    """What people changed before approving, per run configuration (model, prompt version, contract version):
    read from what each decision recorded (``reviews.changes``, ``review_fields``) in one grouped query, and
    only the newest decision on each document run counts. ``run_ids``: only these runs (else every run)."""
    approvals = (select(reviews.c.run_id, cast(null(), NulFreeText).label("field_path"), reviews.c.changes,
                        func.count().label("n"))
                 .where(reviews.c.current == true(), reviews.c.decision == ReviewDecision.approved)
                 .group_by(reviews.c.run_id, reviews.c.changes))
    fields = (select(review_fields.c.run_id, review_fields.c.field_path, cast(null(), Integer).label("changes"),
                     func.count().label("n"))
              .group_by(review_fields.c.run_id, review_fields.c.field_path))
    chunks: list[list[str] | None] = [None]
    if run_ids is not None:
        wanted = sorted(set(run_ids))
        chunks = [wanted[start : start + 500] for start in range(0, len(wanted), 500)]
    found: Counter[tuple[str, str, str, int, str | None, int | None]] = Counter()
    with store.engine.connect() as connection:
        for chunk in chunks:
            both = union_all(approvals.where(reviews.c.run_id.in_(chunk)) if chunk is not None else approvals,
                             fields.where(review_fields.c.run_id.in_(chunk)) if chunk is not None else fields).subquery()
            keys = (runs.c.model, runs.c.prompt_version, runs.c.contract, runs.c.contract_version, both.c.field_path,
                    both.c.changes)
            query = select(*keys, func.sum(both.c.n)).join(runs, runs.c.id == both.c.run_id).group_by(*keys)
            for *key, count in connection.execute(query):
                found[tuple(key)] += int(count)  # type: ignore[index]
    return [(*key, count) for key, count in found.items()]
