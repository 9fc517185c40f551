"""Judge calibration reports: a judge may block only with an admitting report for its model, rubric and threshold.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "judge_calibrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("judge_model", sa.String(500), nullable=False),
        sa.Column("rubric_version", sa.String(100), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("labels_sha256", sa.String(64), nullable=False),
        sa.Column("n_cases", sa.Integer(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_judge_calibrations"),
        sa.CheckConstraint(
            "verdict IN ('admit-block', 'admit-review', 'reject')", name="ck_judge_calibrations_verdict"
        ),
    )
    op.create_index(
        "ix_judge_calibrations_key",
        "judge_calibrations",
        ["judge_model", "rubric_version", "threshold", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_judge_calibrations_key", table_name="judge_calibrations")
    op.drop_table("judge_calibrations")
