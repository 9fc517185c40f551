"""Fresh databases for tests: an SQLite file, or a PostgreSQL database created for one test and dropped after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """A URL of an empty database on ``backend`` ("sqlite" or "postgresql").

    For PostgreSQL ``EXTRACT_TEST_POSTGRES_URL`` is an admin URL (``.ci/postgres.sh`` prints it): a uniquely
    named database is created and dropped afterwards, so tests never see each other's rows. Without the
    variable the test is skipped.
    """
    if backend == "sqlite":
        yield f"sqlite:///{folder}/t.db"
        return
    admin_url = os.environ.get("EXTRACT_TEST_POSTGRES_URL")
    if not admin_url:
        pytest.skip("EXTRACT_TEST_POSTGRES_URL is not set (see .ci/postgres.sh)")
    name = f"extract_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
