"""Documents and claims: who processes a document for one configuration, decided atomically.

A document (content + segmenter) is inserted by exactly one statement, ``_document_id``, whichever path
gets there. A fresh document is claimed by inserting its claim (the primary key lets one process win);
an existing claim is ``done`` when finished (unless forced, or it ended in a state the run retries),
``busy`` while a live run holds it, and otherwise taken over by a conditional UPDATE that only one racing
process can win.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from extractor.errors import StoreError
from extractor.store.db import plain, require_one_of, utcnow, write_connection
from extractor.store.info import ClaimResult, DocumentInfo, FinishedClaim
from extractor.store.runs import is_alive
from extractor.store.tables import claims, document_runs, documents, file_name, runs
from extractor.vocab import FINAL_STATES, DocumentState, values_of

if TYPE_CHECKING:
    from extractor.document import Document as SourceDocument

_CLAIM_ROUNDS = 8
"""Each round either decides or saw another process change the claim; more rounds mean a livelock."""

# Built once: statements whose values come as parameters are compiled once and found in the cache cheaply.
_DOCUMENT_ID = select(documents.c.id).where(
    documents.c.sha256 == bindparam("sha256"), documents.c.segmenter == bindparam("segmenter")
)
_INSERT_DOCUMENT = insert(documents)
_INSERT_DOCUMENT_RUN = insert(document_runs)
_INSERT_CLAIM = insert(claims)
_FINISH_DOCUMENT_RUN = (
    update(document_runs)
    .where(document_runs.c.id == bindparam("run"))
    .values(
        state=bindparam("state"),
        cause=bindparam("cause"),
        needs_person=bindparam("needs_person"),
        final_attempt_id=bindparam("final_attempt_id"),
        finished_at=bindparam("finished_at"),
    )
)
_FINISH_CLAIM = (
    update(claims)
    .where(claims.c.document_run_id == bindparam("run"))
    .values(state=bindparam("state"), updated_at=bindparam("updated_at"))
)


class _ClaimMoved(Exception):
    """Raised inside a takeover transaction to roll it back: another process changed the claim first."""


def _document_id(connection: Connection, document: SourceDocument) -> int:
    """The id of this content under this segmenter, inserting the document if it is not there yet.

    The one place a document row is written. Two processes inserting the same document at once: one of
    them gets ``IntegrityError`` (unique sha256 + segmenter) and retries in a new transaction.
    """
    if not document.segmenter:
        raise ValueError(f"{document.path}: document is not segmented; sentence ids would mean nothing")
    found = connection.execute(_DOCUMENT_ID, {"sha256": document.sha256, "segmenter": document.segmenter}).scalar()
    if found is not None:
        return int(found)
    inserted = connection.execute(_INSERT_DOCUMENT, {
        "sha256": document.sha256, "segmenter": document.segmenter, "path": document.path, "format": document.format,
        "encoding": document.encoding, "char_count": len(document.text), "sentence_count": len(document.sentences),
        "sentences": [s.to_json() for s in document.sentences], "created_at": utcnow(),
    }).inserted_primary_key
    assert inserted is not None
    return int(inserted[0])


def _insert_document_run(connection: Connection, run_id: str, config_hash: str, document_id: int, path: str,
                         tags: Sequence[str], now: datetime) -> int:
    inserted = connection.execute(_INSERT_DOCUMENT_RUN, {
        "run_id": run_id, "document_id": document_id, "path": path, "name": file_name(path), "config_hash": config_hash,
        "state": DocumentState.PROCESSING, "needs_person": [], "tags": list(tags), "started_at": now,
    }).inserted_primary_key
    assert inserted is not None
    return int(inserted[0])


def _insert_claim(connection: Connection, run_id: str, config_hash: str, document_id: int, path: str,
                  tags: Sequence[str]) -> int:
    """A new document run and the claim naming it; ``IntegrityError`` when the claim exists."""
    now = utcnow()
    document_run_id = _insert_document_run(connection, run_id, config_hash, document_id, path, tags, now)
    connection.execute(_INSERT_CLAIM, {
        "config_hash": config_hash, "document_id": document_id, "document_run_id": document_run_id, "run_id": run_id,
        "state": DocumentState.PROCESSING, "claimed_at": now, "updated_at": now,
    })
    return document_run_id


def get_or_create_document(engine: Engine, document: SourceDocument) -> int:
    """The id of this content under this segmenter, inserting it if no process has yet."""
    try:
        with write_connection(engine) as connection:
            return _document_id(connection, document)
    except IntegrityError:  # another process inserted it between our look-up and our insert
        with write_connection(engine) as connection:
            return _document_id(connection, document)


def get_document(engine: Engine, document_id: int) -> DocumentInfo | None:
    with engine.connect() as connection:
        row = connection.execute(select(documents).where(documents.c.id == document_id)).first()
        return None if row is None else plain(DocumentInfo, row)


def claim_document(engine: Engine, run_id: str, config_hash: str, document: SourceDocument, path: str,
                   force: bool = False, tags: Sequence[str] = (), retry: Collection[str] = (), *,
                   stale_after_s: float) -> tuple[int, ClaimResult]:
    """The document (inserted if new) and whether this run processes it: ``(document_id, claim result)``.

    When the claim is new (a first run: the common case) it is one short transaction; any conflict (the
    claim exists, another process raced) rolls it back and ``claim`` decides.
    """
    try:
        with write_connection(engine) as connection:
            document_id = _document_id(connection, document)
            return document_id, ClaimResult("claimed", _insert_claim(connection, run_id, config_hash, document_id,
                                                                     path, tags))
    except IntegrityError:
        pass
    document_id = get_or_create_document(engine, document)
    return document_id, claim(engine, run_id, config_hash, document_id, path, force, tags, retry,
                              stale_after_s=stale_after_s)


def claim(engine: Engine, run_id: str, config_hash: str, document_id: int, path: str, force: bool = False,
          tags: Sequence[str] = (), retry: Collection[str] = (), *, stale_after_s: float) -> ClaimResult:
    """Decide atomically whether this run processes the document for this configuration.

    A finished claim is redone when forced or when it ended in a state of ``retry`` (ERROR: the model was
    never heard). ``tags`` (categories for ``extract compare``) are stored on the new document run. A holder is alive
    while ``extractor.store.runs.is_alive`` says so (heartbeat younger than ``stale_after_s``).
    """
    for _ in range(_CLAIM_ROUNDS):
        try:
            with write_connection(engine) as connection:
                return ClaimResult("claimed", _insert_claim(connection, run_id, config_hash, document_id, path, tags))
        except IntegrityError as conflict:
            error = conflict
        decided = _decide_existing(engine, run_id, config_hash, document_id, path, force, error, tags, retry,
                                   stale_after_s)
        if decided is not None:
            return decided
    raise StoreError(f"claim of document {document_id} kept changing under concurrent runs; retry")


def _decide_existing(engine: Engine, run_id: str, config_hash: str, document_id: int, path: str, force: bool,
                     conflict: IntegrityError, tags: Sequence[str], retry: Collection[str],
                     stale_after_s: float) -> ClaimResult | None:
    """``done`` / ``busy`` / ``claimed`` for an existing claim, or ``None`` if it changed meanwhile."""
    with engine.connect() as connection:
        own = connection.execute(
            select(document_runs.c.id, document_runs.c.state).where(
                document_runs.c.run_id == run_id, document_runs.c.document_id == document_id
            )
        ).first()
        held = connection.execute(
            select(claims.c.document_run_id, claims.c.run_id, claims.c.state, runs.c.status, runs.c.host, runs.c.pid,
                   runs.c.heartbeat_at)
            .join(runs, runs.c.id == claims.c.run_id)
            .where(claims.c.config_hash == config_hash, claims.c.document_id == document_id)
        ).first()
    if own is not None:  # a run processes a document at most once (e.g. the same file given twice)
        return ClaimResult("busy", run_id) if own.state == DocumentState.PROCESSING else ClaimResult("done", own.id)
    if held is None:  # the insert failed for another reason (unknown run or document id)
        raise conflict
    if held.state in FINAL_STATES and not force and held.state not in retry:
        return ClaimResult("done", held.document_run_id)
    if held.state == DocumentState.PROCESSING and is_alive(held.status, held.host, held.pid, held.heartbeat_at,
                                                           stale_after_s):
        return ClaimResult("busy", held.run_id)
    taken = _take_over(engine, run_id, config_hash, document_id, path, held.run_id, held.document_run_id, held.state,
                       tags)
    return None if taken is None else ClaimResult("claimed", taken)


def _take_over(engine: Engine, run_id: str, config_hash: str, document_id: int, path: str, old_run_id: str,
               old_document_run_id: int, old_state: str, tags: Sequence[str]) -> int | None:
    """Move the claim to a new document run of this run, unless another process moved it first."""
    try:
        with write_connection(engine) as connection:
            now = utcnow()
            document_run_id = _insert_document_run(connection, run_id, config_hash, document_id, path, tags, now)
            moved = connection.execute(
                update(claims)
                .where(
                    claims.c.config_hash == config_hash,
                    claims.c.document_id == document_id,
                    claims.c.run_id == old_run_id,
                    claims.c.document_run_id == old_document_run_id,
                    claims.c.state == old_state,
                )
                .values(run_id=run_id, document_run_id=document_run_id, state=DocumentState.PROCESSING,
                        claimed_at=now, updated_at=now)
            )
            if moved.rowcount != 1:
                raise _ClaimMoved
            connection.execute(
                update(document_runs)
                .where(document_runs.c.id == old_document_run_id, document_runs.c.state == DocumentState.PROCESSING)
                .values(state=DocumentState.INTERRUPTED, cause=f"taken over by run {run_id}", finished_at=now)
            )
            return document_run_id
    except (_ClaimMoved, IntegrityError):  # the claim moved, or this run got the document meanwhile
        return None


def has_finished(engine: Engine, config_hash: str) -> bool:
    """Whether any document is finished for this configuration (if none, a run need not look per file)."""
    query = select(claims.c.document_id).where(claims.c.config_hash == config_hash, claims.c.state.in_(FINAL_STATES))
    with engine.connect() as connection:
        return connection.execute(query.limit(1)).first() is not None


def finished_run_of(engine: Engine, config_hash: str, sha256: str) -> FinishedClaim | None:
    """The document run (and its run and state) that finished this content for this configuration, if any:
    a cheap look-up before ingest, so a rerun does not read and segment what is done (``claim`` still
    decides)."""
    query = (
        select(claims.c.document_run_id, claims.c.run_id, claims.c.state)
        .join(documents, documents.c.id == claims.c.document_id)
        .where(claims.c.config_hash == config_hash, documents.c.sha256 == sha256, claims.c.state.in_(FINAL_STATES))
        .limit(1)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else FinishedClaim(row.document_run_id, row.run_id, DocumentState(row.state))


def finish_document(engine: Engine, document_run_id: int, state: DocumentState, cause: str | None = None,
                    needs_person: Iterable[str] = (), final_attempt_id: int | None = None) -> bool:
    """Record where a document ended up; returns whether this run still held its claim.

    The claim follows the document run in the same transaction, unless another run has taken it over
    (then only this run's own record is updated).
    """
    require_one_of(state, (s for s in values_of(DocumentState) if s != DocumentState.PROCESSING), "document state")
    now = utcnow()
    with write_connection(engine) as connection:
        updated = connection.execute(_FINISH_DOCUMENT_RUN, {
            "run": document_run_id, "state": state, "cause": cause, "needs_person": list(needs_person),
            "final_attempt_id": final_attempt_id, "finished_at": now,
        })
        if updated.rowcount != 1:
            raise StoreError(f"no document run {document_run_id}")
        held = connection.execute(_FINISH_CLAIM, {"run": document_run_id, "state": state, "updated_at": now})
        return held.rowcount == 1
