"""Attempts: every model call, written whole as it happened and read back exactly.

An attempt's columns come from ``extractor.store.info.AttemptData``; this module adds only what the store
derives (run, document, request, times), so a new column needs no change here. The request is stored split
(``extractor.store.requests``): its shared part once per run log, its own texts with the attempt. A
candidate that is exactly the JSON of the raw answer (the common case) is stored once, as the answer.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from sqlalchemy import Engine, Row, bindparam, insert, select

from extractor.errors import StoreError
from extractor.store import requests
from extractor.store.db import plain, require_one_of, utcnow, write_connection
from extractor.store.info import AttemptData, AttemptInfo, AttemptRecord
from extractor.store.tables import attempts, document_runs, request_parts
from extractor.vocab import AttemptKind, AttemptOutcome, values_of

_COLUMNS = tuple(f.name for f in fields(AttemptData))
_INSERT_ATTEMPT = insert(attempts)
_DOCUMENT_RUN_OWNER = (select(document_runs.c.run_id, document_runs.c.document_id)
                       .where(document_runs.c.id == bindparam("run")))


def record_attempt(engine: Engine, record: AttemptRecord, known_parts: set[str]) -> int:
    """Store one model call exactly as it happened (``raw_response`` verbatim, JSON or not); returns its id.

    The run and document are the document run's. A second attempt with the same (document run, kind,
    number) raises ``IntegrityError``. ``known_parts`` are request parts this process has seen committed:
    they need no insert (any process may insert a part; the first wins, the others change nothing).
    """
    require_one_of(record.kind, values_of(AttemptKind), "attempt kind")
    require_one_of(record.outcome, values_of(AttemptOutcome), "attempt outcome")
    now = utcnow()
    row: dict[str, Any] = {name: getattr(record, name) for name in _COLUMNS}
    if _is_raw_json(record.parsed, record.raw_response):
        row.update(parsed=None, parsed_is_raw=True)
    stored = requests.split(record.request)
    with write_connection(engine) as connection:
        owner = connection.execute(_DOCUMENT_RUN_OWNER, {"run": record.document_run_id}).first()
        if owner is None:
            raise StoreError(f"no document run {record.document_run_id}")
        if stored.part is not None and stored.part[0] not in known_parts:
            connection.execute(_insert_part(connection.dialect.name), {"sha256": stored.part[0],
                                                                        "content": stored.part[1]})
        row.update(
            run_id=owner.run_id,
            document_id=owner.document_id,
            request=stored.own,
            request_part=None if stored.part is None else stored.part[0],
            request_hash=record.request.fingerprint,
            created_at=record.created_at or now,
            finished_at=now,
        )
        inserted = connection.execute(_INSERT_ATTEMPT, row).inserted_primary_key
        assert inserted is not None
    if stored.part is not None:
        known_parts.add(stored.part[0])
    return int(inserted[0])


def _is_raw_json(parsed: Any, raw: str | None) -> bool:
    """Whether ``parsed`` is exactly what the raw answer parses to (same types: 1 is not 1.0, nor true)."""
    if parsed is None or raw is None:
        return False
    try:
        again = json.loads(raw)
    except ValueError:
        return False
    return _same_json(again, parsed)


def _same_json(left: Any, right: Any) -> bool:
    """Equal JSON values of the same types all the way down (key order aside; floats by their ``repr``, so -0.0
    is not 0.0 and NaN is NaN). A walk instead of comparing two canonical encodings: no depth limit, no strings built."""
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, dict):
            if a.keys() != b.keys():
                return False
            pending.extend((value, b[key]) for key, value in a.items())
        elif isinstance(a, list):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b))
        elif isinstance(a, float):
            if repr(a) != repr(b):
                return False
        elif a != b:
            return False
    return True


def _insert_part(dialect: str) -> Any:
    """INSERT of a request part that does nothing when the part is there already (written by anyone)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(request_parts).on_conflict_do_nothing(index_elements=["sha256"])
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(request_parts).on_conflict_do_nothing(index_elements=["sha256"])


def attempts_for(engine: Engine, document_run_id: int) -> list[AttemptInfo]:
    """Attempts in the order they were made."""
    return _read(engine, attempts.c.document_run_id == document_run_id)


def window_answers(engine: Engine, document_id: int, config_hash: str) -> dict[str, AttemptInfo]:
    """Window calls of this document under this configuration that got an answer, by request fingerprint
    (the earliest of each): what a resumed long document need not ask again."""
    runs = select(document_runs.c.id).where(document_runs.c.document_id == document_id,
                                            document_runs.c.config_hash == config_hash)
    answered = _read(engine, attempts.c.document_run_id.in_(runs) & attempts.c.window.is_not(None)
                     & attempts.c.raw_response.is_not(None) & attempts.c.reused_from.is_(None))
    found: dict[str, AttemptInfo] = {}
    for attempt in answered:
        found.setdefault(attempt.request_hash, attempt)
    return found


def get_attempt(engine: Engine, attempt_id: int) -> AttemptInfo | None:
    found = _read(engine, attempts.c.id == attempt_id)
    return found[0] if found else None


def _read(engine: Engine, condition: Any) -> list[AttemptInfo]:
    """Attempts with their requests joined back together (each template read and parsed once)."""
    query = (
        select(attempts, request_parts.c.content)
        .outerjoin(request_parts, request_parts.c.sha256 == attempts.c.request_part)
        .where(condition)
        .order_by(attempts.c.created_at, attempts.c.id)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [plain(AttemptInfo, row, request=requests.assemble(row.content, row.request, f"attempt {row.id}"),
                  parsed=_parsed(row))
            for row in rows]


def _parsed(row: Row[Any]) -> Any:
    return json.loads(row.raw_response) if row.parsed_is_raw and row.raw_response is not None else row.parsed

