"""Reviewer corrections as a signal: every approval records which field paths the person changed.

``reviews.changed_fields``: the field paths (``processSteps[].actorId``) whose values differ between the
model's final candidate and the record the person approved, list items aligned as ``extract eval`` aligns
them; ``[]`` for an approval as produced, NULL for rejections and for approvals recorded before this revision
(``extract stats --corrections`` leaves those out rather than counting them as unedited).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("reviews", sa.Column("changed_fields", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("reviews", "changed_fields")
