"""The repo documents itself: every ``docs/design.md#section`` a comment cites is a heading of that page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs/design.md"


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_cited_design_section_exists() -> None:
    headings = {anchor(line.lstrip("#")) for line in DESIGN.read_text(encoding="utf-8").splitlines()
                if line.startswith("## ")}
    cited: dict[str, set[str]] = {}
    for path in sorted((ROOT / "extractor").rglob("*.py")):
        for name in re.findall(r"docs/design\.md#([\w-]+)", path.read_text(encoding="utf-8")):
            cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert len(cited) >= 5, cited  # the comments do cite it
    missing = {name: sorted(paths) for name, paths in cited.items() if name not in headings}
    assert not missing, missing


def test_no_comment_cites_an_article_or_spec_that_is_not_in_the_repo() -> None:
    pattern = re.compile(r"\bseed 0\d\d\b|\bAGO\b|\bSPEC\.md\b")  # (Korean 제N조 "articles" are fine)
    offending = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "extractor").rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert not offending, offending
