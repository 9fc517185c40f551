"""Browser sessions of the review pages, shared by both logins: the local one-user login of
``extract review --web`` (a one-time address) and the token login of ``extract serve`` (a pasted API token).

A session is a random id (256 bits) in an HttpOnly, SameSite=Strict cookie, mapped in this process's
memory to what the login established (the local user, or the hash of the API token). The map is keyed by
a hash of the id, so looking a cookie up leaks nothing useful through timing; a session may expire after
``max_age_s``. Sessions end with the process: a restart means signing in again.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Generic, TypeVar

from fastapi import Request, Response

COOKIE = "extract_review_session"

T = TypeVar("T")


def strict_cookie(response: Response, name: str, value: str, *, secure: bool, path: str = "/",
                  max_age: int | None = None) -> None:
    """Set a cookie scripts cannot read and other sites' pages cannot make the browser send."""
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=secure, path=path, max_age=max_age)


def _key(session: str) -> str:
    return hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()


class Sessions(Generic[T]):
    """Session id -> value, thread-safe (FastAPI runs plain handlers in a thread pool)."""

    def __init__(self, *, max_age_s: float | None = None, cookie: str = COOKIE) -> None:
        self.max_age_s = max_age_s
        self.cookie = cookie
        self._values: dict[str, tuple[T, float]] = {}
        self._lock = threading.Lock()

    def start(self, value: T) -> str:
        """A new session holding ``value``; returns its id for the cookie (a new id at every login: no fixation)."""
        session = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if self.max_age_s is not None:  # expired sessions go when new ones come: the map stays bounded
                self._values = {k: v for k, v in self._values.items() if now - v[1] < self.max_age_s}
            self._values[_key(session)] = (value, now)
        return session

    def get(self, request: Request) -> T | None:
        """The value of the request's session cookie; ``None`` without a cookie, an unknown or an expired session."""
        session = request.cookies.get(self.cookie)
        if not session:
            return None
        with self._lock:
            found = self._values.get(_key(session))
        if found is None or (self.max_age_s is not None and time.monotonic() - found[1] >= self.max_age_s):
            return None
        return found[0]

    def end(self, request: Request) -> None:
        """Forget the request's session (its login no longer holds)."""
        session = request.cookies.get(self.cookie)
        if session:
            with self._lock:
                self._values.pop(_key(session), None)

    def set_cookie(self, response: Response, session: str, *, secure: bool) -> None:
        strict_cookie(response, self.cookie, session, secure=secure)
