"""Store what repeats once: request parts shared by a run's requests, and a candidate equal to its raw answer.

Attempts written before keep their whole request inline in ``attempts.request`` (``request_part`` NULL)
and their ``parsed`` candidate (``parsed_is_raw`` false), and read back as they are.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "request_parts",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_request_parts"),
    )
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("request_part", sa.String(64), nullable=True))
        batch.add_column(sa.Column("parsed_is_raw", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.create_foreign_key("fk_attempts_request_part_request_parts", "request_parts", ["request_part"], ["sha256"])


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_constraint("fk_attempts_request_part_request_parts", type_="foreignkey")
        batch.drop_column("parsed_is_raw")
        batch.drop_column("request_part")
    op.drop_table("request_parts")
