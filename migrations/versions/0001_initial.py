"""Run log: runs, documents, document runs, claims, attempts.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

STATES = "'PROCESSING', 'READY_FOR_REVIEW', 'MANUAL_REVIEW', 'ERROR', 'INTERRUPTED', 'SKIPPED'"


def timestamp(name: str, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), nullable=False),
        timestamp("started_at"),
        timestamp("finished_at", nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("contract", sa.String(100), nullable=False),
        sa.Column("contract_version", sa.Integer(), nullable=False),
        sa.Column("prompt_version", sa.String(100), nullable=False),
        sa.Column("model", sa.String(500), nullable=False),
        sa.Column("provider", sa.String(100), nullable=False),
        sa.Column("validator_version", sa.String(100), nullable=False),
        sa.Column("segmenter", sa.String(500), nullable=False),
        sa.Column("judge_model", sa.String(500), nullable=True),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        timestamp("heartbeat_at"),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.CheckConstraint(
            "status IN ('running', 'finished', 'interrupted', 'crashed')", name="ck_runs_status"
        ),
    )
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_index("ix_runs_config_hash", "runs", ["config_hash"])

    op.create_table(
        "documents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("segmenter", sa.String(500), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("format", sa.String(20), nullable=False),
        sa.Column("encoding", sa.String(50), nullable=True),
        sa.Column("char_count", sa.Integer(), nullable=False),
        sa.Column("sentence_count", sa.Integer(), nullable=False),
        sa.Column("sentences", sa.JSON(), nullable=False),
        timestamp("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_documents"),
        sa.UniqueConstraint("sha256", "segmenter", name="uq_documents_sha256_segmenter"),
    )

    # final_attempt_id points at attempts, which does not exist yet: its foreign key is added below.
    op.create_table(
        "document_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("needs_person", sa.JSON(), nullable=False),
        sa.Column("final_attempt_id", sa.Integer(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        timestamp("started_at"),
        timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_document_runs"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_document_runs_run_id_runs"),
        sa.ForeignKeyConstraint(
            ["document_id"], ["documents.id"], name="fk_document_runs_document_id_documents"
        ),
        sa.UniqueConstraint("run_id", "document_id", name="uq_document_runs_run_id_document_id"),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_document_runs_state"),
    )
    op.create_index("ix_document_runs_document_id", "document_runs", ["document_id"])
    op.create_index("ix_document_runs_path", "document_runs", ["path"])

    op.create_table(
        "claims",
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("document_run_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        timestamp("claimed_at"),
        timestamp("updated_at"),
        sa.PrimaryKeyConstraint("config_hash", "document_id", name="pk_claims"),
        sa.ForeignKeyConstraint(["document_id"], ["documents.id"], name="fk_claims_document_id_documents"),
        sa.ForeignKeyConstraint(
            ["document_run_id"], ["document_runs.id"], name="fk_claims_document_run_id_document_runs"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_claims_run_id_runs"),
        sa.CheckConstraint(f"state IN ({STATES})", name="ck_claims_state"),
    )
    op.create_index("ix_claims_run_id", "claims", ["run_id"])
    op.create_index("ix_claims_document_run_id", "claims", ["document_run_id"])

    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_run_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("document_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("prompt_version", sa.String(100), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("raw_response", sa.Text(), nullable=True),
        sa.Column("parsed", sa.JSON(), nullable=True),
        sa.Column("findings", sa.JSON(), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=True),
        sa.Column("sentences", sa.JSON(), nullable=True),
        sa.Column("evidence_spans", sa.JSON(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("mode", sa.String(50), nullable=True),
        sa.Column("model", sa.String(500), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("transport", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        timestamp("created_at"),
        timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_attempts"),
        sa.ForeignKeyConstraint(
            ["document_run_id"], ["document_runs.id"], name="fk_attempts_document_run_id_document_runs"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_attempts_run_id_runs"),
        sa.ForeignKeyConstraint(["document_id"], ["documents.id"], name="fk_attempts_document_id_documents"),
        sa.UniqueConstraint(
            "document_run_id", "kind", "number", name="uq_attempts_document_run_id_kind_number"
        ),
        sa.CheckConstraint("kind IN ('generate', 'repair', 'judge')", name="ck_attempts_kind"),
        sa.CheckConstraint(
            "outcome IN ('passed', 'failed', 'unparseable', 'transport_error', 'interrupted',"
            " 'protocol_error')",
            name="ck_attempts_outcome",
        ),
    )
    op.create_index("ix_attempts_run_id", "attempts", ["run_id"])

    # Batch mode: SQLite cannot add a constraint to an existing table, so it rebuilds the (empty) table.
    with op.batch_alter_table("document_runs") as batch:
        batch.create_foreign_key(
            "fk_document_runs_final_attempt_id_attempts", "attempts", ["final_attempt_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("document_runs") as batch:
        batch.drop_constraint("fk_document_runs_final_attempt_id_attempts", type_="foreignkey")
    op.drop_table("attempts")
    op.drop_table("claims")
    op.drop_table("document_runs")
    op.drop_table("documents")
    op.drop_table("runs")
