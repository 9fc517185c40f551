"""Word .docx: body paragraphs and tables in document order, with styles mapped to block kinds, and the text
outside the body flow as blocks naming their place (docs/formats.md#word).

A table's cells are one block each (a merged cell once), a table inside a cell right after that cell; a text
box, a footnote and an endnote follow the paragraph that anchors them; headers come first and footers last.
Each block outside the body flow says what it is in ``Block.location`` (``footnote 1``, ``text box 2``,
``header``), so ``extract show`` marks it and evidence quoting it says where it came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from io import BytesIO
from typing import Any

import docx
from docx.document import Document as WordDocument
from docx.oxml import parse_xml
from docx.table import Table
from docx.text.paragraph import Paragraph
from lxml import etree

from extractor.document import Block, BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler
from extractor.ingest.contain import open_zip

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_NAMES = {"w": _W, "mc": "http://schemas.openxmlformats.org/markup-compatibility/2006"}
_NOTES = {"footnote": "http://schemas.openxmlformats.org/officeDocument/2006/relationships/footnotes",
          "endnote": "http://schemas.openxmlformats.org/officeDocument/2006/relationships/endnotes"}
_HEADINGS = ("Heading", "Title")
_BOXES = etree.XPath("./w:r//w:txbxContent[not(ancestor::mc:Fallback)] | ./w:hyperlink/w:r//w:txbxContent"
                     "[not(ancestor::mc:Fallback)]", namespaces=_NAMES)
"""A paragraph's text boxes, each once: Word writes a box twice, as DrawingML and as its VML fallback."""
_REFERENCES = {kind: etree.XPath(f"./w:r/w:{kind}Reference | ./w:hyperlink/w:r/w:{kind}Reference", namespaces=_NAMES)
               for kind in _NOTES}


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Canonical text (block texts joined by ``\\n``) and blocks; containers have no text encoding."""
    open_zip(data, path, ".docx")  # every part inflates to what it declares, no DTD: python-docx reads it
    try:
        document = docx.Document(BytesIO(data))
        walk = _Walk(document)
        walk.document()
    except Exception as exc:  # a broken package fails in zipfile, lxml or python-docx, each with its own type
        raise InputError(path, " ".join(f"not a valid .docx ({type(exc).__name__}: {exc})".split())) from exc
    text, blocks, _ = walk.assembler.result()
    return text, blocks, None


class _Walk:
    """The document's blocks in reading order, into one ``Assembler``."""

    def __init__(self, document: WordDocument) -> None:
        self.word = document
        self.assembler = Assembler()
        self.notes = {kind: _notes(document, relationship) for kind, relationship in _NOTES.items()}
        self._boxes = 0

    def document(self) -> None:
        margins = [(kind, part) for section in self.word.sections for kind, part in _margins(section)]
        seen: set[int] = set()
        for kind, part in margins:
            if kind == "header" and id(part.part) not in seen:
                seen.add(id(part.part))
                self.content(part.iter_inner_content(), "header")
        self.content(self.word.iter_inner_content())
        for kind, part in margins:
            if kind == "footer" and id(part.part) not in seen:
                seen.add(id(part.part))
                self.content(part.iter_inner_content(), "footer")

    def content(self, items: Iterator[Paragraph | Table], location: str | None = None) -> None:
        for item in items:
            if isinstance(item, Paragraph):
                self.paragraph(item, location)
            else:
                self.table(item, location)

    def paragraph(self, paragraph: Paragraph, location: str | None = None) -> None:
        """The paragraph as a block, then what it anchors: text boxes, footnotes and endnotes, in that order."""
        kind = _kind(paragraph) if location is None else BlockKind.PARAGRAPH
        style = getattr(paragraph.style, "name", None) or ""
        if location is None and style.lower().startswith("caption"):
            location = "caption"
        self.assembler.block(kind, paragraph.text, location=location)
        self.anchored(paragraph)

    def anchored(self, paragraph: Paragraph) -> None:
        element = paragraph._p
        for box in _BOXES(element):
            if _nearest_paragraph(box) is element:  # a box inside a box is read with the box that holds it
                self._boxes += 1
                self.box(box, f"text box {self._boxes}")
        for kind in _NOTES:
            for reference in _REFERENCES[kind](element):
                number = reference.get(f"{{{_W}}}id", "")
                for note in self.notes[kind].get(number, []):
                    self.paragraph(Paragraph(note, self.word), f"{kind} {number}")

    def box(self, box: Any, location: str) -> None:
        for child in box.iterchildren(f"{{{_W}}}p", f"{{{_W}}}tbl"):
            if child.tag == f"{{{_W}}}p":
                self.paragraph(Paragraph(child, self.word), location)
            else:
                self.table(Table(child, self.word), location)

    def table(self, table: Table, location: str | None = None) -> None:
        """Each cell once (merged cells repeat the same ``w:tc``), its paragraphs as one block; what the cell
        holds besides (a table inside it, a text box, a note) follows it."""
        seen: set[object] = set()  # the elements themselves: an lxml proxy's id() is reused once it is freed
        for row in table.rows:
            for cell in row.cells:
                if cell._tc in seen:
                    continue
                seen.add(cell._tc)
                self.assembler.block(BlockKind.TABLE_CELL, cell.text, location=location)
                for item in cell.iter_inner_content():
                    if isinstance(item, Paragraph):
                        self.anchored(item)
                    else:
                        self.table(item, location)


def _margins(section: Any) -> Iterator[tuple[str, Any]]:
    """The headers and footers a section defines itself (one it takes from the section before is read there)."""
    for kind, parts in (("header", (section.first_page_header, section.header, section.even_page_header)),
                        ("footer", (section.first_page_footer, section.footer, section.even_page_footer))):
        for part in parts:
            if not part.is_linked_to_previous:
                yield kind, part


def _notes(document: WordDocument, relationship: str) -> dict[str, list[Any]]:
    """The paragraphs of each footnote (or endnote) by id, from the part the document relates them in; the
    separators Word keeps there are not notes."""
    try:
        part = document.part.part_related_by(relationship)
    except KeyError:
        return {}
    root = parse_xml(part.blob)
    found: dict[str, list[Any]] = {}
    for note in root.iterchildren(f"{{{_W}}}footnote", f"{{{_W}}}endnote"):
        if note.get(f"{{{_W}}}type") in (None, "normal"):
            found[note.get(f"{{{_W}}}id", "")] = list(note.iter(f"{{{_W}}}p"))
    return found


def _nearest_paragraph(element: Any) -> Any:
    parent = element.getparent()
    while parent is not None and parent.tag != f"{{{_W}}}p":
        parent = parent.getparent()
    return parent


def _kind(paragraph: Paragraph) -> BlockKind:
    """Heading/Title styles are headings; "List ..." styles or direct numbering (numPr) are list items."""
    style = getattr(paragraph.style, "name", None) or ""
    if style.startswith(_HEADINGS):
        return BlockKind.HEADING
    properties = paragraph._p.pPr
    if style.startswith("List") or (properties is not None and properties.numPr is not None):
        return BlockKind.LIST_ITEM
    return BlockKind.PARAGRAPH
