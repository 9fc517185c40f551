"""An approved record's CSV cells, stored when it is approved.

- ``approved_records.record_cells``: the cells of the record's columns and of its evidence spans, as a CSV export
  writes them (``extractor.store.cells.record_cells``), so that export writes a row without reading the record.
  Records approved before this revision have none (NULL): export makes their cells from the record, as it did.
  A BLOB in SQLite; text in PostgreSQL, whose driver reads a bytea as hex at a cost (the cells are UTF-8 without NUL).

Plain ADD COLUMN: no table is copied on SQLite.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("approved_records", sa.Column("record_cells", sa.LargeBinary().with_variant(sa.Text(), "postgresql"),
                                                nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approved_records") as batch:
        batch.drop_column("record_cells")
