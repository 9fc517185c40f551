"""Ingest: a document file -> ``Document`` with canonical text and block structure (no sentences yet).

Every failure a user can fix (missing, too large, binary, empty, broken container) is an ``InputError``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from extractor.canonical import text_sha256
from extractor.document import Block, Document
from extractor.errors import InputError
from extractor.ingest import blocks as blocks_json
from extractor.ingest.assemble import Paged
from extractor.ingest.decode import decode
from extractor.ingest.text import canonicalize, parse_blocks

__all__ = ["FORMATS", "MAX_BYTES_ENV", "from_text", "load", "load_bytes", "max_document_bytes"]

FORMATS: dict[str, str] = {
    ".txt": "txt",
    ".md": "md",
    ".markdown": "md",
    ".text": "txt",
    ".docx": "docx",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".tif": "image",
    ".tiff": "image",
    ".hwp": "hwp",
    ".hwpx": "hwp",
    ".xlsx": "xlsx",
    ".eml": "eml",
    ".json": "blocks",
}
MAX_BYTES_ENV = "EXTRACT_MAX_DOCUMENT_BYTES"
DEFAULT_MAX_BYTES = 10_000_000


def _plain(data: bytes, path: str) -> tuple[str, list[Block], str]:
    text, encoding = decode(data, path)
    canonical = canonicalize(text)
    return canonical, parse_blocks(canonical), encoding


Parser = Callable[..., "tuple[str, list[Block], str | None] | Paged"]
OnPage = Callable[[int, int], None]
PAGED = frozenset({"pdf", "image"})
"""Formats whose reader OCRs pages (and reports each as it is read)."""
_PARSERS: dict[str, Parser] = {"txt": _plain, "md": _plain}
_MODULES = {"docx": "docx", "html": "html", "pdf": "pdf", "hwp": "hwp", "xlsx": "xlsx", "eml": "eml", "image": "image"}
"""Formats whose reader is imported when a file of the format is read: a batch of Markdown never imports a PDF,
HWP or OCR library (each costs tens to hundreds of milliseconds to import)."""


def _parser(fmt: str) -> Parser:
    if fmt not in _PARSERS:
        module = importlib.import_module(f"extractor.ingest.{_MODULES[fmt]}")
        _PARSERS[fmt] = module.parse
    return _PARSERS[fmt]


def load(path: str | os.PathLike[str], on_page: OnPage | None = None) -> Document:
    """Read and parse one document file; the format comes from the suffix.

    ``mail.eml#attachment2/order.pdf`` is the second attachment of ``mail.eml`` (``extractor.ingest.eml``).
    ``on_page(done, total)`` is called as each page of a scan is OCR'd.
    """
    name = os.fspath(path)
    if ".eml#" in name.lower() and not os.path.exists(name):
        return _attachment(name, on_page)
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise InputError(name, "file not found") from None
    except OSError as exc:
        raise InputError(name, f"cannot access file ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(name, "is a directory, not a file" if stat.S_ISDIR(info.st_mode) else "not a regular file")
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(name, f"unsupported file type {suffix or '(no suffix)'!r}; supported: {' '.join(FORMATS)}")
    limit = _max_bytes(name)
    if info.st_size > limit:  # checked before reading so a huge file never enters memory
        raise InputError(
            name,
            f"file too large ({info.st_size / 1e6:.1f} MB = {info.st_size} bytes; limit {limit / 1e6:.1f} MB = "
            f"{limit} bytes, set by {MAX_BYTES_ENV})",
        )
    try:
        data = Path(name).read_bytes()
    except PermissionError:
        raise InputError(name, "permission denied (cannot read the file)") from None
    except OSError as exc:
        raise InputError(name, f"cannot read file ({exc.strerror})") from None
    return load_bytes(name, data, on_page)


def load_bytes(name: str, data: bytes, on_page: OnPage | None = None) -> Document:
    """A document whose bytes are in memory already (an upload in the run log), read as ``load`` reads a file
    called ``name``: its suffix picks the format, within the same size limit; nothing is written to disk."""
    suffix = Path(name).suffix.lower()
    if suffix not in FORMATS:
        raise InputError(name, f"unsupported file type {suffix or '(no suffix)'!r}; supported: {' '.join(FORMATS)}")
    limit = _max_bytes(name)
    if len(data) > limit:
        raise InputError(name, f"too large ({len(data)} bytes; limit {limit} bytes, set by {MAX_BYTES_ENV})")
    fmt = FORMATS[suffix]
    digest = hashlib.sha256(data).hexdigest()
    if fmt == "blocks":
        text, blocks, units = blocks_json.parse(data, name)
        document = _document(name, text, blocks, digest, fmt, "utf-8")
        document.sentences, document.segmenter = units, blocks_json.SEGMENTER_ID
        return document
    return _parsed(name, data, digest, fmt, on_page)


def _parsed(name: str, data: bytes, digest: str, fmt: str, on_page: OnPage | None = None) -> Document:
    parse = _parser(fmt)
    result = parse(data, name, on_page) if fmt in PAGED and on_page is not None else parse(data, name)
    if isinstance(result, Paged):
        document = _document(name, result.text, result.blocks, digest, fmt, None)
        document.words, document.pages, document.reader = result.words, result.pages, result.reader
        return document
    text, blocks, encoding = result
    return _document(name, text, blocks, digest, fmt, encoding)


def source_bytes(path: str) -> tuple[bytes, str]:
    """The bytes of a source (a file, or an e-mail's attachment) and the suffix that names its format."""
    if ".eml#" in path.lower() and not os.path.exists(path):
        from extractor.ingest.eml import attachment

        found = attachment(path, _max_bytes(path))
        if found is None:
            raise InputError(path, "file not found")
        return found[0], Path(found[1]).suffix.lower()
    try:
        return Path(path).read_bytes(), Path(path).suffix.lower()
    except OSError as error:
        raise InputError(path, f"cannot read file ({error.strerror})") from None


def _attachment(name: str, on_page: OnPage | None = None) -> Document:
    """An e-mail's attachment, read from the e-mail and parsed by its own file name's suffix."""
    from extractor.ingest.eml import attachment

    found = attachment(name, _max_bytes(name))
    if found is None:
        raise InputError(name, "file not found")
    data, file_name = found
    suffix = Path(file_name).suffix.lower()
    if suffix not in FORMATS or FORMATS[suffix] == "blocks":
        raise InputError(name, f"unsupported attachment type {suffix or '(no suffix)'!r}")
    limit = _max_bytes(name)
    if len(data) > limit:
        raise InputError(name, f"attachment too large ({len(data)} bytes; limit {limit} bytes, set by {MAX_BYTES_ENV})")
    return _parsed(name, data, hashlib.sha256(data).hexdigest(), FORMATS[suffix], on_page)


def from_text(text: str, path: str = "<text>", fmt: str = "txt") -> Document:
    """A Document from in-memory text, canonicalised and parsed exactly like a .txt/.md file."""
    if fmt not in ("txt", "md"):
        raise ValueError(f"from_text parses plain text only: fmt must be 'txt' or 'md', not {fmt!r}")
    canonical = canonicalize(text)
    digest = text_sha256(text)
    return _document(path, canonical, parse_blocks(canonical), digest, fmt, "utf-8")


def _document(path: str, text: str, blocks: list[Block], sha256: str, fmt: str, encoding: str | None) -> Document:
    if not blocks:  # nothing but whitespace (or bare table rules)
        raise InputError(path, "empty document (no text)")
    return Document(path=path, text=text, blocks=blocks, sha256=sha256, format=fmt, encoding=encoding)


def max_document_bytes() -> int:
    """The largest document ingest reads: ``EXTRACT_MAX_DOCUMENT_BYTES``, else 10,000,000 bytes. The one limit
    of a document wherever it comes from (``extract serve`` refuses a bigger upload with 413); ``ValueError``
    when the variable is not a positive number."""
    raw = os.environ.get(MAX_BYTES_ENV, "")
    if not raw.strip():
        return DEFAULT_MAX_BYTES
    if not raw.strip().isdigit() or int(raw) <= 0:
        raise ValueError(f"{MAX_BYTES_ENV} must be a positive number of bytes, not {raw!r}")
    return int(raw)


def _max_bytes(path: str) -> int:
    try:
        return max_document_bytes()
    except ValueError as error:
        raise InputError(path, str(error)) from None
