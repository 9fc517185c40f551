"""Read-only queries for ``extract show``, ``review``, ``runs``, ``stats`` and ``compare``.

They select only the columns they need (never requests or responses in bulk) and are scoped to the runs
a command selected, so they stay as fast with a large run log as with a small one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, and_, func, or_, select, text
from sqlalchemy.orm import Session, aliased

from extractor.store.db import plain, transaction
from extractor.store.info import DocumentRunInfo, RunInfo
from extractor.store.models import Attempt, Document, DocumentRun, Run, waiting

AttemptFindings = tuple[str, int, int, str, int, str, list[dict[str, Any]]]
"""``(run_id, document_run_id, attempt_id, kind, number, outcome, findings)``."""


def get_run(engine: Engine, run_id: str) -> RunInfo | None:
    with transaction(engine, write=False) as session:
        run = session.get(Run, run_id)
        if run is None:
            return None
        return plain(RunInfo, run, counts=_state_counts(session, [run_id])[run_id],
                     decided=_decided_counts(session, [run_id]).get(run_id, 0))


def find_runs(
    engine: Engine,
    *,
    ids: Iterable[str] | None = None,
    id_prefix: str | None = None,
    model: str | None = None,
    provider_model: tuple[str, str | None] | None = None,
    prompt_version: str | None = None,
    contract: str | None = None,
    validator_version: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    with_documents: bool = False,
) -> list[RunInfo]:
    """Runs matching every given filter, newest first, with their document counts per state; with
    ``with_documents`` only runs in which some document reached the model (one made of unusable inputs or
    skipped documents alone has no document run).

    ``model`` matches the stored model id; with ``provider_model`` (``model`` read as a ``--model`` string,
    see ``extractor.providers.provider_model``) a run of that provider and model matches too.
    """
    query = select(Run).order_by(Run.started_at.desc(), Run.id)
    if ids is not None:
        query = query.where(Run.id.in_(list(ids)))
    if id_prefix is not None:
        query = query.where(*_id_starts_with(Run.id, id_prefix))
    if model is not None:
        condition = Run.model == model
        if provider_model is not None:
            provider, name = provider_model
            condition = or_(condition, Run.provider == provider if name is None
                            else and_(Run.provider == provider, Run.model == name))
        query = query.where(condition)
    for column, value in ((Run.prompt_version, prompt_version), (Run.contract, contract),
                          (Run.validator_version, validator_version)):
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(Run.started_at >= since)
    if until is not None:
        query = query.where(Run.started_at < until)
    if with_documents:
        query = query.where(select(DocumentRun.id).where(DocumentRun.run_id == Run.id).exists())
    if limit is not None:
        query = query.limit(limit)
    with transaction(engine, write=False) as session:
        runs = session.scalars(query).all()
        counts = _state_counts(session, [run.id for run in runs])
        decided = _decided_counts(session, [run.id for run in runs])
        return [plain(RunInfo, run, counts=counts[run.id], decided=decided.get(run.id, 0)) for run in runs]


_HEX = re.compile(r"[0-9a-f]+")
_NEXT_HEX = dict(zip("0123456789abcdef", "123456789abcdefg", strict=True))


def _id_starts_with(column: Any, prefix: str) -> list[Any]:
    """``column`` starts with ``prefix``, as conditions the column's index answers.

    ``LIKE 'prefix%'`` alone reads every row (SQLite's LIKE ignores case and cannot use the index, PostgreSQL's
    needs the C collation): a run id looked up by ``compare``, ``stats`` or ``show`` would cost more with every
    run logged. Ids are lowercase hex (``uuid4().hex``), so a hex prefix is also the range from the prefix up to
    the prefix with its last digit the next one (``9`` -> ``a``, ``f`` -> ``g``; digits sort before letters in
    SQLite's and PostgreSQL's collations alike), which the primary key answers; the LIKE stays, so what matches
    does not change.
    """
    condition = column.startswith(prefix, autoescape=True)
    if not _HEX.fullmatch(prefix):
        return [condition]
    return [column >= prefix, column < prefix[:-1] + _NEXT_HEX[prefix[-1]], condition]


def _decided_counts(session: Session, run_ids: list[str]) -> dict[str, int]:
    """Document runs per run that a person approved or rejected (``DocumentRun.decided``)."""
    if not run_ids:
        return {}
    rows = session.execute(
        select(DocumentRun.run_id, func.count())
        .where(DocumentRun.run_id.in_(run_ids), DocumentRun.decided.is_(True))
        .group_by(DocumentRun.run_id)
    )
    return {run_id: count for run_id, count in rows}


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


def document_runs_for(engine: Engine, run_id: str) -> list[DocumentRunInfo]:
    return _document_runs(engine, DocumentRun.run_id == run_id, order=(DocumentRun.id,))


def latest_document_run(engine: Engine, ref: str | int) -> DocumentRunInfo | None:
    """The newest document run for a document run id, a document's sha256, or a path as given to a run."""
    if isinstance(ref, int) or ref.isdigit():
        condition = DocumentRun.id == int(ref)
    elif re.fullmatch(r"[0-9a-f]{64}", ref):
        condition = Document.sha256 == ref
    else:
        condition = DocumentRun.path == ref
    found = _document_runs(engine, condition, order=(DocumentRun.started_at.desc(), DocumentRun.id.desc()), limit=1)
    return found[0] if found else None


def find_document_runs(
    engine: Engine,
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
    return _document_runs(engine, condition, order=(DocumentRun.started_at.desc(), DocumentRun.id.desc()))


_DOCUMENT_RUN_COLUMNS = [Document.sha256 if f.name == "sha256" else getattr(DocumentRun, f.name)
                         for f in fields(DocumentRunInfo)]


def _document_runs(engine: Engine, condition: Any, order: tuple[Any, ...], limit: int | None = None) -> list[DocumentRunInfo]:
    """Plain rows, no ORM objects: thousands of document runs are read in milliseconds."""
    query = (
        select(*_DOCUMENT_RUN_COLUMNS)
        .join(Document, Document.id == DocumentRun.document_id)
        .where(condition)
        .order_by(*order)
        .limit(limit)
    )
    with engine.connect() as connection:
        return [DocumentRunInfo(*row) for row in connection.execute(query)]


def undecided_document_runs(engine: Engine, states: Iterable[str],
                            run_ids: Iterable[str] | None = None) -> list[DocumentRunInfo]:
    """Document runs in ``states`` that nobody decided and no newer run of the same content and configuration
    (in ``states``, of ``run_ids``) supersedes: what may wait for a person, newest first.

    Read through ``ix_document_runs_waiting``, so the cost follows what is undecided, not the whole log.
    """
    states = list(states)
    newer = aliased(DocumentRun)
    superseded = select(newer.id).where(
        newer.document_id == DocumentRun.document_id, newer.config_hash == DocumentRun.config_hash,
        newer.state.in_(states),
        or_(newer.started_at > DocumentRun.started_at, and_(newer.started_at == DocumentRun.started_at,
                                                            newer.id > DocumentRun.id)))
    conditions: list[Any] = [text(waiting(DocumentRun.__tablename__)), DocumentRun.state.in_(states)]
    if run_ids is not None:
        ids = list(run_ids)
        conditions.append(DocumentRun.run_id.in_(ids))
        superseded = superseded.where(newer.run_id.in_(ids))
    return _document_runs(engine, and_(*conditions, ~superseded.exists()),
                          order=(DocumentRun.started_at.desc(), DocumentRun.id.desc()))


def findings_of_attempts(engine: Engine, attempt_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
    """Only the findings of these attempts (no requests or responses): cheap for thousands of documents."""
    wanted = sorted(set(attempt_ids))
    found: dict[int, list[dict[str, Any]]] = {}
    with transaction(engine, write=False) as session:
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            for attempt_id, findings in session.execute(select(Attempt.id, Attempt.findings).where(Attempt.id.in_(chunk))):
                found[attempt_id] = list(findings or ())
    return found


def attempt_findings_for_runs(engine: Engine, run_ids: Iterable[str]) -> list[AttemptFindings]:
    """``(run_id, document_run_id, attempt_id, kind, number, outcome, findings)`` of every attempt of these runs."""
    query = (
        select(Attempt.run_id, Attempt.document_run_id, Attempt.id, Attempt.kind, Attempt.number, Attempt.outcome,
               Attempt.findings)
        .where(Attempt.run_id.in_(list(run_ids)))
        .order_by(Attempt.document_run_id, Attempt.created_at, Attempt.id)
    )
    with transaction(engine, write=False) as session:
        return [(r, d, a, k, n, o, list(f or ())) for r, d, a, k, n, o, f in session.execute(query)]


SpendRow = tuple[str, int | None, str | None, int, int, int, int, int]
"""``(run_id, document_run_id or None, model, calls with tokens, prompt, cached, completion, calls answered
without token counts)``."""


def spend(engine: Engine, *, run_ids: Iterable[str] | None = None,
          document_run_ids: Iterable[int] | None = None) -> list[SpendRow]:
    """Token sums of the model calls that got an answer, per run and model (per document run and model when
    ``document_run_ids`` is given); answers reused from an earlier attempt cost nothing and are left out."""
    per_document = document_run_ids is not None
    keys: list[Any] = [Attempt.run_id, Attempt.document_run_id if per_document else None, Attempt.model]
    keys = [key for key in keys if key is not None]
    counted = func.count(Attempt.prompt_tokens)
    query = (select(*keys, counted, func.coalesce(func.sum(Attempt.prompt_tokens), 0),
                    func.coalesce(func.sum(Attempt.cached_tokens), 0),
                    func.coalesce(func.sum(Attempt.completion_tokens), 0), func.count() - counted)
             .where(Attempt.reused_from.is_(None),
                    or_(Attempt.raw_response.is_not(None), Attempt.prompt_tokens.is_not(None)))
             .group_by(*keys))
    wanted = sorted(set(document_run_ids)) if per_document and document_run_ids is not None else sorted(set(run_ids or ()))
    column = Attempt.document_run_id if per_document else Attempt.run_id
    rows: list[SpendRow] = []
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            for row in connection.execute(query.where(column.in_(wanted[start : start + 500]))):
                values = tuple(row)
                if not per_document:
                    values = (values[0], None, *values[1:])
                run_id, document_run_id, model, calls, prompt, cached, completion, untold = values
                rows.append((run_id, document_run_id, model, int(calls), int(prompt), int(cached), int(completion),
                             int(untold)))
    return rows
