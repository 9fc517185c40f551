"""Office files as others write them: each public file of ``../shared/real-files/`` read through the CLI and
compared with an independent reader (docs/formats.md#measured-on-real-files).

The files come from other projects' test suites (its README lists each with its repository, path, commit and
licence; CI has the folder beside the clone). Each is read by ``extract split --format json`` in its own
process, the way a user reads it, and its sentences compared with ``tests/support/reference_readers.py``:
pyhwp's record model for .hwp, the section XML for .hwpx, poppler's pdftotext and pdfplumber's own table
finder for PDF, python-docx and the package XML for .docx, openpyxl's full loader for .xlsx, the standard
library's email package for .eml. So a regression in a reader shows as a number: ``pytest -s`` prints them.
"""

from __future__ import annotations

import json
import re
import subprocess
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support import reference_readers as reference
from tests.support.batch import extract_command

REAL_FILES = Path(__file__).resolve().parents[1].parent / "shared" / "real-files"
TOKENS = 0.98
CELLS = 0.98
LOWER = {  # file -> (its bound, why the reference cannot reach the usual one)
    "pdf/pdfplumber-pdffill-demo.pdf": (0.94, "pdftotext breaks the words drawn at 45 degrees into letters (Ro/ta/tio/n "
                                                "for Rotation); our reader keeps them whole, checked below"),
}


def listed() -> list[str]:
    """The files the folder's README lists (its table's first column), in its order."""
    readme = REAL_FILES / "README.md"
    if not readme.exists():
        return []
    return re.findall(r"^\| `([^`]+)` \|", readme.read_text(encoding="utf-8"), flags=re.MULTILINE)


FILES = listed()
pytestmark = pytest.mark.skipif(not FILES, reason=f"no {REAL_FILES} (CI has it beside the clone)")


def read_through_cli(name: str) -> dict[str, Any]:
    done = subprocess.run(extract_command("split", str(REAL_FILES / name), "--format", "json"), capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip(), "code": done.returncode}
    return {"sentences": json.loads(done.stdout)}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict[str, Any]]:
    """Every file read through the CLI, two at a time (each in its own process)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(FILES, pool.map(read_through_cli, FILES)))


def test_the_folder_holds_every_file_its_readme_lists() -> None:
    assert len(FILES) == 57
    assert [name for name in FILES if not (REAL_FILES / name).is_file()] == []


@pytest.mark.parametrize("name", FILES)
def test_real_file_reads_as_its_reference_does(name: str, outcomes: dict[str, dict[str, Any]]) -> None:
    found = reference.read(REAL_FILES / name)
    outcome = outcomes[name]
    if found is None:  # the reference cannot read it either (a password it does not have): refused, saying so
        assert "error" in outcome and outcome["code"] == 2, outcome
        assert outcome["error"].count("\n") == 0 and re.search(r"encrypted|password", outcome["error"]), outcome
        print(f"{name}: refused as the reference is: {outcome['error'].split(': ', 1)[1]}")
        return
    expected = reference.tokens(found.text)
    if not expected:  # nothing to read (a table of empty cells, a page of pictures): empty, or refused as empty
        assert "sentences" in outcome or outcome["error"].endswith("empty document (no text)"), outcome
        print(f"{name}: no text in the reference; ours: {outcome.get('error', 'read')}")
        return
    assert "sentences" in outcome, f"{name} refused while the reference reads {sum(expected.values())} words: {outcome}"
    sentences = outcome["sentences"]
    text = reference.joined(sentences)
    assert not [c for c in text if unicodedata.category(c) == "Zs" and c != " "]  # every space separator a space
    recall = reference.recall(expected, reference.tokens(text))
    blocks: dict[int, list[str]] = {}
    for sentence in sentences:
        blocks.setdefault(sentence["block"], []).append(sentence["text"])
    ours = Counter(reference.squeezed(" ".join(texts)) for texts in blocks.values())
    cells = Counter(cell for cell in map(reference.squeezed, found.cells) if cell)
    cell_recall = sum((cells & ours).values()) / sum(cells.values()) if cells else 1.0
    bound, why = LOWER.get(name, (TOKENS, ""))
    print(f"{name}: token recall {recall:.3f} of {sum(expected.values())}, cells {cell_recall:.3f} of "
          f"{sum(cells.values())}")
    assert recall >= bound, f"{name}: token recall {recall:.3f} < {bound}; missing {list((expected - reference.tokens(text)).items())[:20]}"
    assert cell_recall >= CELLS, f"{name}: cells {cell_recall:.3f}; missing {list((cells - ours).items())[:10]}"
    if name == "pdf/pdfplumber-pdffill-demo.pdf":  # what the reference breaks, whole (see LOWER)
        assert reference.tokens(text)["Rotation"] >= 3


def test_every_place_outside_the_body_is_named(outcomes: dict[str, dict[str, Any]]) -> None:
    """Footnotes, endnotes, headers, footers, text boxes and captions of the real files are read as blocks that
    say where they stand (``extract show`` prints the place before the sentence)."""
    places = {name: {s.get("location") for s in outcome.get("sentences", [])} for name, outcome in outcomes.items()}
    assert {"footnote 1", "footnote 2", "endnote 1", "endnote 2"} <= places["hwp/pyhwp-footnote-endnote.hwp"]
    assert {"header", "footer"} <= places["hwp/pyhwp-headerfooter.hwp"]
    assert {"header", "footer"} <= places["hwpx/hwpxlib-HeaderFooter.hwpx"]
    assert {"text box 1", "caption of figure 1"} <= places["hwp/pyhwp-textbox.hwp"]
    assert {"text box 1", "text box 2"} <= places["hwpx/hwpxlib-RectInRect.hwpx"]
    assert any(str(place).startswith("caption of table") for place in places["hwp/pyhwp-table-caption.hwp"])
    assert {"header", "footer"} <= places["docx/pydocx-hdr-header-footer.docx"]
