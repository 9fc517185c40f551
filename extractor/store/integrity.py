"""Invariants of the run log, checked by ``extract doctor``: one query (or probe) per invariant, one line per problem.

A healthy log has none. The checks find what the store's own transactions never produce but a crash
during a foreign tool's write, a manual edit, writes with foreign keys off or a damaged file could:
claims that disagree with their document runs, dangling references, runs that died without saying so,
requests that no longer reassemble to what was sent.

Every check reads either the whole log or a ``Scope``: what changed since the last clean check (docs/runs.md,
"Checking a run log"). A scope holds the runs that were alive since then (running now, or started, heartbeating
or finished after it, or owning document runs or attempts written after it) and the reviews and evaluations
recorded after it; each check reads the rows of those, and checks them exactly as it checks the whole log. What
it cannot see is an old row edited in place by another tool: ``extract doctor --full`` reads everything, and
SQLite's own check of the file runs only then. Each ``doctor`` run is recorded in ``integrity_checks`` with the
high-water marks (``Marks``) it started from.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Connection, Engine, Select, Table, Text, cast, func, insert, or_, select
from sqlalchemy.exc import SQLAlchemyError

from extractor.canonical import text_sha256
from extractor.errors import StoreError
from extractor.store import requests
from extractor.store.cells import CURRENT, record_cells
from extractor.store.db import safe_url, scrub, utcnow, write_connection
from extractor.store.runs import STALE_AFTER_S, pid_exists
from extractor.store.tables import (
    approved_records,
    attempts,
    claims,
    document_runs,
    evaluation_runs,
    evaluations,
    file_name,
    integrity_checks,
    metadata,
    request_parts,
    review_fields,
    reviews,
    runs,
    tasks,
)
from extractor.vocab import DocumentState, GateDecision, ReviewDecision, RunStatus, TaskState

AnySelect = Select[*tuple[Any, ...]]

CLOCK_SKEW_S = 300.0
"""How far the clocks of the machines writing one run log may disagree: a run counts as alive since the last
check if its heartbeat is less than this older than that check's start."""
MAX_SCOPED_RUNS = 10_000
"""More runs than this changed since the last clean check: the whole log is checked (a list of ids that long
costs more than reading everything)."""
ROWS_STEP = 5_000
"""Rows between two progress reports of a check that reads row by row."""


@dataclass(frozen=True)
class Problem:
    """One broken invariant: which check found it and the line that names the rows."""

    check: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "message": self.message}


@dataclass(frozen=True)
class Marks:
    """The largest id of each table whose rows are only ever added, when a check started: what lies above was
    written after it."""

    document_runs: int = 0
    attempts: int = 0
    reviews: int = 0
    evaluations: int = 0

    @classmethod
    def read(cls, connection: Connection) -> Marks:
        tables = (document_runs, attempts, reviews, evaluations)
        return cls(*(int(connection.execute(select(func.max(table.c.id))).scalar() or 0) for table in tables))

    def to_json(self) -> dict[str, int]:
        return {"document_runs": self.document_runs, "attempts": self.attempts, "reviews": self.reviews,
                "evaluations": self.evaluations}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Marks:
        return cls(**{name: int(data.get(name, 0)) for name in ("document_runs", "attempts", "reviews", "evaluations")})


@dataclass(frozen=True)
class Scope:
    """What changed since the check that started at ``since`` with ``marks``: the runs alive since then
    (``run_ids``), and the reviews and evaluations recorded after it."""

    since: datetime
    marks: Marks
    run_ids: tuple[str, ...]

    @classmethod
    def of(cls, connection: Connection, since: datetime, marks: Marks) -> Scope | None:
        """The scope of what changed since a check, or None when that is too much to list (check everything)."""
        alive = since - timedelta(seconds=CLOCK_SKEW_S)
        found = set(connection.execute(select(runs.c.id).where(or_(
            runs.c.status == RunStatus.running, runs.c.started_at >= alive, runs.c.heartbeat_at >= alive,
            runs.c.finished_at >= alive))).scalars())
        # the rows above the marks, deduplicated here: SQLite answers a DISTINCT run_id by reading all of the
        # run_id index (in run id order) rather than the few rows above the mark
        found.update(connection.execute(select(document_runs.c.run_id).where(
            document_runs.c.id > marks.document_runs)).scalars())
        found.update(connection.execute(select(attempts.c.run_id).where(attempts.c.id > marks.attempts)).scalars())
        if len(found) > MAX_SCOPED_RUNS:
            return None
        return cls(since, marks, tuple(sorted(found)))

    def runs(self, column: Any) -> ColumnElement[bool]:
        """``column`` (a run id) names a run in scope."""
        return column.in_(self.run_ids)  # type: ignore[no-any-return]

    def reviewed(self) -> Any:
        """The document runs that got a decision since."""
        return select(reviews.c.document_run_id).where(reviews.c.id > self.marks.reviews)

    def document_runs(self) -> ColumnElement[bool]:
        """A document run of a run in scope, or one decided since: one ``IN`` of a union, which both databases
        answer from the indexes of its two parts (an ``OR`` of the two made PostgreSQL read every document run)."""
        of_runs = document_runs.alias("in_scope")
        return document_runs.c.id.in_(select(of_runs.c.id).where(self.runs(of_runs.c.run_id)).union(self.reviewed()))

    def counts(self, connection: Connection) -> dict[str, int]:
        """How much the scope holds: runs, and reviews and evaluations recorded since."""
        return {"runs": len(self.run_ids),
                "reviews": int(connection.execute(select(func.count()).where(reviews.c.id > self.marks.reviews)).scalar() or 0),
                "evaluations": int(connection.execute(
                    select(func.count()).where(evaluations.c.id > self.marks.evaluations)).scalar() or 0)}


def _rows_of(table: Table, scope: Scope) -> ColumnElement[bool] | None:
    """Which rows of ``table`` a scoped check reads (None: every row, for a table this module does not know)."""
    return {
        "document_runs": scope.document_runs,
        "claims": lambda: scope.runs(claims.c.run_id),
        "attempts": lambda: scope.runs(attempts.c.run_id),
        "reviews": lambda: reviews.c.document_run_id.in_(scope.reviewed()),
        "review_fields": lambda: review_fields.c.review_id > scope.marks.reviews,
        "tasks": lambda: or_(scope.runs(tasks.c.run_id), tasks.c.state != TaskState.finished),
        "evaluation_runs": lambda: evaluation_runs.c.evaluation_id > scope.marks.evaluations,
        "approved_records": lambda: approved_records.c.approved_at >= scope.since - timedelta(seconds=CLOCK_SKEW_S),
    }.get(table.name, lambda: None)()


class Progress(Protocol):
    """Where a check reports how far it is (``extract doctor --full`` draws it)."""

    def check(self, name: str, number: int, of: int) -> None:
        """Check ``name`` (``number`` of ``of``) starts."""

    def rows(self, done: int, total: int | None) -> None:
        """A check reading row by row has read ``done`` of ``total`` rows (None: not counted)."""


class Silent:
    """No progress shown."""

    def check(self, name: str, number: int, of: int) -> None:
        return None

    def rows(self, done: int, total: int | None) -> None:
        return None


@dataclass(frozen=True)
class Reading:
    """What one check is given: the connection, what to read (None: everything) and where to report progress."""

    connection: Connection
    scope: Scope | None
    progress: Progress = field(default_factory=Silent)

    def where(self, query: AnySelect, table: Table) -> AnySelect:
        """``query`` limited to the scope's rows of ``table``."""
        if self.scope is None:
            return query
        condition = _rows_of(table, self.scope)
        return query if condition is None else query.where(condition)

    def counted(self, rows: Iterable[Any], total_query: AnySelect | None = None) -> Iterator[Any]:
        """``rows``, reporting progress every ``ROWS_STEP`` (of the count ``total_query`` gives, if one)."""
        total = None if total_query is None else int(self.connection.execute(total_query).scalar() or 0)
        done = 0
        for row in rows:
            yield row
            done += 1
            if done % ROWS_STEP == 0:
                self.progress.rows(done, total)


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    run: Callable[[Reading], Iterator[str]]


def _rows(query: Callable[[Reading], AnySelect], message: str) -> Callable[[Reading], Iterator[str]]:
    """A check made of one query selecting the rows that break the invariant, and the message naming each."""

    def run(reading: Reading) -> Iterator[str]:
        for row in reading.connection.execute(query(reading)):
            yield message.format(**row._mapping)

    return run


def _claims_agree(reading: Reading) -> AnySelect:
    return reading.where(
        select(claims.c.config_hash, claims.c.document_id, claims.c.state, document_runs.c.id, document_runs.c.state.label("dr"))
        .join(document_runs, document_runs.c.id == claims.c.document_run_id)
        .where(or_(document_runs.c.run_id != claims.c.run_id, document_runs.c.document_id != claims.c.document_id,
                   document_runs.c.config_hash != claims.c.config_hash, document_runs.c.state != claims.c.state)),
        claims)


def _final_attempt_owned(reading: Reading) -> AnySelect:
    final = attempts.alias()
    return reading.where(
        select(document_runs.c.id, document_runs.c.final_attempt_id, final.c.document_run_id.label("owner"))
        .join(final, final.c.id == document_runs.c.final_attempt_id)
        .where(final.c.document_run_id != document_runs.c.id),
        document_runs)


def _outcome_too_good(reading: Reading) -> AnySelect:
    """Runs whose stored outcome is better than a document run of theirs allows (``run_outcome``)."""
    too_good = or_(
        (document_runs.c.state == DocumentState.BLOCKED) & (runs.c.outcome != GateDecision.BLOCK),
        document_runs.c.state.in_((DocumentState.MANUAL_REVIEW, DocumentState.ERROR)) & (runs.c.outcome == GateDecision.PROMOTE),
    )
    query = (select(runs.c.id, runs.c.outcome, func.min(document_runs.c.state).label("state"))
             .join(document_runs, document_runs.c.run_id == runs.c.id)
             .where(runs.c.outcome.is_not(None), too_good)
             .group_by(runs.c.id, runs.c.outcome))
    return query if reading.scope is None else query.where(reading.scope.runs(runs.c.id))


def _dead_runs(reading: Reading) -> Iterator[str]:
    """Runs still marked running whose process is gone (this machine) or that stopped sending heartbeats (always
    every such run: they are few, and a scope holds them all)."""
    stale = utcnow() - timedelta(seconds=STALE_AFTER_S)
    here = socket.gethostname()
    rows = reading.connection.execute(
        select(runs.c.id, runs.c.host, runs.c.pid, runs.c.heartbeat_at).where(runs.c.status == RunStatus.running)
        .order_by(runs.c.id)
    )
    for run_id, host, pid, heartbeat_at in rows:
        if host == here and pid != os.getpid() and not pid_exists(pid):
            yield (f"run {run_id} is marked running but its process {pid} is gone "
                   "(the next `extract run` marks it crashed and redoes its documents)")
        elif heartbeat_at < stale:
            yield (f"run {run_id} on {host} is marked running but sent no heartbeat since "
                   f"{heartbeat_at:%Y-%m-%d %H:%M:%S} UTC (its documents are taken over by the next run)")


def _parts_match_their_names(reading: Reading) -> Iterator[str]:
    """A request part is named by the sha256 of its content; another hash means it was edited or damaged."""
    parts = select(request_parts.c.sha256, request_parts.c.content).order_by(request_parts.c.sha256)
    if reading.scope is not None:  # the parts the scope's attempts were sent with
        parts = parts.where(request_parts.c.sha256.in_(
            select(attempts.c.request_part).where(reading.scope.runs(attempts.c.run_id)).distinct()))
    for name, content in reading.connection.execute(parts):
        if text_sha256(content) != name:
            yield f"request part {name:.12}: its content no longer hashes to its name (edited or damaged)"


def _requests_read_back(reading: Reading) -> Iterator[str]:
    """Every attempt's request joins back together and has the fingerprint recorded when it was sent."""
    connection = reading.connection
    parts = {name: content for name, content in connection.execute(select(request_parts.c.sha256, request_parts.c.content))}
    rows = connection.execution_options(yield_per=2000).execute(reading.where(
        select(attempts.c.id, attempts.c.request, attempts.c.request_part, attempts.c.request_hash).order_by(attempts.c.id),
        attempts))
    total = reading.where(select(func.count()).select_from(attempts), attempts)
    for attempt_id, own, part, recorded in reading.counted(rows, total):
        if part is not None and part not in parts:
            continue  # a dangling reference: the request_part check names it
        try:
            sent = requests.fingerprint(parts.get(part), own, f"attempt {attempt_id}")
        except StoreError as error:
            yield str(error)
            continue
        except (KeyError, TypeError, ValueError) as error:
            yield f"attempt {attempt_id}: its request cannot be read as a request ({type(error).__name__}: {error})"
            continue
        if sent != recorded:
            yield (f"attempt {attempt_id}: its request reads back with fingerprint {sent:.12}, not the {recorded:.12} "
                   "recorded when it was sent")


def _decided_marks(reading: Reading) -> Iterator[str]:
    """``document_runs.decided`` is what the review queue reads: it must say whether a review exists."""
    reviewed = select(reviews.c.id).where(reviews.c.document_run_id == document_runs.c.id).exists()
    query = reading.where(select(document_runs.c.id, document_runs.c.decided).where(document_runs.c.decided != reviewed)
                          .order_by(document_runs.c.id), document_runs)
    for document_run_id, decided in reading.connection.execute(query):
        yield (f"document run {document_run_id} is marked decided but has no review" if decided else
               f"document run {document_run_id} has a review but is not marked decided (the review queue lists it)")


def _names_match_paths(reading: Reading) -> Iterator[str]:
    """``document_runs.name`` is what ``extract show PATH`` looks up: the file name of the path."""
    query = reading.where(select(document_runs.c.id, document_runs.c.path, document_runs.c.name)
                          .order_by(document_runs.c.id), document_runs)
    total = reading.where(select(func.count()).select_from(document_runs), document_runs)
    for document_run_id, path, name in reading.counted(reading.connection.execution_options(yield_per=5000)
                                                       .execute(query), total):
        if name != file_name(path):
            yield (f"document run {document_run_id}: its name {name!r} is not the file name of its path {path!r} "
                   "(`extract show PATH` does not find it)")


def _record_cells_match(reading: Reading) -> Iterator[str]:
    """The CSV cells an approval stored (``extractor.store.cells.record_cells``) are made again from the record and
    its evidence spans as stored: a record edited in place by another tool would otherwise be exported, as CSV,
    with the cells of what it was. Cells of another version are not used, so not checked."""
    query = reading.where(select(approved_records.c.id, cast(approved_records.c.record, Text),
                                 cast(approved_records.c.evidence_spans, Text), approved_records.c.record_cells)
                          .where(approved_records.c.record_cells.is_not(None))
                          .order_by(approved_records.c.approved_at, approved_records.c.id),
                          approved_records)
    total = reading.where(select(func.count()).select_from(approved_records)
                          .where(approved_records.c.record_cells.is_not(None)), approved_records)
    for record_id, record, evidence, cells in reading.counted(reading.connection.execution_options(yield_per=1000)
                                                              .execute(query), total):
        if cells.startswith(CURRENT) and cells != record_cells(record, evidence):
            yield (f"approved record {record_id}: its stored CSV cells are not those of its record (a CSV export "
                   "would write them); set its record_cells to NULL and export makes them from the record")


def _decisions_recorded(reading: Reading) -> Iterator[str]:
    """What ``stats --corrections`` counts: each decided document run has one current review, its newest; a
    review names its document run's run; an approval's ``changes`` and ``review_fields`` say what its
    ``changed_fields`` say (fields only while it is current)."""
    connection = reading.connection
    query = reading.where(
        select(reviews.c.id, reviews.c.document_run_id, reviews.c.decision, reviews.c.current, reviews.c.changes,
               reviews.c.changed_fields, reviews.c.run_id, document_runs.c.run_id.label("own_run"))
        .outerjoin(document_runs, document_runs.c.id == reviews.c.document_run_id)
        .order_by(reviews.c.document_run_id, reviews.c.created_at, reviews.c.id), reviews)
    fields_query = select(review_fields.c.review_id, review_fields.c.field_path)
    if reading.scope is not None:
        fields_query = fields_query.where(review_fields.c.review_id.in_(
            select(reviews.c.id).where(reviews.c.document_run_id.in_(reading.scope.reviewed()))))
    recorded: dict[int, set[str]] = {}
    for review_id, path in connection.execution_options(yield_per=5000).execute(fields_query):
        recorded.setdefault(review_id, set()).add(path)
    total = reading.where(select(func.count()).select_from(reviews), reviews)
    rows = reading.counted(connection.execution_options(yield_per=5000).execute(query), total)
    for document_run_id, decisions in _by_document_run(rows):
        current = [row.id for row in decisions if row.current]
        if current != [decisions[-1].id]:
            yield (f"document run {document_run_id}: its newest decision is review {decisions[-1].id}, but the "
                   f"current one is {', '.join(map(str, current)) or 'none'}")
        for row in decisions:
            yield from _decision_problems(row, recorded.get(row.id, set()))


def _by_document_run(rows: Iterable[Any]) -> Iterator[tuple[int, list[Any]]]:
    """Rows ordered by document run, grouped per document run (oldest decision first)."""
    group: list[Any] = []
    for row in rows:
        if group and row.document_run_id != group[0].document_run_id:
            yield group[0].document_run_id, group
            group = []
        group.append(row)
    if group:
        yield group[0].document_run_id, group


def _decision_problems(row: Any, fields: set[str]) -> Iterator[str]:
    if row.own_run is not None and row.run_id != row.own_run:
        yield f"review {row.id} names run {row.run_id}, but its document run {row.document_run_id} is of run {row.own_run}"
    changed = set(row.changed_fields) if isinstance(row.changed_fields, list) else None
    approval = row.decision == ReviewDecision.approved
    expected = len(changed) if approval and changed is not None else None
    if row.changes != expected:
        yield f"review {row.id} records {row.changes} changed field(s), its changed fields say {expected}"
    wanted = changed if approval and row.current and changed else set()
    if fields != wanted:
        yield (f"review {row.id}: its recorded field paths ({', '.join(sorted(fields)) or 'none'}) are not the ones "
               f"it changed ({', '.join(sorted(wanted)) or 'none'}{'' if row.current else ': not current'})")


def _sqlite_file(reading: Reading) -> Iterator[str]:
    """SQLite's own check of the file: pages, and every index against its table (``PRAGMA integrity_check``).
    It reads the whole file: only a full check runs it."""
    if reading.connection.dialect.name != "sqlite" or reading.scope is not None:
        return
    for (line,) in reading.connection.exec_driver_sql("PRAGMA integrity_check"):
        if line != "ok":
            yield f"SQLite integrity check: {line}"


def _dangling_references() -> list[Check]:
    """One check per foreign key: impossible while keys are enforced, so a hit reveals a write made without."""
    checks = []
    for table in metadata.sorted_tables:
        keys = [column.label(f"key{i}") for i, column in enumerate(table.primary_key.columns)]
        row = "/".join(f"{{key{i}}}" for i in range(len(keys)))
        for foreign in sorted(table.foreign_keys, key=lambda f: f.parent.name):
            target = foreign.column.table.name

            def query(reading: Reading, table: Table = table, keys: list[Any] = keys, foreign: Any = foreign) -> AnySelect:
                return reading.where(
                    select(*keys, foreign.parent.label("value"))
                    .select_from(table.outerjoin(foreign.column.table, foreign.column == foreign.parent))
                    .where(foreign.parent.is_not(None), foreign.column.is_(None)), table)

            checks.append(Check(
                f"{table.name}.{foreign.parent.name}", f"every {table.name}.{foreign.parent.name} names an existing "
                f"{target} row",
                _rows(query, f"{table.name} {row}: {foreign.parent.name} {{value}} refers to a missing {target} row"),
            ))
    return checks


def checks() -> list[Check]:
    """Every check, in the order ``extract doctor`` runs them."""
    return [
        Check("database_file", "the SQLite file passes SQLite's own integrity check (with --full)", _sqlite_file),
        Check("claim_matches_document_run", "a claim names a document run of the same run, document, "
              "configuration and state", _rows(_claims_agree, "claim ({config_hash:.12}, document {document_id}) in "
                                               "{state} disagrees with document run {id} in {dr}")),
        Check("processing_run_is_running", "a PROCESSING document run belongs to a running run", _rows(
            lambda reading: reading.where(
                select(document_runs.c.id, document_runs.c.run_id, runs.c.status)
                .join(runs, runs.c.id == document_runs.c.run_id)
                .where(document_runs.c.state == DocumentState.PROCESSING, runs.c.status != RunStatus.running),
                document_runs),
            "document run {id} is PROCESSING but its run {run_id} is {status}")),
        Check("running_run_is_alive", "a run marked running has a process or recent heartbeats", _dead_runs),
        Check("final_attempt_owned", "a document run's final attempt is one of its own attempts", _rows(
            _final_attempt_owned,
            "document run {id}: final attempt {final_attempt_id} belongs to document run {owner}")),
        Check("final_attempt_unique", "an attempt is the final attempt of at most one document run", _rows(
            lambda reading: reading.where(
                select(document_runs.c.final_attempt_id, func.count().label("count"))
                .where(document_runs.c.final_attempt_id.is_not(None)), document_runs)
            .group_by(document_runs.c.final_attempt_id)
            .having(func.count() > 1),
            "attempt {final_attempt_id} is the final attempt of {count} document runs")),
        Check("ready_has_final_attempt", "a READY_FOR_REVIEW document run has a final attempt", _rows(
            lambda reading: reading.where(select(document_runs.c.id).where(
                document_runs.c.state == DocumentState.READY_FOR_REVIEW, document_runs.c.final_attempt_id.is_(None)),
                document_runs),
            "document run {id} is READY_FOR_REVIEW without a final attempt")),
        Check("blocked_has_final_attempt", "a BLOCKED document run has the final attempt its block rests on", _rows(
            lambda reading: reading.where(select(document_runs.c.id).where(
                document_runs.c.state == DocumentState.BLOCKED, document_runs.c.final_attempt_id.is_(None)),
                document_runs),
            "document run {id} is BLOCKED without a final attempt")),
        Check("blocked_approval_has_override", "an approval of a BLOCKED document run records its block override",
              _rows(lambda reading: reading.where(
                  select(reviews.c.id, reviews.c.document_run_id)
                  .join(document_runs, document_runs.c.id == reviews.c.document_run_id)
                  .where(document_runs.c.state == DocumentState.BLOCKED, reviews.c.decision == ReviewDecision.approved,
                         reviews.c.block_override.is_(None)), reviews),
                    "review {id} approved BLOCKED document run {document_run_id} without a recorded override")),
        Check("run_outcome_matches_documents", "a run's outcome is no better than its documents allow (any BLOCKED "
              "makes it BLOCK; MANUAL_REVIEW or ERROR rule out PROMOTE)", _rows(_outcome_too_good,
              "run {id} has outcome {outcome} but a document run in {state}")),
        Check("decided_matches_reviews", "a document run is marked decided exactly when it has a review",
              _decided_marks),
        Check("decisions_recorded", "a document run's newest review is its one current decision, with its run and "
              "the field paths it changed as stats --corrections counts them", _decisions_recorded),
        Check("record_cells_match", "an approved record's stored CSV cells are its record's (a CSV export writes "
              "them)", _record_cells_match),
        Check("name_matches_path", "a document run's name is the file name of its path (what show PATH looks up)",
              _names_match_paths),
        Check("request_part_named_by_content", "a request part's content hashes to its name",
              _parts_match_their_names),
        Check("request_reads_back", "an attempt's request joins back together with the fingerprint it was sent "
              "with", _requests_read_back),
        Check("attempt_matches_document_run", "an attempt has its document run's run and document", _rows(
            lambda reading: reading.where(
                select(attempts.c.id, attempts.c.document_run_id)
                .join(document_runs, document_runs.c.id == attempts.c.document_run_id)
                .where(or_(attempts.c.run_id != document_runs.c.run_id,
                           attempts.c.document_id != document_runs.c.document_id)), attempts),
            "attempt {id} disagrees with its document run {document_run_id} on run or document")),
        Check("reused_answer_matches", "a reused window answer is an earlier answer to the same request for the "
              "same document", _reused_answers_differ),
        *_dangling_references(),
    ]


def _reused_answers_differ(reading: Reading) -> Iterator[str]:
    """Attempts whose ``reused_from`` names no attempt of the same document, request and answer.

    Answers are compared as text, read back through their column type: SQLite keeps long ones compressed,
    and two zlib builds may compress the same answer to different bytes.
    """
    earlier = attempts.alias()
    query = reading.where(
        select(attempts.c.id, attempts.c.reused_from, attempts.c.document_id, attempts.c.request_hash, attempts.c.raw_response,
               earlier.c.id.label("earlier_id"), earlier.c.document_id.label("earlier_document"),
               earlier.c.request_hash.label("earlier_request"), earlier.c.raw_response.label("earlier_response"))
        .outerjoin(earlier, earlier.c.id == attempts.c.reused_from)
        .where(attempts.c.reused_from.is_not(None), or_(
            earlier.c.id.is_(None), earlier.c.document_id != attempts.c.document_id,
            earlier.c.request_hash != attempts.c.request_hash, earlier.c.raw_response != attempts.c.raw_response)),
        attempts)
    for row in reading.connection.execute(query):
        if (row.earlier_id, row.earlier_document, row.earlier_request, row.earlier_response) != (
                row.reused_from, row.document_id, row.request_hash, row.raw_response):
            yield (f"attempt {row.id} reuses attempt {row.reused_from}, which is not the same request's answer "
                   f"for document {row.document_id}")


def problems(engine: Engine, scope: Scope | None = None, progress: Progress | None = None) -> list[Problem]:
    """Every problem found in the whole log (or in ``scope``), in check order; an empty list means healthy.

    A check the database cannot even answer (a damaged file, a missing table) raises ``StoreError``.
    """
    found: list[Problem] = []
    every = checks()
    with engine.connect() as connection:
        reading = Reading(connection, scope, progress or Silent())
        for number, check in enumerate(every, start=1):
            reading.progress.check(check.name, number, len(every))
            try:
                found.extend(Problem(check.name, message) for message in check.run(reading))
            except SQLAlchemyError as error:
                raise StoreError(f"cannot check {safe_url(engine)} ({check.name}): {scrub(engine, str(error))}") from None
    return found


@dataclass(frozen=True)
class Doctored:
    """One ``extract doctor``: what it found, and what it read (``scope`` None: the whole log)."""

    problems: list[Problem]
    scope: Scope | None
    counts: dict[str, int]
    """How much the scope held (``Scope.counts``); empty for a full check."""
    last_full: datetime | None
    """When the newest full check before this one started (None: never, or this one is the first)."""
    recorded: str | None = None
    """Why this check could not be recorded (the next one then reads the same again), else None."""


def doctor(engine: Engine, *, full: bool = False, progress: Progress | None = None) -> Doctored:
    """Check what changed since the last clean check (the whole log with ``full``, or when there is no clean
    check newer than the newest full one that found problems: those problems are in rows a scope may not hold),
    and record the check with the marks it started from."""
    started = utcnow()
    with engine.connect() as connection:
        marks = Marks.read(connection)
        history = connection.execute(
            select(integrity_checks.c.started_at, integrity_checks.c.full, integrity_checks.c.problems,
                   integrity_checks.c.marks).order_by(integrity_checks.c.id.desc()).limit(1000)).all()
        base = None if full else _base(history)
        scope = None if base is None else Scope.of(connection, base.started_at, Marks.from_json(base.marks))
        counts = {} if scope is None else scope.counts(connection)
    last_full = next((row.started_at for row in history if row.full), None)
    found = problems(engine, scope, progress)
    try:
        with write_connection(engine) as connection:
            connection.execute(insert(integrity_checks).values(
                started_at=started, finished_at=utcnow(), full=scope is None, problems=len(found), marks=marks.to_json()))
    except SQLAlchemyError as error:
        return Doctored(found, scope, counts, last_full, scrub(engine, str(error)))
    return Doctored(found, scope, counts, last_full)


def _base(history: Sequence[Any]) -> Any:
    """The check a default ``doctor`` reads changes since: the newest clean one, unless a full check that found
    problems came after it (then nothing is: the whole log is read again)."""
    for row in history:
        if row.problems == 0:
            return row
        if row.full:
            return None
    return None
