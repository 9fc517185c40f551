"""Scans, images and PDFs: text layers with pdfplumber, OCR with Debian's Tesseract, every word with its page and box.

Pages are rendered from known text (``tests/support/scans.py``, Noto CJK at 300 dpi) or printed by Chromium
(``tests/support/pdfs.py``), so what OCR and the PDF reader return is compared with what was drawn.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from pypdf import PdfWriter
from rapidfuzz.distance import Levenshtein

from extractor.document import BlockKind, Document
from extractor.errors import InputError
from extractor.ingest import image, load
from extractor.ingest.marks import find_marks
from extractor.segment import segment
from tests.support.pdfs import CHROMIUM, ORDER_TABLE, print_pdf
from tests.support.scans import (
    ENGLISH_PROCEDURE,
    KOREAN_PROCEDURE,
    KOREAN_WITH_LATIN,
    RUSSIAN_PROCEDURE,
    render,
    save_pdf,
)

H, L, P, T = BlockKind.HEADING, BlockKind.LIST_ITEM, BlockKind.PARAGRAPH, BlockKind.TABLE_CELL
needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium to print PDFs")


def accuracy(read: str, drawn: str) -> float:
    """Character accuracy: 1 - edit distance / length, runs of whitespace counted as one space."""
    read, drawn = " ".join(read.split()), " ".join(drawn.split())
    return 1 - Levenshtein.distance(read, drawn) / len(drawn)


def save_png(tmp_path: Path, text: str, name: str) -> tuple[Path, str]:
    scan = render(text)
    path = tmp_path / name
    scan.image.save(path, dpi=(300, 300))
    return path, scan.text


def marked(document: Document) -> list[tuple[BlockKind, str]]:
    return [(b.kind, document.text[b.start:b.content_start].strip()) for b in document.blocks]


def test_a_scanned_korean_procedure_keeps_its_lists_pages_boxes_and_confidence(tmp_path: Path) -> None:
    path, drawn = save_png(tmp_path, KOREAN_PROCEDURE, "procedure.png")
    document = segment(load(path))
    assert accuracy(document.text, drawn) >= 0.94
    assert document.reader.startswith("ocr=tesseract-") and " lang=kor|kor+eng<90 psm=6 " in document.reader
    assert document.segmenter.endswith(document.reader)  # another OCR setting is another segmentation
    # the marks Tesseract cannot read start list items, as in the drawn page
    assert marked(document) == [(H, ""), (H, "1."), (P, ""), (H, "2."), (P, ""), (H, "3."), (L, "□"), (L, "○"),
                                (L, "○"), (L, "□"), (L, "□"), (L, "①"), (L, "②"), (L, "■"), (H, "4."), (H, "")]
    assert document.pages == 1 and all(s.page == 1 and s.box is not None for s in document.sentences)
    first, last = document.sentences[0], document.sentences[-1]
    assert first.box is not None and last.box is not None and first.box[1] < last.box[1] < 1.0
    assert all(w.confidence is not None and 0 <= w.confidence <= 100 for w in document.words
               if document.text[w.start:w.end] not in "□○①②■")
    assert document.text[document.words[0].start:document.words[0].end] == "작업"


def test_latin_words_on_a_korean_scan_are_read(tmp_path: Path) -> None:
    """A Korean page with ERP, SAP, PDF and an e-mail address: read with Korean alone, Tesseract is unsure of it
    (mean confidence 83) and reads none of its Latin words; read again with ``kor+eng`` it is surer (89) and reads
    them, and that reading is kept. A page of Korean alone keeps its Korean reading (the test above)."""
    path, drawn = save_png(tmp_path, KOREAN_WITH_LATIN, "mixed.png")
    document = load(path)
    assert accuracy(document.text, drawn) >= 0.9
    words = {word.strip("()") for word in document.text.split()}
    latin = ("ERP", "SAP", "PDF", "USD", "CFO", "FOB", "PO", "Purchase", "Order", "purchasing@example.com")
    assert sum(word in words for word in latin) >= 6  # 7 measured (PDF read POF); none with Korean alone


@pytest.mark.parametrize(("text", "languages"), [(RUSSIAN_PROCEDURE, "rus+eng"), (ENGLISH_PROCEDURE, "eng")])
def test_russian_and_english_scans_read_exactly_in_the_detected_language(tmp_path: Path, text: str,
                                                                         languages: str) -> None:
    path, drawn = save_png(tmp_path, text, "page.png")
    document = load(path)
    assert f" lang={languages} " in document.reader
    assert accuracy(document.text, drawn) >= 0.99
    assert [b.kind for b in document.blocks][:3] == [H, H, P]
    assert sum(b.kind is L for b in document.blocks) >= 3


def test_ocr_language_asked_for_wins_and_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = save_png(tmp_path, ENGLISH_PROCEDURE, "page.png")
    monkeypatch.setenv("EXTRACT_OCR_LANG", "eng+rus")
    assert " lang=eng+rus " in load(path).reader
    for bad, problem in (("fra", "no Tesseract model for fra"), ("eng;rm -rf", "must be Tesseract language codes")):
        monkeypatch.setenv("EXTRACT_OCR_LANG", bad)
        with pytest.raises(InputError, match=problem):
            load(path)


def test_multi_page_tiff_reports_each_page_as_read(tmp_path: Path) -> None:
    first, second = render(ENGLISH_PROCEDURE), render("Second page\nThe order ships on Friday.")
    path = tmp_path / "two.tif"
    first.image.save(path, save_all=True, append_images=[second.image], dpi=(300, 300), compression="tiff_lzw")
    progress: list[tuple[int, int]] = []
    paged = image.parse(path.read_bytes(), str(path), lambda done, total: progress.append((done, total)))
    assert progress == [(0, 2), (1, 2), (2, 2)]  # the count first, then each page as it is read
    assert paged.pages == 2 and paged.text.endswith("Second page\nThe order ships on Friday.")
    assert {w.page for w in paged.words} == {1, 2}


def test_marks_are_found_by_shape_and_letters_are_not(tmp_path: Path) -> None:
    lines = ["□ 요청서를 제출한다.", "○ 사유를 적는다.", "■ 결과를 기록한다.", "● 주의 사항", "③ 세 번째 항목",
             "⑫ 열두 번째 항목", "Only managers approve.", "O 형 혈액", "0.5 mm", "디지털 문서", "- 대시 항목", "1. 목적"]
    page = render("\n".join(lines)).image
    assert [m.char for m in find_marks(page)] == ["□", "○", "■", "●", "③", "⑫"]


@needs_chromium
def test_pdf_table_cells_in_reading_order_with_merged_headers_repeated(tmp_path: Path) -> None:
    document = segment(load(print_pdf(ORDER_TABLE, tmp_path / "order.pdf")))
    assert [(b.kind, document.text[b.content_start:b.end]) for b in document.blocks] == [
        (H, "구매 주문서"), (P, "주문 번호: PO-2025-0314. 아래 품목을 3월 14일까지 납품해 주십시오."),
        (T, "품목"), (T, "수량"), (T, "수량"), (T, "단가"),  # 수량 spans two columns: once per column
        (T, "주문"), (T, "재고"),
        (T, "A4 용지"), (T, "10"), (T, "3"), (T, "4,500원"), (T, "토너 카트리지"), (T, "2"), (T, "0"), (T, "89,000원"),
        (P, "납품 장소는 본사 3층 총무팀입니다."),
    ]
    assert document.reader == "" and document.pages == 1
    assert all(s.page == 1 and s.box is not None and 0 <= s.box[0] < s.box[2] <= 1 for s in document.sentences)
    cell = next(s for s in document.sentences if s.text == "토너 카트리지")
    heading = document.sentences[0]
    assert heading.box is not None and cell.box is not None and heading.box[3] < cell.box[1]


NESTED_TABLE = """<!doctype html><html lang="en"><meta charset="utf-8"><style>
body { font-family: 'Noto Sans CJK KR', sans-serif; font-size: 11pt; margin: 2cm; }
table { border-collapse: collapse; } td { border: 1px solid #000; padding: 6pt; vertical-align: top; }
.tracked { letter-spacing: 3.5pt; font-size: 18pt; }
</style><body>
<p>Signed on <span class="tracked">03/25/2016</span> for <span class="tracked">USD 12,500.00</span> in total.</p>
<table>
<tr><td>Approvers</td><td><table><tr><td>Legal</td><td>2 days</td></tr><tr><td>Finance</td><td>3 days</td></tr></table></td></tr>
<tr><td colspan="2">Every row of this table has a merged cell</td></tr>
</table>
<table>
<tr><td colspan="2">Merged across the top</td></tr>
<tr><td colspan="2">and again below</td></tr>
</table>
<p>End of the agreement.</p>
</body></html>"""


@needs_chromium
def test_pdf_nested_tables_keep_their_cells_and_tracked_numbers_stay_one_word(tmp_path: Path) -> None:
    """A table inside a cell follows that cell, cell by cell (not every word in the outer cell); a table whose
    every row is merged is read, not a reason to refuse the file; a date and an amount printed with letter
    spacing (3.5 pt between 18 pt glyphs: more than pdfplumber's fixed 3 pt tolerance, which read
    ``0 3 / 2 5 / 2 0 1 6``) stay one word each, as pdftotext reads them."""
    document = segment(load(print_pdf(NESTED_TABLE, tmp_path / "nested.pdf")))
    assert [(b.kind, document.text[b.content_start:b.end]) for b in document.blocks] == [
        (P, "Signed on 03/25/2016 for USD 12,500.00 in total."),
        (T, "Approvers"), (T, "Legal"), (T, "2 days"), (T, "Finance"), (T, "3 days"),
        (T, "Every row of this table has a merged cell"),
        (T, "Merged across the top"), (T, "and again below"),
        (P, "End of the agreement."),
    ]


@needs_chromium
def test_a_pdf_uses_its_text_layer_and_ocrs_only_its_scanned_pages(tmp_path: Path) -> None:
    printed = print_pdf(ORDER_TABLE, tmp_path / "printed.pdf")
    scanned = save_pdf([render(KOREAN_PROCEDURE)], tmp_path / "scanned.pdf")
    writer = PdfWriter()
    writer.append(str(printed))
    writer.append(str(scanned))
    buffer = io.BytesIO()
    writer.write(buffer)
    (tmp_path / "mixed.pdf").write_bytes(buffer.getvalue())
    document = segment(load(tmp_path / "mixed.pdf"))
    assert document.pages == 2
    assert " lang=kor|kor+eng<90 " in document.reader  # the text layer on page 1 chose the OCR model
    by_page = {page: [s.text for s in document.sentences if s.page == page] for page in (1, 2)}
    assert by_page[1][0] == "구매 주문서" and by_page[2][0] == "작업 요청 검토 절차"
    page_one = {w.confidence for w in document.words if w.page == 1}
    assert page_one == {None}  # the text layer is read, not OCR'd
    assert all(w.confidence is not None for w in document.words if w.page == 2 and w.end - w.start > 1)


def test_unreadable_images_are_input_errors(tmp_path: Path) -> None:
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    with pytest.raises(InputError, match="not a readable image"):
        load(tmp_path / "broken.png")
    Image.new("L", (600, 400), 255).save(tmp_path / "blank.jpg")
    with pytest.raises(InputError, match="no text found by OCR"):
        load(tmp_path / "blank.jpg")


def ocr_document(confidences: list[float | None]) -> Document:
    """A one-line scanned document whose words have these OCR confidences (None: a text layer's word)."""
    from extractor.document import Word
    from extractor.ingest import from_text

    text = "요청자는 작업 요청서를 팀장에게 제출한다."
    document = from_text(text)
    offset, words = 0, []
    for index, token in enumerate(text.split(" ")):
        start = text.index(token, offset)
        words.append(Word(start, start + len(token), 1, (0.1 + index * 0.1, 0.2, 0.18 + index * 0.1, 0.23),
                          confidences[index]))
        offset = start + len(token)
    document.words = words
    return segment(document)


def candidate(excerpt: str) -> str:
    import json

    return json.dumps({
        "documentPurpose": excerpt, "participants": [], "processSteps": [], "rules": [], "assignmentRule": None,
        "missingFields": [{"fieldPath": "assignmentRule", "question": "Who assigns it?"}],
        "evidence": [{"fieldPath": "documentPurpose", "sourceExcerpt": excerpt}],
        "sentenceCoverage": [{"sentenceId": "s1", "status": "MAPPED", "fieldPaths": ["documentPurpose"]}],
    }, ensure_ascii=False)


def test_evidence_on_a_word_ocr_was_unsure_of_goes_to_a_person() -> None:
    from extractor.contracts import get_contract
    from extractor.validate import validate

    contract = get_contract("work_procedure")
    threshold = contract.settings["ocr_confidence"]["threshold"]  # calibrated: samples/ocr_confidence/labels.csv
    assert 0.5 < threshold < 0.95 and "EVIDENCE_LOW_OCR_CONFIDENCE" in contract.needs_person
    excerpt = "요청자는 작업 요청서를 팀장에게 제출한다."
    sure = validate(candidate(excerpt), ocr_document([96.0, 93.5, 91.0, 97.2, 95.0]), contract)
    assert not [f for f in sure.findings if f.rule_id == "EVIDENCE_LOW_OCR_CONFIDENCE"]
    unsure = validate(candidate(excerpt), ocr_document([96.0, 93.5, 41.0, 97.2, 95.0]), contract)
    found = [f for f in unsure.findings if f.rule_id == "EVIDENCE_LOW_OCR_CONFIDENCE"]
    assert len(found) == 1 and found[0].location == "$.evidence[0]"
    assert "'요청서를' 0.41 (page 1)" in found[0].message
    assert found[0].hint is not None and found[0].hint["words"][0]["page"] == 1
    # an excerpt that avoids the doubtful word passes; a text layer (no confidence) always passes
    assert not [f for f in validate(candidate("팀장에게 제출한다."), ocr_document([96.0, 93.5, 41.0, 97.2, 95.0]),
                                    contract).findings if f.rule_id == "EVIDENCE_LOW_OCR_CONFIDENCE"]
    assert not [f for f in validate(candidate(excerpt), ocr_document([None] * 5), contract).findings
                if f.rule_id == "EVIDENCE_LOW_OCR_CONFIDENCE"]


def test_the_ocr_confidence_threshold_is_calibrated_through_the_cli(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.support.batch import ROOT

    settings = tmp_path / "calibration.json"
    done = subprocess.run([sys.executable, "-m", "extractor", "rules", "calibrate", "EVIDENCE_LOW_OCR_CONFIDENCE",
                           str(ROOT / "samples/ocr_confidence/labels.csv"), "--settings", str(settings), "--format",
                           "json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "admit-review" and report["settings_section"] == "ocr_confidence"
    written = json.loads(settings.read_text(encoding="utf-8"))["ocr_confidence"]
    assert written["threshold"] == report["band"][1] and written["calibration"]["auroc"] > 0.9
    assert written["calibration"]["score"] == "confidence"


def test_a_long_scan_reports_each_page_from_its_reader(tmp_path: Path, fresh_pool: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages are OCR'd in a reader process; the page count, then each page read, reaches the run's event loop as it
    is read."""
    import asyncio
    import os

    from extractor import offload

    scans = [render(ENGLISH_PROCEDURE), render("Second page\nThe order ships on Friday."),
             render("Third page\nPayment is due in 30 days.")]
    path = save_pdf(scans, tmp_path / "three.pdf")
    reports: list[tuple[int, int, int]] = []

    async def read() -> Document:
        document, _ = await offload.read(path, lambda done, total: reports.append((done, total, os.getpid())))
        return document

    monkeypatch.setenv("EXTRACT_OCR_CACHE", str(tmp_path / "cache"))  # passed to the reader with the file
    document = asyncio.run(read())
    assert list((tmp_path / "cache").rglob("*.json"))  # the reader OCR'd (and cached) the pages
    assert [(done, total) for done, total, _ in reports] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert {pid for _, _, pid in reports} == {os.getpid()}  # relayed into this process's loop
    assert document.pages == 3 and {w.page for w in document.words} == {1, 2, 3}
    assert document.sentences and document.sentences[-1].page == 3
