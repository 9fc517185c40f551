"""A raw TCP server on 127.0.0.1 whose answers are bytes a test writes itself: what no well-behaved HTTP
server library would send (bad framing, a gzip bomb, a reset mid-answer, an answer that never comes).

Each accepted connection reads one request at a time (head, then a Content-Length body) and hands the
socket to the test's ``answer(connection, request)``, in a thread per connection. ``answer`` returns True
to read the next request on the same connection, False to close it. A behaviour that holds a connection
open waits on ``server.closing``, which ``close()`` sets, so no thread outlives its test.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO


@dataclass(frozen=True)
class Request:
    line: str  # "POST /v1/chat/completions HTTP/1.1"
    headers: dict[str, str]  # lower-case names
    body: bytes


Answer = Callable[[socket.socket, Request], bool]


def read_head(reader: BinaryIO) -> tuple[str, dict[str, str]]:
    """A request line and its headers (lower-case names) from a socket file; ``("", {})`` once the peer closed."""
    line = reader.readline().decode("latin-1").strip()
    headers = {}
    while (header := reader.readline()) not in (b"\r\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return line, headers


class TCPServer:
    """A listening socket on 127.0.0.1 (a free port); each accepted connection goes to ``_serve`` in a thread."""

    def __init__(self) -> None:
        self.connections = 0
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self._listener.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.closing.set()
        self._listener.close()

    def __enter__(self) -> TCPServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RawServer(TCPServer):
    """Answers every request with ``answer``; records what came in."""

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self.received = threading.Event()  # set once the first request has been read whole
        self._tls = tls
        super().__init__()

    def __enter__(self) -> RawServer:
        return self

    def _serve(self, client: socket.socket) -> None:
        if self._tls is not None:
            try:
                client = self._tls.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                client.close()
                return
        reader = client.makefile("rb")
        try:
            with client:
                while not self.closing.is_set():
                    line, headers = read_head(reader)
                    if not line:
                        return
                    request = Request(line, headers, reader.read(int(headers.get("content-length", "0"))))
                    with self._lock:
                        self.requests.append(request)
                    self.received.set()
                    if not self.answer(client, request):
                        return
        except OSError:
            return  # the client went away (it may: a capped body, a timeout) while an answer was being written

    def hold(self) -> bool:
        """Keep the connection open, silent, until the test ends."""
        self.closing.wait()
        return False


def reset(connection: socket.socket) -> None:
    """Close with a TCP RST rather than a FIN."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def ok(body: bytes, *headers: str) -> bytes:
    """A 200 with a Content-Length body and any extra header lines."""
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body
