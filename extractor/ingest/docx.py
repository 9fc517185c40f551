"""Word .docx: body paragraphs and tables in document order, with styles mapped to block kinds."""

from __future__ import annotations

from collections.abc import Iterator
from io import BytesIO

import docx
from docx.document import Document as WordDocument
from docx.text.paragraph import Paragraph

from extractor.document import Block, BlockKind
from extractor.errors import InputError
from extractor.ingest.contain import open_zip
from extractor.ingest.text import join_blocks


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Canonical text (block texts joined by ``\\n``) and blocks; containers have no text encoding."""
    open_zip(data, path, ".docx")  # sizes and DTDs checked before python-docx inflates anything
    try:
        document = docx.Document(BytesIO(data))
    except Exception as exc:  # a broken package fails in zipfile, lxml or python-docx, each with its own type
        raise InputError(path, " ".join(f"not a valid .docx ({type(exc).__name__}: {exc})".split())) from exc
    text, blocks = join_blocks(_pieces(document))
    return text, blocks, None


def _pieces(document: WordDocument) -> Iterator[tuple[BlockKind, str]]:
    """Paragraphs and table cells in reading order; a merged cell is yielded once."""
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            yield _kind(item), item.text
            continue
        seen: set[object] = set()
        for row in item.rows:
            for cell in row.cells:
                if cell._tc not in seen:  # merged cells repeat the same <w:tc> element
                    seen.add(cell._tc)
                    yield BlockKind.TABLE_CELL, cell.text


def _kind(paragraph: Paragraph) -> BlockKind:
    """Heading/Title styles are headings; "List ..." styles or direct numbering (numPr) are list items."""
    style = getattr(paragraph.style, "name", None) or ""
    if style.startswith(("Heading", "Title")):
        return BlockKind.HEADING
    properties = paragraph._p.pPr
    if style.startswith("List") or (properties is not None and properties.numPr is not None):
        return BlockKind.LIST_ITEM
    return BlockKind.PARAGRAPH
