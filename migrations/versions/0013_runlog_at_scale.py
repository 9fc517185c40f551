"""The run log at a million document runs: what ``show``, ``stats --corrections``, ``export`` and ``doctor`` look up
is indexed or written when it happens, so they do not read the whole log.

- ``document_runs.name``: the file name of ``path`` (what follows its last ``/``), indexed: ``extract show PATH``
  finds its document runs through ``ix_document_runs_name`` instead of reading every path; filled for existing rows.
- ``ix_approved_records_approved_at``: export reads approved records in approval order, ``--since`` a range of it.
- ``reviews.run_id`` (the run of the reviewed document run), ``reviews.current`` (the newest decision on its
  document run), ``reviews.changes`` (how many field paths an approval changed; NULL for a rejection and for an
  approval recorded before revision 0009) and ``review_fields`` (a row per field path a current approval
  changed): ``extract stats --corrections`` counts them in one grouped query. Filled here from
  ``reviews.changed_fields`` for the decisions already recorded.
- ``integrity_checks``: every ``extract doctor`` check with the high-water marks it started from, so the next one
  checks what changed since the last clean one.

Plain ADD COLUMN (with its constraint on SQLite, which allows that) and new tables: no table is copied.
``document_runs.name`` keeps the DEFAULT '' that SQLite's ADD COLUMN ... NOT NULL needs (PostgreSQL drops it);
the store always writes the name.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

FILE_NAME = {
    "sqlite": "substr(path, length(rtrim(path, replace(path, '/', ''))) + 1)",
    "postgresql": "substring(path from '[^/]*$')",
}
"""SQL for what follows the last ``/`` of ``path`` (the whole path without one), as ``extractor.store.tables.file_name``."""


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    sqlite = dialect == "sqlite"
    op.add_column("document_runs", sa.Column("name", sa.Text(), nullable=False, server_default=""))
    op.execute(f"UPDATE document_runs SET name = {FILE_NAME[dialect]}")
    if not sqlite:
        op.alter_column("document_runs", "name", server_default=None)
    op.create_index("ix_document_runs_name", "document_runs", ["name"])
    op.create_index("ix_approved_records_approved_at", "approved_records", ["approved_at", "id"])

    if sqlite:  # a column with its constraint: SQLite adds it without a copy
        op.execute("ALTER TABLE reviews ADD COLUMN run_id VARCHAR(32) CONSTRAINT fk_reviews_run_id_runs REFERENCES runs (id)")
        op.execute("UPDATE reviews SET run_id = (SELECT run_id FROM document_runs WHERE id = reviews.document_run_id)")
    else:
        op.add_column("reviews", sa.Column("run_id", sa.String(32), nullable=True))
        op.create_foreign_key("fk_reviews_run_id_runs", "reviews", "runs", ["run_id"], ["id"])
        op.execute("UPDATE reviews SET run_id = d.run_id FROM document_runs d WHERE d.id = reviews.document_run_id")
    op.add_column("reviews", sa.Column("current", sa.Boolean(), nullable=False, server_default=sa.true()))
    op.add_column("reviews", sa.Column("changes", sa.Integer(), nullable=True))
    op.execute("UPDATE reviews SET current = FALSE WHERE EXISTS (SELECT 1 FROM reviews newer WHERE "
               "newer.document_run_id = reviews.document_run_id AND (newer.created_at > reviews.created_at OR "
               "(newer.created_at = reviews.created_at AND newer.id > reviews.id)))")
    is_list = "json_type(changed_fields) = 'array'" if sqlite else "json_typeof(changed_fields) = 'array'"
    op.execute(f"UPDATE reviews SET changes = json_array_length(changed_fields) WHERE decision = 'approved' AND {is_list}")
    op.create_index("ix_reviews_current_decision_run_id_changes", "reviews", ["current", "decision", "run_id", "changes"])

    op.create_table(
        "review_fields",
        sa.Column("review_id", sa.Integer(), nullable=False),
        sa.Column("field_path", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("review_id", "field_path", name="pk_review_fields"),
        sa.ForeignKeyConstraint(["review_id"], ["reviews.id"], name="fk_review_fields_review_id_reviews"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_review_fields_run_id_runs"),
    )
    op.create_index("ix_review_fields_run_id_field_path", "review_fields", ["run_id", "field_path"])
    elements = "json_each(r.changed_fields) AS j" if sqlite else "json_array_elements_text(r.changed_fields) AS j(value)"
    op.execute(f"INSERT INTO review_fields (review_id, field_path, run_id) SELECT DISTINCT r.id, j.value, r.run_id "
               f"FROM reviews r, {elements} WHERE r.current AND r.changes > 0 AND r.run_id IS NOT NULL")

    op.create_table(
        "integrity_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("full", sa.Boolean(), nullable=False),
        sa.Column("problems", sa.Integer(), nullable=False),
        sa.Column("marks", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_integrity_checks"),
    )


def downgrade() -> None:
    op.drop_table("integrity_checks")
    op.drop_index("ix_review_fields_run_id_field_path", table_name="review_fields")
    op.drop_table("review_fields")
    op.drop_index("ix_reviews_current_decision_run_id_changes", table_name="reviews")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("fk_reviews_run_id_runs", "reviews", type_="foreignkey")
    for column in ("changes", "current", "run_id"):
        op.drop_column("reviews", column)  # SQLite (3.35+) drops a column that only its own constraint names
    op.drop_index("ix_approved_records_approved_at", table_name="approved_records")
    op.drop_index("ix_document_runs_name", table_name="document_runs")
    op.drop_column("document_runs", "name")
