"""Shared fixtures."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text

from tests.support.llm_server import Script, ScriptedLLMServer


@pytest.fixture
def llm_server() -> Iterator[Callable[..., ScriptedLLMServer]]:
    """Starts scripted OpenAI-compatible servers on free ports: ``server = llm_server([Reply("{}")])``.

    Keyword options go to ``ScriptedLLMServer`` (e.g. ``reject_response_format=True``); every server
    started here is stopped after the test.
    """
    started: list[ScriptedLLMServer] = []

    def start(script: Script = (), **options: Any) -> ScriptedLLMServer:
        server = ScriptedLLMServer(script, **options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: an SQLite file always; PostgreSQL when ``EXTRACT_TEST_POSTGRES_URL`` is set.

    For PostgreSQL the variable is an admin URL: a uniquely named database is created for the test and
    dropped after it, so tests never see each other's rows (``.ci/postgres.sh`` prints the variable).
    """
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/t.db"
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
