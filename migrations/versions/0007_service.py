"""The queue and the HTTP service: uploaded documents, batches, tasks (with their delivery counts), API tokens.

- ``uploads``: the bytes of a submitted document, so a worker on another machine reads it from the run log;
- ``batches``: documents submitted together and the settings every worker converts them with;
- ``tasks``: one queued document (the Celery message carries only its id): state, outcome and cause (with the
  tokens and final rule ids the batch summary reports),
  ``deliveries`` (how many times a worker started it: a poison document ends ERROR after N), the worker
  run that last started it and the document run it ended in;
- ``api_tokens``: bearer tokens of ``extract serve``, stored as SHA-256 only, with their role.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

# As ``extractor.vocab`` had them when this revision was written (migrations never import the models).
TASK_STATES = "state IN ('queued', 'started', 'finished')"
OUTCOMES = ("outcome IS NULL OR outcome IN ('READY_FOR_REVIEW', 'MANUAL_REVIEW', 'ERROR', 'INTERRUPTED', "
            "'SKIPPED', 'INPUT_ERROR')")
ROLES = "role IN ('submitter', 'reviewer', 'admin')"


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_uploads"),
    )
    op.create_index("ix_uploads_sha256", "uploads", ["sha256"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("submitted_by", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_batches"),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("batch_id", sa.String(32), nullable=False),
        sa.Column("upload_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(20), nullable=True),
        sa.Column("cause", sa.Text(), nullable=True),
        sa.Column("tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("rule_ids", sa.JSON(), nullable=False),
        sa.Column("deliveries", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=True),
        sa.Column("document_run_id", sa.Integer(), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_tasks"),
        sa.ForeignKeyConstraint(["batch_id"], ["batches.id"], name="fk_tasks_batch_id_batches"),
        sa.ForeignKeyConstraint(["upload_id"], ["uploads.id"], name="fk_tasks_upload_id_uploads"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_tasks_run_id_runs"),
        sa.ForeignKeyConstraint(["document_run_id"], ["document_runs.id"], name="fk_tasks_document_run_id_document_runs"),
        sa.CheckConstraint(TASK_STATES, name="ck_tasks_state"),
        sa.CheckConstraint(OUTCOMES, name="ck_tasks_outcome"),
    )
    op.create_index("ix_tasks_batch_id_state", "tasks", ["batch_id", "state"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("name", name="uq_api_tokens_name"),
        sa.UniqueConstraint("token_sha256", name="uq_api_tokens_token_sha256"),
        sa.CheckConstraint(ROLES, name="ck_api_tokens_role"),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
    op.drop_index("ix_tasks_state", table_name="tasks")
    op.drop_index("ix_tasks_batch_id_state", table_name="tasks")
    op.drop_table("tasks")
    op.drop_table("batches")
    op.drop_index("ix_uploads_sha256", table_name="uploads")
    op.drop_table("uploads")
