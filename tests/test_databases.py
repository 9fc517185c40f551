"""The tests' own PostgreSQL: with the server binaries installed, nothing needs configuring.

``tests.support.databases`` starts a throwaway cluster (pytest-postgresql's executor) when
``EXTRACT_TEST_POSTGRES_URL`` is not set, so the PostgreSQL variants of the store, compare and queue tests
run on a fresh machine instead of being skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.support import databases


def test_a_fresh_machine_gets_a_postgres_server_without_configuration(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if databases.pg_ctl() is None:
        pytest.skip("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    monkeypatch.delenv(databases.ADMIN_URL_ENV, raising=False)
    with databases.fresh_database("postgresql", tmp_path) as url:
        assert url.startswith("postgresql+psycopg://") and "127.0.0.1" in url
        engine = create_engine(url)
        with engine.connect() as connection:
            assert connection.execute(text("SELECT current_database()")).scalar() == url.rsplit("/", 1)[1]
            assert connection.execute(text("SHOW fsync")).scalar() == "off"  # a throwaway: nothing to keep
        engine.dispose()
    with databases.fresh_database("postgresql", tmp_path) as second:
        assert second != url  # one database per test, on the one server of the session
