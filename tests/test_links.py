"""Every place a reader is sent to exists: the ``docs/PAGE.md#section`` references of every command's ``--help``,
of the code (comments, docstrings, messages) and of the pages themselves, plain text or in backticks, reach a
page and one of its headings (or an ``<a id>`` anchor); and the Grafana dashboard the docs name is there.

(Markdown links ``[text](page.md#section)`` of the README and docs are checked by ``tests/test_docs.py``.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.test_docs import anchor
from tests.test_help import ALL, help_of

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = re.compile(r"\bdocs/([\w-]+\.(?:md|json))(?:#([\w-]+))?")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(page: Path) -> set[str]:
    """A page's headings as a renderer anchors them, and its explicit ``<a id="...">`` anchors."""
    text = page.read_text(encoding="utf-8")
    return ({anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
            | set(re.findall(r'<a id="([\w-]+)">', text)))


def broken(where: str, text: str) -> list[str]:
    found = []
    for name, section in REFERENCE.findall(text):
        page = ROOT / "docs" / name
        if not page.exists():
            found.append(f"{where}: docs/{name} (no such file)")
        elif section and (page.suffix != ".md" or section not in anchors(page)):
            found.append(f"{where}: docs/{name}#{section} (no such section)")
    return found


def test_every_docs_reference_of_every_help_text_resolves() -> None:
    problems, seen = [], 0
    for words, _ in ALL:
        text = help_of(words, columns=400)  # wide: no reference is folded over two lines
        seen += len(REFERENCE.findall(text))
        problems += broken(f"extract {' '.join(words)} --help", text)
    assert not problems, problems
    assert seen >= 5  # the help does send readers to the docs (docs/service.md among them)


def test_every_docs_reference_of_the_code_and_the_pages_resolves() -> None:
    problems = []
    for path in [*sorted((ROOT / "extractor").rglob("*.py")), *sorted((ROOT / "extractor").rglob("*.html")), *PAGES]:
        problems += broken(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert not problems, problems


def test_the_service_page_and_its_dashboard_exist_and_are_linked() -> None:
    service = (ROOT / "docs/service.md").read_text(encoding="utf-8")
    assert {"tokens", "claims-and-four-eyes", "metrics", "the-dashboard"} <= anchors(ROOT / "docs/service.md")
    assert "(service.md)" in (ROOT / "docs/queue-and-api.md").read_text(encoding="utf-8")
    assert "docs/service.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    dashboard = json.loads((ROOT / "docs/grafana-dashboard.json").read_text(encoding="utf-8"))
    assert "grafana-dashboard.json" in service and dashboard["panels"]
    documented = set(re.findall(r"`(extract_[a-z_]+)", service))
    used = {re.sub(r"_(bucket|count|sum)$", "", name) for name in re.findall(r"extract_[a-z_]+", json.dumps(dashboard))}
    assert used and used <= documented, used - documented  # the dashboard is built on the documented series
