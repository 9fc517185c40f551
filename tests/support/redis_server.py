"""A real redis-server on a free port for one test (no persistence), started and stopped by the test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REDIS_SERVER = "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def redis_server(folder: Path, timeout: float = 20.0) -> Iterator[str]:
    """The URL of a fresh redis-server that answers PING; skipped when the binary is not installed."""
    binary = REDIS_SERVER if Path(REDIS_SERVER).exists() else shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_for_ping(url, process, timeout)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_ping(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {process.returncode}: {process.stderr.read() if process.stderr else ''}")
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.02)  # not listening yet: poll again
        raise TimeoutError(f"redis-server at {url} did not answer PING in {timeout} s")
    finally:
        client.close()
