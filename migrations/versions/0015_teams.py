"""A service several teams share: reviewers per owner, expiring tokens, review claims, two approvals, indexed reads.

- ``api_tokens.all_owners``: a reviewer that reads and decides every owner's work (``--all-owners``); any other
  reviewer reads only its owner's. Reviewer and admin tokens made before this revision without an owner saw
  every owner's work, so they keep it (``all_owners`` true, shown by ``extract tokens list``); a reviewer made
  with ``--owner`` is limited to that owner from now on.
- ``api_tokens.expires_at`` and ``last_used_at``: tokens expire. Those made before this revision expire 90 days
  after it is applied (``extract tokens rotate NAME`` renews one).
- ``document_runs.review_version``: the number of decisions taken on a document run, so a decision is written
  only if nobody decided in between (compare-and-set).
- ``signoffs``: each person's approval of a record whose contract needs more than one; ``approved_records.approvals``
  names them on the record.
- ``review_claims``: who has a document open to review it, until when.
- Indexes for what a submitter or a reviewer of one owner reads: tasks by document run and by upload, the newest
  batches of one owner and of everyone (``ix_batches_owner`` becomes ``ix_batches_owner_created_at``).

Plain ADD COLUMN (with server defaults), new tables and indexes: no table is copied on SQLite.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | None = None
depends_on: str | None = None

# As ``extractor.vocab`` had them when this revision was written (migrations never import the models).
SIGNOFF_STATES = "state IN ('pending', 'approved', 'superseded')"
TOKEN_DAYS = 90


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("all_owners", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("api_tokens", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    tokens = sa.table("api_tokens", sa.column("role", sa.String), sa.column("owner", sa.String),
                      sa.column("all_owners", sa.Boolean), sa.column("expires_at", sa.DateTime(timezone=True)),
                      sa.column("revoked_at", sa.DateTime(timezone=True)))
    op.execute(tokens.update().where(tokens.c.role.in_(["reviewer", "admin"]), tokens.c.owner.is_(None))
               .values(all_owners=True))
    expires = datetime.now(UTC) + timedelta(days=TOKEN_DAYS)
    if op.get_bind().dialect.name == "sqlite":  # stored as naive UTC there (extractor.store.tables.UTCDateTime)
        expires = expires.replace(tzinfo=None)
    op.execute(tokens.update().where(tokens.c.revoked_at.is_(None)).values(expires_at=expires))

    op.add_column("document_runs", sa.Column("review_version", sa.Integer(), server_default=sa.text("0"),
                                             nullable=False))
    op.add_column("approved_records", sa.Column("approvals", sa.JSON(none_as_null=True), nullable=True))
    op.create_table(
        "signoffs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("document_run_id", sa.Integer(), nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("record_sha256", sa.String(64), nullable=False),
        sa.Column("evidence_spans", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("attempt_id", sa.Integer(), nullable=True),
        sa.Column("edited", sa.Boolean(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("block_override", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("changed_fields", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("review_id", sa.Integer(), nullable=True),
        sa.CheckConstraint(SIGNOFF_STATES, name="ck_signoffs_state"),
        sa.ForeignKeyConstraint(["document_run_id"], ["document_runs.id"], name="fk_signoffs_document_run_id_document_runs"),
        sa.ForeignKeyConstraint(["review_id"], ["reviews.id"], name="fk_signoffs_review_id_reviews"),
        sa.PrimaryKeyConstraint("id", name="pk_signoffs"),
    )
    op.create_index("ix_signoffs_document_run_id_state", "signoffs", ["document_run_id", "state"])
    op.create_table(
        "review_claims",
        sa.Column("document_run_id", sa.Integer(), nullable=False),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["document_run_id"], ["document_runs.id"],
                                name="fk_review_claims_document_run_id_document_runs"),
        sa.PrimaryKeyConstraint("document_run_id", name="pk_review_claims"),
    )

    op.create_index("ix_tasks_document_run_id", "tasks", ["document_run_id"])
    op.create_index("ix_tasks_upload_id", "tasks", ["upload_id"])
    op.drop_index("ix_batches_owner", table_name="batches")
    op.create_index("ix_batches_owner_created_at", "batches", ["owner", "created_at"])
    op.create_index("ix_batches_created_at", "batches", ["created_at"])


def downgrade() -> None:
    """Pending sign-offs, claims and expiry are forgotten; a reviewer limited to an owner sees everyone again."""
    op.drop_index("ix_batches_created_at", table_name="batches")
    op.drop_index("ix_batches_owner_created_at", table_name="batches")
    op.create_index("ix_batches_owner", "batches", ["owner"])
    op.drop_index("ix_tasks_upload_id", table_name="tasks")
    op.drop_index("ix_tasks_document_run_id", table_name="tasks")
    op.drop_table("review_claims")
    op.drop_index("ix_signoffs_document_run_id_state", table_name="signoffs")
    op.drop_table("signoffs")
    op.drop_column("approved_records", "approvals")
    op.drop_column("document_runs", "review_version")
    op.drop_column("api_tokens", "last_used_at")
    op.drop_column("api_tokens", "expires_at")
    op.drop_column("api_tokens", "all_owners")
