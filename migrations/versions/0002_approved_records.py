"""Approved records and the review decision history (written only by the review commands).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # No foreign keys: approved records may be kept in a database of their own.
    op.create_table(
        "approved_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_sha256", sa.String(64), nullable=False),
        sa.Column("document_path", sa.Text(), nullable=False),
        sa.Column("contract", sa.String(100), nullable=False),
        sa.Column("contract_version", sa.Integer(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("evidence_spans", sa.JSON(), nullable=True),
        sa.Column("attempt_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.String(32), nullable=True),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("edited", sa.Boolean(), nullable=False),
        sa.Column("approved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_approved_records"),
        sa.UniqueConstraint(
            "document_sha256",
            "contract",
            "contract_version",
            name="uq_approved_records_document_sha256_contract_contract_version",
        ),
    )

    op.create_table(
        "reviews",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_run_id", sa.Integer(), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_reviews"),
        sa.ForeignKeyConstraint(
            ["document_run_id"], ["document_runs.id"], name="fk_reviews_document_run_id_document_runs"
        ),
        sa.CheckConstraint("decision IN ('approved', 'rejected')", name="ck_reviews_decision"),
    )
    op.create_index("ix_reviews_document_run_id", "reviews", ["document_run_id"])


def downgrade() -> None:
    op.drop_table("reviews")
    op.drop_table("approved_records")
