"""``extract serve``'s app on a real socket for a test: uvicorn on a free port, in a thread of the test."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from extractor.service.app import Service, create_app
from tests.support.redis_server import free_port


@contextmanager
def serving(service: Service) -> Iterator[str]:
    """The app over ``service`` listening on 127.0.0.1; its base URL (stopped on leaving)."""
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
