"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.databases import fresh_database, stop_cluster
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
    """A fresh, empty database: an SQLite file, and PostgreSQL on the session's throwaway cluster (or the server of
    ``EXTRACT_TEST_POSTGRES_URL``); see ``tests.support.databases``."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def fresh_pool() -> Iterator[None]:
    """The CPU pool's processes started afresh for the test, and stopped after it."""
    from extractor import offload

    offload.POOL.close()
    yield
    offload.POOL.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the throwaway PostgreSQL cluster, if a test started one."""
    stop_cluster()


@pytest.fixture(autouse=True)
def contract_registry() -> Iterator[None]:
    """Each test starts with the contracts and contract folders the process knew before it: a test that loads
    ``purchase_order`` from the samples (registered by name and version for the process's life) must not hand that
    copy to a later test whose own folder changes it."""
    from extractor.contracts import registry

    known, folders = dict(registry._CONTRACTS), list(registry._DIRS)
    yield
    registry._CONTRACTS.clear()
    registry._CONTRACTS.update(known)
    registry._DIRS[:] = folders
