"""Critical findings block: the BLOCKED document state, the run outcome, and overrides of a block.

- ``document_runs.state`` and ``claims.state`` may be ``BLOCKED`` (CHECK constraints widened); the review
  queue's partial index ``ix_document_runs_waiting`` covers BLOCKED too (a person sees it, rejects it, or
  approves it over the block).
- ``runs.outcome``: PROMOTE / MANUAL_REVIEW / BLOCK / NOT_EVALUABLE once the run ended (NULL before, and for
  runs recorded before this revision).
- ``reviews.block_override`` and ``approved_records.block_override``: who approved a BLOCKED result, when, why,
  and which critical rules they overrode (export carries it as provenance).

SQLite cannot alter a CHECK constraint: the state tables are rebuilt with the new one in Alembic's batch mode
(new table, rows copied, old table dropped, new one renamed: SQLite's documented procedure for schema changes it
cannot ALTER), with foreign keys off while the migration runs and checked before it commits
(``extractor.store.db.migration_connection``); PostgreSQL alters the constraint in place. ``runs.outcome`` is a
plain ADD COLUMN with its CHECK constraint, which SQLite allows.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

OLD_STATES = "'PROCESSING', 'READY_FOR_REVIEW', 'MANUAL_REVIEW', 'ERROR', 'INTERRUPTED', 'SKIPPED'"
NEW_STATES = "'PROCESSING', 'READY_FOR_REVIEW', 'MANUAL_REVIEW', 'BLOCKED', 'ERROR', 'INTERRUPTED', 'SKIPPED'"
OLD_WAITING = "NOT decided AND state IN ('READY_FOR_REVIEW', 'MANUAL_REVIEW')"
NEW_WAITING = "NOT decided AND state IN ('READY_FOR_REVIEW', 'MANUAL_REVIEW', 'BLOCKED')"
OUTCOMES = "outcome IN ('PROMOTE', 'MANUAL_REVIEW', 'BLOCK', 'NOT_EVALUABLE')"
"""As ``extractor.vocab`` had them when this revision was written (migrations never import the models)."""
STATE_TABLES = ("document_runs", "claims")
REBUILDS = STATE_TABLES
"""Tables SQLite rebuilds here (``extractor.store.db.apply_migrations`` checks their references)."""


def _states(new: str) -> None:
    """Make ``new`` the IN list of the ``state`` CHECK constraint of every state table."""
    for table in STATE_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"ck_{table}_state", type_="check")
            batch.create_check_constraint(f"ck_{table}_state", sa.text(f"state IN ({new})"))


def _waiting_index(condition: str) -> None:
    op.drop_index("ix_document_runs_waiting", table_name="document_runs")
    op.create_index("ix_document_runs_waiting", "document_runs", ["started_at"], sqlite_where=sa.text(condition),
                    postgresql_where=sa.text(condition))


def upgrade() -> None:
    _states(NEW_STATES)
    _waiting_index(NEW_WAITING)
    if op.get_bind().dialect.name == "sqlite":  # a column with its constraint: SQLite adds it without a copy
        op.execute(f"ALTER TABLE runs ADD COLUMN outcome VARCHAR(16) CONSTRAINT ck_runs_outcome CHECK ({OUTCOMES})")
    else:
        op.add_column("runs", sa.Column("outcome", sa.String(16), nullable=True))
        op.create_check_constraint("ck_runs_outcome", "runs", OUTCOMES)
    for table in ("reviews", "approved_records"):
        op.add_column(table, sa.Column("block_override", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    """BLOCKED results become MANUAL_REVIEW (an older extractor knows no other state that waits for a person)."""
    for table in ("approved_records", "reviews"):
        op.drop_column(table, "block_override")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("ck_runs_outcome", "runs", type_="check")
    op.drop_column("runs", "outcome")
    for table in STATE_TABLES:
        op.execute(f"UPDATE {table} SET state = 'MANUAL_REVIEW' WHERE state = 'BLOCKED'")
    _waiting_index(OLD_WAITING)
    _states(OLD_STATES)
