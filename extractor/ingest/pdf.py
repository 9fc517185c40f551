"""PDF: each page's text layer with pdfplumber (words with boxes, tables as cells), or OCR where a page has none
(docs/formats.md#pdf).

A page with a text layer uses it; a page without one (a scan) is rendered with PDFium at 300 dpi and read by
Tesseract (``extractor.ingest.ocr``). Text outside tables is parsed like plain text, a page at a time, a blank
line between pages. A table pdfplumber finds (ruled lines) gives one TABLE_CELL block per cell in reading
order (row by row); a header cell merged across columns is repeated for each column it spans, so every
column's cells sit under their own header. Every word keeps its page and box.
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from io import BytesIO
from typing import Any

from extractor.document import BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler, Paged, Placed
from extractor.ingest.contain import MAX_PAGES, MAX_PIXELS, check_pdf
from extractor.ingest.ocr import DPI, OcrError, OnPage, choose, read_pages

_LINE_TOLERANCE = 0.5
"""Words whose tops differ by less than this share of their height are on one line."""


def parse(data: bytes, path: str, on_page: OnPage | None = None) -> Paged:
    """Text, blocks and word boxes of every page; pages without a text layer are OCR'd."""
    import pdfplumber
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect
    from pdfplumber.utils.exceptions import PdfminerException

    check_pdf(data, path)
    logging.getLogger("pdfminer").setLevel(logging.ERROR)  # font warnings about a readable file are not the user's
    try:
        with pdfplumber.open(BytesIO(data)) as pdf:
            count = len(pdf.pages)
            if count > MAX_PAGES:
                raise InputError(path, f"PDF has {count} pages (limit {MAX_PAGES}); refused")
            pages = [_page_content(page, number) for number, page in enumerate(pdf.pages, start=1)]
    except InputError:
        raise
    except Exception as error:  # malformed PDFs fail deep inside pdfminer with many exception types
        cause = error.args[0] if isinstance(error, PdfminerException) and error.args else error
        if isinstance(cause, PDFPasswordIncorrect | PDFEncryptionError) or isinstance(cause, type) and issubclass(
                cause, PDFPasswordIncorrect):
            raise InputError(path, "encrypted PDF; decrypt it first") from None
        raise InputError(path, " ".join(f"cannot read PDF ({type(error).__name__}: {error})".split())) from None
    scanned = [number for number, content in enumerate(pages, start=1) if content is None]
    reader = ""
    scans: dict[int, list[list[Placed]]] = {}
    if scanned:
        text_elsewhere = " ".join(word.text for content in pages if content for line in content.lines for word in line)
        try:
            settings = choose(path, text_elsewhere, lambda: render(data, scanned[0]))
            scans = read_pages([partial(render, data, number) for number in scanned], scanned, settings, on_page)
        except OcrError as error:
            raise InputError(path, str(error)) from None
        reader = settings.reader
    assembler = Assembler()
    for number, content in enumerate(pages, start=1):
        if content is None:
            assembler.lines(scans[number])
        else:
            content.add_to(assembler)
    text, blocks, words = assembler.result()
    if not blocks:
        what = "no text layer, and OCR found no text" if scanned else "no extractable text"
        raise InputError(path, f"PDF has {what}")
    return Paged(text, blocks, words, len(pages), reader)


class _PageContent:
    """One page's text layer: its lines of words outside tables and its tables, in reading order."""

    def __init__(self, number: int, width: float, height: float) -> None:
        self.number = number
        self.width = width
        self.height = height
        self.lines: list[list[Placed]] = []
        self.regions: list[tuple[float, str, Any]] = []  # (top, "lines" | "table", content)

    def placed(self, word: dict[str, Any]) -> Placed:
        box = (word["x0"] / self.width, word["top"] / self.height, word["x1"] / self.width, word["bottom"] / self.height)
        return Placed(word["text"], self.number, box)

    def add_to(self, assembler: Assembler) -> None:
        for _, kind, content in sorted(self.regions, key=lambda region: region[0]):
            if kind == "lines":
                assembler.lines(content)
            else:
                for text, words in content:
                    assembler.block(BlockKind.TABLE_CELL, text, words=words)


def _page_content(page: Any, number: int) -> _PageContent | None:
    """The text layer of one page (None when it has none: a scan), split into text lines and tables."""
    words = page.extract_words(keep_blank_chars=False, use_text_flow=False)
    if not any(word["text"].strip() for word in words):
        return None
    content = _PageContent(number, float(page.width), float(page.height))
    tables = page.find_tables()
    inside: list[list[dict[str, Any]]] = [[] for _ in tables]
    outside: list[dict[str, Any]] = []
    for word in words:
        middle = ((word["x0"] + word["x1"]) / 2, (word["top"] + word["bottom"]) / 2)
        owner = next((i for i, table in enumerate(tables) if _contains(table.bbox, middle)), None)
        (outside if owner is None else inside[owner]).append(word)
    lines = [[content.placed(word) for word in line] for line in _lines(outside)]
    content.lines = lines
    # text between tables stays between them: lines are grouped by the table (if any) they come before
    tops = sorted(table.bbox[1] for table in tables)
    groups: dict[int, list[list[Placed]]] = {}
    for line in lines:
        top = line[0].box[1] * content.height
        groups.setdefault(sum(1 for t in tops if t < top), []).append(line)
    for group in groups.values():
        content.regions.append((group[0][0].box[1] * content.height, "lines", group))
    for table, table_words in zip(tables, inside):
        content.regions.append((table.bbox[1], "table", _cells(table, table_words, content)))
    return content


def _contains(box: tuple[float, float, float, float], point: tuple[float, float]) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def _lines(words: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Words grouped into lines (tops within half a word's height), top to bottom, each left to right."""
    lines: list[list[dict[str, Any]]] = []
    for word in sorted(words, key=lambda w: (w["top"], w["x0"])):
        height = max(word["bottom"] - word["top"], 1.0)
        if lines and abs(lines[-1][0]["top"] - word["top"]) < _LINE_TOLERANCE * height:
            lines[-1].append(word)
        else:
            lines.append([word])
    return [sorted(line, key=lambda w: w["x0"]) for line in lines]


def _cells(table: Any, words: list[dict[str, Any]], content: _PageContent) -> list[tuple[str, list[Placed]]]:
    """``(text, words)`` per cell, row by row; a cell merged across columns of a header row (a row above the first
    row with every cell of its own) is repeated in each column it spans."""
    rows = [list(row.cells) for row in table.rows]
    header_rows = next((i for i, row in enumerate(rows) if all(cell is not None for cell in row)), 0)
    centres = [(cell[0] + cell[2]) / 2 for cell in rows[header_rows]] if rows else []
    found: list[tuple[str, list[Placed]]] = []
    for index, row in enumerate(rows):
        last: tuple[float, float, float, float] | None = None
        for column, cell in enumerate(row):
            if cell is None and index < header_rows and last is not None and last[2] > centres[column]:
                cell = last  # a header cell merged across columns, again for the column it also covers
            if cell is None:
                continue
            last = cell
            inside = [w for w in words if _contains(cell, ((w["x0"] + w["x1"]) / 2, (w["top"] + w["bottom"]) / 2))]
            lines = _lines(inside)
            text = "\n".join(" ".join(w["text"] for w in line) for line in lines)
            if text.strip():
                found.append((text, [content.placed(w) for line in lines for w in line]))
    return found


def _scanned_image(sheet: Any) -> Any:
    """The page's one image as stored, when the page is nothing but that image, upright, covering it (what a
    scanner writes): its own pixels at its own resolution, decoded in a tenth of what rendering the page at
    300 dpi takes. None for any other page (it is rendered)."""
    import pypdfium2.raw as pdfium_c

    objects = list(sheet.get_objects(max_depth=1))
    if len(objects) != 1 or objects[0].type != pdfium_c.FPDF_PAGEOBJ_IMAGE:
        return None
    image = objects[0]
    left, bottom, right, top = image.get_bounds()
    width, height = sheet.get_size()
    a, b, c, d, _, _ = image.get_matrix().get()
    if b or c or a <= 0 or d <= 0 or (right - left) * (top - bottom) < 0.9 * width * height:
        return None
    pixels_wide, pixels_high = image.get_px_size()
    if pixels_wide * pixels_high > MAX_PIXELS:
        return None  # rendered instead, at a resolution within the limit
    return image.get_bitmap(render=False).to_pil().convert("L")


_PDFIUM = threading.Lock()
"""PDFium is not thread-safe: pages OCR'd in parallel are rendered one at a time (a tenth of a page's OCR)."""


def render(data: bytes, page: int, dpi: int = DPI) -> Any:
    """One page as a greyscale PIL image at ``dpi`` (lower for a page so large it would pass ``MAX_PIXELS``)."""
    with _PDFIUM:
        return _render(data, page, dpi)


def _render(data: bytes, page: int, dpi: int) -> Any:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    try:
        sheet = document[page - 1]
        scanned = _scanned_image(sheet)
        if scanned is not None:
            return scanned
        width, height = sheet.get_size()
        scale = dpi / 72
        pixels = width * height * scale * scale
        if pixels > MAX_PIXELS:
            scale *= (MAX_PIXELS / pixels) ** 0.5
        bitmap = sheet.render(scale=scale, grayscale=True)
        return bitmap.to_pil()
    finally:
        document.close()

