"""What the model calls' HTTP does over aiohttp, against raw sockets: framing and encodings read right, kept-alive
connections (and the one resend when a server dropped one unanswered), the connection pool's size, proxies
from the environment (http:// and https:// proxies, CONNECT, credentials, NO_PROXY, ALL_PROXY), certificates
from SSL_CERT_FILE / SSL_CERT_DIR, and the log line OPENAI_LOG asks for.

Each server is a real TCP server on 127.0.0.1 (``tests.support.raw_server``) answering with scripted bytes,
so what is read is exactly what a server sent. Hostile servers, through the whole CLI, are in
``test_hostile_servers``.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extractor.generate import GenerationRequest
from extractor.providers import ProviderSettings, from_string
from extractor.providers.transport import AnswerBroken, ConnectFailed, Progress, Response, Session, TransportError
from tests.support.raw_server import RawServer, Request, TCPServer, ok, read_head, reset

KEY = "sk-test-transport-0123456789abcdef"


def scripted(answers: list[bytes | None]) -> Any:
    """An ``answer`` that sends the next scripted bytes (None: close without answering), one per request."""
    remaining = list(answers)
    lock = threading.Lock()

    def answer(connection: socket.socket, request: Request) -> bool:
        with lock:
            data = remaining.pop(0) if remaining else None
        if data is None:
            return False
        connection.sendall(data)
        return b"\r\nconnection: close\r\n" not in data.split(b"\r\n\r\n")[0].lower() + b"\r\n"

    return answer


@pytest.fixture
def raw_server() -> Iterator[Any]:
    started: list[RawServer] = []

    def start(answers: list[bytes | None], tls: ssl.SSLContext | None = None) -> RawServer:
        server = RawServer(scripted(answers), tls)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture(autouse=True)
def no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests set the proxy variables they mean; none leaks in from the machine running them."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def session(base_url: str, connections: int = 4, max_body_bytes: int = 64 << 20, **headers: str) -> Session:
    return Session(base_url, headers, connections=connections, timeout_s=10, max_body_bytes=max_body_bytes)


def post_all(client: Session, *bodies: bytes) -> list[Response]:
    async def run() -> list[Response]:
        try:
            return [await client.post("chat/completions", body, Progress()) for body in bodies]
        finally:
            await client.aclose()

    return asyncio.run(run())


def failure(client: Session, body: bytes = b"{}") -> TransportError:
    with pytest.raises(TransportError) as caught:
        post_all(client, body)
    return caught.value


def test_a_call_is_one_post_with_the_headers_on_a_kept_alive_connection(raw_server: Any) -> None:
    server = raw_server([ok(b'{"a": 1}', "Content-Type: application/json"), ok(b'{"b": 2}')])
    client = session(f"http://127.0.0.1:{server.port}/v1/", Authorization="Bearer k")
    first, second = post_all(client, b'{"x": 1}', b'{"y": 2}')
    assert (first.status, first.body, first.headers["content-type"]) == (200, b'{"a": 1}', "application/json")
    assert second.body == b'{"b": 2}' and second.is_success
    assert server.connections == 1
    request = server.requests[0]
    assert request.line == "POST /v1/chat/completions HTTP/1.1" and request.body == b'{"x": 1}'
    assert request.headers["host"] == f"127.0.0.1:{server.port}" and request.headers["authorization"] == "Bearer k"
    assert request.headers["accept-encoding"] == "gzip, deflate"  # what the reader can inflate, nothing else
    assert client.base_url == f"http://127.0.0.1:{server.port}/v1"


def test_chunked_gzip_deflate_and_interim_responses_are_read(raw_server: Any) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4;ext=1\r\n{\"a\"\r\n5\r\n: 1}\n\r\n0\r\nX-Trailer: t\r\n\r\n")
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    deflated = raw_deflate.compress(b"deflated") + raw_deflate.flush()
    server = raw_server([chunked, ok(gzip.compress(b"zipped " * 50), "Content-Encoding: gzip"),
                         b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after 100"), ok(deflated, "Content-Encoding: deflate"),
                         ok(zlib.compress(b"wrapped"), "Content-Encoding: deflate"),
                         b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 2\r\n\r\nbusy"])
    responses = post_all(session(f"http://127.0.0.1:{server.port}"), *[b"{}"] * 6)
    assert [r.body for r in responses[:5]] == [b'{"a": 1}\n', b"zipped " * 50, b"after 100", b"deflated", b"wrapped"]
    assert (responses[5].status, responses[5].text, responses[5].headers["retry-after"]) == (503, "busy", "2")
    assert server.connections == 1  # every one of them left the connection reusable


@pytest.mark.parametrize("answer, problem", [
    (ok(b"not gzip", "Content-Encoding: gzip"), "gzip body does not decompress"),
    (ok(gzip.compress(b"cut short " * 100)[:-20], "Content-Encoding: gzip"), "gzip body ends before its compressed"),
    (ok(b"x", "Content-Encoding: br"), "unsupported Content-Encoding 'br'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "invalid character in Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "Content-Length 99999999999 is over the 64 MB"),
])
def test_an_answer_that_cannot_be_read_names_what_is_wrong_with_it(raw_server: Any, answer: bytes, problem: str) -> None:
    error = failure(session(f"http://127.0.0.1:{raw_server([answer]).port}"))
    assert problem in str(error) and "\n" not in str(error)


def test_the_body_cap_counts_the_bytes_after_inflating_and_is_named(raw_server: Any) -> None:
    server = raw_server([ok(gzip.compress(b" " * 5000), "Content-Encoding: gzip"), ok(b" " * 2000),
                         b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + b" " * 2000 + b"\r\n0\r\n\r\n",
                         ok(b" " * 1000)])
    client = session(f"http://127.0.0.1:{server.port}", max_body_bytes=1000)
    assert str(failure(client)) == "body over 1000 bytes after gzip"  # 54 bytes on the wire
    assert str(failure(client)) == "Content-Length 2000 is over the 1000 bytes a body may have"  # refused unread
    assert str(failure(client)) == "body over 1000 bytes"
    assert post_all(client, b"{}")[0].body == b" " * 1000


def test_a_body_framed_by_the_end_of_the_connection_and_connection_close(raw_server: Any) -> None:
    server = raw_server([b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
                         ok(b"next", "Connection: close"), ok(b"third")])
    responses = post_all(session(f"http://127.0.0.1:{server.port}"), b"1", b"2", b"3")
    assert [r.body for r in responses] == [b"until the end", b"next", b"third"]
    assert server.connections == 3  # a connection the server closes is never reused


def test_a_kept_alive_connection_the_server_dropped_unanswered_is_resent_once_on_a_new_one(raw_server: Any) -> None:
    server = raw_server([ok(b"first"), None, ok(b"second")])
    responses = post_all(session(f"http://127.0.0.1:{server.port}"), b"1", b"2")
    assert [r.body for r in responses] == [b"first", b"second"]
    assert [r.body for r in server.requests] == [b"1", b"2", b"2"] and server.connections == 2


def test_a_new_connection_closed_unanswered_is_not_resent(raw_server: Any) -> None:
    server = raw_server([None, ok(b"never asked for")])
    error = failure(session(f"http://127.0.0.1:{server.port}"))
    assert isinstance(error, AnswerBroken) and str(error) == "the server closed the connection without answering"
    assert len(server.requests) == 1  # only the keep-alive race is resent: a server that took the request may act


def test_a_reset_before_the_answer_is_a_broken_answer_not_an_unreachable_server() -> None:
    with RawServer(lambda connection, request: reset(connection) or False) as server:
        error = failure(session(server.base_url))
    assert isinstance(error, AnswerBroken) and str(error).startswith("the connection broke before answering")


CUT_SHORT = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 40
CHUNKS_CUT_SHORT = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"


@pytest.mark.parametrize(("sent", "then_reset", "cause"), [
    (CUT_SHORT, False, "the connection ended after 40 of the 1000 body bytes its Content-Length promised"),
    (CUT_SHORT, True, "the connection ended after 40 of the 1000 body bytes its Content-Length promised"),
    (CHUNKS_CUT_SHORT, False, "the connection ended before the chunked body's last chunk (5 bytes read)"),
    (CHUNKS_CUT_SHORT, True, "the connection ended before the chunked body's last chunk (5 bytes read)"),
], ids=["closed", "reset", "chunks closed", "chunks reset"])
def test_a_body_cut_short_is_named_from_aiohttps_exception_types(sent: bytes, then_reset: bool, cause: str) -> None:
    """The count is the bytes that came (read or not yet read when the end came), the kind from the exception's
    type and its cause; nothing is read out of aiohttp's messages."""
    def answer(connection: socket.socket, request: Request) -> bool:
        connection.sendall(sent)
        if then_reset:
            reset(connection)
        return False

    with RawServer(answer) as server:
        error = failure(session(server.base_url))
    assert isinstance(error, AnswerBroken) and str(error) == cause


def test_calls_in_flight_share_at_most_the_connections_the_session_was_sized_for() -> None:
    """Eight calls at once on a session of three connections: three at a time reach the server."""
    arrived = threading.Semaphore(0)
    release = threading.Event()
    most = [0]
    lock = threading.Lock()
    open_now = [0]

    def answer(connection: socket.socket, request: Request) -> bool:
        with lock:
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])
        arrived.release()
        release.wait(30)
        with lock:
            open_now[0] -= 1
        connection.sendall(ok(b"{}"))
        return True

    with RawServer(answer) as server:
        client = session(server.base_url, connections=3)

        async def run() -> list[Response]:
            calls = asyncio.gather(*(client.post("chat/completions", b"{}", Progress()) for _ in range(8)))
            await asyncio.to_thread(lambda: [arrived.acquire(timeout=30) for _ in range(3)])
            release.set()
            try:
                return await calls
            finally:
                await client.aclose()

        responses = asyncio.run(run())
    assert [r.status for r in responses] == [200] * 8
    assert most[0] == 3 and server.connections == 3


@pytest.mark.parametrize("base_url", ["localhost:8080/v1", "ftp://models.example/v1", "http:///v1"])
def test_a_base_url_that_is_not_http_is_refused_when_the_client_is_made(base_url: str) -> None:
    with pytest.raises(ValueError, match="is not an http:// or https:// URL"):
        session(base_url)


def test_credentials_in_the_base_url_are_sent_as_basic_auth_and_left_out_of_the_url(raw_server: Any) -> None:
    server = raw_server([ok(b"{}")])
    client = session(f"http://ann:s%40cret@127.0.0.1:{server.port}/v1", Authorization="Bearer k")
    post_all(client, b"{}")
    assert server.requests[0].headers["authorization"] == "Basic " + base64.b64encode(b"ann:s@cret").decode()
    assert client.base_url == f"http://127.0.0.1:{server.port}/v1"


def test_a_refused_connection_is_a_connect_error_naming_the_address() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    error = failure(session(f"http://127.0.0.1:{port}"))
    assert isinstance(error, ConnectFailed) and f"127.0.0.1:{port}" in str(error)


# --- proxies ------------------------------------------------------------------------------------------------


def test_an_http_proxy_from_the_environment_gets_the_whole_url_and_its_credentials(
        raw_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = raw_server([ok(b"via proxy"), ok(b"via all_proxy")])
    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@127.0.0.1:{proxy.port}")
    [response] = post_all(session("http://models.example:8080/v1", Authorization="Bearer k"), b"{}")
    assert response.body == b"via proxy"
    request = proxy.requests[0]
    assert request.line == "POST http://models.example:8080/v1/chat/completions HTTP/1.1"
    assert request.headers["proxy-authorization"] == "Basic " + base64.b64encode(b"user:p@ss").decode()
    assert request.headers["host"] == "models.example:8080" and request.headers["authorization"] == "Bearer k"

    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv("ALL_PROXY", f"127.0.0.1:{proxy.port}")  # a proxy for every scheme, no scheme given
    [response] = post_all(session("http://models.example:8080/v1", Authorization="Bearer k"), b"{}")
    assert response.body == b"via all_proxy"
    assert "proxy-authorization" not in proxy.requests[1].headers  # no credentials: none, and never the API key

    monkeypatch.setenv("NO_PROXY", "models.example")  # bypassed: straight to a name that does not resolve
    assert isinstance(failure(session("http://models.example:8080/v1")), ConnectFailed)
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match="socks5://127.0.0.1 from the environment is not supported"):
        session("https://api.example/v1")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` and 127.0.0.1 (openssl, which ``.ci/run`` installs)."""
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    return folder / "cert.pem", folder / "key.pem"


def server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


def test_https_checks_the_certificate_against_ssl_cert_file_or_ssl_cert_dir(
        raw_server: Any, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    server = raw_server([ok(b"secure"), ok(b"again"), ok(b"from the folder")], tls=server_context(certificate))
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    responses = post_all(session(f"https://localhost:{server.port}/v1"), b"1", b"2")
    assert [r.body for r in responses] == [b"secure", b"again"] and server.connections == 1

    monkeypatch.delenv("SSL_CERT_FILE")
    folder = tmp_path / "certs"  # a c_rehash-style folder: <subject hash>.0
    folder.mkdir()
    subject_hash = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(certificate[0])],
                                  capture_output=True, text=True, check=True).stdout.strip()
    shutil.copy(certificate[0], folder / f"{subject_hash}.0")
    monkeypatch.setenv("SSL_CERT_DIR", str(folder))
    [response] = post_all(session(f"https://localhost:{server.port}/v1"), b"3")
    assert response.body == b"from the folder"

    monkeypatch.delenv("SSL_CERT_DIR")  # certifi's bundle does not trust a self-signed certificate
    error = failure(session(f"https://localhost:{server.port}/v1"))
    assert isinstance(error, ConnectFailed) and "CERTIFICATE_VERIFY_FAILED" in str(error)


class TunnelProxy(TCPServer):
    """An HTTP proxy that answers CONNECT and then relays bytes both ways (or refuses with ``refuse``); with
    ``tls`` it is an https:// proxy (TLS to the proxy, then the tunnel inside it)."""

    def __init__(self, refuse: bytes | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.refuse = refuse
        self.connects: list[tuple[str, dict[str, str]]] = []
        self._tls = tls
        super().__init__()

    def _serve(self, client: socket.socket) -> None:
        if self._tls is not None:
            client = self._tls.wrap_socket(client, server_side=True)
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
                return  # the other side closed: the relay ends with it
            finally:
                target.close()

        threading.Thread(target=relay, args=(upstream, client), daemon=True).start()
        relay(client, upstream)


def test_https_through_a_proxy_tunnels_with_connect(raw_server: Any, certificate: tuple[Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server = raw_server([ok(b"tunnelled"), ok(b"tunnelled through TLS")], tls=server_context(certificate))
    proxy = TunnelProxy()
    refusing = TunnelProxy(refuse=b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
    secure_proxy = TunnelProxy(tls=server_context(certificate))
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
        monkeypatch.setenv("HTTPS_PROXY", f"http://u:pw@127.0.0.1:{proxy.port}")
        [response] = post_all(session(f"https://localhost:{server.port}/v1", Authorization=f"Bearer {KEY}"), b"{}")
        assert response.body == b"tunnelled"
        [(line, headers)] = proxy.connects
        assert line == f"CONNECT localhost:{server.port} HTTP/1.1"
        assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"u:pw").decode()
        assert not any(KEY in value for value in headers.values())  # the key travels inside the tunnel only
        assert server.requests[0].line == "POST /v1/chat/completions HTTP/1.1"  # inside the tunnel: origin form
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"

        monkeypatch.setenv("HTTPS_PROXY", f"https://127.0.0.1:{secure_proxy.port}")  # TLS to the proxy too
        [response] = post_all(session(f"https://localhost:{server.port}/v1"), b"{}")
        assert response.body == b"tunnelled through TLS" and len(secure_proxy.connects) == 1

        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{refusing.port}")
        error = failure(session(f"https://localhost:{server.port}/v1"))
        assert isinstance(error, ConnectFailed)
        assert str(error).startswith(f"proxy 127.0.0.1:{refusing.port} refused the tunnel: HTTP 407"), str(error)
    finally:
        for each in (proxy, refusing, secure_proxy):
            each.close()


# --- timeouts and logging, through the provider ------------------------------------------------------------


def test_a_cancelled_call_closes_its_connection() -> None:
    """A call the caller's timeout cancels never leaves its connection for the next call to read."""
    answered = threading.Event()

    def answer(connection: socket.socket, request: Request) -> bool:
        if request.body == b"slow":
            answered.wait(30)  # answers only after the caller gave up on it
            connection.sendall(ok(b"late"))
            return True
        connection.sendall(ok(b"fresh"))
        return True

    with RawServer(answer) as server:
        client = session(server.base_url)

        async def run() -> Response:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await client.post("chat/completions", b"slow", Progress())
            answered.set()
            try:
                return await client.post("chat/completions", b"next", Progress())
            finally:
                await client.aclose()

        assert asyncio.run(run()).body == b"fresh"
        assert server.connections == 2


def test_openai_log_logs_one_line_per_call_and_never_a_header(raw_server: Any, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    answer = b'{"choices": [{"message": {"role": "assistant", "content": "{}"}}]}'
    server = raw_server([None, ok(answer), ok(answer)])
    monkeypatch.setenv("OPENAI_LOG", "info")
    caplog.set_level(logging.INFO)  # what OPENAI_LOG turns on for the provider's loggers, captured here
    provider = from_string("openai:m", base_url=server.base_url, api_key=KEY,
                           settings=ProviderSettings(max_transport_retries=1, backoff_base_s=0.01, backoff_max_s=0.01))
    request = GenerationRequest(messages=[{"role": "user", "content": "hi"}], schema={"type": "object"}, schema_name="x")

    async def run() -> None:
        try:
            await provider.generate(request)
            await provider.generate(request)
        finally:
            await provider.aclose()

    asyncio.run(run())
    calls = [r.getMessage() for r in caplog.records if r.name == "extractor.providers.transport"]
    assert len(calls) == 2 and all(f"POST {server.base_url}/chat/completions -> HTTP 200 (" in c for c in calls), calls
    assert any("connection_error, retrying" in r.getMessage() for r in caplog.records)  # the unanswered first try
    assert KEY not in caplog.text and "Bearer" not in caplog.text and "Authorization" not in caplog.text
