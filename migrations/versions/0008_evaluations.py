"""Evaluations against gold records (``extract eval``): the score and which runs it scored.

- ``evaluations``: when, which selection and gold set (with the sha256 of its files), the bootstrap's
  resamples and seed, the headline numbers (``summary``) and the whole report;
- ``evaluation_runs``: the runs one evaluation scored, so ``extract runs`` finds a run's latest score.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("selection", sa.Text(), nullable=False),
        sa.Column("gold", sa.Text(), nullable=False),
        sa.Column("gold_sha256", sa.String(64), nullable=False),
        sa.Column("resamples", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_evaluations"),
    )
    op.create_index("ix_evaluations_created_at", "evaluations", ["created_at"])
    op.create_table(
        "evaluation_runs",
        sa.Column("evaluation_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.ForeignKeyConstraint(["evaluation_id"], ["evaluations.id"], name="fk_evaluation_runs_evaluation_id_evaluations"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_evaluation_runs_run_id_runs"),
        sa.PrimaryKeyConstraint("evaluation_id", "run_id", name="pk_evaluation_runs"),
    )
    op.create_index("ix_evaluation_runs_run_id", "evaluation_runs", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_evaluation_runs_run_id", table_name="evaluation_runs")
    op.drop_table("evaluation_runs")
    op.drop_index("ix_evaluations_created_at", table_name="evaluations")
    op.drop_table("evaluations")
