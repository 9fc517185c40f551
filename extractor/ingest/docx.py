"""Word .docx: body paragraphs and tables in document order, with styles mapped to block kinds, and the text
outside the body flow as blocks naming their place (docs/formats.md#word).

A table's cells are one block each (a merged cell once), a table inside a cell right after that cell; a text
box, a footnote and an endnote follow the paragraph that anchors them; headers come first and footers last.
Each block outside the body flow says what it is in ``Block.location`` (``footnote 1``, ``text box 2``,
``header``), so ``extract show`` marks it and evidence quoting it says where it came from.

python-docx opens the package and gives each paragraph's text and style; the walk itself goes over the XML of
the parts (``Document.element``, a header's ``part.element``: python-docx's public element accessors) with lxml,
since the paragraph and cell objects python-docx hands out keep their elements only in private attributes
(docs/design.md#dependencies).
"""

from __future__ import annotations

from collections.abc import Iterator
from io import BytesIO
from typing import Any

import docx
from docx.document import Document as WordDocument
from docx.oxml import parse_xml
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
_P, _TBL, _TR, _TC = (f"{{{_W}}}{name}" for name in ("p", "tbl", "tr", "tc"))
_CONTINUED = etree.XPath("./w:tcPr/w:vMerge[not(@w:val) or @w:val = 'continue']", namespaces=_NAMES)
"""A cell that continues the cell above it (a vertical merge): its text is the first cell's, read there."""
_NUMBERED = etree.XPath("./w:pPr/w:numPr", namespaces=_NAMES)


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
                self.content(part.part.element, "header")
        body = self.word.element.find(f"{{{_W}}}body")
        if body is not None:
            self.content(body)
        for kind, part in margins:
            if kind == "footer" and id(part.part) not in seen:
                seen.add(id(part.part))
                self.content(part.part.element, "footer")

    def content(self, container: Any, location: str | None = None) -> None:
        """The paragraphs and tables directly in ``container`` (a body, header, footer, text box or cell)."""
        for child in container.iterchildren(_P, _TBL):
            if child.tag == _P:
                self.paragraph(child, location)
            else:
                self.table(child, location)

    def paragraph(self, element: Any, location: str | None = None) -> None:
        """The paragraph as a block, then what it anchors: text boxes, footnotes and endnotes, in that order."""
        paragraph = Paragraph(element, self.word)
        style = getattr(paragraph.style, "name", None) or ""
        kind = _kind(element, style) if location is None else BlockKind.PARAGRAPH
        if location is None and style.lower().startswith("caption"):
            location = "caption"
        self.assembler.block(kind, paragraph.text, location=location)
        self.anchored(element)

    def anchored(self, element: Any) -> None:
        for box in _BOXES(element):
            if _nearest_paragraph(box) is element:  # a box inside a box is read with the box that holds it
                self._boxes += 1
                self.content(box, f"text box {self._boxes}")
        for kind in _NOTES:
            for reference in _REFERENCES[kind](element):
                number = reference.get(f"{{{_W}}}id", "")
                for note in self.notes[kind].get(number, []):
                    self.paragraph(note, f"{kind} {number}")

    def table(self, table: Any, location: str | None = None) -> None:
        """Each cell once (a cell spanning columns is one ``w:tc``; one continuing a vertical merge is skipped, unless
        it is in the first row: it continues nothing, and its text is kept), its paragraphs as one block; what the
        cell holds besides (a table inside it, a text box, a note) follows it."""
        for number, row in enumerate(table.iterchildren(_TR)):
            for cell in row.iterchildren(_TC):
                if number and _CONTINUED(cell):
                    continue
                texts = [Paragraph(paragraph, self.word).text for paragraph in cell.iterchildren(_P)]
                self.assembler.block(BlockKind.TABLE_CELL, "\n".join(texts), location=location)
                for child in cell.iterchildren(_P, _TBL):
                    if child.tag == _P:
                        self.anchored(child)
                    else:
                        self.table(child, location)


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


def _kind(element: Any, style: str) -> BlockKind:
    """Heading/Title styles are headings; "List ..." styles or direct numbering (numPr) are list items."""
    if style.startswith(_HEADINGS):
        return BlockKind.HEADING
    if style.startswith("List") or _NUMBERED(element):
        return BlockKind.LIST_ITEM
    return BlockKind.PARAGRAPH
