"""A queued document may end BLOCKED: ``tasks.outcome`` takes ``BLOCKED`` (its CHECK constraint widened).

Revision 0007 wrote the outcomes a task could end with, and left out BLOCKED, which revision 0005 had added to
the document states: a worker whose document ended BLOCKED (a critical finding) failed to record the task's
outcome (``CHECK constraint failed: ck_tasks_outcome``). On SQLite the table is rebuilt with the new constraint in
Alembic's batch mode, as revision 0005 does for the state tables.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

# As ``extractor.vocab`` had them when this revision was written (migrations never import the models).
OLD = "'READY_FOR_REVIEW', 'MANUAL_REVIEW', 'ERROR', 'INTERRUPTED', 'SKIPPED', 'INPUT_ERROR'"
NEW = "'READY_FOR_REVIEW', 'MANUAL_REVIEW', 'BLOCKED', 'ERROR', 'INTERRUPTED', 'SKIPPED', 'INPUT_ERROR'"
REBUILDS = ("tasks",)
"""Tables SQLite rebuilds here (``extractor.store.db.apply_migrations`` checks their references)."""


def _outcomes(outcomes: str) -> None:
    """Make ``outcomes`` the IN list of the ``ck_tasks_outcome`` CHECK constraint."""
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("ck_tasks_outcome", type_="check")
        batch.create_check_constraint("ck_tasks_outcome", sa.text(f"outcome IS NULL OR outcome IN ({outcomes})"))


def upgrade() -> None:
    _outcomes(NEW)


def downgrade() -> None:
    """BLOCKED tasks become MANUAL_REVIEW (an older extractor knows no other outcome that waits for a person)."""
    op.execute("UPDATE tasks SET outcome = 'MANUAL_REVIEW' WHERE outcome = 'BLOCKED'")
    _outcomes(OLD)
