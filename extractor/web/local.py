"""``extract review --web``: the review pages for one local user, with nothing to configure.

The server listens on 127.0.0.1 only. At start it makes a random one-time login token and prints the
address with it (as Jupyter does); opening that address exchanges the token for a session cookie
(HttpOnly, SameSite=Strict) and drops the token from the address bar. The reviewer recorded with every
decision is the OS user who started the server: the login proves who opened the page, and nobody types a
name. Other local users (or pages on other sites) get nothing without the token: every page needs the
session cookie, every POST the CSRF token, and a request naming any host but 127.0.0.1 or localhost (DNS
rebinding) is refused.
"""

from __future__ import annotations

import getpass
import hmac
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from starlette.middleware.trustedhost import TrustedHostMiddleware

from extractor.store import Store
from extractor.web.router import SECURITY_HEADERS, no_favicon, review_router
from extractor.web.sessions import Sessions

HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@dataclass(frozen=True)
class LocalPrincipal:
    """The OS user who started ``extract review --web``: every owner's documents are theirs to review."""

    name: str
    role: str = "reviewer"
    scope: str | None = None


class LocalLogin:
    """One login token, exchanged once for a session; sessions live as long as the server."""

    def __init__(self, user: str) -> None:
        self.token = secrets.token_urlsafe(32)
        self.principal = LocalPrincipal(user)
        self.sessions: Sessions[LocalPrincipal] = Sessions()
        self._used = False
        self._lock = threading.Lock()

    def exchange(self, token: str) -> str | None:
        """A new session id for the right, unused token; ``None`` otherwise."""
        with self._lock:
            if self._used or not hmac.compare_digest(token.encode(), self.token.encode()):
                return None
            self._used = True
        return self.sessions.start(self.principal)

    def signed_in(self, request: Request) -> bool:
        return self.sessions.get(request) is not None

    def current(self, request: Request) -> LocalPrincipal:
        """The FastAPI dependency the review router gets: the local user, or 401."""
        from fastapi import HTTPException

        if not self.signed_in(request):
            raise HTTPException(401, "not signed in: open the address `extract review --web` printed")
        return self.principal


def create_local_app(open_stores: Callable[[], tuple[Store, Store]], *, user: str | None = None) -> tuple[FastAPI, LocalLogin]:
    """The app (review router under /review, login at /) and its login; ``user`` defaults to the OS user."""
    login = LocalLogin(user or getpass.getuser())
    app = FastAPI(title="extractor review", docs_url=None, redoc_url=None, openapi_url=None)
    # only addresses of this machine: a page on another site that rebinds its name to 127.0.0.1 gets a 400
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=[HOST, "localhost"])
    app.include_router(review_router(open_stores, login.current))
    no_favicon(app)

    @app.exception_handler(401)
    async def unauthorised(_request: Request, exc: Any) -> Response:
        return PlainTextResponse(str(getattr(exc, "detail", "not signed in")), status_code=401, headers=SECURITY_HEADERS)

    @app.get("/", include_in_schema=False)
    def start(request: Request, token: str = "") -> Response:
        if token:
            session = login.exchange(token)
            if session is None:
                return PlainTextResponse("this login address was used already (or is wrong): restart "
                                         "`extract review --web` for a new one", status_code=403, headers=SECURITY_HEADERS)
            response = RedirectResponse("/review/", status_code=303, headers=SECURITY_HEADERS)
            login.sessions.set_cookie(response, session, secure=False)  # plain http on 127.0.0.1
            return response
        if login.signed_in(request):
            return RedirectResponse("/review/", status_code=303, headers=SECURITY_HEADERS)
        return PlainTextResponse("not signed in: open the address `extract review --web` printed", status_code=401,
                                 headers=SECURITY_HEADERS)

    return app, login


def listening_socket(port: int | None) -> socket.socket:
    """A socket bound on 127.0.0.1: ``port``, or 8765, or any free port when 8765 is taken (port 0: any)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, DEFAULT_PORT if port is None else port))
    except OSError:
        if port is not None:
            sock.close()
            raise
        sock.bind((HOST, 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(open_stores: Callable[[], tuple[Store, Store]], *, port: int | None = None,
          announce: Callable[[str], None] = print) -> None:
    """Serve until Ctrl-C; ``announce`` gets the login address once the socket is bound."""
    import uvicorn

    app, login = create_local_app(open_stores)
    threading.Thread(target=_warm_readers, name="warm-readers", daemon=True).start()
    sock = listening_socket(port)
    bound = sock.getsockname()[1]
    announce(f"http://{HOST}:{bound}/?token={login.token}")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


def _warm_readers() -> None:
    """Start the fork server the readers come from (a source is read again, and segmented, in a reader: it imports
    the sentence splitters once, and the Korean one takes seconds), so the reviewer's first "Check" does not wait
    for it."""
    from extractor.offload import in_reader, warm_process

    in_reader("warm-up", warm_process, (None,))
