"""Review in the browser, in real headless Chromium: `extract review --web` against runs made by `extract run`.

One module-wide setup (the browser is the slow part): three documents (English, Korean, Russian) converted
through the CLI against the scripted model server (the Korean answer invents a rule: MANUAL_REVIEW with an
error), plus a second run, tagged and with another model, of a document whose title carries ``<script>``
(its answer swaps two steps: a warning that needs a person). The server is the real ``extract review --web``
subprocess, signed in once with the token it prints; the tests drive Debian's chromium through Playwright
(no browser download). The decision test runs last: it approves one document, edits and approves the second,
rejects the third, then checks the approved records through ``extract export`` and ``extract show``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.batch import answer_for, cli_env, extract_command, run_cli, write_batch
from tests.support.corpus import run
from tests.support.llm_server import Reply, ScriptedLLMServer

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install -y chromium); Playwright drives it, nothing is downloaded")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install -e '.[test]')")

REVIEWER = "web-reviewer"
INVENTED = "모든 요청은 CFO 서명이 필요하다."
HOSTILE_TITLE = "# Purchase Request Approval Procedure <script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"


def answer(body: dict[str, Any] | None, _call: int) -> Reply:
    """The sample candidate that passes; the Korean one with an invented rule; the hostile one with two
    steps swapped (STEP_ORDER_INVERTED: a warning that needs a person)."""
    candidate = json.loads(answer_for(body))
    text = json.dumps(body, ensure_ascii=False)
    if "작업 요청" in text:
        candidate["rules"].append(INVENTED)
    if "<script>" in text:
        steps = candidate["processSteps"]
        steps[0]["order"], steps[1]["order"] = 2, 1
    return Reply(json.dumps(candidate, ensure_ascii=False))


class Review:
    """The run log, the ids of its document runs, the signed-in browser context and the server's address."""

    def __init__(self, folder: Path, db_url: str, base: str, ids: dict[str, int], context: Any, env: dict[str, str]) -> None:
        self.folder, self.db_url, self.base, self.ids, self.context, self.env = folder, db_url, base, ids, context, env

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, "--database", self.db_url, env=self.env, cwd=self.folder, timeout=120)

    def show(self, document_run_id: int) -> dict[str, Any]:
        """What ``extract show DOC --format json`` prints (the same function, in process: no interpreter start)."""
        from extractor.review import resolve
        from extractor.review.view import document_view
        from extractor.store import open_store
        from extractor.store.approved import open_approved

        with open_store(self.db_url, create=False) as store:
            resolved = resolve(store, str(document_run_id))
            return document_view(store, open_approved(store), resolved.document_run, resolved.others).to_json()

    def open(self, path: str) -> Any:
        """A new tab on ``path``, failing the test on any console error (a CSP violation is one)."""
        page = self.context.new_page()
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.console_errors = errors
        response = page.goto(self.base + path)
        page.wait_for_selector("body[data-ready='1']")
        page.first_response = response
        return page


def read_address(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """The login address ``extract review --web`` prints once it listens (waited for on a reader thread)."""
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    while True:
        line = lines.get(timeout=timeout)
        if "?token=" in line:
            return line.split("browser: ", 1)[1].strip()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, int], dict[str, str]]:
    """The runs (made before the browser starts: Playwright's sync API keeps an event loop in this thread)."""
    folder = tmp_path_factory.mktemp("web")
    db_url = f"sqlite:///{folder}/run.db"
    paths = write_batch(folder / "docs", 3)
    hostile = folder / "hostile" / "purchase.md"
    hostile.parent.mkdir()
    english = (Path(__file__).resolve().parents[1] / "samples/en_purchase_approval.md").read_text(encoding="utf-8")
    hostile.write_text(english.replace("# Purchase Request Approval Procedure", HOSTILE_TITLE, 1), encoding="utf-8")
    with ScriptedLLMServer(answer) as server:
        env = cli_env(server.base_url, db_url, USER=REVIEWER, LOGNAME=REVIEWER, COLUMNS="200")
        first = run_cli("run", str(folder / "docs"), "--model", "openai:scripted", "--format", "json", env=env, cwd=folder)
        second = run(db_url, server, [hostile], "scripted-b", tags=["hostile"])  # in process: one interpreter less
    outcomes = {o["path"]: o for o in json.loads(first.stdout)["outcomes"] + [o.to_json() for o in second.outcomes]}
    named = (("en", paths[0]), ("ko", paths[1]), ("ru", paths[2]), ("hostile", hostile))
    states = {name: outcomes[str(path)]["state"] for name, path in named}
    assert states == {"en": "READY_FOR_REVIEW", "ko": "MANUAL_REVIEW", "ru": "READY_FOR_REVIEW",
                      "hostile": "MANUAL_REVIEW"}, states
    return folder, db_url, {name: outcomes[str(path)]["document_run_id"] for name, path in named}, env


@pytest.fixture(scope="module")
def review(run_log: tuple[Path, str, dict[str, int], dict[str, str]], browser: Any) -> Iterator[Review]:
    folder, db_url, ids, env = run_log
    process = subprocess.Popen([*extract_command("review", "--web", "--port", "0", "--database", db_url)], env=env,
                               cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = read_address(process)
        base = address.split("/?token=")[0]
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(120_000)  # the first edit check loads the Korean splitter (seconds on a busy machine)
        page = context.new_page()
        page.goto(address)
        assert page.url == base + "/review/", page.url  # signed in, the token gone from the address bar
        page.close()
        context.login_address = address
        yield Review(folder, db_url, base, ids, context, env)
        context.close()
    finally:
        process.terminate()
        process.wait(timeout=20)


# ---------------------------------------------------------------- login, queue, document page


def test_login_token_works_once_and_gives_a_strict_http_only_cookie(review: Review, browser: Any) -> None:
    [cookie] = review.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["name"] == "extract_review_session"
    stranger = browser.new_context()
    try:
        page = stranger.new_page()
        assert page.goto(review.base + "/review/").status == 401
        again = page.goto(review.context.login_address)
        assert again.status == 403 and "used already" in page.content()
        assert stranger.cookies() == []
    finally:
        stranger.close()


def test_queue_puts_needs_a_person_first_and_filters(review: Review) -> None:
    page = review.open("/review/")
    rows = page.locator("tr.row")
    ids = [int(x) for x in rows.evaluate_all("rows => rows.map(r => r.dataset.id)")]
    # needs a person (the swapped steps) first, then READY_FOR_REVIEW, then the other MANUAL_REVIEW
    assert ids == [review.ids["hostile"], review.ids["en"], review.ids["ru"], review.ids["ko"]]
    counts = {a.get_attribute("data-state"): a.locator("b").inner_text() for a in page.locator("a.count[data-state]").all()}
    assert counts == {"READY_FOR_REVIEW": "2", "MANUAL_REVIEW": "2", "BLOCKED": "0"}
    assert "STEP_ORDER_INVERTED" in rows.first.inner_text() and "VALUE_WITHOUT_EVIDENCE" in rows.last.inner_text()
    # what needs a person is said on the warning itself (no column that stays empty for most rows)
    headers = page.locator("table.queue th").all_inner_texts()
    assert "needs a person" not in [h.replace("\n", " ") for h in headers], headers
    assert rows.first.locator(".badge.needs").inner_text() == "STEP_ORDER_INVERTED · needs a person"
    # a path wraps only after a "/": never inside a name
    path = rows.first.locator("td.path")
    assert path.evaluate("cell => getComputedStyle(cell).wordBreak") == "normal"
    assert path.evaluate("cell => getComputedStyle(cell).overflowWrap") == "normal"
    assert path.evaluate("cell => cell.innerHTML").startswith(f"{review.folder}/".replace("/", "/<wbr>")[:-5])

    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("tr.row.selected").get_attribute("data-id") == str(review.ids["en"])
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/review/doc/{review.ids['en']}")

    page.goto(review.base + "/review/?state=MANUAL_REVIEW")
    assert page.locator("tr.row").count() == 2
    page.goto(review.base + "/review/?tag=hostile")
    assert page.locator("tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)") == [str(review.ids["hostile"])]
    page.goto(review.base + "/review/?model=scripted&prompt=v1")
    assert page.locator("tr.row").count() == 3
    page.goto(review.base + "/review/?model=nobody")
    assert page.locator("tr.row").count() == 0 and "Nothing waits" in page.inner_text("main")
    assert page.console_errors == []


def test_document_page_colours_sentences_and_links_every_excerpt_to_its_field(review: Review, tmp_path: Path) -> None:
    view = review.show(review.ids["en"])
    page = review.open(f"/review/doc/{review.ids['en']}")
    assert page.locator("html").get_attribute("lang") == "en"
    page.screenshot(path=str(tmp_path / "document.png"), full_page=True)
    assert (tmp_path / "document.png").stat().st_size > 10_000

    for sentence in view["sentences"]:  # every sentence drawn with its state
        element = page.locator(f"#sent-{sentence['id']}")
        assert element.get_attribute("data-label") == sentence["label"]
        assert sentence["label"] in element.get_attribute("class")
    found = [span for span in view["evidence_spans"] if span["found"]]
    assert len(found) == len(view["evidence_spans"]) >= 10
    for span in found:  # every evidence item has its highlight, and its field links to it
        marks = page.locator(f"mark.ev[data-ev~='{span['index']}']")
        assert marks.count() >= 1, span
        assert span["fieldPath"] in marks.first.get_attribute("data-fields").split(" ")
        assert page.locator(f".field.has-ev[data-ev~='{span['index']}']").count() == 1, span

    step = page.locator(".field[data-path='processSteps[3]']")
    step.locator(":scope > .fhead").click()
    flashed = page.locator("mark.ev.flash")
    assert flashed.count() >= 1
    assert flashed.first.inner_text() == "The procurement officer issues the purchase order after approval"
    flashed.first.wait_for(state="visible")
    page.wait_for_function("() => { const r = document.querySelector('mark.ev.flash').getBoundingClientRect(); "
                           "return r.top >= 0 && r.bottom <= window.innerHeight; }")  # scrolled to it

    page.locator("#sent-s12").click()
    assert "lit" in page.locator(".field[data-path='processSteps[3]']").get_attribute("class")
    assert "lit" not in page.locator(".field[data-path='processSteps[0]']").get_attribute("class")
    # the question of a NEEDS_INPUT field, and every attempt's raw response
    assert "Which budget owner decides" in page.locator(".field[data-path='assignmentRule'] .question").inner_text()
    assert page.locator("main").inner_text().count("Which budget owner decides") == 1  # shown once, at its field
    assert "assignmentRule" in page.locator(".questions .at-fields").inner_text()  # and named in the summary
    page.locator("details.raw summary").first.click()
    assert '"documentPurpose"' in page.locator("details.raw pre").first.inner_text()
    assert page.console_errors == []

    page.keyboard.press("j")  # next and previous in the queue's order
    page.wait_for_url(f"**/review/doc/{review.ids['ru']}")
    page.wait_for_selector("body[data-ready='1']")
    page.keyboard.press("k")
    page.wait_for_url(f"**/review/doc/{review.ids['en']}")


@pytest.mark.parametrize(("name", "lang", "phrase"), [("ko", "ko", "요청자가 작업 내용을 작성합니다."),
                                                      ("ru", "ru", "Сотрудник")])
def test_korean_and_russian_render_as_written(review: Review, name: str, lang: str, phrase: str) -> None:
    page = review.open(f"/review/doc/{review.ids[name]}")
    assert page.locator("html").get_attribute("lang") == lang
    assert page.locator("#source").get_attribute("lang") == lang
    assert phrase in page.locator("#source").inner_text()
    view = review.show(review.ids[name])
    assert page.locator("#source").inner_text().replace("\n", "") .count(view["sentences"][2]["text"].replace("\n", "")) == 1
    if name == "ko":  # the invented rule's finding sits beside the field it points at
        finding = page.locator(".field[data-path='rules[2]'] .finding")
        assert finding.get_attribute("data-rule") == "VALUE_WITHOUT_EVIDENCE" and INVENTED in page.locator(
            ".field[data-path='rules[2]'] .value").inner_text()


def test_a_script_in_the_document_is_shown_as_text(review: Review) -> None:
    page = review.open(f"/review/doc/{review.ids['hostile']}")
    csp = page.first_response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.evaluate("() => window.pwned") is None
    assert HOSTILE_TITLE[2:] in page.locator("#source").inner_text()
    assert page.locator("script").count() == 1 and page.locator("#source img").count() == 0
    page.locator("details.request summary").first.click()
    assert "<script>window.pwned = 1</script>" in page.locator("details.request pre").first.inner_text()
    assert "STEP_ORDER_INVERTED" in page.inner_text(".needs")
    # latency as extract show gives it, in seconds
    assert re.search(r" · \d+\.\d s · ", page.inner_text(".attempts")) and " ms " not in page.inner_text(".attempts")
    assert page.console_errors == []


def test_a_post_without_the_csrf_token_is_refused(review: Review, browser: Any) -> None:
    target = f"{review.base}/review/doc/{review.ids['en']}/approve"
    assert review.context.request.post(target, form={"note": "no token"}).status == 403
    assert review.context.request.post(target, form={"note": "wrong", "csrf": "0" * 64}).status == 403
    reject = f"{review.base}/review/doc/{review.ids['en']}/reject"
    assert review.context.request.post(reject, form={"reason": "no token"}).status == 403
    edit = f"{review.base}/review/doc/{review.ids['ko']}/edit"
    assert review.context.request.post(edit, form={"action": "approve"}).status == 403
    stranger = browser.new_context()
    try:  # without the session nothing at all, token or not
        assert stranger.request.post(target, form={"note": "x"}).status == 401
    finally:
        stranger.close()
    assert review.show(review.ids["en"])["reviews"] == [] and review.show(review.ids["en"])["approved"] is None


# ---------------------------------------------------------------- decisions (last: they change the queue)


def test_approve_edit_and_reject_then_export(review: Review) -> None:
    en, ko, ru = review.ids["en"], review.ids["ko"], review.ids["ru"]

    # approve: one keystroke
    page = review.open(f"/review/doc/{en}")
    page.keyboard.press("a")
    page.wait_for_url(lambda url: f"/doc/{en}" not in url)
    assert page.inner_text(".done") == f"approved document run {en} as {REVIEWER}"

    # the Korean candidate has an error: approving it as produced is refused with the reason on the page
    page = review.open(f"/review/doc/{ko}")
    page.keyboard.press("a")
    page.wait_for_selector("#error")
    page.wait_for_selector("body[data-ready='1']")  # the keys work once the page's script has run
    assert "error findings" in page.inner_text("#error") and "VALUE_WITHOUT_EVIDENCE" in page.inner_text("#error")

    # edit: the form is built from the schema; removing the invented rule makes the check pass
    page.keyboard.press("e")
    page.wait_for_url(f"**/doc/{ko}/edit**")
    page.wait_for_selector("body[data-ready='1']")
    rules = page.locator("fieldset.arr[data-path='rules']")
    assert rules.locator(":scope > ol > li.item").count() == 3
    assert page.locator("fieldset[data-path='sentenceCoverage[2]'] fieldset.arr[data-path='sentenceCoverage[2].fieldPaths']").count() == 1
    page.click("#approve-edit")  # unchanged: refused, with the finding beside the field
    page.wait_for_selector("#error")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator(".leaf[data-path='rules[2]'] .finding").get_attribute("data-rule") == "VALUE_WITHOUT_EVIDENCE"
    rules = page.locator("fieldset.arr[data-path='rules']")
    rules.locator(":scope > ol > li.item").nth(2).locator("button.remove").click()
    rules.locator(":scope > button.add").click()  # a new item from the template, then removed again
    assert rules.locator(":scope > ol > li.item").count() == 3
    rules.locator(":scope > ol > li.item").last.locator("input").fill("검토는 사흘 안에 끝낸다.")
    page.click("#check")
    page.wait_for_selector(".finding[data-rule='VALUE_WITHOUT_EVIDENCE']")
    page.wait_for_selector("body[data-ready='1']")
    assert page.locator("#passed").count() == 0
    page.locator("fieldset.arr[data-path='rules'] > ol > li.item").last.locator("button.remove").click()
    page.click("#check")
    page.wait_for_selector("#passed")
    page.wait_for_selector("body[data-ready='1']")
    page.fill("form#edit-form input[name=note]", "removed the invented CFO rule")
    page.click("#approve-edit")
    page.wait_for_url(lambda url: "/edit" not in url)

    # reject: r focuses the reason, Enter sends it
    page = review.open(f"/review/doc/{ru}")
    page.keyboard.press("r")
    assert page.evaluate("() => document.activeElement.id") == "reason"
    page.keyboard.type("wrong approver named")
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: f"/doc/{ru}" not in url)
    assert page.console_errors == []

    # a rejection without a reason is refused by the server too (the browser's `required` aside)
    csrf = review.open(f"/review/doc/{review.ids['hostile']}").locator("#reject-form input[name=csrf]").get_attribute("value")
    refused = review.context.request.post(f"{review.base}/review/doc/{review.ids['hostile']}/reject",
                                          form={"csrf": csrf, "reason": "  "})
    assert refused.status == 409 and "needs a reason" in refused.text()

    queue_ids = review.open("/review/").locator("tr.row").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert queue_ids == [str(review.ids["hostile"])]

    out = review.folder / "approved.jsonl"
    exported = review.cli("export", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    by_name = {Path(row["provenance"]["document_path"]).name: row for row in rows}
    assert sorted(by_name) == ["00000_en_purchase_approval.md", "00001_ko_work_request_review.txt"]
    assert {row["provenance"]["reviewer"] for row in rows} == {REVIEWER}
    korean_record = by_name["00001_ko_work_request_review.txt"]
    assert korean_record["provenance"]["edited"] and len(korean_record["record"]["rules"]) == 2
    assert not by_name["00000_en_purchase_approval.md"]["provenance"]["edited"]
    korean = review.show(ko)
    assert korean["approved"]["edited"] and korean["approved"]["reviewer"] == REVIEWER
    assert korean["approved"]["note"] == "removed the invented CFO rule"
    assert INVENTED not in json.dumps(rows, ensure_ascii=False)
    assert review.show(en)["approved"]["edited"] is False
    [rejection] = review.show(ru)["reviews"]
    assert rejection == {**rejection, "decision": "rejected", "reviewer": REVIEWER, "note": "wrong approver named"}

    # the approved Korean document's page shows the approved record, the edit marked, who and when: nothing to decide
    page = review.open(f"/review/doc/{ko}")
    assert page.inner_text("#decision") == "APPROVED" and page.locator(".badge.state-MANUAL_REVIEW").count() == 0
    assert page.locator("#approve-form, #reject-form, #edit, #needs-edit").count() == 0
    approved = page.inner_text("#approved")
    assert approved.startswith(f"Approved by {REVIEWER} at ") and " UTC, edited" in approved
    assert approved.endswith(": removed the invented CFO rule") and page.inner_text("main").count(f"by {REVIEWER}") == 1
    rules = page.locator(".field[data-path='rules']")
    assert rules.locator(":scope > .fhead .badge.edited").inner_text() == "edited"
    assert rules.locator(":scope > .fhead .was").inner_text() == "the model had 3 items"
    assert rules.locator(".field[data-path^='rules[']").count() == 2  # the approved record's two rules
    fields = page.inner_text("#fields")
    assert INVENTED not in fields and "VALUE_WITHOUT_EVIDENCE" not in fields  # the model's finding went with its rule
    page.keyboard.press("a")  # no decision to take: the key does nothing
    assert page.url.endswith(f"/review/doc/{ko}") and page.console_errors == []
    page = review.open(f"/review/doc/{ru}")
    assert page.inner_text("#decision") == "REJECTED" and page.locator("#approve-form, #reject-form").count() == 0
    assert page.inner_text("#rejected") .endswith(": wrong approver named")
    assert os.environ.get("USER") != REVIEWER  # the name came from the server's login, not from this process


def test_a_findings_hint_reads_as_words(browser: Any, tmp_path: Path) -> None:
    """A finding's hint (machine-usable help for the repair, a dict) is drawn as words on the page, never as a Python
    dict: an answer that leaves the last sentence out of its coverage gets SENTENCE_NOT_ACCOUNTED with one."""
    def leaves_one_out(body: dict[str, Any] | None, _call: int) -> Reply:
        candidate = json.loads(answer_for(body))
        candidate["sentenceCoverage"] = [e for e in candidate["sentenceCoverage"] if e["sentenceId"] != "s18"]
        return Reply(json.dumps(candidate, ensure_ascii=False))

    db_url = f"sqlite:///{tmp_path}/run.db"
    [path] = write_batch(tmp_path / "docs", 1)
    with ScriptedLLMServer(leaves_one_out) as server:
        env = cli_env(server.base_url, db_url, USER=REVIEWER, LOGNAME=REVIEWER)
        done = run_cli("run", str(path), "--model", "openai:scripted", "--format", "json", env=env, cwd=tmp_path)
    [outcome] = json.loads(done.stdout)["outcomes"]
    assert outcome["state"] == "MANUAL_REVIEW", outcome
    process = subprocess.Popen([*extract_command("review", "--web", "--port", "0", "--database", db_url)], env=env,
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(read_address(process))
        page.goto(page.url + f"doc/{outcome['document_run_id']}")
        finding = page.locator(".field[data-path='sentenceCoverage'] .finding[data-rule='SENTENCE_NOT_ACCOUNTED']")
        assert finding.locator(".detail").inner_text() == "sentence id s18 · text “Questions go to the finance team.”"
        assert "{'" not in page.inner_text("main") and "'sentence_id'" not in page.content()
    finally:
        context.close()
        process.terminate()
        process.wait(timeout=20)
