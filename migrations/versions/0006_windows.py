"""Long documents read in windows (issue 13): which window an attempt belongs to.

- ``attempts.window``: the window's 1-based index (NULL for a whole-document attempt, including the
  candidate merged from the windows), ``attempts.first_sentence`` / ``last_sentence``: the 1-based numbers of
  the window's own sentences.
- ``attempts.reused_from``: a rerun that finds a window answered by an earlier, unfinished run of the same
  configuration (same request) records that answer again with the id of the attempt that paid for it, and
  calls the model only for the windows that never got an answer.

Plain ADD COLUMN (no constraint changes), so SQLite needs no table copy.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

COLUMNS = ("window", "first_sentence", "last_sentence", "reused_from")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("attempts", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    for name in reversed(COLUMNS):
        op.drop_column("attempts", name)
