"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

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
