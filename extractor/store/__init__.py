"""The run log (SQLAlchemy 2 + Alembic): SQLite by default, PostgreSQL through ``EXTRACT_DATABASE_URL``.

The pipeline uses only what is exported here. Approved records are written by ``extractor.store.approved``,
which only the review commands import.
"""

from __future__ import annotations

from extractor.store.db import DATABASE_URL_ENV, DEFAULT_DATABASE_URL, StoreError
from extractor.store.models import (
    ATTEMPT_KINDS,
    ATTEMPT_OUTCOMES,
    DOCUMENT_STATES,
    FINAL_STATES,
    RUN_STATUSES,
    AttemptKind,
    AttemptOutcome,
    DocumentState,
    RunStatus,
)
from extractor.store.runlog import (
    STALE_AFTER_S,
    AttemptInfo,
    ClaimResult,
    DocumentInfo,
    DocumentRunInfo,
    RunConfig,
    RunInfo,
    Store,
    open_store,
)

__all__ = [
    "ATTEMPT_KINDS",
    "ATTEMPT_OUTCOMES",
    "DATABASE_URL_ENV",
    "DEFAULT_DATABASE_URL",
    "DOCUMENT_STATES",
    "FINAL_STATES",
    "RUN_STATUSES",
    "STALE_AFTER_S",
    "AttemptInfo",
    "AttemptKind",
    "AttemptOutcome",
    "ClaimResult",
    "DocumentInfo",
    "DocumentRunInfo",
    "DocumentState",
    "RunConfig",
    "RunInfo",
    "RunStatus",
    "Store",
    "StoreError",
    "open_store",
]
