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
    with RedisServer(folder, timeout) as server:
        yield server.url


class RedisServer:
    """A redis-server on a port of its own that a test may stop and start again (a broker outage); without
    persistence, so what it held is gone after a restart, as after a crash of a broker without it."""

    def __init__(self, folder: Path, timeout: float = 20.0) -> None:
        binary = REDIS_SERVER if Path(REDIS_SERVER).exists() else shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
        self.binary = binary
        self.folder = folder
        self.timeout = timeout
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", "--dir", str(self.folder)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait_for_ping(self.url, self.process, self.timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
