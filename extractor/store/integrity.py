"""Invariants of the run log, checked by ``extract doctor``: one query (or probe) per invariant, one line per problem.

A healthy log has none. The checks find what the store's own transactions never produce but a crash
during a foreign tool's write, a manual edit, writes with foreign keys off or a damaged file could:
claims that disagree with their document runs, dangling references, runs that died without saying so,
requests that no longer reassemble to what was sent.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Select, func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from extractor.canonical import text_sha256
from extractor.errors import StoreError
from extractor.store import requests
from extractor.store.db import safe_url, scrub, utcnow
from extractor.store.runs import STALE_AFTER_S, pid_exists
from extractor.store.tables import attempts, claims, document_runs, metadata, request_parts, reviews, runs
from extractor.vocab import DocumentState, GateDecision, ReviewDecision, RunStatus

AnySelect = Select[*tuple[Any, ...]]


@dataclass(frozen=True)
class Problem:
    """One broken invariant: which check found it and the line that names the rows."""

    check: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"check": self.check, "message": self.message}


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    run: Callable[[Connection], Iterator[str]]


def _rows(query: AnySelect, message: str) -> Callable[[Connection], Iterator[str]]:
    """A check made of one query selecting the rows that break the invariant, and the message naming each."""

    def run(connection: Connection) -> Iterator[str]:
        for row in connection.execute(query):
            yield message.format(**row._mapping)

    return run


def _claims_agree() -> AnySelect:
    return (
        select(claims.c.config_hash, claims.c.document_id, claims.c.state, document_runs.c.id, document_runs.c.state.label("dr"))
        .join(document_runs, document_runs.c.id == claims.c.document_run_id)
        .where(or_(document_runs.c.run_id != claims.c.run_id, document_runs.c.document_id != claims.c.document_id,
                   document_runs.c.config_hash != claims.c.config_hash, document_runs.c.state != claims.c.state))
    )


def _final_attempt_owned() -> AnySelect:
    final = attempts.alias()
    return (
        select(document_runs.c.id, document_runs.c.final_attempt_id, final.c.document_run_id.label("owner"))
        .join(final, final.c.id == document_runs.c.final_attempt_id)
        .where(final.c.document_run_id != document_runs.c.id)
    )


def _outcome_too_good() -> AnySelect:
    """Runs whose stored outcome is better than a document run of theirs allows (``run_outcome``)."""
    too_good = or_(
        (document_runs.c.state == DocumentState.BLOCKED) & (runs.c.outcome != GateDecision.BLOCK),
        document_runs.c.state.in_((DocumentState.MANUAL_REVIEW, DocumentState.ERROR)) & (runs.c.outcome == GateDecision.PROMOTE),
    )
    return (select(runs.c.id, runs.c.outcome, func.min(document_runs.c.state).label("state"))
            .join(document_runs, document_runs.c.run_id == runs.c.id)
            .where(runs.c.outcome.is_not(None), too_good)
            .group_by(runs.c.id, runs.c.outcome))


def _dead_runs(connection: Connection) -> Iterator[str]:
    """Runs still marked running whose process is gone (this machine) or that stopped sending heartbeats."""
    stale = utcnow() - timedelta(seconds=STALE_AFTER_S)
    here = socket.gethostname()
    rows = connection.execute(
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


def _parts_match_their_names(connection: Connection) -> Iterator[str]:
    """A request part is named by the sha256 of its content; another hash means it was edited or damaged."""
    parts = select(request_parts.c.sha256, request_parts.c.content).order_by(request_parts.c.sha256)
    for name, content in connection.execute(parts):
        if text_sha256(content) != name:
            yield f"request part {name:.12}: its content no longer hashes to its name (edited or damaged)"


def _requests_read_back(connection: Connection) -> Iterator[str]:
    """Every attempt's request joins back together and has the fingerprint recorded when it was sent."""
    parts = {name: content for name, content in connection.execute(select(request_parts.c.sha256, request_parts.c.content))}
    rows = connection.execution_options(yield_per=2000).execute(
        select(attempts.c.id, attempts.c.request, attempts.c.request_part, attempts.c.request_hash).order_by(attempts.c.id))
    for attempt_id, own, part, recorded in rows:
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


def _decided_marks(connection: Connection) -> Iterator[str]:
    """``document_runs.decided`` is what the review queue reads: it must say whether a review exists."""
    reviewed = select(reviews.c.id).where(reviews.c.document_run_id == document_runs.c.id).exists()
    query = (select(document_runs.c.id, document_runs.c.decided).where(document_runs.c.decided != reviewed)
             .order_by(document_runs.c.id))
    for document_run_id, decided in connection.execute(query):
        yield (f"document run {document_run_id} is marked decided but has no review" if decided else
               f"document run {document_run_id} has a review but is not marked decided (the review queue lists it)")


def _sqlite_file(connection: Connection) -> Iterator[str]:
    """SQLite's own check of the file: pages, and every index against its table (``PRAGMA integrity_check``)."""
    if connection.dialect.name != "sqlite":
        return
    for (line,) in connection.exec_driver_sql("PRAGMA integrity_check"):
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
            query = (
                select(*keys, foreign.parent.label("value"))
                .select_from(table.outerjoin(foreign.column.table, foreign.column == foreign.parent))
                .where(foreign.parent.is_not(None), foreign.column.is_(None))
            )
            checks.append(Check(
                f"{table.name}.{foreign.parent.name}", f"every {table.name}.{foreign.parent.name} names an existing "
                f"{target} row",
                _rows(query, f"{table.name} {row}: {foreign.parent.name} {{value}} refers to a missing {target} row"),
            ))
    return checks


def checks() -> list[Check]:
    """Every check, in the order ``extract doctor`` runs them."""
    return [
        Check("database_file", "the SQLite file passes SQLite's own integrity check", _sqlite_file),
        Check("claim_matches_document_run", "a claim names a document run of the same run, document, "
              "configuration and state", _rows(_claims_agree(), "claim ({config_hash:.12}, document {document_id}) in "
                                               "{state} disagrees with document run {id} in {dr}")),
        Check("processing_run_is_running", "a PROCESSING document run belongs to a running run", _rows(
            select(document_runs.c.id, document_runs.c.run_id, runs.c.status)
            .join(runs, runs.c.id == document_runs.c.run_id)
            .where(document_runs.c.state == DocumentState.PROCESSING, runs.c.status != RunStatus.running),
            "document run {id} is PROCESSING but its run {run_id} is {status}")),
        Check("running_run_is_alive", "a run marked running has a process or recent heartbeats", _dead_runs),
        Check("final_attempt_owned", "a document run's final attempt is one of its own attempts", _rows(
            _final_attempt_owned(),
            "document run {id}: final attempt {final_attempt_id} belongs to document run {owner}")),
        Check("final_attempt_unique", "an attempt is the final attempt of at most one document run", _rows(
            select(document_runs.c.final_attempt_id, func.count().label("count"))
            .where(document_runs.c.final_attempt_id.is_not(None))
            .group_by(document_runs.c.final_attempt_id)
            .having(func.count() > 1),
            "attempt {final_attempt_id} is the final attempt of {count} document runs")),
        Check("ready_has_final_attempt", "a READY_FOR_REVIEW document run has a final attempt", _rows(
            select(document_runs.c.id).where(
                document_runs.c.state == DocumentState.READY_FOR_REVIEW, document_runs.c.final_attempt_id.is_(None)),
            "document run {id} is READY_FOR_REVIEW without a final attempt")),
        Check("blocked_has_final_attempt", "a BLOCKED document run has the final attempt its block rests on", _rows(
            select(document_runs.c.id).where(
                document_runs.c.state == DocumentState.BLOCKED, document_runs.c.final_attempt_id.is_(None)),
            "document run {id} is BLOCKED without a final attempt")),
        Check("blocked_approval_has_override", "an approval of a BLOCKED document run records its block override",
              _rows(select(reviews.c.id, reviews.c.document_run_id)
                    .join(document_runs, document_runs.c.id == reviews.c.document_run_id)
                    .where(document_runs.c.state == DocumentState.BLOCKED, reviews.c.decision == ReviewDecision.approved,
                           reviews.c.block_override.is_(None)),
                    "review {id} approved BLOCKED document run {document_run_id} without a recorded override")),
        Check("run_outcome_matches_documents", "a run's outcome is no better than its documents allow (any BLOCKED "
              "makes it BLOCK; MANUAL_REVIEW or ERROR rule out PROMOTE)", _rows(_outcome_too_good(),
              "run {id} has outcome {outcome} but a document run in {state}")),
        Check("decided_matches_reviews", "a document run is marked decided exactly when it has a review",
              _decided_marks),
        Check("request_part_named_by_content", "a request part's content hashes to its name",
              _parts_match_their_names),
        Check("request_reads_back", "an attempt's request joins back together with the fingerprint it was sent "
              "with", _requests_read_back),
        Check("attempt_matches_document_run", "an attempt has its document run's run and document", _rows(
            select(attempts.c.id, attempts.c.document_run_id)
            .join(document_runs, document_runs.c.id == attempts.c.document_run_id)
            .where(or_(attempts.c.run_id != document_runs.c.run_id, attempts.c.document_id != document_runs.c.document_id)),
            "attempt {id} disagrees with its document run {document_run_id} on run or document")),
        Check("reused_answer_matches", "a reused window answer is an earlier answer to the same request for the "
              "same document", _reused_answers_differ),
        *_dangling_references(),
    ]


def _reused_answers_differ(connection: Connection) -> Iterator[str]:
    """Attempts whose ``reused_from`` names no attempt of the same document, request and answer.

    Answers are compared as text, read back through their column type: SQLite keeps long ones compressed,
    and two zlib builds may compress the same answer to different bytes.
    """
    earlier = attempts.alias()
    query = (
        select(attempts.c.id, attempts.c.reused_from, attempts.c.document_id, attempts.c.request_hash, attempts.c.raw_response,
               earlier.c.id.label("earlier_id"), earlier.c.document_id.label("earlier_document"),
               earlier.c.request_hash.label("earlier_request"), earlier.c.raw_response.label("earlier_response"))
        .outerjoin(earlier, earlier.c.id == attempts.c.reused_from)
        .where(attempts.c.reused_from.is_not(None), or_(
            earlier.c.id.is_(None), earlier.c.document_id != attempts.c.document_id,
            earlier.c.request_hash != attempts.c.request_hash, earlier.c.raw_response != attempts.c.raw_response))
    )
    for row in connection.execute(query):
        if (row.earlier_id, row.earlier_document, row.earlier_request, row.earlier_response) != (
                row.reused_from, row.document_id, row.request_hash, row.raw_response):
            yield (f"attempt {row.id} reuses attempt {row.reused_from}, which is not the same request's answer "
                   f"for document {row.document_id}")


def problems(engine: Engine) -> list[Problem]:
    """Every problem found, in check order; an empty list means healthy.

    A check the database cannot even answer (a damaged file, a missing table) raises ``StoreError``.
    """
    found: list[Problem] = []
    with engine.connect() as connection:
        for check in checks():
            try:
                found.extend(Problem(check.name, message) for message in check.run(connection))
            except SQLAlchemyError as error:
                raise StoreError(f"cannot check {safe_url(engine)} ({check.name}): {scrub(engine, str(error))}") from None
    return found
