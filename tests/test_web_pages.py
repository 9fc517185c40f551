"""The page beside the text in the browser review: `extract review --web` in real headless Chromium shows each page
of a scanned or printed PDF, with a box on every line of every excerpt, and lights up the boxes of the field a
reviewer selects.

The scanned sample (black and white, 300 dpi, OCR'd) and the printed purchase order (a text layer with a table)
are converted through the CLI against the scripted model server of ``tests/test_format_samples.py``; a
screenshot of each page is kept under the test's folder (``--basetemp`` to look at it).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.batch import ROOT, cli_env, extract_command, run_cli
from tests.support.llm_server import Reply, ScriptedLLMServer
from tests.test_format_samples import candidate_for
from tests.test_web_review import CHROMIUM, read_address

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, int], Path, Any]]:
    folder = tmp_path_factory.mktemp("pages")
    db_url = f"sqlite:///{folder}/run.db"
    with ScriptedLLMServer(lambda request, number: Reply(candidate_for(request))) as server:
        env = cli_env(server.base_url, db_url, EXTRACT_OCR_CACHE=str(folder / "ocr"),
                      EXTRACT_PAGE_CACHE=str(folder / "pages"))
        done = run_cli("run", "samples/formats/ko_scanned_procedure.pdf", "samples/formats/ko_purchase_order.pdf",
                       "--model", "openai:scripted", "--format", "json", env=env, cwd=ROOT)
    assert done.returncode in (0, 3), done.stderr
    ids = {Path(o["path"]).name: o["document_run_id"] for o in json.loads(done.stdout)["outcomes"]}
    process = subprocess.Popen([*extract_command("review", "--web", "--port", "0", "--database", db_url)], env=env,
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = read_address(process)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            context = browser.new_context(viewport={"width": 1600, "height": 1100})
            context.set_default_timeout(120_000)
            context.new_page().goto(address)  # signs in
            yield address.split("/?token=")[0], ids, folder, context
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=20)


def open_document(site: tuple[str, dict[str, int], Path, Any], name: str) -> Any:
    base, ids, _, context = site
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(f"{base}/review/doc/{ids[name]}")
    page.wait_for_selector("body[data-ready='1']")
    page.locator(".page-image img").evaluate_all("images => Promise.all(images.map(i => i.decode()))")
    page.console_errors = errors
    return page


@pytest.mark.parametrize("name", ["ko_scanned_procedure.pdf", "ko_purchase_order.pdf"])
def test_the_page_image_stands_beside_the_text_with_the_selected_fields_boxes(site: tuple[str, dict[str, int], Path, Any],
                                                                              name: str) -> None:
    page = open_document(site, name)
    image = page.locator(".page-image img").first
    assert image.evaluate("i => i.naturalWidth") == 1000  # rendered for the page, not the 300 dpi scan
    boxes = page.locator(".ev-box")
    assert boxes.count() >= 2  # documentPurpose and rules[0], one box per line of each excerpt
    page.locator('.field.has-ev[data-path="documentPurpose"]').click()
    lit = page.locator(".ev-box.flash")
    assert lit.count() >= 1
    assert set(lit.evaluate_all("boxes => boxes.map(b => b.dataset.fields)")) == {"documentPurpose"}
    # the box lies on the image, around the excerpt's line: inside the page, a line high (measured in one
    # moment: the panel scrolls the box into view)
    frame, box = lit.first.evaluate(
        "b => [b.parentElement.querySelector('img').getBoundingClientRect(), b.getBoundingClientRect()]"
        ".map(r => ({x: r.x, y: r.y, width: r.width, height: r.height}))")
    assert frame["x"] - 3 <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"] + 3
    assert frame["y"] - 3 <= box["y"] and 8 < box["height"] < 0.05 * frame["height"]
    assert page.locator("#pages").evaluate("p => p.compareDocumentPosition(document.getElementById('source'))") == 4
    shot = site[2] / f"{Path(name).stem}.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 20_000
    assert page.console_errors == []  # no CSP violation: boxes are placed by the page's script


def test_a_page_the_document_does_not_have_is_not_found(site: tuple[str, dict[str, int], Path, Any]) -> None:
    base, ids, _, context = site
    page = context.new_page()
    assert page.goto(f"{base}/review/doc/{ids['ko_purchase_order.pdf']}/page/2").status == 404
    response = page.goto(f"{base}/review/doc/{ids['ko_purchase_order.pdf']}/page/1")
    assert response.status == 200 and response.headers["content-type"] == "image/png"
