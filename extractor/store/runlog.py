"""The run log: every run, document and model attempt, written as it happens.

Every method is one short transaction, safe to call from several processes at once. Whether a
document is processed is decided by ``claim``, atomically, per configuration (``config_hash``): a
document is converted exactly once per configuration unless forced, and work held by a run that died
is taken over. Queries return plain dataclasses, never ORM objects tied to a closed session.

This module never writes ``approved_records`` or ``reviews`` (see ``extractor.store.approved``).
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Select, bindparam, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased

from extractor.document import Document as SourceDocument
from extractor.redact import redact_config, redact_text
from extractor.store.db import (
    StoreError,
    create_store_engine,
    plain,
    safe_url,
    transaction,
    upgrade_schema,
    utcnow,
)
from extractor.store.info import (
    AttemptData,
    AttemptInfo,
    AttemptRecord,
    CalibrationInfo,
    ClaimResult,
    DocumentInfo,
    DocumentRunInfo,
    FinishedClaim,
    RunConfig,
    RunInfo,
)
from extractor.store.models import Attempt, Base, Claim, Document, DocumentRun, Run
from extractor.vocab import (
    FINAL_STATES,
    AttemptKind,
    AttemptOutcome,
    CalibrationVerdict,
    DocumentState,
    RunStatus,
    values_of,
)

STALE_AFTER_S = 60.0
"""A run whose heartbeat is older than this is considered dead and its documents may be taken over."""

_CLAIM_ROUNDS = 8
"""Each round either decides or saw another process change the claim; more rounds mean a livelock."""

AnySelect = Select[*tuple[Any, ...]]


class _ClaimMoved(Exception):
    """Raised inside a takeover transaction to roll it back: another process changed the claim first."""


def _require(value: str, allowed: Iterable[str], what: str) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


def _pid_exists(pid: int) -> bool:
    """Whether a process with this id exists on this machine (POSIX only: elsewhere rely on heartbeats)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Built once: statements whose values come as parameters are compiled once and found in the cache cheaply.
_DOCUMENT_ID = select(Document.id).where(
    Document.sha256 == bindparam("sha256"), Document.segmenter == bindparam("segmenter")
)
_INSERT_DOCUMENT = insert(Document.__table__)
_INSERT_DOCUMENT_RUN = insert(DocumentRun.__table__)
_INSERT_CLAIM = insert(Claim.__table__)
_INSERT_ATTEMPT = insert(Attempt.__table__)
_DOCUMENT_RUN_OWNER = select(DocumentRun.run_id, DocumentRun.document_id).where(DocumentRun.id == bindparam("run"))
_FINISH_DOCUMENT_RUN = (
    update(DocumentRun.__table__)
    .where(DocumentRun.id == bindparam("run"))
    .values(
        state=bindparam("state"),
        cause=bindparam("cause"),
        needs_person=bindparam("needs_person"),
        final_attempt_id=bindparam("final_attempt_id"),
        finished_at=bindparam("finished_at"),
    )
)
_FINISH_CLAIM = (
    update(Claim.__table__)
    .where(Claim.document_run_id == bindparam("run"))
    .values(state=bindparam("state"), updated_at=bindparam("updated_at"))
)


class Store:
    """The run log on one database; create it with ``open_store``."""

    def __init__(self, engine: Engine, *, stale_after_s: float = STALE_AFTER_S) -> None:
        self.engine = engine
        self.stale_after_s = stale_after_s

    @property
    def url(self) -> str:
        """The database URL without its password, for messages."""
        return safe_url(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One short write transaction on a plain connection (the hot paths: no ORM session around it).

        Same locking as ``transaction(write=True)``: SQLite takes its write lock up front.
        """
        with self.engine.execution_options(store_write=True).begin() as connection:
            yield connection

    # -- runs -------------------------------------------------------------------------------------------

    def start_run(self, config: RunConfig) -> str:
        """Record a new running run and return its id; secrets in the command and config are never stored."""
        run_id = uuid.uuid4().hex
        now = utcnow()
        with transaction(self.engine) as session:
            session.add(
                Run(
                    id=run_id,
                    started_at=now,
                    status=RunStatus.running,
                    contract=config.contract,
                    contract_version=config.contract_version,
                    prompt_version=config.prompt_version,
                    model=config.model,
                    provider=config.provider,
                    validator_version=config.validator_version,
                    segmenter=config.segmenter,
                    judge_model=config.judge_model,
                    config_hash=config.config_hash,
                    config=redact_config(config.config),
                    command=redact_text(config.command),
                    host=config.host,
                    pid=config.pid,
                    heartbeat_at=now,
                )
            )
        return run_id

    def heartbeat(self, run_id: str) -> None:
        """Tell other processes this run is alive (call well within ``stale_after_s``)."""
        with transaction(self.engine) as session:
            session.connection().execute(update(Run).where(Run.id == run_id).values(heartbeat_at=utcnow()))

    def finish_run(self, run_id: str, status: RunStatus) -> None:
        _require(status, (s for s in values_of(RunStatus) if s != RunStatus.running), "run status")
        now = utcnow()
        with transaction(self.engine) as session:
            session.connection().execute(
                update(Run).where(Run.id == run_id).values(status=status, finished_at=now, heartbeat_at=now)
            )

    # -- documents and claims ---------------------------------------------------------------------------

    def get_or_create_document(self, document: SourceDocument) -> int:
        """The id of this content under this segmenter, inserting it if no process has yet."""
        if not document.segmenter:
            raise ValueError(f"{document.path}: document is not segmented; sentence ids would mean nothing")
        key = (Document.sha256 == document.sha256, Document.segmenter == document.segmenter)
        try:
            with transaction(self.engine) as session:
                row = Document(
                    sha256=document.sha256,
                    segmenter=document.segmenter,
                    path=document.path,
                    format=document.format,
                    encoding=document.encoding,
                    char_count=len(document.text),
                    sentence_count=len(document.sentences),
                    sentences=[sentence.to_json() for sentence in document.sentences],
                    created_at=utcnow(),
                )
                session.add(row)
                session.flush()
                return row.id
        except IntegrityError:
            with transaction(self.engine, write=False) as session:
                existing = session.scalar(select(Document.id).where(*key))
            if existing is None:
                raise
            return existing

    def get_document(self, document_id: int) -> DocumentInfo | None:
        with transaction(self.engine, write=False) as session:
            row = session.get(Document, document_id)
            return None if row is None else plain(DocumentInfo, row)

    def claim(
        self, run_id: str, config_hash: str, document_id: int, path: str, force: bool = False,
        tags: Sequence[str] = (), retry: Collection[str] = (),
    ) -> ClaimResult:
        """Decide atomically whether this run processes the document for this configuration.

        A fresh document is claimed by inserting its claim (the primary key lets one process win). An
        existing claim is ``done`` when finished (unless ``force``, or it ended in a state of ``retry``),
        ``busy`` while a live run holds it, and otherwise taken over by a conditional UPDATE that only one
        racing process can win. ``tags`` (categories for ``extract compare``) are stored on the new
        document run.
        """
        for _ in range(_CLAIM_ROUNDS):
            try:
                return ClaimResult("claimed", self._claim_new(run_id, config_hash, document_id, path, tags))
            except IntegrityError as conflict:
                error = conflict
            decided = self._decide_existing(run_id, config_hash, document_id, path, force, error, tags, retry)
            if decided is not None:
                return decided
        raise StoreError(f"claim of document {document_id} kept changing under concurrent runs; retry")

    def claim_document(
        self, run_id: str, config_hash: str, document: SourceDocument, path: str, force: bool = False,
        tags: Sequence[str] = (), retry: Collection[str] = (),
    ) -> tuple[int, ClaimResult]:
        """``get_or_create_document`` and ``claim`` together: ``(document_id, claim result)``.

        When the claim is new (a first run: the common case) it is one short transaction of Core
        statements; any conflict (the document or its claim exists, another process raced) rolls it back
        and the general path decides, exactly as the two calls would.
        """
        if not document.segmenter:
            raise ValueError(f"{document.path}: document is not segmented; sentence ids would mean nothing")
        try:
            with self._write() as connection:
                now = utcnow()
                document_id = connection.execute(
                    _DOCUMENT_ID, {"sha256": document.sha256, "segmenter": document.segmenter}
                ).scalar()
                if document_id is None:
                    document_id = connection.execute(_INSERT_DOCUMENT, {
                        "sha256": document.sha256, "segmenter": document.segmenter, "path": document.path,
                        "format": document.format, "encoding": document.encoding, "char_count": len(document.text),
                        "sentence_count": len(document.sentences),
                        "sentences": [s.to_json() for s in document.sentences], "created_at": now,
                    }).inserted_primary_key[0]
                document_run_id = connection.execute(_INSERT_DOCUMENT_RUN, {
                    "run_id": run_id, "document_id": document_id, "path": path, "config_hash": config_hash,
                    "state": DocumentState.PROCESSING, "needs_person": [], "tags": list(tags), "started_at": now,
                }).inserted_primary_key[0]
                connection.execute(_INSERT_CLAIM, {
                    "config_hash": config_hash, "document_id": document_id, "document_run_id": document_run_id,
                    "run_id": run_id, "state": DocumentState.PROCESSING, "claimed_at": now, "updated_at": now,
                })
                return document_id, ClaimResult("claimed", document_run_id)
        except IntegrityError:
            pass
        document_id = self.get_or_create_document(document)
        return document_id, self.claim(run_id, config_hash, document_id, path, force, tags, retry)

    def has_finished(self, config_hash: str) -> bool:
        """Whether any document is finished for this configuration (if none, a run need not look per file)."""
        query = select(Claim.document_id).where(Claim.config_hash == config_hash, Claim.state.in_(FINAL_STATES))
        with transaction(self.engine, write=False) as session:
            return session.execute(query.limit(1)).first() is not None

    def _claim_new(self, run_id: str, config_hash: str, document_id: int, path: str, tags: Sequence[str]) -> int:
        with transaction(self.engine) as session:
            now = utcnow()
            document_run = self._new_document_run(run_id, config_hash, document_id, path, now, tags)
            session.add(document_run)
            session.flush()
            session.add(
                Claim(
                    config_hash=config_hash,
                    document_id=document_id,
                    document_run_id=document_run.id,
                    run_id=run_id,
                    state=DocumentState.PROCESSING,
                    claimed_at=now,
                    updated_at=now,
                )
            )
            session.flush()
            return document_run.id

    @staticmethod
    def _new_document_run(
        run_id: str, config_hash: str, document_id: int, path: str, now: datetime, tags: Sequence[str]
    ) -> DocumentRun:
        return DocumentRun(
            run_id=run_id,
            document_id=document_id,
            path=path,
            config_hash=config_hash,
            state=DocumentState.PROCESSING,
            needs_person=[],
            tags=list(tags),
            started_at=now,
        )

    def _decide_existing(
        self,
        run_id: str,
        config_hash: str,
        document_id: int,
        path: str,
        force: bool,
        conflict: IntegrityError,
        tags: Sequence[str],
        retry: Collection[str] = (),
    ) -> ClaimResult | None:
        """``done`` / ``busy`` / ``claimed`` for an existing claim, or ``None`` if it changed meanwhile."""
        with transaction(self.engine, write=False) as session:
            own = session.execute(
                select(DocumentRun.id, DocumentRun.state).where(
                    DocumentRun.run_id == run_id, DocumentRun.document_id == document_id
                )
            ).first()
            held = session.execute(
                select(
                    Claim.document_run_id,
                    Claim.run_id,
                    Claim.state,
                    Run.status,
                    Run.host,
                    Run.pid,
                    Run.heartbeat_at,
                )
                .join(Run, Run.id == Claim.run_id)
                .where(Claim.config_hash == config_hash, Claim.document_id == document_id)
            ).first()
        if own is not None:  # a run processes a document at most once (e.g. the same file given twice)
            return ClaimResult("busy", run_id) if own.state == DocumentState.PROCESSING else ClaimResult("done", own.id)
        if held is None:  # the insert failed for another reason (unknown run or document id)
            raise conflict
        if held.state in FINAL_STATES and not force and held.state not in retry:
            return ClaimResult("done", held.document_run_id)
        if held.state == DocumentState.PROCESSING and self._alive(held.status, held.host, held.pid, held.heartbeat_at):
            return ClaimResult("busy", held.run_id)
        taken = self._take_over(
            run_id, config_hash, document_id, path, held.run_id, held.document_run_id, held.state, tags
        )
        return None if taken is None else ClaimResult("claimed", taken)

    def _alive(self, status: str, host: str, pid: int, heartbeat_at: datetime) -> bool:
        """Whether the run holding a claim may still be working on it."""
        if status != RunStatus.running:
            return False
        if utcnow() - heartbeat_at > timedelta(seconds=self.stale_after_s):
            return False
        return host != socket.gethostname() or _pid_exists(pid)

    def _take_over(
        self,
        run_id: str,
        config_hash: str,
        document_id: int,
        path: str,
        old_run_id: str,
        old_document_run_id: int,
        old_state: str,
        tags: Sequence[str],
    ) -> int | None:
        """Move the claim to a new document run of this run, unless another process moved it first."""
        try:
            with transaction(self.engine) as session:
                now = utcnow()
                document_run = self._new_document_run(run_id, config_hash, document_id, path, now, tags)
                session.add(document_run)
                session.flush()
                connection = session.connection()
                moved = connection.execute(
                    update(Claim)
                    .where(
                        Claim.config_hash == config_hash,
                        Claim.document_id == document_id,
                        Claim.run_id == old_run_id,
                        Claim.document_run_id == old_document_run_id,
                        Claim.state == old_state,
                    )
                    .values(
                        run_id=run_id,
                        document_run_id=document_run.id,
                        state=DocumentState.PROCESSING,
                        claimed_at=now,
                        updated_at=now,
                    )
                )
                if moved.rowcount != 1:
                    raise _ClaimMoved
                connection.execute(
                    update(DocumentRun)
                    .where(DocumentRun.id == old_document_run_id, DocumentRun.state == DocumentState.PROCESSING)
                    .values(state=DocumentState.INTERRUPTED, cause=f"taken over by run {run_id}", finished_at=now)
                )
                return document_run.id
        except (_ClaimMoved, IntegrityError):  # the claim moved, or this run got the document meanwhile
            return None

    def finish_document(
        self,
        document_run_id: int,
        state: DocumentState,
        cause: str | None = None,
        needs_person: Iterable[str] = (),
        final_attempt_id: int | None = None,
    ) -> bool:
        """Record where a document ended up; returns whether this run still held its claim.

        The claim follows the document run in the same transaction, unless another run has taken it over
        (then only this run's own record is updated).
        """
        _require(state, (s for s in values_of(DocumentState) if s != DocumentState.PROCESSING), "document state")
        now = utcnow()
        with self._write() as connection:
            updated = connection.execute(_FINISH_DOCUMENT_RUN, {
                "run": document_run_id, "state": state, "cause": cause, "needs_person": list(needs_person),
                "final_attempt_id": final_attempt_id, "finished_at": now,
            })
            if updated.rowcount != 1:
                raise StoreError(f"no document run {document_run_id}")
            held = connection.execute(_FINISH_CLAIM, {"run": document_run_id, "state": state, "updated_at": now})
            return held.rowcount == 1

    def mark_interrupted(self, run_id: str) -> int:
        """Every document this run was still processing becomes INTERRUPTED (resumable); returns how many."""
        now = utcnow()
        with transaction(self.engine) as session:
            connection = session.connection()
            interrupted = connection.execute(
                update(DocumentRun)
                .where(DocumentRun.run_id == run_id, DocumentRun.state == DocumentState.PROCESSING)
                .values(state=DocumentState.INTERRUPTED, finished_at=now)
            )
            connection.execute(
                update(Claim)
                .where(Claim.run_id == run_id, Claim.state == DocumentState.PROCESSING)
                .values(state=DocumentState.INTERRUPTED, updated_at=now)
            )
            return interrupted.rowcount

    def reap_dead_runs(self) -> list[str]:
        """Runs of this machine still marked running whose process is gone (killed, crashed) become
        ``crashed``, their unfinished documents INTERRUPTED; returns their ids.

        Only a missing process counts as dead here (a stale heartbeat may be a suspended laptop); claims
        of runs on other machines are still taken over once their heartbeat is stale (see ``claim``).
        """
        with transaction(self.engine, write=False) as session:
            running = session.execute(
                select(Run.id, Run.pid).where(Run.status == RunStatus.running, Run.host == socket.gethostname())
            ).all()
        dead = [run_id for run_id, pid in running if pid != os.getpid() and not _pid_exists(pid)]
        for run_id in dead:
            now = utcnow()
            cause = "its run ended without finishing (process killed or crashed)"
            with transaction(self.engine) as session:
                connection = session.connection()
                connection.execute(
                    update(DocumentRun)
                    .where(DocumentRun.run_id == run_id, DocumentRun.state == DocumentState.PROCESSING)
                    .values(state=DocumentState.INTERRUPTED, cause=cause, finished_at=now)
                )
                connection.execute(
                    update(Claim)
                    .where(Claim.run_id == run_id, Claim.state == DocumentState.PROCESSING)
                    .values(state=DocumentState.INTERRUPTED, updated_at=now)
                )
                connection.execute(
                    update(Run)
                    .where(Run.id == run_id, Run.status == RunStatus.running)
                    .values(status=RunStatus.crashed, finished_at=now)
                )
        return dead

    def finished_run_of(self, config_hash: str, sha256: str) -> FinishedClaim | None:
        """The document run (and its run and state) that finished this content for this configuration, if
        any: a cheap look-up before ingest, so a rerun does not read and segment what is done (``claim``
        still decides)."""
        query = (
            select(Claim.document_run_id, Claim.run_id, Claim.state)
            .join(Document, Document.id == Claim.document_id)
            .where(Claim.config_hash == config_hash, Document.sha256 == sha256, Claim.state.in_(FINAL_STATES))
            .limit(1)
        )
        with transaction(self.engine, write=False) as session:
            row = session.execute(query).first()
        return None if row is None else FinishedClaim(row.document_run_id, row.run_id, DocumentState(row.state))

    # -- attempts ---------------------------------------------------------------------------------------

    def record_attempt(self, record: AttemptRecord) -> int:
        """Store one model call exactly as it happened (``raw_response`` verbatim, JSON or not); returns its id.

        The run and document are the document run's. A second attempt with the same (document run, kind,
        number) raises ``IntegrityError``.
        """
        _require(record.kind, values_of(AttemptKind), "attempt kind")
        _require(record.outcome, values_of(AttemptOutcome), "attempt outcome")
        now = utcnow()
        row = {f.name: getattr(record, f.name) for f in fields(AttemptData)}
        with self._write() as connection:
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
            return connection.execute(_INSERT_ATTEMPT, row).inserted_primary_key[0]

    # -- queries ----------------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunInfo | None:
        with transaction(self.engine, write=False) as session:
            run = session.get(Run, run_id)
            if run is None:
                return None
            return plain(RunInfo, run, counts=self._state_counts(session, [run_id])[run_id])

    @staticmethod
    def _state_counts(session: Session, run_ids: list[str]) -> defaultdict[str, dict[str, int]]:
        counts: defaultdict[str, dict[str, int]] = defaultdict(dict)
        if run_ids:
            rows = session.execute(
                select(DocumentRun.run_id, DocumentRun.state, func.count())
                .where(DocumentRun.run_id.in_(run_ids))
                .group_by(DocumentRun.run_id, DocumentRun.state)
            )
            for run_id, state, count in rows:
                counts[run_id][state] = count
        return counts

    def document_runs_for(self, run_id: str) -> list[DocumentRunInfo]:
        return self._document_runs(DocumentRun.run_id == run_id, order=(DocumentRun.id,))

    def latest_document_run(self, ref: str | int) -> DocumentRunInfo | None:
        """The newest document run for a document run id, a document's sha256, or a path as given to a run."""
        if isinstance(ref, int) or ref.isdigit():
            condition = DocumentRun.id == int(ref)
        elif re.fullmatch(r"[0-9a-f]{64}", ref):
            condition = Document.sha256 == ref
        else:
            condition = DocumentRun.path == ref
        found = self._document_runs(
            condition, order=(DocumentRun.started_at.desc(), DocumentRun.id.desc()), limit=1
        )
        return found[0] if found else None

    def _document_runs(
        self, condition: Any, order: tuple[Any, ...], limit: int | None = None
    ) -> list[DocumentRunInfo]:
        query = (
            select(DocumentRun, Document.sha256)
            .join(Document, Document.id == DocumentRun.document_id)
            .where(condition)
            .order_by(*order)
            .limit(limit)
        )
        with transaction(self.engine, write=False) as session:
            return [plain(DocumentRunInfo, row, sha256=sha256) for row, sha256 in session.execute(query)]

    def attempts_for(self, document_run_id: int) -> list[AttemptInfo]:
        """Attempts in the order they were made."""
        query = (
            select(Attempt)
            .where(Attempt.document_run_id == document_run_id)
            .order_by(Attempt.created_at, Attempt.id)
        )
        with transaction(self.engine, write=False) as session:
            return [plain(AttemptInfo, row) for row in session.scalars(query)]

    def integrity_check(self) -> list[str]:
        """Problems in the run log, one line each; an empty list means healthy."""
        with transaction(self.engine, write=False) as session:
            return [
                message.format(**row._mapping)
                for query, message in _integrity_queries()
                for row in session.execute(query)
            ]

    # -- judge calibrations (extractor.judge) -------------------------------------------------------------

    def save_calibration(
        self,
        *,
        judge_model: str,
        rubric_version: str,
        threshold: float,
        verdict: str,
        labels_sha256: str,
        n_cases: int,
        report: dict[str, Any],
    ) -> int:
        """Store one calibration report; returns its id. Reports are never updated, only superseded."""
        from extractor.store.models import JudgeCalibration

        _require(verdict, values_of(CalibrationVerdict), "calibration verdict")
        with transaction(self.engine) as session:
            row = JudgeCalibration(
                created_at=utcnow(), judge_model=judge_model, rubric_version=rubric_version,
                threshold=float(threshold), verdict=verdict, labels_sha256=labels_sha256, n_cases=n_cases,
                report=report,
            )
            session.add(row)
            session.flush()
            return row.id

    def calibrations(
        self, *, judge_model: str | None = None, rubric_version: str | None = None, limit: int | None = 50
    ) -> list[CalibrationInfo]:
        """Stored calibration reports, newest first."""
        from extractor.store.models import JudgeCalibration

        query = select(JudgeCalibration).order_by(JudgeCalibration.created_at.desc(), JudgeCalibration.id.desc())
        if judge_model is not None:
            query = query.where(JudgeCalibration.judge_model == judge_model)
        if rubric_version is not None:
            query = query.where(JudgeCalibration.rubric_version == rubric_version)
        if limit is not None:
            query = query.limit(limit)
        with transaction(self.engine, write=False) as session:
            return [plain(CalibrationInfo, row) for row in session.scalars(query)]

    def get_calibration(self, calibration_id: int) -> CalibrationInfo | None:
        from extractor.store.models import JudgeCalibration

        with transaction(self.engine, write=False) as session:
            row = session.get(JudgeCalibration, calibration_id)
            return None if row is None else plain(CalibrationInfo, row)

    def latest_calibration(self, judge_model: str, rubric_version: str, threshold: float) -> CalibrationInfo | None:
        """The newest report for exactly this judge model, rubric version and threshold (any verdict)."""
        from extractor.store.models import JudgeCalibration

        query = (
            select(JudgeCalibration)
            .where(
                JudgeCalibration.judge_model == judge_model,
                JudgeCalibration.rubric_version == rubric_version,
                func.abs(JudgeCalibration.threshold - float(threshold)) < 1e-9,
            )
            .order_by(JudgeCalibration.created_at.desc(), JudgeCalibration.id.desc())
            .limit(1)
        )
        with transaction(self.engine, write=False) as session:
            row = session.scalars(query).first()
            return None if row is None else plain(CalibrationInfo, row)

    # -- queries for review, export, stats and compare (extractor.review, extractor.compare) ----------------

    def find_runs(
        self,
        *,
        ids: Iterable[str] | None = None,
        id_prefix: str | None = None,
        model: str | None = None,
        prompt_version: str | None = None,
        contract: str | None = None,
        validator_version: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs matching every given filter, newest first, with their document counts per state."""
        query = select(Run).order_by(Run.started_at.desc(), Run.id)
        if ids is not None:
            query = query.where(Run.id.in_(list(ids)))
        if id_prefix is not None:
            query = query.where(Run.id.startswith(id_prefix, autoescape=True))
        for column, value in ((Run.model, model), (Run.prompt_version, prompt_version), (Run.contract, contract),
                              (Run.validator_version, validator_version)):
            if value is not None:
                query = query.where(column == value)
        if since is not None:
            query = query.where(Run.started_at >= since)
        if until is not None:
            query = query.where(Run.started_at < until)
        if limit is not None:
            query = query.limit(limit)
        with transaction(self.engine, write=False) as session:
            runs = session.scalars(query).all()
            counts = self._state_counts(session, [run.id for run in runs])
            return [plain(RunInfo, run, counts=counts[run.id]) for run in runs]

    def find_document_runs(
        self,
        *,
        ids: Iterable[int] | None = None,
        run_ids: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
        sha_prefix: str | None = None,
        path_suffix: str | None = None,
    ) -> list[DocumentRunInfo]:
        """Document runs matching every given filter, newest first."""
        conditions: list[Any] = []
        if ids is not None:
            conditions.append(DocumentRun.id.in_(list(ids)))
        if run_ids is not None:
            conditions.append(DocumentRun.run_id.in_(list(run_ids)))
        if states is not None:
            conditions.append(DocumentRun.state.in_(list(states)))
        if sha_prefix is not None:
            conditions.append(Document.sha256.startswith(sha_prefix.lower(), autoescape=True))
        if path_suffix is not None:
            conditions.append(DocumentRun.path.endswith(path_suffix, autoescape=True))
        condition = DocumentRun.id.is_not(None)
        for extra in conditions:
            condition = condition & extra
        return self._document_runs(condition, order=(DocumentRun.started_at.desc(), DocumentRun.id.desc()))

    def get_attempt(self, attempt_id: int) -> AttemptInfo | None:
        with transaction(self.engine, write=False) as session:
            row = session.get(Attempt, attempt_id)
            return None if row is None else plain(AttemptInfo, row)

    def findings_of_attempts(self, attempt_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
        """Only the findings of these attempts (no requests or responses): cheap for thousands of documents."""
        wanted = sorted(set(attempt_ids))
        found: dict[int, list[dict[str, Any]]] = {}
        with transaction(self.engine, write=False) as session:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                for attempt_id, findings in session.execute(
                    select(Attempt.id, Attempt.findings).where(Attempt.id.in_(chunk))
                ):
                    found[attempt_id] = list(findings or ())
        return found

    def attempt_findings_for_runs(
        self, run_ids: Iterable[str]
    ) -> list[tuple[str, int, int, str, int, str, list[dict[str, Any]]]]:
        """``(run_id, document_run_id, attempt_id, kind, number, outcome, findings)`` of every attempt of these runs."""
        query = (
            select(Attempt.run_id, Attempt.document_run_id, Attempt.id, Attempt.kind, Attempt.number, Attempt.outcome,
                   Attempt.findings)
            .where(Attempt.run_id.in_(list(run_ids)))
            .order_by(Attempt.document_run_id, Attempt.created_at, Attempt.id)
        )
        with transaction(self.engine, write=False) as session:
            return [(r, d, a, k, n, o, list(f or ())) for r, d, a, k, n, o, f in session.execute(query)]


def _integrity_queries() -> list[tuple[AnySelect, str]]:
    """One query per invariant, selecting the rows that break it, and the message naming each row."""
    final = aliased(Attempt)
    checks: list[tuple[AnySelect, str]] = [
        (
            select(
                Claim.config_hash,
                Claim.document_id,
                Claim.state,
                DocumentRun.id,
                DocumentRun.state.label("dr"),
            )
            .join(DocumentRun, DocumentRun.id == Claim.document_run_id)
            .where(
                or_(
                    DocumentRun.run_id != Claim.run_id,
                    DocumentRun.document_id != Claim.document_id,
                    DocumentRun.state != Claim.state,
                )
            ),
            "claim ({config_hash:.12}, document {document_id}) in {state} disagrees with "
            "document run {id} in {dr}",
        ),
        (
            select(DocumentRun.id, DocumentRun.run_id, Run.status)
            .join(Run, Run.id == DocumentRun.run_id)
            .where(DocumentRun.state == DocumentState.PROCESSING, Run.status != RunStatus.running),
            "document run {id} is PROCESSING but its run {run_id} is {status}",
        ),
        (
            select(DocumentRun.id, DocumentRun.final_attempt_id, final.document_run_id.label("owner"))
            .join(final, final.id == DocumentRun.final_attempt_id)
            .where(final.document_run_id != DocumentRun.id),
            "document run {id}: final attempt {final_attempt_id} belongs to document run {owner}",
        ),
        (
            select(DocumentRun.final_attempt_id, func.count().label("count"))
            .where(DocumentRun.final_attempt_id.is_not(None))
            .group_by(DocumentRun.final_attempt_id)
            .having(func.count() > 1),
            "attempt {final_attempt_id} is the final attempt of {count} document runs",
        ),
        (
            select(DocumentRun.id).where(
                DocumentRun.state == DocumentState.READY_FOR_REVIEW, DocumentRun.final_attempt_id.is_(None)
            ),
            "document run {id} is READY_FOR_REVIEW without a final attempt",
        ),
        (
            select(Attempt.id, Attempt.document_run_id)
            .join(DocumentRun, DocumentRun.id == Attempt.document_run_id)
            .where(or_(Attempt.run_id != DocumentRun.run_id, Attempt.document_id != DocumentRun.document_id)),
            "attempt {id} disagrees with its document run {document_run_id} on run or document",
        ),
    ]
    # Dangling references: impossible while foreign keys are enforced, so they reveal writes made without.
    for table in Base.metadata.sorted_tables:
        keys = [column.label(f"key{i}") for i, column in enumerate(table.primary_key.columns)]
        row = "/".join(f"{{key{i}}}" for i in range(len(keys)))
        for foreign in table.foreign_keys:
            checks.append(
                (
                    select(*keys, foreign.parent.label("value"))
                    .select_from(table.outerjoin(foreign.column.table, foreign.column == foreign.parent))
                    .where(foreign.parent.is_not(None), foreign.column.is_(None)),
                    f"{table.name} {row}: {foreign.parent.name} {{value}} refers to a missing "
                    f"{foreign.column.table.name} row",
                )
            )
    return checks


def open_store(url: str | None = None, *, stale_after_s: float = STALE_AFTER_S) -> Store:
    """Open the run log at ``url`` (else ``EXTRACT_DATABASE_URL``, else ./extract.db), upgrading its schema.

    Raises ``StoreError`` (one line, password hidden) when the database cannot be reached or migrated,
    or was written by a newer extractor.
    """
    engine = create_store_engine(url)
    try:
        upgrade_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, stale_after_s=stale_after_s)
