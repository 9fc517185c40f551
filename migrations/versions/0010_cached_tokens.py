"""Cost: the prompt tokens a server read from its prompt cache, per attempt, as it reported them.

``attempts.cached_tokens`` (OpenAI's ``usage.prompt_tokens_details.cached_tokens``; part of
``prompt_tokens``): cached input is billed at a lower price, so a call's cost needs it (``extractor.prices``).
NULL when the server did not report it, and for attempts recorded before this revision.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("cached_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "cached_tokens")
