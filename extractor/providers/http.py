"""The HTTP/1.1 client model calls go out on: kept-alive connections on asyncio protocols, one write per request.

Why not httpx: at 64 calls in flight, httpx, httpcore and anyio cost 2.0-2.2 ms of CPU per call in the run's
event loop (measured against the benchmark's server), this client 0.1-0.15 ms; that loop is what every call
in flight waits on, and its CPU was the run process's largest part. A model call is one POST with a JSON body
and one answer, so what is needed is small, and all of it is here:

- connections are kept alive and reused, most recently used first; one the server closed (or idle for
  ``KEEPALIVE_S``) is dropped; a request on a reused connection that the server closed before answering
  a single byte is sent once more on a new one (the race every keep-alive client has);
- responses framed by Content-Length, chunked, or the end of the connection; gzip and deflate bodies are
  decompressed; 1xx interim responses are skipped;
- https with the certificates httpx uses (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else certifi's bundle);
- the proxies of the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``): an http
  proxy is sent the absolute URL, an https target is tunnelled with CONNECT; credentials in the proxy URL
  become ``Proxy-Authorization``;
- ``OPENAI_LOG=info`` (or ``debug``) logs one line per call (never a header: the key is in one).

Timeouts are the caller's (``asyncio.timeout``): a cancelled call closes its connection.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import ssl
import time
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

log = logging.getLogger(__name__)

KEEPALIVE_S = 5.0
"""Seconds an idle connection is kept (as httpx): a server or a NAT may drop it silently after longer."""
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 64 << 20


class HttpError(Exception):
    """A call that got no complete HTTP response; the class name says at which step (``ConnectError`` ...)."""


class ConnectError(HttpError):
    """No connection: refused, unreachable, a name that does not resolve, TLS refused, a proxy refused."""


class ReadError(HttpError):
    """The connection broke, or the server closed it, before the response was complete."""


class ProtocolError(HttpError):
    """What came back is not HTTP/1.1 this client can read (bad status line, framing, encoding, size)."""


@dataclass(frozen=True, slots=True)
class Response:
    """A complete response: status, headers (lower-case names; repeated ones joined by ", "), decoded body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; reads one response at a time into its buffer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.received = False  # any byte of the current response
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._eof = False
        self._head_only = False

    # -- asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport: create_connection made it

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing asked (a server's parting 408, say): never read as the next answer
            self.close()
            return
        self.received = True
        self._buffer += data
        self._try_complete()

    def eof_received(self) -> bool:
        self._eof = True
        self.closed = True
        self._try_complete()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._eof = True
        self._try_complete()
        if self._waiter is not None and not self._waiter.done():
            reason = f": {exc}" if exc is not None else ""
            self._waiter.set_exception(ReadError(f"the server closed the connection before the response was "
                                                 f"complete{reason}"))

    # -- ours

    async def exchange(self, data: bytes, *, head_only: bool = False) -> Response:
        """Send ``data`` (a whole request) and wait for the response; ``head_only``: it has no body (CONNECT)."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._head_only = head_only
        self.received = False
        self.transport.write(data)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _try_complete(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        try:
            response = self._parse()
        except HttpError as error:
            self.close()
            waiter.set_exception(error)
            return
        if response is not None:
            waiter.set_result(response)

    def _parse(self) -> Response | None:
        """The response in the buffer once it is complete (and it is taken out), else None."""
        buffer = self._buffer
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ProtocolError(f"response head over {MAX_HEAD_BYTES} bytes")
                return None
            lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise ProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
            status = int(code)
            if 100 <= status < 200 and status != 101:  # interim (100 Continue, 103 Early Hints): the real one follows
                del buffer[:end + 4]
                continue
            break
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        start = end + 4
        if self._head_only:
            body, used = b"", start
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            framed = _chunked(buffer, start)
            if framed is None:
                return None
            body, used = framed
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"].split(",")[0])
            except ValueError:
                raise ProtocolError(f"bad Content-Length {headers['content-length']!r}") from None
            if length > MAX_BODY_BYTES:
                raise ProtocolError(f"response body of {length} bytes is over {MAX_BODY_BYTES}")
            if len(buffer) - start < length:
                if self._eof:
                    raise ReadError(f"the server closed the connection after {len(buffer) - start} of "
                                    f"{length} body bytes")
                return None
            body, used = bytes(buffer[start:start + length]), start + length
        else:  # no framing: the body is whatever comes until the server closes
            if not self._eof:
                if len(buffer) - start > MAX_BODY_BYTES:
                    raise ProtocolError(f"response body over {MAX_BODY_BYTES} bytes")
                return None
            body, used = bytes(buffer[start:]), len(buffer)
            self.closed = True
        del buffer[:used]
        if buffer or version == "HTTP/1.0" or "close" in headers.get("connection", "").lower():
            self.closed = True  # not reusable: bytes nobody asked for, or the server said it closes
        return Response(status, headers, _decoded(body, headers.get("content-encoding", "")))


def _chunked(buffer: bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked body from ``start``: ``(body, end of the message)``, or None while incomplete."""
    parts: list[bytes] = []
    position = start
    size_total = 0
    while True:
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        size_text = bytes(buffer[position:line_end]).split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size_text[:20]!r}") from None
        size_total += size
        if size_total > MAX_BODY_BYTES:
            raise ProtocolError(f"response body over {MAX_BODY_BYTES} bytes")
        if size == 0:  # the last chunk; then trailer fields, each a line, and an empty line
            position = line_end + 2
            while (line_end := buffer.find(b"\r\n", position)) != position:
                if line_end < 0:
                    return None
                position = line_end + 2
            return b"".join(parts), line_end + 2
        chunk_end = line_end + 2 + size
        if len(buffer) < chunk_end + 2:
            return None
        parts.append(bytes(buffer[line_end + 2:chunk_end]))
        position = chunk_end + 2


def _decoded(body: bytes, encoding: str) -> bytes:
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return body
    try:
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if coding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:  # servers send raw deflate as often as zlib-wrapped
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error as error:
        raise ProtocolError(f"{coding} body does not decompress: {error}") from None
    raise ProtocolError(f"unsupported Content-Encoding {encoding!r}")


@dataclass(frozen=True)
class _Proxy:
    host: str
    port: int
    tls: bool
    authorization: str | None


def _proxy_for(scheme: str, host: str) -> _Proxy | None:
    """The environment's proxy for ``scheme://host`` (None without one, or when ``NO_PROXY`` covers the host)."""
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    if not url or urllib.request.proxy_bypass(host):
        return None
    if "://" not in url:
        url = f"http://{url}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"proxy {parts.scheme}://{parts.hostname} from the environment is not supported "
                         "(an http:// or https:// proxy is)")
    return _Proxy(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), parts.scheme == "https",
                  _basic_credentials(parts))


def _basic_credentials(parts: SplitResult) -> str | None:
    """``user:password@`` of a URL as a Basic authorization value (percent-escapes undone); None without one."""
    if parts.username is None:
        return None
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def tls_context() -> ssl.SSLContext:
    """Certificate checks as httpx makes them: ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``, else certifi's bundle."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile and os.path.isfile(cafile):
        context = ssl.create_default_context(cafile=cafile)
    elif capath and os.path.isdir(capath):
        context = ssl.create_default_context(capath=capath)
    else:
        import certifi

        context = ssl.create_default_context(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


class HttpClient:
    """POSTs to one server (``base_url``), every request with ``headers``."""

    def __init__(self, base_url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL {base_url!r} is not an http:// or https:// URL")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        default_port = 443 if self._tls else 80
        self._port = parts.port or default_port
        authority = self._host if ":" not in self._host else f"[{self._host}]"
        authority += "" if self._port == default_port else f":{self._port}"
        self.base_url = f"{parts.scheme}://{authority}{parts.path.rstrip('/')}"
        self._path = parts.path.rstrip("/")
        fields = {"Host": authority, **headers, "Accept-Encoding": "gzip, deflate"}
        if credentials := _basic_credentials(parts):  # credentials in the URL are Basic auth, as httpx sends them
            fields["Authorization"] = credentials
        self._proxy = _proxy_for(parts.scheme, self._host)
        self._absolute = self._proxy is not None and not self._tls  # an http proxy is sent the whole URL
        if self._absolute and self._proxy is not None and self._proxy.authorization:
            fields["Proxy-Authorization"] = self._proxy.authorization
        self._fields = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode("latin-1")
        self._context: ssl.SSLContext | None = None
        self._idle: list[_Connection] = []
        self._closed = False

    async def post(self, path: str, content: bytes) -> Response:
        """POST ``content`` (JSON) to ``base_url/path``; ``HttpError`` when no complete response came back."""
        target = f"{self._path}/{path}"
        if self._absolute:
            target = f"{self.base_url}/{path}"
        request = (f"POST {target} HTTP/1.1\r\n".encode("latin-1") + self._fields
                   + b"Content-Length: " + str(len(content)).encode() + b"\r\n\r\n" + content)
        began = time.monotonic()
        connection, reused = await self._checkout()
        try:
            try:
                response = await connection.exchange(request)
            except ReadError:
                if not reused or connection.received:
                    raise
                connection.close()  # closed by the server while idle, before our request reached it: once more
                connection, reused = await self._connect(), False
                response = await connection.exchange(request)
        except BaseException:
            connection.close()
            raise
        self._checkin(connection)
        if log.isEnabledFor(logging.INFO):
            log.info("POST %s/%s -> HTTP %d (%.0f ms, %d bytes)", self.base_url, path, response.status,
                     (time.monotonic() - began) * 1000, len(response.body))
        return response

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _checkout(self) -> tuple[_Connection, bool]:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < KEEPALIVE_S:
                return connection, True
            connection.close()
        return await self._connect(), False

    def _checkin(self, connection: _Connection) -> None:
        if connection.closed or self._closed:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        proxy = self._proxy
        host, port, tls = (proxy.host, proxy.port, proxy.tls) if proxy else (self._host, self._port, self._tls)
        try:
            _, connection = await loop.create_connection(
                _Connection, host, port, ssl=self._tls_context() if tls else None,
                server_hostname=host if tls else None)
        except (OSError, ssl.SSLError) as error:
            where = f"proxy {host}:{port}" if proxy else f"{host}:{port}"
            raise ConnectError(f"{where}: {error}") from error
        if proxy is not None and self._tls:
            await self._tunnel(connection, proxy)
        return connection

    async def _tunnel(self, connection: _Connection, proxy: _Proxy) -> None:
        """CONNECT through ``proxy`` to the target, then TLS with the target inside the tunnel."""
        authority = f"{self._host}:{self._port}"
        head = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
        if proxy.authorization:
            head += f"Proxy-Authorization: {proxy.authorization}\r\n"
        try:
            answer = await connection.exchange(f"{head}\r\n".encode("latin-1"), head_only=True)
            if not answer.is_success:
                raise ConnectError(f"proxy {proxy.host}:{proxy.port} refused CONNECT {authority}: HTTP {answer.status}")
            assert connection.transport is not None
            transport = await asyncio.get_running_loop().start_tls(
                connection.transport, connection, self._tls_context(), server_hostname=self._host)
        except (OSError, ssl.SSLError, ReadError) as error:
            connection.close()
            raise ConnectError(f"through proxy {proxy.host}:{proxy.port} to {authority}: {error}") from error
        except BaseException:
            connection.close()
            raise
        if transport is None:
            raise ConnectError(f"through proxy {proxy.host}:{proxy.port} to {authority}: TLS did not start")
        connection.transport = transport  # type: ignore[assignment]

    def _tls_context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = tls_context()
        return self._context
