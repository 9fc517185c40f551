"""A queued document may end BLOCKED: ``tasks.outcome`` takes ``BLOCKED`` (its CHECK constraint widened).

Revision 0007 wrote the outcomes a task could end with, and left out BLOCKED, which revision 0005 had added to
the document states: a worker whose document ended BLOCKED (a critical finding) failed to record the task's
outcome (``CHECK constraint failed: ck_tasks_outcome``). On SQLite the IN list is edited in the stored schema
text, as revision 0005 does for the state tables (a widened list changes no stored row).

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


def _outcomes(old: str, new: str) -> None:
    """Replace the IN list of the ``ck_tasks_outcome`` CHECK constraint."""
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("ck_tasks_outcome", "tasks", type_="check")
        op.create_check_constraint("ck_tasks_outcome", "tasks", f"outcome IS NULL OR outcome IN ({new})")
        return
    connection = op.get_bind()
    version = connection.exec_driver_sql("PRAGMA schema_version").scalar_one()
    connection.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        changed = connection.execute(
            sa.text("UPDATE sqlite_master SET sql = replace(sql, :old, :new) "
                    "WHERE type = 'table' AND name = 'tasks' AND instr(sql, :old) > 0"),
            {"old": f"outcome IN ({old}))", "new": f"outcome IN ({new}))"})
        if changed.rowcount != 1:
            raise RuntimeError("tasks: its outcome CHECK constraint is not the one revision 0011 left")
        connection.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        connection.exec_driver_sql("PRAGMA writable_schema = OFF")


def upgrade() -> None:
    _outcomes(OLD, NEW)


def downgrade() -> None:
    """BLOCKED tasks become MANUAL_REVIEW (an older extractor knows no other outcome that waits for a person)."""
    op.execute("UPDATE tasks SET outcome = 'MANUAL_REVIEW' WHERE outcome = 'BLOCKED'")
    _outcomes(NEW, OLD)
