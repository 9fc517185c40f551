"""The review pages served by ``extract serve`` under /review, over real HTTP (uvicorn on a free port) with
httpx as the browser: sign in by pasting an API token, sessions that end when the token is revoked, roles,
CSRF on decisions and on the login itself. The run log comes from the real pipeline against the scripted
model server (two documents, both READY_FOR_REVIEW), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from extractor.queue.settings import BatchSettings
from extractor.service.app import Service, build_service
from extractor.service.browser import LOGIN_COOKIE
from extractor.store import open_store
from extractor.store.tokens import create_token, revoke_token
from extractor.web.router import SECURITY_HEADERS
from extractor.web.sessions import COOKIE
from tests.support.api import bearer, finished, serving
from tests.support.corpus import run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

REVIEWER, SUBMITTER = "lee (purchasing)", "intake-bot"


@dataclass
class Site:
    url: str
    ids: list[int]
    tokens: dict[str, str]
    service: Service
    db_url: str

    def browser(self) -> httpx.Client:
        """A client that keeps cookies, as a browser does (the caller closes it)."""
        return httpx.Client(base_url=self.url, timeout=30)


@pytest.fixture
def site(db_url: str, tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer],
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server = llm_server(script({"base": lambda _number: "pass"}))
    summary = run(db_url, server, write_documents(tmp_path / "docs", [0, 1]), "base")
    ids = [o.document_run_id for o in sorted(summary.outcomes, key=lambda o: o.path)]
    assert [o.state for o in summary.outcomes] == ["READY_FOR_REVIEW"] * 2, summary.outcomes
    store = open_store(db_url)
    service = build_service(store, broker=None, concurrency=1, model="openai:base")
    service.defaults = BatchSettings(model="openai:base", base_url=server.base_url)  # for submissions
    tokens = {REVIEWER: create_token(store.engine, REVIEWER, "reviewer", all_owners=True),
              SUBMITTER: create_token(store.engine, SUBMITTER, "submitter")}
    try:
        with serving(service) as url:
            yield Site(url, ids, tokens, service, db_url)
    finally:
        service.close()


def hidden_csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert match, "page without a CSRF token"
    return match.group(1)


def sign_in(client: httpx.Client, token: str, **headers: str) -> httpx.Response:
    """What a person does: open the login page, paste the token, submit."""
    form = client.get("/review/login")
    assert form.status_code == 200
    return client.post("/review/login", data={"token": token, "csrf": hidden_csrf(form.text)}, headers=headers)


def secured(response: httpx.Response) -> bool:
    return all(response.headers.get(name) == value for name, value in SECURITY_HEADERS.items())


def test_without_a_session_pages_go_to_the_login_and_wrong_or_revoked_tokens_are_refused(site: Site) -> None:
    good = site.ids[0]
    with site.browser() as client:
        page = client.get("/review/")
        assert page.status_code == 303 and page.headers["location"] == "/review/login" and secured(page)
        assert client.get(f"/review/doc/{good}").headers["location"] == "/review/login"
        posted = client.post(f"/review/doc/{good}/approve", data={"csrf": "0" * 64})
        assert posted.status_code == 401 and "sign in at /review/login" in posted.text

        login = client.get("/review/login")
        assert login.status_code == 200 and secured(login) and 'type="password" name="token"' in login.text
        assert "<script>" not in login.text  # the CSP allows no inline script; the page's only script is a file
        nonce_cookie = login.headers["set-cookie"]
        assert nonce_cookie.startswith(f"{LOGIN_COOKIE}=") and "HttpOnly" in nonce_cookie
        assert "SameSite=strict" in nonce_cookie and "Path=/review/login" in nonce_cookie

        wrong = sign_in(client, "ext_" + "x" * 43)
        assert wrong.status_code == 401 and "unknown or revoked token" in wrong.text and COOKIE not in client.cookies
        revoked = create_token(site.service.store.engine, "left the team", "reviewer", all_owners=True)
        assert revoke_token(site.service.store.engine, "left the team")
        assert sign_in(client, revoked).status_code == 401
        assert sign_in(client, "").status_code == 401 and COOKIE not in client.cookies
        assert client.get("/review/").status_code == 303

        signed_in = sign_in(client, site.tokens[REVIEWER])
        assert signed_in.status_code == 303 and signed_in.headers["location"] == "/review/"
        session_cookie = next(c for c in signed_in.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}="))
        assert "HttpOnly" in session_cookie and "SameSite=strict" in session_cookie
        assert "Secure" not in session_cookie  # plain http here; over https the cookie is Secure
        assert site.tokens[REVIEWER] not in session_cookie
        queue = client.get("/review/")
        assert queue.status_code == 200 and f"signed in as <b>{REVIEWER}</b>" in queue.text

        # revoking the token ends its sessions at the next request: pages go to the login, a POST is 401
        token = hidden_csrf(client.get(f"/review/doc/{good}").text)
        assert revoke_token(site.service.store.engine, REVIEWER)
        assert client.get("/review/").headers["location"] == "/review/login"
        assert client.post(f"/review/doc/{good}/approve", data={"csrf": token}).status_code == 401
        assert client.get(f"/v1/review/{good}", headers=bearer(site.tokens[REVIEWER])).status_code == 401


def test_a_reviewer_approves_with_the_csrf_token_and_is_recorded_under_the_token_name(site: Site, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from extractor.cli import app

    first, second = site.ids
    with site.browser() as client:
        assert sign_in(client, site.tokens[REVIEWER]).status_code == 303
        queue = client.get("/review/").text
        assert f'data-id="{first}"' in queue and f'data-id="{second}"' in queue and "2 documents waiting" in queue
        page = client.get(f"/review/doc/{first}")
        assert page.status_code == 200 and secured(page)
        token = hidden_csrf(page.text)

        assert client.post(f"/review/doc/{first}/approve", data={"note": "ok"}).status_code == 403
        assert client.post(f"/review/doc/{first}/approve", data={"csrf": token[::-1]}).status_code == 403
        with site.browser() as other:  # another person's session: their token is not this one's
            assert sign_in(other, create_token(site.service.store.engine, "kim", "admin")).status_code == 303
            assert other.post(f"/review/doc/{first}/approve", data={"csrf": token}).status_code == 403
        approved = client.post(f"/review/doc/{first}/approve", data={"csrf": token, "note": "checked"})
        assert approved.status_code == 303 and approved.headers["location"].startswith(f"/review/doc/{second}?")
        assert f'data-id="{first}"' not in client.get("/review/").text

    api = httpx.get(f"{site.url}/v1/review/{first}", headers=bearer(site.tokens[REVIEWER])).json()
    assert api["approved"]["reviewer"] == REVIEWER and api["reviews"][0]["decision"] == "approved"
    out = tmp_path / "approved.jsonl"
    result = CliRunner().invoke(app, ["export", "--out", str(out), "--database", site.db_url])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["provenance"]["reviewer"], r["provenance"]["note"]) for r in records] == [(REVIEWER, "checked")]


def test_a_submitted_document_is_approved_in_the_browser_against_its_uploaded_copy(site: Site, tmp_path: Path) -> None:
    """A document that came in through the API has no file on this machine (its path is the name it was
    submitted under): the approval re-reads the copy the run log keeps, as the API's approval does."""
    [path] = write_documents(tmp_path / "upload", [2])
    with site.browser() as client:
        sent = client.post("/v1/documents", headers=bearer(site.tokens[SUBMITTER]),
                           files=[("files", ("purchase_02.md", path.read_bytes(), "text/markdown"))])
        assert sent.status_code == 202, sent.text
        task = finished(client, site.tokens[SUBMITTER], sent.json()["documents"][0]["id"])
        assert task["outcome"] == "READY_FOR_REVIEW", task
        assert sign_in(client, site.tokens[REVIEWER]).status_code == 303
        uploaded = task["document_run"]
        assert f'data-id="{uploaded}"' in client.get("/review/").text
        token = hidden_csrf(client.get(f"/review/doc/{uploaded}").text)
        approved = client.post(f"/review/doc/{uploaded}/approve", data={"csrf": token})
        assert approved.status_code == 303, approved.text
    api = httpx.get(f"{site.url}/v1/review/{uploaded}", headers=bearer(site.tokens[REVIEWER])).json()
    assert api["approved"]["reviewer"] == REVIEWER


def test_a_submitter_cannot_sign_in_and_the_login_page_says_so(site: Site) -> None:
    good = site.ids[0]
    with site.browser() as reviewer:
        assert sign_in(reviewer, site.tokens[REVIEWER]).status_code == 303
        token = hidden_csrf(reviewer.get(f"/review/doc/{good}").text)
    with site.browser() as client:
        login = client.get("/review/login").text
        assert "Submitter tokens cannot sign in here" in login and "may look" not in login
        refused_login = sign_in(client, site.tokens[SUBMITTER])
        assert refused_login.status_code == 403 and COOKIE not in client.cookies
        assert f"token &#39;{SUBMITTER}&#39; is a submitter&#39;s" in refused_login.text
        assert client.get("/review/").headers["location"] == "/review/login"
        refused = client.post(f"/review/doc/{good}/approve", data={"csrf": token})
        assert refused.status_code == 401
    api = httpx.get(f"{site.url}/v1/review/{good}", headers=bearer(site.tokens[REVIEWER])).json()
    assert api["approved"] is None and api["reviews"] == []


def test_the_login_is_protected_against_login_csrf(site: Site) -> None:
    """Another site must not sign the browser in under the attacker's token (so the victim's decisions, or
    what they type, would land under the attacker's name): the form token is bound to the browser's own
    SameSite nonce cookie, and requests the browser marks as cross-site are refused."""
    attacker_token = create_token(site.service.store.engine, "attacker", "reviewer", all_owners=True)
    with site.browser() as attacker, site.browser() as victim:
        attacker_csrf = hidden_csrf(attacker.get("/review/login").text)
        # a cross-site form post carries no SameSite=Strict cookie: only the fields the attacker knows
        bare = victim.post("/review/login", data={"token": attacker_token, "csrf": attacker_csrf})
        assert bare.status_code == 403 and COOKIE not in victim.cookies
        # even with the victim's own nonce cookie (had it visited the login page), the attacker's field does not fit
        victim.get("/review/login")
        assert victim.post("/review/login", data={"token": attacker_token, "csrf": attacker_csrf}).status_code == 403
        assert victim.post("/review/login", data={"token": attacker_token}).status_code == 403
        csrf = hidden_csrf(victim.get("/review/login").text)
        for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site"}):
            refused = victim.post("/review/login", data={"token": attacker_token, "csrf": csrf}, headers=headers)
            assert refused.status_code == 403 and "did not come from this page" in refused.text, headers
        assert COOKIE not in victim.cookies and victim.get("/review/").status_code == 303
        # a same-origin post under Referrer-Policy: no-referrer says "Origin: null": that is the page itself
        own = victim.post("/review/login", data={"token": site.tokens[REVIEWER], "csrf": csrf},
                          headers={"Origin": "null", "Sec-Fetch-Site": "same-origin"})
        assert own.status_code == 303 and COOKIE in victim.cookies
        assert f"signed in as <b>{REVIEWER}</b>" in victim.get("/review/").text


def test_behind_an_https_proxy_both_cookies_are_secure(site: Site) -> None:
    """uvicorn takes the scheme from ``X-Forwarded-Proto`` of a proxy on this machine: over https the login
    nonce and the session cookie carry Secure (a browser then never sends them over plain http)."""
    https = {"X-Forwarded-Proto": "https"}
    form = httpx.get(f"{site.url}/review/login", headers=https)
    assert form.status_code == 200 and "; secure" in form.headers["set-cookie"].lower()
    nonce = form.cookies[LOGIN_COOKIE]
    done = httpx.post(f"{site.url}/review/login", headers=https | {"Cookie": f"{LOGIN_COOKIE}={nonce}",
                                                                    "Origin": site.url.replace("http:", "https:")},
                      data={"token": site.tokens[REVIEWER], "csrf": hidden_csrf(form.text)})
    assert done.status_code == 303, done.text
    session_cookie = next(c for c in done.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}="))
    assert "; secure" in session_cookie.lower() and "httponly" in session_cookie.lower()


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_a_reviewer_signs_in_through_the_form_and_approves_in_chromium(site: Site) -> None:
    """The real browser's own headers (``Origin: null`` under no-referrer, ``Sec-Fetch-Site``) pass the login
    check, the cookie is what the server set, and no script or style breaks the Content-Security-Policy."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install -e '.[test]')")
    first, second = site.ids
    with sync_api.sync_playwright() as playwright:  # after the site's runs: Playwright keeps a loop in this thread
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            context = browser.new_context()
            context.set_default_timeout(60_000)
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("response", lambda response: errors.append(f"{response.status} {response.url}")
                    if response.status >= 400 else None)
            page.goto(site.url + "/review/")
            assert page.url == site.url + "/review/login"
            page.fill("#token", site.tokens[REVIEWER])
            page.click("#sign-in")
            page.wait_for_url(site.url + "/review/")
            page.wait_for_selector("body[data-ready='1']")
            assert page.locator("tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)") == [str(first), str(second)]
            assert REVIEWER in page.inner_text("header")
            [cookie] = [c for c in context.cookies() if c["name"] == COOKIE]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"

            page.goto(f"{site.url}/review/doc/{first}")
            page.fill("input[name=note]", "looks right")
            page.click("#approve")
            page.wait_for_url(f"**/review/doc/{second}?*")
            assert f"approved document run {first} as {REVIEWER}" in page.inner_text("main")
            assert errors == []
        finally:
            browser.close()
    api = httpx.get(f"{site.url}/v1/review/{first}", headers=bearer(site.tokens[REVIEWER])).json()
    assert api["approved"]["reviewer"] == REVIEWER and api["approved"]["note"] == "looks right"
