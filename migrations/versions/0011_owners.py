"""Who owns queued work, so each submitter of ``extract serve`` sees only its own.

- ``api_tokens.owner``: tokens grouped under one owner (a team, a service account) see each other's
  submissions; NULL means the token is its own owner (its name);
- ``batches.owner``: the owner of the token that submitted the batch through the API; NULL for batches
  submitted by ``extract run --queue`` (visible to reviewers and admins only). Batches an API token submitted
  before this revision get that token's owner (its ``submitted_by`` is the token's name).

Plain ADD COLUMN, so SQLite needs no table copy.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("owner", sa.String(200), nullable=True))
    op.add_column("batches", sa.Column("owner", sa.String(200), nullable=True))
    op.create_index("ix_batches_owner", "batches", ["owner"])
    op.execute("UPDATE batches SET owner = submitted_by "
               "WHERE submitted_by IN (SELECT name FROM api_tokens)")


def downgrade() -> None:
    op.drop_index("ix_batches_owner", table_name="batches")
    op.drop_column("batches", "owner")
    op.drop_column("api_tokens", "owner")
