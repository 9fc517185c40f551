"""The API of ``extract serve`` on a real socket for tests, and what its clients do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from extractor.service.app import Service, create_app
from tests.support.processes import wait_for
from tests.support.redis_server import free_port


@contextmanager
def serving(service: Service) -> Iterator[str]:
    """The app on a real socket, in a thread of the test; its base URL."""
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=free_port(), log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def finished(client: httpx.Client, token: str, submission: str) -> dict[str, Any]:
    """The submission once a worker finished it."""
    found: dict[str, Any] = {}

    def done() -> bool:
        found.update(client.get(f"/v1/submissions/{submission}", headers=bearer(token)).json())
        return found["state"] == "finished"

    wait_for(done, f"submission {submission} to finish", timeout=240)
    return found
