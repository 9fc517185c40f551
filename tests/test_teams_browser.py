"""Two reviewers of one team in two real headless Chromium browsers (Playwright, Debian's chromium) on one
``extract serve``: opening a document claims it and the other sees who has it and cannot decide until it is let go;
a contract that needs two approvals shows "1 of 2 approvals" until a second person approves; a page left open while
someone else decided refuses its decision, naming that decision; another team's document is not there.

The documents are converted through the API before the browsers start (Playwright's sync API keeps an event loop
in the test's thread); claims last 3 s here, so an open page renews its claim every 0.6 s.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from extractor.queue.settings import BatchSettings
from extractor.service.app import build_service
from extractor.store import open_store
from extractor.store.tokens import create_token
from tests.support.api import bearer, finished, serving
from tests.support.batch import ROOT, answer_for
from tests.support.llm_server import Reply, ScriptedLLMServer

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install -y chromium); Playwright drives it, nothing is downloaded")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install -e '.[test]')")

CLAIM_S = 3.0
PO_ANSWER = (ROOT / "samples/expected/purchase_orders/en_pass.candidate.json").read_text(encoding="utf-8")


def answer(request: dict[str, Any] | None, _number: int) -> Reply:
    return Reply(PO_ANSWER if "lineItems" in json.dumps(request, ensure_ascii=False) else answer_for(request))


class Site:
    def __init__(self, base: str, ids: dict[str, int], tokens: dict[str, str], db: Any) -> None:
        self.base, self.ids, self.tokens, self.db = base, ids, tokens, db

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.db.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from extractor.contracts import use_dirs

    folder = tmp_path_factory.mktemp("teams-browser")
    contracts = folder / "contracts"
    shutil.copytree(ROOT / "samples/contracts/purchase_order", contracts / "purchase_order")
    checks = contracts / "purchase_order/v1/checks.toml"
    checks.write_text(checks.read_text(encoding="utf-8") + "\n[review]\napprovals = 2\n", encoding="utf-8")
    use_dirs([contracts])
    with ScriptedLLMServer(answer) as server:
        store = open_store(f"sqlite:///{folder}/run.db")
        service = build_service(store, broker=None, concurrency=2, model="openai:scripted-model")
        service.defaults = BatchSettings(model="openai:scripted-model", base_url=server.base_url)
        service.claim_s = CLAIM_S
        tokens = {"a-bot": create_token(store.engine, "a-bot", "submitter", "team-a"),
                  "b-bot": create_token(store.engine, "b-bot", "submitter", "team-b"),
                  "kim": create_token(store.engine, "kim", "reviewer", "team-a"),
                  "lee": create_token(store.engine, "lee", "reviewer", "team-a")}
        english = (ROOT / "samples/en_purchase_approval.md").read_text(encoding="utf-8")
        order = (ROOT / "samples/purchase_orders/en_purchase_order.md").read_text(encoding="utf-8")
        documents = {"held": ("a-bot", "held.md", english.replace("Procedure", "Procedure (held)", 1), None),
                     "stale": ("a-bot", "stale.md", english.replace("Procedure", "Procedure (stale)", 1), None),
                     "po": ("a-bot", "po.md", order, "purchase_order"),
                     "po45": ("a-bot", "po45.md", order.replace("net 30", "net 45"), "purchase_order"),
                     "other team": ("b-bot", "b.md", english.replace("Procedure", "Procedure (B)", 1), None)}
        try:
            with serving(service) as base, httpx.Client(base_url=base, timeout=60) as client:
                ids = {}
                for key, (token, name, body, contract) in documents.items():
                    sent = client.post("/v1/documents/text", headers=bearer(tokens[token]),
                                       json={"name": name, "text": body} | ({"contract": contract} if contract else {}))
                    assert sent.status_code == 202, sent.text
                    task = finished(client, tokens[token], sent.json()["documents"][0]["id"])
                    # the candidate says net 30 days: an error finding on po45 (only a person's edit can pass)
                    assert task["outcome"] == ("MANUAL_REVIEW" if key == "po45" else "READY_FOR_REVIEW"), task
                    ids[key] = task["document_run"]
                yield Site(base, ids, tokens, store.engine)
        finally:
            service.close()
            use_dirs(())


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


def signed_in(browser: Any, site: Site, name: str) -> Any:
    """A browser context of its own (cookies apart), signed in by pasting ``name``'s token."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    page = context.new_page()
    page.goto(site.base + "/review/login")
    page.fill("#token", site.tokens[name])
    page.click("#sign-in")
    page.wait_for_url(site.base + "/review/")
    page.close()
    return context


def open_document(context: Any, site: Site, key: str) -> Any:
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.console_errors = errors
    page.goto(f"{site.base}/review/doc/{site.ids[key]}")
    page.wait_for_selector("body[data-ready='1']")
    return page


def test_the_reviewer_who_opened_a_document_holds_it_until_they_leave(site: Site, browser: Any) -> None:
    kim, lee = signed_in(browser, site, "kim"), signed_in(browser, site, "lee")
    try:
        mine = open_document(kim, site, "held")
        assert mine.locator("#held").count() == 0 and mine.locator("#approve").is_enabled()
        theirs = open_document(lee, site, "held")
        notice = theirs.locator("#held").inner_text()
        assert notice.startswith("kim has it open since ") and "you can decide it once they decide, leave it" in notice
        assert theirs.locator("#approve").is_disabled() and theirs.locator("#reject").is_disabled()
        mine.wait_for_timeout(CLAIM_S * 1000 * 1.5)  # longer than a claim lasts: kim's open page keeps renewing it
        assert site.rows(f"SELECT reviewer FROM review_claims WHERE document_run_id = {site.ids['held']} "
                         "AND expires_at > CURRENT_TIMESTAMP") == [("kim",)]
        csrf = theirs.locator('#approve-form input[name="csrf"]').input_value()
        forced = theirs.request.post(f"{site.base}/review/doc/{site.ids['held']}/approve", form={"csrf": csrf})
        assert forced.status == 409 and "kim has it open since" in forced.text()
        queue = open_document(lee, site, "held")  # lee's queue shows who has it
        queue.goto(site.base + "/review/")
        row = queue.locator(f'tr[data-id="{site.ids["held"]}"] td.review-status').inner_text()
        assert row.startswith("open by kim since")
        queue.close()

        mine.goto(site.base + "/review/")  # kim leaves the document: the page lets the claim go
        theirs.wait_for_selector("#held", state="detached", timeout=30_000)  # lee's page took it and reloaded
        theirs.wait_for_selector("body[data-ready='1']")
        assert theirs.locator("#approve").is_enabled()
        theirs.click("#approve")
        theirs.wait_for_load_state()
        assert site.rows(f"SELECT reviewer, decision FROM reviews WHERE document_run_id = {site.ids['held']}") == [
            ("lee", "approved")]
        assert site.rows(f"SELECT * FROM review_claims WHERE document_run_id = {site.ids['held']}") == []
        assert mine.console_errors == [] and theirs.console_errors == []
    finally:
        kim.close()
        lee.close()


def test_two_approvals_show_1_of_2_until_a_second_person_approves(site: Site, browser: Any) -> None:
    kim, lee = signed_in(browser, site, "kim"), signed_in(browser, site, "lee")
    try:
        page = open_document(kim, site, "po")
        assert page.locator("#approvals").inner_text().startswith("0 of 2 approvals")
        page.click("#approve")
        page.wait_for_load_state()
        again = open_document(kim, site, "po")
        shown = again.locator("#approvals").inner_text()
        assert shown.startswith("1 of 2 approvals (kim): approved, and exported, once 1 more person approves")
        assert "(not you: you approved it)" in shown
        assert site.rows("SELECT COUNT(*) FROM approved_records") == [(1,)]  # the held document's alone
        again.goto(site.base + "/review/")
        row = again.locator(f'tr[data-id="{site.ids["po"]}"] td.review-status').inner_text()
        assert row.startswith("1 of 2 approvals (kim); open by kim since")  # the tab above holds it
        again.close()
        page.close()

        second = open_document(lee, site, "po")
        second.wait_for_selector("#held", state="detached", timeout=30_000)
        assert second.locator("#approvals").inner_text().startswith("1 of 2 approvals (kim)")
        second.click("#approve")
        second.wait_for_load_state()
        approvals = site.rows("SELECT approvals FROM approved_records WHERE reviewer = 'lee' AND approvals IS NOT NULL")
        assert [[entry["reviewer"] for entry in json.loads(value) if isinstance(value, str)] or
                [entry["reviewer"] for entry in value] for (value,) in approvals] == [["kim", "lee"]]
        done = open_document(lee, site, "po")
        assert "Approved by kim, lee" in done.locator("#approved").inner_text()
    finally:
        kim.close()
        lee.close()


def test_a_decision_from_a_page_left_open_while_another_was_taken_is_refused_naming_it(site: Site, browser: Any) -> None:
    kim = signed_in(browser, site, "kim")
    try:
        first, stale = open_document(kim, site, "stale"), open_document(kim, site, "stale")  # two tabs of one person
        first.click("#approve")
        first.wait_for_load_state()
        stale.fill("#reason", "not what the document says")
        stale.click("#reject")
        stale.wait_for_selector("#error")
        error = stale.locator("#error").inner_text()
        assert f"kim approved document run {site.ids['stale']} at" in error and "nothing was written" in error
        assert site.rows(f"SELECT decision FROM reviews WHERE document_run_id = {site.ids['stale']}") == [("approved",)]

        other = kim.new_page()  # another team's document is not there
        assert other.goto(f"{site.base}/review/doc/{site.ids['other team']}").status == 404
        other.goto(site.base + "/review/")
        assert other.locator(f'tr[data-id="{site.ids["other team"]}"]').count() == 0
    finally:
        kim.close()


def test_the_second_reviewer_is_shown_the_record_the_first_one_edited_and_approves_it(site: Site, browser: Any) -> None:
    kim, lee = signed_in(browser, site, "kim"), signed_in(browser, site, "lee")
    fixed = json.loads(PO_ANSWER.replace("net 30", "net 45"))
    number = site.ids["po45"]
    try:
        edit = kim.new_page()
        edit.goto(f"{site.base}/review/doc/{number}/edit?mode=json")
        edit.fill("textarea[name=raw_json]", json.dumps(fixed))
        edit.click("#approve-edit")
        edit.wait_for_load_state()
        assert site.rows(f"SELECT reviewer, state FROM signoffs WHERE document_run_id = {number}") == [("kim", "pending")]
        edit.close()

        page = open_document(lee, site, "po45")
        page.wait_for_selector("#held", state="detached", timeout=30_000)
        assert page.locator("#needs-edit").count() == 0  # the model's candidate is not what Approve signs off
        waiting = page.locator("#pending").inner_text()
        assert waiting.startswith("Waiting for approval: the record kim signed off, edited by kim"), waiting
        fields = page.locator("#fields").inner_text()
        assert "net 45 days after delivery" in fields and "the model's value: net 30 days after delivery" in fields
        form = lee.new_page()  # Edit starts from kim's record
        form.goto(f"{site.base}/review/doc/{number}/edit?mode=json")
        assert json.loads(form.locator("textarea[name=raw_json]").input_value()) == fixed
        form.close()
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        page.click("#approve")
        page.wait_for_load_state()
        done = site.rows(f"SELECT reviewer, state FROM signoffs WHERE document_run_id = {number} ORDER BY id")
        assert done == [("kim", "approved"), ("lee", "approved")]
        records = [json.loads(r) if isinstance(r, str) else r for (r,) in site.rows(
            "SELECT record FROM approved_records WHERE reviewer = 'lee' AND edited")]
        assert records == [fixed]
        assert page.console_errors == []
    finally:
        kim.close()
        lee.close()
