"""Read-only queries for ``extract show``, ``review``, ``runs``, ``stats`` and ``compare``.

They select only the columns they need (never requests or responses in bulk) and are scoped to the runs
a command selected, so they stay as fast with a large run log as with a small one.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, or_, select, text

from extractor.store.db import plain
from extractor.store.info import DocumentRunInfo, RunInfo, RunQuery
from extractor.store.tables import attempts, document_runs, documents, file_name, runs, waiting
from extractor.store.tasks import owned_by

AttemptFindings = tuple[str, int, int, str, int, str, list[dict[str, Any]]]
"""``(run_id, document_run_id, attempt_id, kind, number, outcome, findings)``."""


def get_run(engine: Engine, run_id: str) -> RunInfo | None:
    with engine.connect() as connection:
        run = connection.execute(select(runs).where(runs.c.id == run_id)).first()
        if run is None:
            return None
        return plain(RunInfo, run, counts=_state_counts(connection, [run_id])[run_id],
                     decided=_decided_counts(connection, [run_id]).get(run_id, 0))


def find_runs(engine: Engine, wanted: RunQuery = RunQuery(), *, limit: int | None = None, with_documents: bool = False,
              counts: bool = True) -> list[RunInfo]:
    """Runs ``wanted`` selects, newest first, with their document counts per state (unless ``counts`` is False:
    then ``counts`` and ``decided`` are left empty, for a caller that needs only the runs); with ``with_documents``
    only runs in which some document reached the model (one made of unusable inputs or skipped documents alone has
    no document run)."""
    query = select(runs).order_by(runs.c.started_at.desc(), runs.c.id)
    if wanted.ids is not None:
        query = query.where(runs.c.id.in_(list(wanted.ids)))
    if wanted.id_prefix is not None:
        query = query.where(*_id_starts_with(runs.c.id, wanted.id_prefix))
    if wanted.model is not None:
        condition = runs.c.model == wanted.model
        if wanted.provider_model is not None:
            provider, name = wanted.provider_model
            condition = or_(condition, runs.c.provider == provider if name is None
                            else and_(runs.c.provider == provider, runs.c.model == name))
        query = query.where(condition)
    for column, value in ((runs.c.prompt_version, wanted.prompt_version), (runs.c.contract, wanted.contract),
                          (runs.c.validator_version, wanted.validator_version)):
        if value is not None:
            query = query.where(column == value)
    if wanted.since is not None:
        query = query.where(runs.c.started_at >= wanted.since)
    if wanted.until is not None:
        query = query.where(runs.c.started_at < wanted.until)
    if with_documents:
        query = query.where(select(document_runs.c.id).where(document_runs.c.run_id == runs.c.id).exists())
    if limit is not None:
        query = query.limit(limit)
    with engine.connect() as connection:
        found = connection.execute(query).all()
        if not counts:
            return [plain(RunInfo, run, counts={}, decided=0) for run in found]
        states = _state_counts(connection, [run.id for run in found])
        decided = _decided_counts(connection, [run.id for run in found])
        return [plain(RunInfo, run, counts=states[run.id], decided=decided.get(run.id, 0)) for run in found]


_HEX = re.compile(r"[0-9a-f]+")
_NEXT_HEX = dict(zip("0123456789abcdef", "123456789abcdefg", strict=True))


def _id_starts_with(column: Any, prefix: str) -> list[Any]:
    """``column`` starts with ``prefix``, as conditions the column's index answers.

    ``LIKE 'prefix%'`` alone reads every row (SQLite's LIKE ignores case and cannot use the index, PostgreSQL's
    needs the C collation): a run id looked up by ``compare``, ``stats`` or ``show`` (or a content hash by ``show``)
    would cost more with every run logged. Ids are lowercase hex (``uuid4().hex``, sha256), so a hex prefix is also
    the range from the prefix up to
    the prefix with its last digit the next one (``9`` -> ``a``, ``f`` -> ``g``; digits sort before letters in
    SQLite's and PostgreSQL's collations alike), which the primary key answers; the LIKE stays, so what matches
    does not change.
    """
    condition = column.startswith(prefix, autoescape=True)
    if not _HEX.fullmatch(prefix):
        return [condition]
    return [column >= prefix, column < prefix[:-1] + _NEXT_HEX[prefix[-1]], condition]


def _decided_counts(connection: Connection, run_ids: list[str]) -> dict[str, int]:
    """Document runs per run that a person approved or rejected (``document_runs.decided``)."""
    if not run_ids:
        return {}
    rows = connection.execute(
        select(document_runs.c.run_id, func.count())
        .where(document_runs.c.run_id.in_(run_ids), document_runs.c.decided.is_(True))
        .group_by(document_runs.c.run_id)
    )
    return {run_id: count for run_id, count in rows}


def _state_counts(connection: Connection, run_ids: list[str]) -> defaultdict[str, dict[str, int]]:
    counts: defaultdict[str, dict[str, int]] = defaultdict(dict)
    if run_ids:
        rows = connection.execute(
            select(document_runs.c.run_id, document_runs.c.state, func.count())
            .where(document_runs.c.run_id.in_(run_ids))
            .group_by(document_runs.c.run_id, document_runs.c.state)
        )
        for run_id, state, count in rows:
            counts[run_id][state] = count
    return counts


def document_runs_for(engine: Engine, run_id: str, limit: int | None = None) -> list[DocumentRunInfo]:
    """The run's document runs in the order they started (the first ``limit``: a range of its unique index)."""
    return _document_runs(engine, document_runs.c.run_id == run_id, order=(document_runs.c.id,), limit=limit)


def latest_document_run(engine: Engine, ref: str | int) -> DocumentRunInfo | None:
    """The newest document run for a document run id, a document's sha256, or a path as given to a run."""
    if isinstance(ref, int) or ref.isdigit():
        condition = document_runs.c.id == int(ref)
    elif re.fullmatch(r"[0-9a-f]{64}", ref):
        condition = documents.c.sha256 == ref
    else:
        condition = document_runs.c.path == ref
    found = _document_runs(engine, condition, order=(document_runs.c.started_at.desc(), document_runs.c.id.desc()), limit=1)
    return found[0] if found else None


def find_document_runs(
    engine: Engine,
    *,
    ids: Iterable[int] | None = None,
    run_ids: Iterable[str] | None = None,
    states: Iterable[str] | None = None,
    sha_prefix: str | None = None,
    same_file_name: str | None = None,
) -> list[DocumentRunInfo]:
    """Document runs matching every given filter, newest first: ``sha_prefix`` a prefix of the content's sha256 (a
    range of the documents' unique index), ``same_file_name`` the file name of this path (``ix_document_runs_name``;
    whole paths are the caller's to compare)."""
    conditions: list[Any] = []
    if ids is not None:
        conditions.append(document_runs.c.id.in_(list(ids)))
    if run_ids is not None:
        conditions.append(document_runs.c.run_id.in_(list(run_ids)))
    if states is not None:
        conditions.append(document_runs.c.state.in_(list(states)))
    if sha_prefix is not None:
        conditions.extend(_id_starts_with(documents.c.sha256, sha_prefix.lower()))
    if same_file_name is not None:
        conditions.append(document_runs.c.name == file_name(same_file_name))
    condition = document_runs.c.id.is_not(None)
    for extra in conditions:
        condition = condition & extra
    return _document_runs(engine, condition, order=(document_runs.c.started_at.desc(), document_runs.c.id.desc()))


_DOCUMENT_RUN_COLUMNS = [documents.c.sha256 if f.name == "sha256" else document_runs.c[f.name]
                         for f in fields(DocumentRunInfo)]


def _document_runs(engine: Engine, condition: Any, order: tuple[Any, ...], limit: int | None = None) -> list[DocumentRunInfo]:
    """Plain rows, no ORM objects: thousands of document runs are read in milliseconds."""
    query = (
        select(*_DOCUMENT_RUN_COLUMNS)
        .join(documents, documents.c.id == document_runs.c.document_id)
        .where(condition)
        .order_by(*order)
        .limit(limit)
    )
    with engine.connect() as connection:
        return [DocumentRunInfo(*row) for row in connection.execute(query)]


def undecided_document_runs(engine: Engine, states: Iterable[str], run_ids: Iterable[str] | None = None,
                            owner: str | None = None) -> list[DocumentRunInfo]:
    """Document runs in ``states`` that nobody decided and no newer run of the same content and configuration
    (in ``states``, of ``run_ids``) supersedes: what may wait for a person, newest first; with ``owner``, only
    those a task of that owner's batches ended in (``extractor.store.tasks.owned_by``).

    Read through ``ix_document_runs_waiting``, so the cost follows what is undecided, not the whole log.
    """
    states = list(states)
    newer = document_runs.alias().c
    superseded = select(newer.id).where(
        newer.document_id == document_runs.c.document_id, newer.config_hash == document_runs.c.config_hash,
        newer.state.in_(states),
        or_(newer.started_at > document_runs.c.started_at, and_(newer.started_at == document_runs.c.started_at,
                                                            newer.id > document_runs.c.id)))
    conditions: list[Any] = [text(waiting(document_runs.name)), document_runs.c.state.in_(states)]
    if run_ids is not None:
        ids = list(run_ids)
        conditions.append(document_runs.c.run_id.in_(ids))
        superseded = superseded.where(newer.run_id.in_(ids))
    if owner is not None:
        conditions.append(owned_by(owner))
    return _document_runs(engine, and_(*conditions, ~superseded.exists()),
                          order=(document_runs.c.started_at.desc(), document_runs.c.id.desc()))


def findings_of_attempts(engine: Engine, attempt_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
    """Only the findings of these attempts (no requests or responses): cheap for thousands of documents."""
    wanted = sorted(set(attempt_ids))
    found: dict[int, list[dict[str, Any]]] = {}
    with engine.connect() as connection:
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            query = select(attempts.c.id, attempts.c.findings).where(attempts.c.id.in_(chunk))
            for attempt_id, findings in connection.execute(query):
                found[attempt_id] = list(findings or ())
    return found


def attempt_findings_for_runs(engine: Engine, run_ids: Iterable[str]) -> list[AttemptFindings]:
    """``(run_id, document_run_id, attempt_id, kind, number, outcome, findings)`` of every attempt of these runs."""
    query = (
        select(attempts.c.run_id, attempts.c.document_run_id, attempts.c.id, attempts.c.kind, attempts.c.number,
               attempts.c.outcome, attempts.c.findings)
        .where(attempts.c.run_id.in_(list(run_ids)))
        .order_by(attempts.c.document_run_id, attempts.c.created_at, attempts.c.id)
    )
    with engine.connect() as connection:
        return [(r, d, a, k, n, o, list(f or ())) for r, d, a, k, n, o, f in connection.execute(query)]


SpendRow = tuple[str, int | None, str | None, int, int, int, int, int]
"""``(run_id, document_run_id or None, model, calls with tokens, prompt, cached, completion, calls answered
without token counts)``."""


def spend(engine: Engine, *, run_ids: Iterable[str] | None = None,
          document_run_ids: Iterable[int] | None = None) -> list[SpendRow]:
    """Token sums of the model calls that got an answer, per run and model (per document run and model when
    ``document_run_ids`` is given); answers reused from an earlier attempt cost nothing and are left out."""
    per_document = document_run_ids is not None
    keys: list[Any] = [attempts.c.run_id, attempts.c.document_run_id if per_document else None, attempts.c.model]
    keys = [key for key in keys if key is not None]
    counted = func.count(attempts.c.prompt_tokens)
    query = (select(*keys, counted, func.coalesce(func.sum(attempts.c.prompt_tokens), 0),
                    func.coalesce(func.sum(attempts.c.cached_tokens), 0),
                    func.coalesce(func.sum(attempts.c.completion_tokens), 0), func.count() - counted)
             .where(attempts.c.reused_from.is_(None),
                    or_(attempts.c.raw_response.is_not(None), attempts.c.prompt_tokens.is_not(None)))
             .group_by(*keys))
    wanted = sorted(set(document_run_ids)) if per_document and document_run_ids is not None else sorted(set(run_ids or ()))
    column = attempts.c.document_run_id if per_document else attempts.c.run_id
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
