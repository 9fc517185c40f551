"""The model calls' HTTP/1.1 client against raw sockets: framing, encodings, kept-alive connections, proxies, TLS.

Each server here is a real TCP server on 127.0.0.1 that answers every request with the next scripted bytes,
so what the client must read (chunked bodies, gzip, interim responses, a connection closed mid-way) is exactly
what a server sent.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import socket
import ssl
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extractor.providers import http
from extractor.providers.http import ConnectError, HttpClient, ProtocolError, ReadError, Response

CLOSE = None
"""A script step: close the connection without answering (after reading the request)."""


class TCPServer:
    """A listening socket on 127.0.0.1; each accepted connection is handed to ``_serve`` in a thread of its own."""

    def __init__(self) -> None:
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
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
        self._listener.close()


def read_head(reader: Any) -> tuple[str, dict[str, str]]:
    """A request line and its headers (lower-case names) from a socket file; ``("", {})`` once the peer closed."""
    line = reader.readline().decode("latin-1").strip()
    headers = {}
    while (header := reader.readline()) not in (b"\r\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return line, headers


class RawServer(TCPServer):
    """Answers each request (head + Content-Length body) with the next scripted bytes; records what came in."""

    def __init__(self, answers: list[bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self._tls = tls
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        if self._tls is not None:
            try:
                client = self._tls.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                client.close()
                return
        reader = client.makefile("rb")
        with client:
            while True:
                line, headers = read_head(reader)
                if not line:
                    return
                body = reader.read(int(headers.get("content-length", "0")))
                with self._lock:
                    self.requests.append((line, headers, body))
                    answer = self.answers.pop(0) if self.answers else CLOSE
                if answer is CLOSE:
                    return
                client.sendall(answer)
                if b"\r\nConnection: close\r\n" in answer.split(b"\r\n\r\n")[0] + b"\r\n":
                    return


@pytest.fixture
def raw_server() -> Iterator[Any]:
    started: list[RawServer] = []

    def start(answers: list[bytes | None], tls: ssl.SSLContext | None = None) -> RawServer:
        server = RawServer(answers, tls)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def post_all(client: HttpClient, *bodies: bytes) -> list[Response]:
    async def run() -> list[Response]:
        try:
            return [await client.post("chat/completions", body) for body in bodies]
        finally:
            await client.aclose()

    return asyncio.run(run())


def failure(client: HttpClient, body: bytes = b"{}") -> BaseException:
    with pytest.raises(http.HttpError) as caught:
        post_all(client, body)
    return caught.value


def test_a_request_is_one_post_with_the_headers_and_connections_are_kept_alive(raw_server: Any) -> None:
    server = raw_server([ok(b'{"a": 1}', "Content-Type: application/json"), ok(b'{"b": 2}')])
    client = HttpClient(f"http://127.0.0.1:{server.port}/v1/", {"Authorization": "Bearer k"})
    first, second = post_all(client, b'{"x": 1}', b'{"y": 2}')
    assert (first.status, first.body, first.headers["content-type"]) == (200, b'{"a": 1}', "application/json")
    assert second.body == b'{"b": 2}' and second.is_success
    assert server.connections == 1
    line, headers, body = server.requests[0]
    assert line == "POST /v1/chat/completions HTTP/1.1" and body == b'{"x": 1}'
    assert headers["host"] == f"127.0.0.1:{server.port}" and headers["authorization"] == "Bearer k"
    assert client.base_url == f"http://127.0.0.1:{server.port}/v1"


def test_chunked_gzip_deflate_and_interim_responses_are_read(raw_server: Any) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4;ext=1\r\n{\"a\"\r\n5\r\n: 1}\n\r\n0\r\nX-Trailer: t\r\n\r\n")
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    deflated = raw_deflate.compress(b"deflated") + raw_deflate.flush()
    server = raw_server([chunked, ok(gzip.compress(b"zipped " * 50), "Content-Encoding: gzip"),
                         b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100"), ok(deflated, "Content-Encoding: deflate"),
                         b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 2\r\n\r\nbusy"])
    responses = post_all(HttpClient(f"http://127.0.0.1:{server.port}", {}), *[b"{}"] * 5)
    assert [r.body for r in responses[:4]] == [b'{"a": 1}\n', b"zipped " * 50, b"after 100", b"deflated"]
    assert (responses[4].status, responses[4].text, responses[4].headers["retry-after"]) == (503, "busy", "2")
    assert server.connections == 1  # every one of them left the connection reusable
    assert server.requests[0][1]["accept-encoding"] == "gzip, deflate"


def test_a_body_framed_by_the_end_of_the_connection_and_connection_close(raw_server: Any) -> None:
    server = raw_server([b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
                         ok(b"next", "Connection: close"), ok(b"third")])
    responses = post_all(HttpClient(f"http://127.0.0.1:{server.port}", {}), b"1", b"2", b"3")
    assert [r.body for r in responses] == [b"until the end", b"next", b"third"]
    assert server.connections == 3  # a connection the server closes is never reused


def test_a_kept_alive_connection_the_server_dropped_unanswered_is_retried_once_on_a_new_one(raw_server: Any) -> None:
    server = raw_server([ok(b"first"), CLOSE, ok(b"second")])
    responses = post_all(HttpClient(f"http://127.0.0.1:{server.port}", {}), b"1", b"2")
    assert [r.body for r in responses] == [b"first", b"second"]
    assert [body for _, _, body in server.requests] == [b"1", b"2", b"2"] and server.connections == 2


def test_a_new_connection_closed_unanswered_or_mid_body_is_a_read_error(raw_server: Any) -> None:
    error = failure(HttpClient(f"http://127.0.0.1:{raw_server([CLOSE]).port}", {}))
    assert isinstance(error, ReadError) and "before the response was complete" in str(error)
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n0123456789"
    error = failure(HttpClient(f"http://127.0.0.1:{raw_server([cut]).port}", {}))
    assert isinstance(error, ReadError) and "10 of 100 body bytes" in str(error)


@pytest.mark.parametrize("answer, problem", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "bad Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
    (ok(b"not gzip", "Content-Encoding: gzip"), "gzip body does not decompress"),
    (ok(b"x", "Content-Encoding: br"), "unsupported Content-Encoding 'br'"),
])
def test_what_is_not_readable_http_is_a_protocol_error(raw_server: Any, answer: bytes, problem: str) -> None:
    error = failure(HttpClient(f"http://127.0.0.1:{raw_server([answer]).port}", {}))
    assert isinstance(error, ProtocolError) and problem in str(error)


def test_bytes_sent_on_an_idle_connection_are_never_read_as_the_next_answer(raw_server: Any) -> None:
    parting = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n"
    server = raw_server([ok(b"first") + parting, ok(b"second")])
    responses = post_all(HttpClient(f"http://127.0.0.1:{server.port}", {}), b"1", b"2")
    assert [r.body for r in responses] == [b"first", b"second"] and server.connections == 2


def test_a_connection_that_receives_bytes_while_idle_is_closed_at_once() -> None:
    """Bytes that arrive with no request waiting (a server's parting 408) close the connection."""
    async def run() -> bool:
        ours, theirs = socket.socketpair()
        _, connection = await asyncio.get_running_loop().create_connection(http._Connection, sock=ours)
        theirs.sendall(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
        try:
            async with asyncio.timeout(10):
                while not connection.closed:
                    await asyncio.sleep(0.01)
        finally:
            theirs.close()
        return connection.closed

    assert asyncio.run(run())


def test_connections_idle_longer_than_the_keepalive_are_not_reused(raw_server: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "KEEPALIVE_S", 0.0)
    server = raw_server([ok(b"1"), ok(b"2")])
    post_all(HttpClient(f"http://127.0.0.1:{server.port}", {}), b"1", b"2")
    assert server.connections == 2


@pytest.mark.parametrize("base_url", ["localhost:8080/v1", "ftp://models.example/v1", "http:///v1"])
def test_a_base_url_that_is_not_http_is_refused_when_the_client_is_made(base_url: str) -> None:
    with pytest.raises(ValueError, match="is not an http:// or https:// URL"):
        HttpClient(base_url, {})


def test_a_refused_connection_is_a_connect_error_naming_the_address() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    error = failure(HttpClient(f"http://127.0.0.1:{port}", {}))
    assert isinstance(error, ConnectError) and f"127.0.0.1:{port}" in str(error)


def test_an_http_proxy_from_the_environment_gets_the_whole_url_and_its_credentials(
        raw_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = raw_server([ok(b"via proxy")])
    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{proxy.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    [response] = post_all(HttpClient("http://models.example:8080/v1", {"Authorization": "Bearer k"}), b"{}")
    assert response.body == b"via proxy"
    line, headers, _ = proxy.requests[0]
    assert line == "POST http://models.example:8080/v1/chat/completions HTTP/1.1"
    assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"user:p@ss").decode()
    assert headers["host"] == "models.example:8080"
    monkeypatch.setenv("NO_PROXY", "models.example")  # bypassed: straight to a name that does not resolve
    assert isinstance(failure(HttpClient("http://models.example:8080/v1", {})), ConnectError)
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match="socks5://127.0.0.1 from the environment is not supported"):
        HttpClient("https://api.example/v1", {})


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` (openssl, which ``.ci/run`` installs)."""
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    return folder / "cert.pem", folder / "key.pem"


def test_https_checks_the_certificate_against_ssl_cert_file(raw_server: Any, certificate: tuple[Path, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = raw_server([ok(b"secure"), ok(b"again")], tls=context)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    responses = post_all(HttpClient(f"https://localhost:{server.port}/v1", {}), b"1", b"2")
    assert [r.body for r in responses] == [b"secure", b"again"] and server.connections == 1
    monkeypatch.delenv("SSL_CERT_FILE")  # certifi's bundle does not trust a self-signed certificate
    error = failure(HttpClient(f"https://localhost:{server.port}/v1", {}))
    assert isinstance(error, ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(error)


class TunnelProxy(TCPServer):
    """An HTTP proxy that answers CONNECT and then relays bytes both ways (or refuses with ``refuse``)."""

    def __init__(self, refuse: bytes | None = None) -> None:
        self.refuse = refuse
        self.connects: list[tuple[str, dict[str, str]]] = []
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        line, headers = read_head(client.makefile("rb"))
        self.connects.append((line, headers))
        if self.refuse is not None:
            client.sendall(self.refuse)
            client.close()
            return
        port = line.split()[1].rpartition(":")[2]
        upstream = socket.create_connection(("127.0.0.1", int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def relay(source: socket.socket, target: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    target.sendall(data)
            except OSError:
                pass  # the other side closed: the relay ends with it
            finally:
                target.close()

        threading.Thread(target=relay, args=(upstream, client), daemon=True).start()
        relay(client, upstream)


def test_https_through_a_proxy_tunnels_with_connect(raw_server: Any, certificate: tuple[Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = raw_server([ok(b"tunnelled")], tls=context)
    proxy = TunnelProxy()
    refusing = TunnelProxy(refuse=b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setenv("HTTPS_PROXY", f"http://u:pw@127.0.0.1:{proxy.port}")
        [response] = post_all(HttpClient(f"https://localhost:{server.port}/v1", {}), b"{}")
        assert response.body == b"tunnelled"
        [(line, headers)] = proxy.connects
        assert line == f"CONNECT localhost:{server.port} HTTP/1.1"
        assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"u:pw").decode()
        assert server.requests[0][0] == "POST /v1/chat/completions HTTP/1.1"  # inside the tunnel: origin form
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{refusing.port}")
        error = failure(HttpClient(f"https://localhost:{server.port}/v1", {}))
        assert isinstance(error, ConnectError) and f"refused CONNECT localhost:{server.port}: HTTP 407" in str(error)
    finally:
        proxy.close()
        refusing.close()


def test_a_cancelled_call_closes_its_connection() -> None:
    """A call the caller's timeout cancels never leaves its connection for the next call to read."""
    hold = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))  # accepts, reads, never answers
    port = listener.getsockname()[1]

    def silent() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            hold.wait(10)

    threading.Thread(target=silent, daemon=True).start()
    client = HttpClient(f"http://127.0.0.1:{port}", {})

    async def run() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await client.post("chat/completions", b"{}")
        assert client._idle == []  # not put back
        await client.aclose()

    try:
        asyncio.run(run())
    finally:
        hold.set()
        listener.close()
