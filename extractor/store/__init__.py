"""The run log (SQLAlchemy 2 + Alembic): SQLite by default, PostgreSQL through ``EXTRACT_DATABASE_URL``.

The pipeline uses only what is exported here (``Store`` is a thin front over one module per concern, see
``extractor.store.runlog``; the dataclasses going in and out are in ``extractor.store.info``); states and
decisions are named in ``extractor.vocab``. Approved records are written by ``extractor.store.approved``,
which only the review commands import.
"""

from __future__ import annotations

from extractor.errors import StoreError
from extractor.store.db import DATABASE_URL_ENV, DEFAULT_DATABASE_URL
from extractor.store.evaluations import NewEvaluation
from extractor.store.info import (
    AttemptInfo,
    AttemptRecord,
    CalibrationInfo,
    ClaimResult,
    DocumentInfo,
    DocumentRunInfo,
    FinishedClaim,
    RunConfig,
    RunInfo,
    RunQuery,
)
from extractor.store.runlog import Store, open_store
from extractor.store.runs import STALE_AFTER_S

__all__ = [
    "DATABASE_URL_ENV",
    "DEFAULT_DATABASE_URL",
    "STALE_AFTER_S",
    "AttemptInfo",
    "AttemptRecord",
    "CalibrationInfo",
    "ClaimResult",
    "DocumentInfo",
    "DocumentRunInfo",
    "FinishedClaim",
    "NewEvaluation",
    "RunConfig",
    "RunInfo",
    "RunQuery",
    "Store",
    "StoreError",
    "open_store",
]
