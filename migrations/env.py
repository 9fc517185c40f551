"""Alembic environment: migrations run on the connection ``extractor.store.db.upgrade_schema`` passes in.

There is no alembic.ini: ``open_store`` upgrades every database it opens. To write a new revision, copy
the newest file in ``versions/`` (hand-written, one small step each, every constraint named explicitly)
and bump the numbers. No target metadata on purpose: a migration must build the same schema whatever the
models look like later; tests compare the migrated schema with the models instead.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("migrations run through extractor.store.open_store(), which passes a connection")

# render_as_batch: SQLite cannot ALTER most things, so later migrations recreate tables there.
context.configure(connection=connection, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
