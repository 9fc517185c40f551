"""Store what repeats once, and find what waits for review without reading every document run.

- ``request_parts``: what a run's requests share (system prompt, template text, schema), once;
  ``attempts.request_part`` names it, ``attempts.request`` keeps the attempt's own texts. Attempts written
  before keep their whole request inline (``request_part`` NULL) and read back as they are.
- ``attempts.parsed_is_raw``: a candidate that is exactly the JSON of the raw answer is kept once.
- ``document_runs.decided`` (set for every document run that has a review) and the partial index
  ``ix_document_runs_waiting`` over the undecided reviewable ones: the review queue reads only those.

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

WAITING = "NOT decided AND state IN ('READY_FOR_REVIEW', 'MANUAL_REVIEW')"
"""As ``extractor.store.tables.waiting()`` when this revision was written (migrations never import the tables)."""


def upgrade() -> None:
    # Plain ADD COLUMN everywhere (SQLite allows it with a REFERENCES clause): no copy of these large tables.
    op.create_table(
        "request_parts",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_request_parts"),
    )
    if op.get_bind().dialect.name == "sqlite":  # Alembic would ALTER a constraint in, which SQLite cannot
        op.execute("ALTER TABLE attempts ADD COLUMN request_part VARCHAR(64) "
                   "CONSTRAINT fk_attempts_request_part_request_parts REFERENCES request_parts (sha256)")
    else:
        op.add_column("attempts", sa.Column("request_part", sa.String(64), nullable=True))
        op.create_foreign_key("fk_attempts_request_part_request_parts", "attempts", "request_parts",
                              ["request_part"], ["sha256"])
    op.add_column("attempts", sa.Column("parsed_is_raw", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("document_runs", sa.Column("decided", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("UPDATE document_runs SET decided = TRUE WHERE id IN (SELECT document_run_id FROM reviews)")
    op.create_index("ix_document_runs_waiting", "document_runs", ["started_at"], sqlite_where=sa.text(WAITING),
                    postgresql_where=sa.text(WAITING))


def downgrade() -> None:
    op.drop_index("ix_document_runs_waiting", table_name="document_runs")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("fk_attempts_request_part_request_parts", "attempts", type_="foreignkey")
    for table, column in (("document_runs", "decided"), ("attempts", "parsed_is_raw"), ("attempts", "request_part")):
        op.drop_column(table, column)  # SQLite (3.35+) drops a column that only its own constraint names
    op.drop_table("request_parts")
