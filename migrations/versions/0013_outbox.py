"""What the queue keeps of a submission: tasks not yet sent to the broker, the broker that took each message, and
the name an upload was sent with.

- ``tasks.state`` takes ``unsent``: committed, its message not yet taken by the broker (it was away); the outbox
  of ``extract serve`` and ``extract run --queue`` sends it when the broker is back (``extractor.queue.outbox``);
- ``tasks.sent_to``: the broker that took the message (Redis's run id, new at every restart), so a message lost
  with a broker that restarted without its data is sent again; NULL for tasks queued before this revision;
- ``uploads.sent_name``: the name as its submitter sent it, when the document's name (its base name) differs.

The CHECK constraint is widened in Alembic's batch mode: SQLite recreates the table (named constraints,
indexes and foreign keys are reflected and carried over), PostgreSQL alters it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

# As ``extractor.vocab`` had them when this revision was written (migrations never import the models).
OLD = "state IN ('queued', 'started', 'finished')"
NEW = "state IN ('unsent', 'queued', 'started', 'finished')"


def _states(check: str) -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("ck_tasks_state", type_="check")
        batch.create_check_constraint("ck_tasks_state", sa.text(check))


def upgrade() -> None:
    _states(NEW)
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("sent_to", sa.String(64), nullable=True))
    with op.batch_alter_table("uploads") as batch:
        batch.add_column(sa.Column("sent_name", sa.Text(), nullable=True))


def downgrade() -> None:
    """Unsent tasks become queued: an older extractor's service takes them up (in process) or waits for a
    message that is not coming, as it did before."""
    with op.batch_alter_table("uploads") as batch:
        batch.drop_column("sent_name")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("sent_to")
    op.execute("UPDATE tasks SET state = 'queued' WHERE state = 'unsent'")
    _states(OLD)
