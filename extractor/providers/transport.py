"""The HTTP under model calls: aiohttp, bounded in connections, size and time, with a one-line cause for
every way a server can answer wrong.

Why aiohttp: the bytes a model server (or a user's proxy, or a misbehaving gateway) sends are untrusted
input, and an HTTP parser is a known problem best left to a library many people run and fix. aiohttp's C
parser (llhttp) refuses bad framing (a chunk size of ``-6`` or ``zz``, ``Content-Length: +5``) at once, reads
chunked bodies in linear time and bounds each header line. Its cost, measured by
``bench/bench_throughput.py`` (docs/model-servers.md gives the numbers), is a fraction of a millisecond of
CPU per call; httpx costs several. What stays ours, in ``openai_compat``: building the request and reading
the answer; and here:

- one ``ClientSession`` per provider (a run's), on a ``TCPConnector`` sized to the run's calls in flight,
  connections kept alive ``KEEPALIVE_S``;
- the body is read in chunks and inflated here (``auto_decompress`` off), so the cap (``max_body_bytes``,
  64 MB unless the settings say otherwise) counts the bytes after gzip: a bomb stops at the cap, never
  expanded whole on the event loop;
- the response head as a whole is capped (``MAX_HEAD_BYTES``), beside aiohttp's per-line and count caps;
- a request on a kept-alive connection that the server closed before answering is sent once more, on
  another connection (the race every keep-alive client has; aiohttp retries only idempotent methods);
- proxies (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``; http:// and https:// proxies,
  CONNECT for https targets, credentials in the proxy URL) are read from the environment once, here, not
  by aiohttp's ``trust_env``: that looks them up again in a thread for every request, ignores ``ALL_PROXY``
  and https:// proxies, and adds ``~/.netrc`` credentials that clash with the bearer key;
- certificates: ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``, else certifi's bundle.

The caller bounds each try's time (``asyncio.timeout``); the session's ``ClientTimeout`` bounds connecting
and each read by the same number, so nothing waits longer than a try.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import time
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp import http_exceptions
from multidict import CIMultiDict
from yarl import URL

log = logging.getLogger(__name__)

KEEPALIVE_S = 5.0
"""Seconds an idle connection is kept (as httpx): a server or a NAT may drop it silently after longer."""
MAX_HEAD_BYTES = 64 << 10
MAX_LINE_BYTES = 8190  # one header line (aiohttp's default, named so the cause can say it)
MAX_HEADERS = 128
_READ_BYTES = 1 << 16  # aiohttp's read buffer: how much of a body waits in memory before reading pauses


class TransportError(Exception):
    """A call that got no complete, readable HTTP response; the subclass says whose side it broke on."""


class ConnectFailed(TransportError):
    """No connection: refused, unreachable, a name that does not resolve, TLS refused, a proxy refused."""


class AnswerBroken(TransportError):
    """The connection closed or broke before the response was complete."""


class AnswerMalformed(TransportError):
    """What came back is not HTTP that may be read: bad framing, bad headers, too large, bad encoding."""


@dataclass(frozen=True, slots=True)
class Response:
    """A complete response: status, headers (case-insensitive names), body after Content-Encoding."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Progress:
    """How far the current try got, so a timeout can say what was missing (nothing, or part of a body)."""

    __slots__ = ("status", "expected", "received")

    def __init__(self) -> None:
        self.status: int | None = None  # the response head arrived, with this status
        self.expected: int | None = None  # its Content-Length
        self.received = 0  # body bytes on the wire so far

    def describe(self, seconds: float) -> str:
        if self.status is None:
            return f"no answer within {seconds:g} s"
        of = f" of {self.expected}" if self.expected is not None else ""
        return (f"HTTP {self.status} arrived but only {self.received}{of} body bytes followed within {seconds:g} s "
                "(a server sending its answer that slowly is stuck or throttled)")


def tls_context() -> ssl.SSLContext:
    """Certificate checks as httpx makes them: ``SSL_CERT_FILE`` or ``SSL_CERT_DIR``, else certifi's bundle."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile and os.path.isfile(cafile):
        return ssl.create_default_context(cafile=cafile)
    if capath and os.path.isdir(capath):
        return ssl.create_default_context(capath=capath)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


@dataclass(frozen=True)
class Proxy:
    url: URL  # without credentials
    headers: Mapping[str, str]  # Proxy-Authorization from the credentials in the proxy URL, if any (for CONNECT;
    # a proxy of http:// targets reads it from the request itself)


def proxy_for(target: URL) -> Proxy | None:
    """The environment's proxy for ``target`` (None without one, or when ``NO_PROXY`` covers its host).

    ``<scheme>_proxy`` first, then ``all_proxy`` (either case, as urllib reads them); an http:// or
    https:// proxy, anything else (socks5://) is refused in one line.
    """
    proxies = urllib.request.getproxies_environment()
    value = proxies.get(target.scheme) or proxies.get("all")
    if not value or urllib.request.proxy_bypass(target.host or ""):
        return None
    url = URL(value if "://" in value else f"http://{value}")
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"proxy {url.scheme}://{url.host} from the environment is not supported "
                         "(an http:// or https:// proxy is)")
    return Proxy(url.with_user(None), {"Proxy-Authorization": _basic(url)} if url.user is not None else {})


def _basic(url: URL) -> str:
    """``user:password@`` of a URL (percent-escapes undone) as a Basic authorization value."""
    pair = f"{url.user}:{url.password or ''}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


class Session:
    """POSTs to one server (``base_url``), every request with ``headers``, at most ``connections`` at once.

    The aiohttp session is made on the first call, inside the event loop that runs the calls.
    """

    def __init__(self, base_url: str, headers: Mapping[str, str], *, connections: int, timeout_s: float,
                 max_body_bytes: int) -> None:
        url = URL(base_url) if "://" in base_url else None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base URL {base_url!r} is not an http:// or https:// URL")
        fields = {**headers, "Accept-Encoding": "gzip, deflate"}
        if url.user is not None:  # credentials in the URL are Basic auth, as httpx sends them
            fields["Authorization"] = _basic(url)
        self.base_url = str(url.with_user(None).with_query(None).with_fragment(None)).rstrip("/")
        self._proxy = proxy_for(url)
        if self._proxy is not None and url.scheme == "http":  # the proxy reads the request itself: it goes there
            fields.update(self._proxy.headers)
        # Sent with each request, not as the session's default headers: aiohttp copies those into the proxy's
        # headers too, so the API key would reach the proxy (in CONNECT, or as Proxy-Authorization).
        self._headers = CIMultiDict(fields)
        self._connections = connections
        self._timeout_s = timeout_s
        self._max_body = max_body_bytes
        self._session: aiohttp.ClientSession | None = None

    async def post(self, path: str, content: bytes, progress: Progress) -> Response:
        """POST ``content`` (JSON) to ``base_url/path``; ``TransportError`` when no complete response came back.

        ``progress`` follows the try, for the caller's timeout message.
        """
        session = self._session or self._open()
        url = f"{self.base_url}/{path}"
        began = time.monotonic()
        proxy = self._proxy
        for last in (False, True):
            call = SimpleNamespace(reused=False)
            try:
                async with session.post(url, data=content, headers=self._headers, allow_redirects=False,
                                        trace_request_ctx=call, proxy=proxy.url if proxy else None,
                                        proxy_headers=proxy.headers if proxy else None) as response:
                    progress.status, progress.expected = response.status, response.content_length
                    try:
                        _check_head(response, self._max_body)
                        body = await _read_body(response, progress, self._max_body)
                    except AnswerMalformed:  # closed, not pooled: the rest of its body may still be on the way
                        response.close()  # (one whose body had all come is already back in the pool, well framed)
                        raise
                    except aiohttp.ClientPayloadError:  # the bytes that came, read by us or not yet
                        progress.received = max(progress.received, response.content.total_bytes)
                        raise
                    answer = Response(response.status, response.headers, body)
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as error:
                if last or not call.reused or progress.status is not None or isinstance(
                        error, aiohttp.ClientConnectorError):
                    raise _transport_error(error, progress, self._where()) from error
                log.info("POST %s: the kept-alive connection was closed before an answer (%s); sending once more",
                         url, error)
            except TimeoutError:  # aiohttp's own timeouts are ClientErrors too: the caller's to describe
                raise
            except aiohttp.ClientError as error:
                raise _transport_error(error, progress, self._where()) from error
        if log.isEnabledFor(logging.INFO):
            log.info("POST %s -> HTTP %d (%.0f ms, %d bytes)", url, answer.status,
                     (time.monotonic() - began) * 1000, len(answer.body))
        return answer

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _open(self) -> aiohttp.ClientSession:
        tls: ssl.SSLContext | bool = True
        if self.base_url.startswith("https:") or (self._proxy and self._proxy.url.scheme == "https"):
            tls = tls_context()
        traced = aiohttp.TraceConfig()
        traced.on_connection_reuseconn.append(_reused)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._connections, ssl=tls, keepalive_timeout=KEEPALIVE_S),
            auto_decompress=False, trust_env=False, trace_configs=[traced],
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout_s, sock_read=self._timeout_s),
            read_bufsize=_READ_BYTES, max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES,
            max_headers=MAX_HEADERS)
        return self._session

    def _where(self) -> str:
        proxy = self._proxy
        return f"proxy {proxy.url.host}:{proxy.url.port}" if proxy else self.base_url


async def _reused(session: aiohttp.ClientSession, context: SimpleNamespace, params: object) -> None:
    """Trace hook: the request went out on a kept-alive connection (so an unanswered close may be the race)."""
    context.trace_request_ctx.reused = True


def _check_head(response: aiohttp.ClientResponse, cap: int) -> None:
    """The head's total size (aiohttp bounds each line and the number of headers, not their sum), and a
    Content-Length over the body cap refused before any of the body is read."""
    size = len(response.reason or "") + 15 + sum(len(name) + len(value) + 4 for name, value in response.raw_headers)
    if size > MAX_HEAD_BYTES:
        raise AnswerMalformed(f"response head of {size} bytes is over {MAX_HEAD_BYTES >> 10} KB")
    length = response.content_length
    if length is not None and length > cap:
        raise AnswerMalformed(f"Content-Length {length} is over the {_size(cap)} a body may have")


async def _read_body(response: aiohttp.ClientResponse, progress: Progress, cap: int) -> bytes:
    """The body, read a chunk at a time and inflated as it comes; at most ``cap`` bytes after inflating."""
    inflate = _inflater(response.headers.get("Content-Encoding", ""))
    parts: list[bytes] = []
    room = cap
    read = response.content.readany
    while chunk := await read():
        progress.received += len(chunk)
        if inflate is not None:
            chunk = inflate.feed(chunk, room)
            if len(chunk) > room:
                raise AnswerMalformed(f"body over {_size(cap)} after {inflate.coding}")
        room -= len(chunk)
        if room < 0:
            raise AnswerMalformed(f"body over {_size(cap)}")
        parts.append(chunk)
    if inflate is not None:
        inflate.finish()
    return b"".join(parts)


class _Inflater:
    """gzip or deflate, inflated a chunk at a time, never more than the room left (``feed``)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._inflate: Any = zlib.decompressobj(16 + zlib.MAX_WBITS) if coding == "gzip" else None
        self._head = b""  # deflate: the first two bytes say zlib-wrapped or raw (servers send both)

    def feed(self, data: bytes, room: int) -> bytes:
        """What ``data`` inflates to, stopped one byte past ``room`` (so the caller knows the cap was passed)."""
        if self._inflate is None:
            self._head += data
            if len(self._head) < 2:
                return b""
            data, self._head = self._head, b""
            wrapped = data[0] & 0x0F == 8 and int.from_bytes(data[:2], "big") % 31 == 0
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        try:
            out: bytes = self._inflate.decompress(data, max(room, 0) + 1)
        except zlib.error as error:
            raise AnswerMalformed(f"{self.coding} body does not decompress: {error}") from None
        return out  # at most one byte over ``room``: the caller says so

    def finish(self) -> None:
        if self._inflate is None or not self._inflate.eof:
            raise AnswerMalformed(f"{self.coding} body ends before its compressed stream does")


def _inflater(encoding: str) -> _Inflater | None:
    coding = encoding.strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in ("gzip", "x-gzip"):
        return _Inflater("gzip")
    if coding == "deflate":
        return _Inflater("deflate")
    raise AnswerMalformed(f"unsupported Content-Encoding {encoding[:40]!r} (gzip and deflate were asked for)")


def _size(count: int) -> str:
    return f"{count / (1 << 20):g} MB" if count >= 1 << 20 else f"{count} bytes"


def _transport_error(error: aiohttp.ClientError, progress: Progress, where: str) -> TransportError:
    """What aiohttp raised, as one line that says what the server did (not what aiohttp's class is called).

    Classified by aiohttp's exception types, never by their messages: a body that ended before its framing said
    is a ``ClientPayloadError`` caused by the parser's ``ContentLengthError`` or ``TransferEncodingError`` at the
    end of the stream; bad framing or headers anywhere else is an ``HttpProcessingError`` subclass (its message,
    llhttp's description of the bytes, is only shown)."""
    if isinstance(error, aiohttp.ClientHttpProxyError):
        return ConnectFailed(f"{where} refused the tunnel: HTTP {error.status} {error.message}")
    if isinstance(error, aiohttp.ClientConnectorError):
        return ConnectFailed(f"ConnectError: {_connect_failure(error)}")
    if isinstance(error, aiohttp.ClientPayloadError):
        cut = error.__cause__
        if isinstance(cut, http_exceptions.ContentLengthError):
            return AnswerBroken(f"the connection ended after {progress.received} of the {progress.expected} body bytes "
                                "its Content-Length promised")
        if isinstance(cut, http_exceptions.TransferEncodingError):
            return AnswerBroken(f"the connection ended before the chunked body's last chunk ({progress.received} "
                                "bytes read)")
    malformed = _processing_error(error)
    if isinstance(malformed, http_exceptions.LineTooLong):
        return AnswerMalformed(f"a response header line over {MAX_LINE_BYTES} bytes")
    if malformed is not None:
        return AnswerMalformed(_one_line(malformed.message))
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return AnswerBroken("the server closed the connection without answering")
    if isinstance(error, aiohttp.ClientOSError):
        stage = "before answering" if progress.status is None else f"after {progress.received} body bytes"
        return AnswerBroken(f"the connection broke {stage}: {error.strerror or type(error).__name__}")
    return AnswerBroken(_one_line(str(error)) or type(error).__name__)


def _connect_failure(error: aiohttp.ClientConnectorError) -> str:
    """``cannot connect to HOST:PORT: why``. aiohttp's own text says ``ssl:default`` of every address, plain http
    included, and asyncio's says ``Connect call failed ('127.0.0.1', 9)`` where the system's word is clearer."""
    cause: BaseException = getattr(error, "certificate_error", None) or error.os_error
    why = str(cause) or type(cause).__name__
    if isinstance(cause, OSError) and not isinstance(cause, ssl.SSLError):
        if cause.errno is not None and cause.errno > 0:
            why = os.strerror(cause.errno)  # "Connection refused"
        elif cause.strerror:
            why = cause.strerror  # a name that does not resolve: "Name or service not known"
    return f"cannot connect to {error.host}:{error.port}: {_one_line(why)}"


def _processing_error(error: BaseException) -> http_exceptions.HttpProcessingError | None:
    """The parser's complaint behind an aiohttp error (it wraps it, sometimes twice), if there is one."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, http_exceptions.HttpProcessingError) and type(seen) is not http_exceptions.HttpProcessingError:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _one_line(message: str) -> str:
    """llhttp's message (a sentence, then the offending bytes and a caret on lines of their own) as one line."""
    lines = [line.strip().rstrip(":.") for line in message.splitlines() if line.strip().strip("^")]
    text = ": ".join(lines)
    return (text[:1].lower() + text[1:])[:200]
