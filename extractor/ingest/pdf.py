"""PDF: each page's text layer read by PDFium (words with boxes), ruled tables found by pdfplumber's table
finder, OCR where a page has no text layer (docs/formats.md#pdf).

PDFium (pypdfium2) reads a page's glyphs in C, in reading order, each with its loose box. Words and lines are
decided here from the glyphs themselves (``_words``, ``_same_line``), not from the spaces PDFium infers: a gap
wider than the gaps beside it by a tenth of the glyphs' height is a space, so ``03/25/2016`` set with letter
spacing stays one word. The page's straight edges, read from PDFium's parsed drawing, go to pdfplumber's table
finder when there are two or more each way; each table gives one TABLE_CELL block per cell in reading order
(row by row), a header cell merged across columns repeated for each column it spans, and a table inside a
cell after that cell. A table that cannot be laid out costs that table only: its words stay in the page's
text. A page without a text layer (a scan) is rendered with PDFium at 300 dpi and read by Tesseract
(``extractor.ingest.ocr``). Text outside tables is parsed like plain text, a page at a time, a blank line
between pages. Every word keeps its page and box.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from extractor.document import BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler, Paged, Placed
from extractor.ingest.contain import MAX_PAGES, MAX_PIXELS, check_pdf
from extractor.ingest.ocr import DPI, OcrError, OnPage, choose, read_pages

Box = tuple[float, float, float, float]
"""``(x0, top, x1, bottom)`` in points from the page's top left corner, as pdfplumber measures."""


@dataclass
class _Word:
    text: str
    box: Box


@dataclass
class _Table:
    """One table pdfplumber found: its box, its rows of cell boxes (None where a merged cell spans), and the
    column centres (where a header cell merged across columns is repeated)."""

    box: Box
    rows: list[list[Box | None]]
    centres: list[float]
    words: list[_Word] = field(default_factory=list)
    inner: list[_Table] = field(default_factory=list)


def parse(data: bytes, path: str, on_page: OnPage | None = None) -> Paged:
    """Text, blocks and word boxes of every page; pages without a text layer are OCR'd."""
    import pypdfium2 as pdfium

    check_pdf(data, path)
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        if "password" in str(error).lower():
            raise InputError(path, "encrypted PDF; decrypt it first") from None
        raise InputError(path, " ".join(f"cannot read PDF ({error})".split())) from None
    try:
        count = len(document)  # from the page tree PDFium parsed, wherever the PDF keeps it
        if count > MAX_PAGES:
            raise InputError(path, f"PDF has {count} pages (limit {MAX_PAGES}); refused")
        pages = [_page(document, number) for number in range(1, count + 1)]
    except pdfium.PdfiumError as error:
        raise InputError(path, " ".join(f"cannot read PDF ({error})".split())) from None
    finally:
        document.close()
    scanned = [number for number, content in enumerate(pages, start=1) if content is None]
    reader = ""
    scans: dict[int, list[list[Placed]]] = {}
    if scanned:
        text_elsewhere = " ".join(word.text for content in pages if content for word in content.words)
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
    """One page's text layer: its lines of words, and the tables found on it (if it has ruling lines)."""

    def __init__(self, number: int, width: float, height: float, lines: list[list[_Word]]) -> None:
        self.number = number
        self.width = width
        self.height = height
        self.lines = lines
        self.tables: list[_Table] = []

    def set_tables(self, tables: list[_Table]) -> None:
        """The page's tables, outermost first; each word goes to the innermost table holding it, if any."""
        self.tables = tables
        for word in self.words:
            owner = self.owner(word)
            if owner is not None:
                owner.words.append(word)

    @property
    def words(self) -> list[_Word]:
        return [word for line in self.lines for word in line]

    def placed(self, word: _Word) -> Placed:
        x0, top, x1, bottom = word.box
        return Placed(word.text, self.number, (x0 / self.width, top / self.height, x1 / self.width, bottom / self.height))

    def add_to(self, assembler: Assembler) -> None:
        """Text lines and tables in reading order: the lines above a table come before it, those between two
        tables between them, each table where it stands."""
        outside = [[word for word in line if self.owner(word) is None] for line in self.lines]
        regions: list[tuple[float, int, Any]] = []
        tops = sorted(table.box[1] for table in self.tables)
        groups: dict[int, list[list[_Word]]] = {}
        for line in outside:
            if line:
                groups.setdefault(sum(1 for top in tops if top < line[0].box[1]), []).append(line)
        for group in groups.values():
            regions.append((group[0][0].box[1], 0, group))
        for table in self.tables:
            regions.append((table.box[1], 1, table))
        for _, kind, content in sorted(regions, key=lambda region: region[:2]):
            if kind == 0:
                assembler.lines([[self.placed(word) for word in line] for line in content])
            else:
                self._table(content, assembler)

    def owner(self, word: _Word) -> _Table | None:
        """The innermost table holding the word's middle, if any: its words are that table's."""
        for table in self.tables:
            found = _innermost(table, _middle(word.box))
            if found is not None:
                return found
        return None

    def _table(self, table: _Table, assembler: Assembler) -> None:
        for text, words, inner in _cells(table):
            assembler.block(BlockKind.TABLE_CELL, text, words=[self.placed(word) for word in words])
            for nested in inner:
                self._table(nested, assembler)


def _page(document: Any, number: int) -> _PageContent | None:
    page = document[number - 1]
    try:
        return _text_layer(page, number)
    finally:
        page.close()


def _text_layer(page: Any, number: int) -> _PageContent | None:
    """The text layer of one page as lines of words with boxes (None when it has none: a scan)."""
    left, bottom, right, top = page.get_cropbox()
    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        text = textpage.get_text_range(0, count) if count > 0 else ""
        if not text.strip():
            return None
        lines = [words for line in _glyph_lines(textpage, text, left, top) if (words := _words(line))]
    finally:
        textpage.close()
    content = _PageContent(number, right - left, top - bottom, lines)
    content.set_tables(_tables(_edges(page, left, top), f"page {number}"))
    return content


@dataclass
class _Glyph:
    text: str
    box: Box
    spaced: bool  # the PDF itself has a space (or a tab) before this glyph


def _glyph_lines(textpage: Any, text: str, left: float, top: float) -> list[list[_Glyph]]:
    """The page's glyphs line by line, in PDFium's reading order, each with its loose box (the font's ascent to
    descent: the glyphs of a line share their top and bottom). The PDF's own spaces are kept; the spaces and line
    breaks PDFium infers are not: ``_words`` decides the spaces from the glyphs' sizes, ``_same_line`` the lines
    from where the glyphs are."""
    import pypdfium2.raw as pdfium_c

    handle = textpage.raw
    rect = pdfium_c.FS_RECTF()
    lines: list[list[_Glyph]] = [[]]
    spaced = False
    for character, index in zip(text, _utf16_indices(text)):
        if character in "\r\n":
            continue  # where a line ends is decided by where the glyphs are (``_same_line``)
        if character.isspace():
            spaced = spaced or not pdfium_c.FPDFText_IsGenerated(handle, index)
        elif pdfium_c.FPDFText_GetLooseCharBox(handle, index, rect):
            x0, x1 = min(rect.left, rect.right), max(rect.left, rect.right)
            y0, y1 = min(rect.bottom, rect.top), max(rect.bottom, rect.top)
            glyph = _Glyph(character, (x0 - left, top - y1, x1 - left, top - y0), spaced)
            if lines[-1] and not _same_line(lines[-1][-1].box, glyph.box):
                lines.append([])
            lines[-1].append(glyph)
            spaced = False
    return [line for line in lines if line]


def _same_line(before: Box, after: Box) -> bool:
    """Whether a glyph goes on the line of the glyph before it: level with it (their middles within half a
    height) and not back to the left of it by more than a height. Decided by where the glyphs are, as PDFium
    ends a line inside a word where glyphs come in pieces."""
    height = max(before[3] - before[1], after[3] - after[1], 1.0)
    level = abs((before[1] + before[3]) - (after[1] + after[3])) / 2 < height / 2
    return level and after[0] >= before[0] - height


_WORD_GAP = 0.1
"""A gap between two glyphs is a space when it is wider than the gaps beside it by this share of the glyphs'
height (about 0.12 em; a space is 0.2-0.3 em). Measured against the neighbouring gaps, letter spacing (a date
set with 3.5 pt between its digits) is not taken for spaces, as pdftotext does not; a fixed tolerance
(pdfplumber's 3 pt) splits ``03/25/2016`` into ``0 3 / 2 5 / 2 0 1 6``."""


def _words(line: list[_Glyph]) -> list[_Word]:
    """A line's glyphs grouped into words: a space of the PDF's own, a step back (a new line PDFium did not
    mark), or a gap wider than the gaps beside it by ``_WORD_GAP`` of the glyphs' height."""
    gaps = [following.box[0] - glyph.box[2] for glyph, following in zip(line, line[1:])]
    words: list[_Word] = []
    start = 0
    for index in range(1, len(line) + 1):
        if index < len(line):
            glyph, previous = line[index], line[index - 1]
            gap = gaps[index - 1]
            beside = [gaps[other] for other in (index - 2, index) if 0 <= other < len(gaps)
                      and not line[other + 1].spaced]
            height = max(glyph.box[3] - glyph.box[1], previous.box[3] - previous.box[1], 1.0)
            if not (glyph.spaced or glyph.box[0] < previous.box[0] - height
                    or gap - max(0.0, min(beside, default=0.0)) > _WORD_GAP * height):
                continue
        pieces = line[start:index]
        words.append(_Word("".join(glyph.text for glyph in pieces),
                           (min(g.box[0] for g in pieces), min(g.box[1] for g in pieces),
                            max(g.box[2] for g in pieces), max(g.box[3] for g in pieces))))
        start = index
    return words


def _utf16_indices(text: str) -> list[int]:
    """PDFium's character index of each character of ``text`` (it counts UTF-16 code units: a character past
    U+FFFF is two)."""
    if text.isascii() or all(ord(character) <= 0xFFFF for character in text):
        return list(range(len(text)))
    found, index = [], 0
    for character in text:
        found.append(index)
        index += 2 if ord(character) > 0xFFFF else 1
    return found


def _edges(page: Any, left: float, top: float) -> list[dict[str, Any]]:
    """The straight horizontal and vertical edges the page draws (table rules), as pdfplumber's table finder
    takes them: every line segment of every path, in points from the page's top left corner. Read from PDFium's
    parsed drawing, so the table finder never needs pdfminer to interpret the page."""
    import pypdfium2.raw as pdfium_c

    found: list[dict[str, Any]] = []
    x, y = ctypes.c_float(), ctypes.c_float()
    for item in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_PATH], max_depth=_FORM_DEPTH):
        matrix = item.get_matrix()
        parent = item.container
        while parent is not None:  # a path inside a form: its matrix is the form's space, the form's is the page's
            matrix = matrix.multiply(parent.get_matrix())
            parent = parent.container
        points: list[tuple[float, float]] = []
        start: tuple[float, float] | None = None
        for index in range(min(pdfium_c.FPDFPath_CountSegments(item.raw), _MAX_SEGMENTS)):
            segment = pdfium_c.FPDFPath_GetPathSegment(item.raw, index)
            if not pdfium_c.FPDFPathSegment_GetPoint(segment, x, y):
                continue
            point = matrix.on_point(x.value, y.value)
            point = (point[0] - left, top - point[1])
            kind = pdfium_c.FPDFPathSegment_GetType(segment)
            if kind == pdfium_c.FPDF_SEGMENT_LINETO and points:
                _edge(points[-1], point, found)
            if kind == pdfium_c.FPDF_SEGMENT_MOVETO or start is None:
                start = point
            points.append(point)
            if pdfium_c.FPDFPathSegment_GetClose(segment) and start is not None:
                _edge(point, start, found)
    return found


_FORM_DEPTH = 4
"""Forms inside forms followed this deep for table rules (a writer nests one or two)."""
_MAX_SEGMENTS = 100_000
"""Segments read of one path: a table's rules are a few hundred; a drawing of millions is not a table."""


def _edge(one: tuple[float, float], other: tuple[float, float], found: list[dict[str, Any]]) -> None:
    """A segment as pdfplumber's edge, when it is horizontal or vertical and at least a point long (its own
    prefilter)."""
    (x0, y0), (x1, y1) = one, other
    if abs(y0 - y1) < 1e-6 and abs(x1 - x0) >= 1:
        orientation = "h"
    elif abs(x0 - x1) < 1e-6 and abs(y1 - y0) >= 1:
        orientation = "v"
    else:
        return
    found.append({"object_type": "line_edge", "orientation": orientation, "x0": min(x0, x1), "x1": max(x0, x1),
                  "top": min(y0, y1), "bottom": max(y0, y1), "width": abs(x1 - x0), "height": abs(y1 - y0)})


class _Sheet:
    """What pdfplumber's table finder reads of a page when it is given the page's edges: nothing but its box."""

    bbox = (0.0, 0.0, 0.0, 0.0)


def _tables(edges: list[dict[str, Any]], where: str) -> list[_Table]:
    """pdfplumber's ruled tables (its table finder: edges snapped and joined, intersections, cells, tables)
    from the page's edges, nested. A page with fewer than two rules either way has none; a table that cannot
    be laid out is left out, its words staying in the page's text."""
    from pdfplumber.table import TableFinder

    vertical = [edge for edge in edges if edge["orientation"] == "v"]
    horizontal = [edge for edge in edges if edge["orientation"] == "h"]
    if len(vertical) < 2 or len(horizontal) < 2:
        return []
    settings = {"vertical_strategy": "explicit", "horizontal_strategy": "explicit",
                "explicit_vertical_lines": vertical, "explicit_horizontal_lines": horizontal}
    sheet: Any = _Sheet()  # the finder reads a page's box only
    found = []
    try:
        tables = TableFinder(sheet, settings).tables
    except _LAYOUT_ERRORS as error:
        logging.getLogger(__name__).info("%s: no tables laid out (%s); their words stay text", where, error)
        return []
    for table in tables:
        try:
            laid_out = _table(table)
        except _LAYOUT_ERRORS as error:
            logging.getLogger(__name__).info("%s: a table not laid out (%s); its words stay text", where, error)
            continue
        if laid_out is not None:
            found.append(laid_out)
    return _nest(found)


_LAYOUT_ERRORS = (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError)
"""What laying a table out from odd geometry raises (a cell without a box, a row of merged cells): the table is
lost, its words are not."""


def _table(table: Any) -> _Table | None:
    """A table as rows of cell boxes with its column centres; None when pdfplumber's table has no grid."""
    rows = [[None if cell is None else (float(cell[0]), float(cell[1]), float(cell[2]), float(cell[3]))
             for cell in row.cells] for row in table.rows]
    columns = [column.bbox for column in table.columns]
    if not rows or not columns:
        return None
    centres = [(float(column[0]) + float(column[2])) / 2 for column in columns]
    x0, top, x1, bottom = table.bbox
    return _Table((float(x0), float(top), float(x1), float(bottom)), rows, centres)


def _nest(tables: list[_Table]) -> list[_Table]:
    """Tables inside a cell of another table become that table's inner tables (pdfplumber finds both the outer
    and the inner one); the outermost are returned, top to bottom."""
    tables.sort(key=lambda table: (table.box[2] - table.box[0]) * (table.box[3] - table.box[1]))
    outer: list[_Table] = []
    for index, table in enumerate(tables):
        parent = next((other for other in tables[index + 1:] if _inside(table.box, other.box)), None)
        (outer if parent is None else parent.inner).append(table)
    return sorted(outer, key=lambda table: table.box[1])


def _innermost(table: _Table, point: tuple[float, float]) -> _Table | None:
    if not _contains(table.box, point):
        return None
    for inner in table.inner:
        found = _innermost(inner, point)
        if found is not None:
            return found
    return table


def _cells(table: _Table) -> list[tuple[str, list[_Word], list[_Table]]]:
    """``(text, words, inner tables)`` per cell, row by row: the cell's own words (not those of a table inside
    it) and the tables inside it. A cell merged across columns of a header row (a row above the first row with
    every cell of its own) is repeated in each column it spans."""
    rows = table.rows
    header_rows = next((i for i, row in enumerate(rows) if all(cell is not None for cell in row)), 0)
    words = table.words
    found: list[tuple[str, list[_Word], list[_Table]]] = []
    for index, row in enumerate(rows):
        last: Box | None = None
        for column, cell in enumerate(row):
            if (cell is None and index < header_rows and last is not None and column < len(table.centres)
                    and last[2] > table.centres[column]):
                cell = last  # a header cell merged across columns, again for the column it also covers
            if cell is None:
                continue
            last = cell
            inside = [word for word in words if _contains(cell, _middle(word.box))]
            lines = _lines(inside)
            inner = [nested for nested in table.inner if _inside(nested.box, cell)]
            text = "\n".join(" ".join(word.text for word in line) for line in lines)
            if text.strip() or inner:
                found.append((text, [word for line in lines for word in line], inner))
    return found


def _lines(words: list[_Word]) -> list[list[_Word]]:
    """Words grouped into lines (tops within half a word's height), top to bottom, each left to right."""
    lines: list[list[_Word]] = []
    for word in sorted(words, key=lambda w: (w.box[1], w.box[0])):
        height = max(word.box[3] - word.box[1], 1.0)
        if lines and abs(lines[-1][0].box[1] - word.box[1]) < 0.5 * height:
            lines[-1].append(word)
        else:
            lines.append([word])
    return [sorted(line, key=lambda w: w.box[0]) for line in lines]


def _middle(box: Box) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def _contains(box: Box, point: tuple[float, float]) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def _inside(inner: Box, outer: Box) -> bool:
    return inner != outer and _contains(outer, (inner[0], inner[1])) and _contains(outer, (inner[2], inner[3]))


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
        bitmap = sheet.render(scale=scale, grayscale=True, draw_annots=False)  # a scan's text is in its pixels
        return bitmap.to_pil()
    finally:
        document.close()
