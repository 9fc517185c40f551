"""What the queue keeps of a submission: tasks not yet sent to the broker, the broker that took each message, and
the name a document was sent with.

- ``tasks.state`` takes ``unsent``: committed, its message not yet taken by the broker (it was away); the outbox
  of ``extract serve`` and ``extract run --queue`` sends it when the broker is back (``extractor.queue.outbox``);
- ``tasks.sent_to``: the broker that took the message (Redis's run id, new at every restart), so a message lost
  with a broker that restarted without its data is sent again; NULL for tasks queued before this revision;
- ``tasks.sent_name``: the name as its submitter sent it, when the document's name (its base name) differs.

All in one step of Alembic's batch mode on ``tasks``: SQLite recreates the table (named constraints, indexes and
foreign keys are reflected and carried over; no table refers to ``tasks``, so its copy replaces it with foreign
keys enforced), PostgreSQL alters it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

REBUILDS = ("tasks",)  # SQLite copies the table: extractor.store.db checks its references before committing

# As ``extractor.vocab`` had them when this revision was written (migrations never import the models).
OLD = "state IN ('queued', 'started', 'finished')"
NEW = "state IN ('unsent', 'queued', 'started', 'finished')"


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("ck_tasks_state", type_="check")
        batch.create_check_constraint("ck_tasks_state", sa.text(NEW))
        batch.add_column(sa.Column("sent_to", sa.String(64), nullable=True))
        batch.add_column(sa.Column("sent_name", sa.Text(), nullable=True))


def downgrade() -> None:
    """Unsent tasks become queued: an older extractor's service takes them up (in process) or waits for a
    message that is not coming, as it did before."""
    op.execute("UPDATE tasks SET state = 'queued' WHERE state = 'unsent'")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("sent_name")
        batch.drop_column("sent_to")
        batch.drop_constraint("ck_tasks_state", type_="check")
        batch.create_check_constraint("ck_tasks_state", sa.text(OLD))
