"""The run log: every run, document and model attempt, written as it happens.

``Store`` is a thin front over one module per concern, each a set of short transactions safe to call
from several processes at once:

- ``runs``: start, heartbeat, finish, interrupted and dead runs;
- ``claims``: documents and claims (a document is converted exactly once per configuration unless forced,
  and work held by a run that died is taken over);
- ``attempts``: every model call, written whole (``AttemptRecord``) and read back exactly, its request
  split by ``requests`` into what the run's requests share (stored once) and its own texts;
- ``queries``: what ``show``, ``review``, ``runs``, ``stats`` and ``compare`` read;
- ``calibrations``: judge calibration reports;
- ``integrity``: the invariants ``extract doctor`` checks.

Reads return the plain dataclasses of ``extractor.store.info``. Nothing here writes ``approved_records``
or ``reviews`` (see ``extractor.store.approved``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from extractor.errors import StoreError
from extractor.store import attempts, calibrations, claims, evaluations, integrity, queries, runs
from extractor.store.db import (
    create_store_engine,
    missing_sqlite_file,
    read_only_folder,
    safe_url,
    sqlite_file,
    upgrade_schema,
)
from extractor.store.evaluations import EvaluationInfo, FinalCandidate, NewEvaluation
from extractor.store.info import (
    AttemptInfo,
    AttemptRecord,
    CalibrationInfo,
    Claimant,
    ClaimResult,
    DocumentInfo,
    DocumentRunInfo,
    FinishedClaim,
    RunConfig,
    RunInfo,
    RunQuery,
)
from extractor.store.queries import AttemptFindings
from extractor.store.runs import STALE_AFTER_S
from extractor.vocab import DocumentState, GateDecision, RunStatus

if TYPE_CHECKING:
    from extractor.calibration_report import CalibrationReport
    from extractor.document import Document as SourceDocument


class Store:
    """The run log on one database; create it with ``open_store``."""

    def __init__(self, engine: Engine, *, stale_after_s: float = STALE_AFTER_S, read_only: str | None = None) -> None:
        self.engine = engine
        self.stale_after_s = stale_after_s
        self.read_only = read_only
        """The read-only folder of an SQLite run log opened read-only (``open_store(reads_only=True)``), else None."""
        self._known_parts: set[str] = set()  # request parts committed by this store: inserted once per process

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

    # -- runs (extractor.store.runs) ----------------------------------------------------------------------

    def start_run(self, config: RunConfig) -> str:
        return runs.start_run(self.engine, config)

    def heartbeat(self, run_id: str) -> None:
        runs.heartbeat(self.engine, run_id)

    def finish_run(self, run_id: str, status: RunStatus, outcome: GateDecision | None = None) -> None:
        runs.finish_run(self.engine, run_id, status, outcome)

    def mark_interrupted(self, run_id: str) -> int:
        return runs.mark_interrupted(self.engine, run_id)

    def reap_dead_runs(self) -> list[str]:
        return runs.reap_dead_runs(self.engine)

    # -- documents and claims (extractor.store.claims) ------------------------------------------------------

    def get_or_create_document(self, document: SourceDocument) -> int:
        return claims.get_or_create_document(self.engine, document)

    def get_document(self, document_id: int) -> DocumentInfo | None:
        return claims.get_document(self.engine, document_id)

    def claim(self, run_id: str, config_hash: str, document_id: int, path: str, force: bool = False,
              tags: Sequence[str] = (), retry: Collection[str] = ()) -> ClaimResult:
        return claims.claim(self.engine, Claimant(run_id, config_hash, path, tuple(tags), force, frozenset(retry)),
                            document_id, stale_after_s=self.stale_after_s)

    def claim_document(self, run_id: str, config_hash: str, document: SourceDocument, path: str, force: bool = False,
                       tags: Sequence[str] = (), retry: Collection[str] = ()) -> tuple[int, ClaimResult]:
        return claims.claim_document(self.engine, Claimant(run_id, config_hash, path, tuple(tags), force,
                                                           frozenset(retry)), document, stale_after_s=self.stale_after_s)

    def has_finished(self, config_hash: str) -> bool:
        return claims.has_finished(self.engine, config_hash)

    def finished_run_of(self, config_hash: str, sha256: str) -> FinishedClaim | None:
        return claims.finished_run_of(self.engine, config_hash, sha256)

    def finish_document(self, document_run_id: int, state: DocumentState, cause: str | None = None,
                        needs_person: Iterable[str] = (), final_attempt_id: int | None = None) -> bool:
        return claims.finish_document(self.engine, document_run_id, state, cause, needs_person, final_attempt_id)

    # -- attempts (extractor.store.attempts) --------------------------------------------------------------

    def record_attempt(self, record: AttemptRecord) -> int:
        return attempts.record_attempt(self.engine, record, self._known_parts)

    def attempts_for(self, document_run_id: int) -> list[AttemptInfo]:
        return attempts.attempts_for(self.engine, document_run_id)

    def window_answers(self, document_id: int, config_hash: str) -> dict[str, AttemptInfo]:
        return attempts.window_answers(self.engine, document_id, config_hash)

    def get_attempt(self, attempt_id: int) -> AttemptInfo | None:
        return attempts.get_attempt(self.engine, attempt_id)

    # -- queries for show, review, runs, stats and compare (extractor.store.queries) ------------------------

    def get_run(self, run_id: str) -> RunInfo | None:
        return queries.get_run(self.engine, run_id)

    def find_runs(self, wanted: RunQuery = RunQuery(), *, limit: int | None = None, with_documents: bool = False,
                  counts: bool = True) -> list[RunInfo]:
        return queries.find_runs(self.engine, wanted, limit=limit, with_documents=with_documents, counts=counts)

    def document_runs_for(self, run_id: str, limit: int | None = None) -> list[DocumentRunInfo]:
        return queries.document_runs_for(self.engine, run_id, limit)

    def latest_document_run(self, ref: str | int) -> DocumentRunInfo | None:
        return queries.latest_document_run(self.engine, ref)

    def find_document_runs(self, *, ids: Iterable[int] | None = None, run_ids: Iterable[str] | None = None,
                           states: Iterable[str] | None = None, sha_prefix: str | None = None,
                           same_file_name: str | None = None) -> list[DocumentRunInfo]:
        return queries.find_document_runs(self.engine, ids=ids, run_ids=run_ids, states=states, sha_prefix=sha_prefix,
                                          same_file_name=same_file_name)

    def undecided_document_runs(self, states: Iterable[str], run_ids: Iterable[str] | None = None,
                                owner: str | None = None) -> list[DocumentRunInfo]:
        return queries.undecided_document_runs(self.engine, states, run_ids, owner)

    def findings_of_attempts(self, attempt_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
        return queries.findings_of_attempts(self.engine, attempt_ids)

    def attempt_findings_for_runs(self, run_ids: Iterable[str]) -> list[AttemptFindings]:
        return queries.attempt_findings_for_runs(self.engine, run_ids)

    def spend(self, *, run_ids: Iterable[str] | None = None,
              document_run_ids: Iterable[int] | None = None) -> list[queries.SpendRow]:
        return queries.spend(self.engine, run_ids=run_ids, document_run_ids=document_run_ids)

    # -- judge calibrations (extractor.store.calibrations) --------------------------------------------------

    def save_calibration(self, report: CalibrationReport) -> int:
        return calibrations.save_calibration(self.engine, report)

    def calibrations(self, *, judge_model: str | None = None, rubric_version: str | None = None,
                     limit: int | None = 50) -> list[CalibrationInfo]:
        return calibrations.calibrations(self.engine, judge_model=judge_model, rubric_version=rubric_version,
                                         limit=limit)

    def get_calibration(self, calibration_id: int) -> CalibrationInfo | None:
        return calibrations.get_calibration(self.engine, calibration_id)

    def latest_calibration(self, judge_model: str, rubric_version: str, threshold: float) -> CalibrationInfo | None:
        return calibrations.latest_calibration(self.engine, judge_model, rubric_version, threshold)

    # -- evaluations against gold (extractor.store.evaluations, ``extract eval``) ------------------------------

    def save_evaluation(self, evaluation: NewEvaluation) -> int:
        return evaluations.save_evaluation(self.engine, evaluation)

    def latest_evaluations(self, run_ids: Sequence[str]) -> dict[str, EvaluationInfo]:
        return evaluations.latest_for_runs(self.engine, run_ids)

    def final_candidates(self, attempt_ids: Iterable[int]) -> dict[int, FinalCandidate]:
        return evaluations.final_candidates(self.engine, attempt_ids)

    def sentences_of(self, document_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
        return evaluations.sentences_of(self.engine, document_ids)

    # -- integrity (extractor.store.integrity, ``extract doctor``) -------------------------------------------

    def problems(self) -> list[integrity.Problem]:
        """Every problem in the whole log (not recorded as a check: ``doctor`` is)."""
        return integrity.problems(self.engine)

    def doctor(self, *, full: bool = False, progress: integrity.Progress | None = None) -> integrity.Doctored:
        return integrity.doctor(self.engine, full=full, progress=progress)

    def integrity_check(self) -> list[str]:
        """Problems in the run log, one line each; an empty list means healthy."""
        return [problem.message for problem in self.problems()]


def open_store(url: str | None = None, *, create: bool = True, reads_only: bool = False,
               stale_after_s: float = STALE_AFTER_S) -> Store:
    """Open the run log at ``url`` (else ``EXTRACT_DATABASE_URL``, else ./extract.db), upgrading its schema.

    Raises ``StoreError`` (one line, password hidden) when the database cannot be reached or migrated,
    was written by a newer extractor, or (``create=False``, for commands that only read or review) is an
    SQLite file that does not exist: opening it would leave an empty run log behind. An SQLite file in a folder
    this process may not write is opened read-only for a command that ``reads_only`` (``Store.read_only`` names
    the folder); for any other command that is a ``StoreError`` saying so, before anything is done.
    """
    if not create:
        missing = missing_sqlite_file(url)
        if missing is not None:
            raise StoreError(f"no run log at {missing}: run `extract run` first, or point --database / "
                             "EXTRACT_DATABASE_URL at one")
    folder = read_only_folder(url)
    if folder is not None and not (reads_only and not missing_sqlite_file(url)):
        raise StoreError(f"{folder} is read-only: the run log {sqlite_file(url)} cannot be written there; run in a "
                         "folder you can write to, or point --database / EXTRACT_DATABASE_URL at one elsewhere")
    engine = create_store_engine(url, read_only=folder is not None)
    try:
        upgrade_schema(engine, read_only=folder is not None)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, stale_after_s=stale_after_s, read_only=folder)
