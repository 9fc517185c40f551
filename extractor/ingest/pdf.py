"""PDF: the text layer via pypdf, one group per page, parsed like plain text."""

from __future__ import annotations

from io import BytesIO

from pypdf import PdfReader

from extractor.document import Block
from extractor.errors import InputError
from extractor.ingest.contain import check_pdf
from extractor.ingest.text import canonicalize, parse_blocks


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Canonical text (pages joined by a blank line) and blocks; no OCR, so image-only PDFs are refused."""
    check_pdf(data, path)
    try:
        reader = PdfReader(BytesIO(data))
        locked = reader.is_encrypted and not reader.decrypt("")
        pages = [] if locked else [page.extract_text() for page in reader.pages]
    except Exception as exc:  # malformed PDFs fail deep inside pypdf with many exception types
        raise InputError(path, " ".join(f"cannot read PDF ({type(exc).__name__}: {exc})".split())) from exc
    if locked:
        raise InputError(path, "encrypted PDF; decrypt it first")
    text = canonicalize("\n\n".join(pages))
    if not text.strip():
        raise InputError(path, "PDF has no extractable text (scanned/image-only?)")
    return text, parse_blocks(text), None
