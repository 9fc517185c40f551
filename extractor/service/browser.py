"""The review pages of ``extract serve`` under ``/review``: a person signs in with their API token.

A browser cannot send a bearer header, so ``GET /review/login`` shows a form where the person pastes the
token ``extract tokens create NAME --role reviewer`` gave them. ``POST /review/login`` looks it up like a
bearer token (by its hash; a revoked one is refused) and starts a session (``extractor.web.sessions``)
holding the token's hash, never the secret. Every request of a session looks the token up again, so
revoking, rotating or the expiry of the token ends its sessions on the next request, and the principal (token
name = the reviewer recorded, token role, whose documents it reads) is always the token's own. Without a
session a page redirects (303) to the login and a POST gets 401. The pages are for reviewers and admins: a
submitter token is refused at the login, saying so.

Login CSRF (another site signing the browser in under the attacker's token): the form carries an HMAC of a
random nonce that ``GET /review/login`` puts in a SameSite=Strict cookie, so a cross-site POST has neither
the cookie nor the matching field; a request the browser marks as coming from another site (``Sec-Fetch-Site``,
or an ``Origin`` that is not this one) is refused before that. Sessions live in this process (12 hours at
most): several ``extract serve`` processes behind one address need sticky sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from extractor.service.auth import MAX_TOKEN_CHARS, Principal, refusal
from extractor.store import Store
from extractor.store.tokens import find_token, find_token_by_hash, token_hash, touch
from extractor.vocab import Role
from extractor.web.router import SECURITY_HEADERS, SecuredRoute, form_items, no_favicon, render, review_router
from extractor.web.sessions import Sessions, strict_cookie

PREFIX = "/review"
LOGIN_COOKIE = "extract_review_login"
SESSION_HOURS = 12


class NotSignedIn(Exception):
    """No live session: the app answers a page with a redirect to the login, anything else with 401."""


class TokenLogin:
    """Sessions started by pasting an API token; the principal dependency of the review router."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sessions: Sessions[str] = Sessions(max_age_s=SESSION_HOURS * 3600)
        self._key = secrets.token_bytes(32)

    def current(self, request: Request) -> Principal:
        """The signed-in person, checked against the token table on every request (revocation, rotation and expiry
        end it)."""
        sha256 = self.sessions.get(request)
        found = find_token_by_hash(self.store.engine, sha256) if sha256 is not None else None
        if found is None or refusal(found) is not None:
            if sha256 is not None:
                self.sessions.end(request)
            raise NotSignedIn
        touch(self.store.engine, found)
        return Principal.of(found)

    def form_token(self, nonce: str) -> str:
        return hmac.new(self._key, f"review-login|{nonce}".encode(), hashlib.sha256).hexdigest()

    def nonce(self, request: Request) -> str:
        """The login nonce the browser holds, or a new one (kept, so two open login tabs both work)."""
        held = request.cookies.get(LOGIN_COOKIE, "")
        return held if 20 <= len(held) <= 100 else secrets.token_urlsafe(32)


def from_another_site(request: Request) -> bool:
    """What the browser says about where the request comes from: another site (or a sibling) is refused.
    ``Origin: null`` is what a same-origin POST carries under ``Referrer-Policy: no-referrer``, so it passes
    here; the form token decides."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    return origin not in (None, "null", f"{request.url.scheme}://{request.url.netloc}")


def mount_review(app: FastAPI, store: Store, records: Store, *, claim_s: float) -> TokenLogin:
    """Serve the review pages and their login under ``/review`` in ``app`` (the service's, with its run log and
    approved records; opening a document holds it ``claim_s`` seconds). Decisions are checked against the upload of
    a submitted document, as the API's are (``extractor.review.decide``)."""
    login = TokenLogin(store)

    @app.exception_handler(NotSignedIn)
    def not_signed_in(request: Request, _error: NotSignedIn) -> Response:
        if request.method in ("GET", "HEAD"):
            return RedirectResponse(f"{PREFIX}/login", status_code=303, headers=SECURITY_HEADERS)
        return PlainTextResponse(f"not signed in: sign in at {PREFIX}/login", status_code=401, headers=SECURITY_HEADERS)

    pages = APIRouter(prefix=PREFIX, route_class=SecuredRoute, include_in_schema=False)

    def login_page(request: Request, *, status: int = 200, error: str | None = None) -> Response:
        nonce = login.nonce(request)
        response = render("login.html", status, prefix=PREFIX, lang="en", csrf=login.form_token(nonce), error=error)
        strict_cookie(response, LOGIN_COOKIE, nonce, secure=request.url.scheme == "https", path=f"{PREFIX}/login")
        return response

    @pages.get("/login")
    def show_login(request: Request) -> Response:
        return login_page(request)

    @pages.post("/login")
    def sign_in(request: Request, items: list[tuple[str, str]] = Depends(form_items)) -> Response:
        form = dict(items)
        nonce = request.cookies.get(LOGIN_COOKIE, "")
        if from_another_site(request) or not nonce or not hmac.compare_digest(
                form.get("csrf", "").encode(), login.form_token(nonce).encode()):
            return login_page(request, status=403, error="this sign-in did not come from this page: sign in again here")
        secret = form.get("token", "").strip()
        found = find_token(store.engine, secret) if 0 < len(secret) <= MAX_TOKEN_CHARS else None
        why = refusal(found)
        if why is not None or found is None:
            return login_page(request, status=401, error=why)
        if found.role == Role.submitter:
            return login_page(request, status=403, error=f"token {found.name!r} is a submitter's: these pages are for "
                              "reviewers and admins (a submitter follows its documents through the API)")
        response = RedirectResponse(f"{PREFIX}/", status_code=303)
        login.sessions.set_cookie(response, login.sessions.start(token_hash(secret)),
                                  secure=request.url.scheme == "https")
        response.delete_cookie(LOGIN_COOKIE, path=f"{PREFIX}/login", httponly=True, samesite="strict")
        return response

    app.include_router(pages)
    no_favicon(app)
    app.include_router(review_router(lambda: (store, records), login.current, prefix=PREFIX, claim_s=claim_s),
                       include_in_schema=False)  # pages for people, not the API /openapi.json describes
    return login

