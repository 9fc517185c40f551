"""Attempts: every model call, written whole as it happened and read back exactly.

An attempt's columns come from ``extractor.store.info.AttemptData``; this module adds only what the store
derives (run, document, request, times), so a new column needs no change here.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sqlalchemy import Engine, bindparam, insert, select

from extractor.store.db import StoreError, plain, require_one_of, transaction, utcnow, write_connection
from extractor.store.info import AttemptData, AttemptInfo, AttemptRecord
from extractor.store.models import Attempt, DocumentRun
from extractor.vocab import AttemptKind, AttemptOutcome, values_of

_COLUMNS = tuple(f.name for f in fields(AttemptData))
_INSERT_ATTEMPT = insert(Attempt)
_DOCUMENT_RUN_OWNER = select(DocumentRun.run_id, DocumentRun.document_id).where(DocumentRun.id == bindparam("run"))


def record_attempt(engine: Engine, record: AttemptRecord) -> int:
    """Store one model call exactly as it happened (``raw_response`` verbatim, JSON or not); returns its id.

    The run and document are the document run's. A second attempt with the same (document run, kind,
    number) raises ``IntegrityError``.
    """
    require_one_of(record.kind, values_of(AttemptKind), "attempt kind")
    require_one_of(record.outcome, values_of(AttemptOutcome), "attempt outcome")
    now = utcnow()
    row: dict[str, Any] = {name: getattr(record, name) for name in _COLUMNS}
    with write_connection(engine) as connection:
        owner = connection.execute(_DOCUMENT_RUN_OWNER, {"run": record.document_run_id}).first()
        if owner is None:
            raise StoreError(f"no document run {record.document_run_id}")
        row.update(
            run_id=owner.run_id,
            document_id=owner.document_id,
            request=record.request.to_json(),
            request_hash=record.request.fingerprint,
            created_at=record.created_at or now,
            finished_at=now,
        )
        inserted = connection.execute(_INSERT_ATTEMPT, row).inserted_primary_key
        assert inserted is not None
        return int(inserted[0])


def attempts_for(engine: Engine, document_run_id: int) -> list[AttemptInfo]:
    """Attempts in the order they were made."""
    query = select(Attempt).where(Attempt.document_run_id == document_run_id).order_by(Attempt.created_at, Attempt.id)
    with transaction(engine, write=False) as session:
        return [plain(AttemptInfo, row) for row in session.scalars(query)]


def get_attempt(engine: Engine, attempt_id: int) -> AttemptInfo | None:
    with transaction(engine, write=False) as session:
        row = session.get(Attempt, attempt_id)
        return None if row is None else plain(AttemptInfo, row)

