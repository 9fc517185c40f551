"""Hostile files contained before a parser sees them (docs/formats.md#hostile-files).

A 10 MB upload can be a zip that inflates to terabytes, an XML part that expands entities a billion times,
an image header claiming 50,000 x 50,000 pixels or a PDF declaring a million objects. Each is refused here,
from what the file declares, before anything is inflated, decoded or parsed: one ``InputError`` naming the
file and the limit, in milliseconds and without the memory the parser would have taken.
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from io import BytesIO
from typing import Any

from extractor.errors import InputError

MAX_ZIP_MEMBERS = 5_000
MAX_UNPACKED_BYTES = 200_000_000
"""What all members of an office package may inflate to together: a real 10 MB workbook or HWPX is far below."""
MAX_RATIO = 200
"""Inflated / compressed bytes of one member over 1 MB; XML of office files compresses 5-30 times."""
MAX_PIXELS = 120_000_000
"""An A3 page scanned at 600 dpi is 70 million pixels; 50,000 x 50,000 (2.5 billion, 2.5 GB as grey) is refused."""
MAX_PDF_OBJECTS = 500_000
MAX_PAGES = 2_000

_PDF_SIZE = re.compile(rb"/Size\s+(\d{1,12})")
_CHUNK = 1 << 20
"""Bytes inflated at a time: what a member's reading holds at once, whatever the member claims."""
_LOCAL_HEADER = struct.Struct("<4s22xHH")
"""A zip member's local header (PKWARE APPNOTE 4.3.7): signature, then the lengths of its name and extra field."""


def open_zip(data: bytes, path: str, what: str, keep: Callable[[str], bool] = lambda name: False
             ) -> tuple[zipfile.ZipFile, dict[str, bytes]]:
    """The package once its declared sizes are within limits and every member inflates to exactly what it
    declares, and the members ``keep`` selects, inflated.

    Every member is inflated by streaming, a megabyte at a time, its byte count checked as it grows: one that
    inflates past the size its directory declares is refused before it is held (``ZipFile.read()`` would inflate
    it whole first; a parser reading it later would too). So after this, a library reading the package reads
    what the directory declares, and the declared sizes bound it. Each XML part's prolog is read by defusedxml,
    which refuses a DTD (office XML never declares one; entities can expand a billion times).
    """
    try:
        package = zipfile.ZipFile(BytesIO(data))
        members = package.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as error:
        raise InputError(path, f"not a valid {what} (not a zip package: {error})") from None
    if len(members) > MAX_ZIP_MEMBERS:
        raise InputError(path, f"{what} package has {len(members)} parts (limit {MAX_ZIP_MEMBERS}); refused as a zip bomb")
    total = sum(member.file_size for member in members)
    if total > MAX_UNPACKED_BYTES:
        raise InputError(path, f"{what} package inflates to {total / 1e6:.0f} MB (limit {MAX_UNPACKED_BYTES / 1e6:.0f} MB);"
                               " refused as a zip bomb")
    for member in members:
        if member.file_size > 1_000_000 and member.file_size > MAX_RATIO * max(member.compress_size, 1):
            raise InputError(path, f"{what} part {member.filename} inflates {member.file_size // max(member.compress_size, 1)}"
                                   f" times (limit {MAX_RATIO}); refused as a zip bomb")
    kept = {}
    for member in members:
        inflated = _inflated(data, member, path, what, keep(member.filename))
        if inflated is not None:
            kept[member.filename] = inflated
    return package, kept


def _inflated(data: bytes, member: zipfile.ZipInfo, path: str, what: str, hold: bool) -> bytes | None:
    """One member inflated a megabyte at a time, never past its declared size, its CRC checked; its bytes when
    ``hold``. An XML part's prolog goes to defusedxml as it comes."""
    name = f"{what} part {member.filename}"
    prolog = _Prolog(path, name) if member.filename.lower().endswith((".xml", ".rels", ".hpf")) else None
    held: list[bytes] = []
    size, crc = 0, 0
    try:
        for piece in _pieces(_raw(data, member, path, name), member.compress_type == zipfile.ZIP_DEFLATED):
            size += len(piece)
            if size > member.file_size:
                raise InputError(path, f"{name} inflates past the {member.file_size} bytes it declares; refused as a "
                                       "zip bomb")
            crc = zlib.crc32(piece, crc)
            if prolog is not None:
                prolog.feed(piece)
            if hold:
                held.append(piece)
    except zlib.error as error:
        raise InputError(path, f"not a valid {what} ({member.filename}: {error})") from None
    if size != member.file_size or crc != member.CRC:
        raise InputError(path, f"not a valid {what} ({member.filename} inflates to {size} bytes with CRC {crc:08x}; "
                               f"its directory declares {member.file_size} with {member.CRC:08x})")
    return b"".join(held) if hold else None


def _pieces(raw: memoryview, deflated: bool) -> Iterator[bytes]:
    """A member's bytes, at most ``_CHUNK`` at a time however much one compressed chunk inflates to."""
    if not deflated:
        for start in range(0, len(raw), _CHUNK):
            yield bytes(raw[start:start + _CHUNK])
        return
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    for start in range(0, len(raw), _CHUNK):
        yield inflater.decompress(raw[start:start + _CHUNK], _CHUNK)
        while inflater.unconsumed_tail:
            yield inflater.decompress(inflater.unconsumed_tail, _CHUNK)
    yield inflater.flush()


def _raw(data: bytes, member: zipfile.ZipInfo, path: str, name: str) -> memoryview:
    """A member's compressed bytes, where its local header says they start."""
    if member.flag_bits & 0x1:
        raise InputError(path, f"{name} is encrypted; refused")
    if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InputError(path, f"{name} uses compression method {member.compress_type}, which office files do not "
                               "use; refused")
    header = data[member.header_offset:member.header_offset + _LOCAL_HEADER.size]
    if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise InputError(path, f"not a valid zip package ({name} has no local header)")
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    start = member.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    if start + member.compress_size > len(data):
        raise InputError(path, f"not a valid zip package ({name} runs past the end of the file)")
    return memoryview(data)[start:start + member.compress_size]


class _Prolog:
    """An XML part's prolog through defusedxml's parser, which refuses a DTD or an entity declaration (in any
    encoding the XML declares); reading stops at the root element, where a DTD can no longer stand, so a part
    costs its first kilobytes, not a parse."""

    def __init__(self, path: str, part: str) -> None:
        from defusedxml.ElementTree import DefusedXMLParser

        self._path, self._part = path, part
        self._parser: Any = DefusedXMLParser(target=_RootFound(), forbid_dtd=True)
        self._done = False

    def feed(self, piece: bytes) -> None:
        from defusedxml import DefusedXmlException

        if self._done:
            return
        try:
            self._parser.feed(piece)
        except _Root:
            self._done = True
        except DefusedXmlException:
            raise InputError(self._path, f"{self._part} declares a DTD or entities (<!DOCTYPE/<!ENTITY>); refused "
                                         "(entity expansion)") from None
        except SyntaxError:  # not well-formed: the format's reader says so, naming what it expected
            self._done = True


class _Root(Exception):
    """The root element started: the prolog is over."""


class _RootFound:
    """A parser target that stops the parse at the first element."""

    def start(self, tag: str, attributes: dict[str, str]) -> None:
        raise _Root


def check_pixels(width: int, height: int, path: str, page: str = "image") -> None:
    """Refuse an image whose header claims more pixels than a page scan has, before decoding it."""
    if width * height > MAX_PIXELS:
        raise InputError(path, f"{page} is {width} x {height} pixels ({width * height / 1e6:.0f} megapixels; limit "
                               f"{MAX_PIXELS / 1e6:.0f}); refused")


def check_pdf(data: bytes, path: str) -> None:
    """Refuse a PDF whose cross-reference tables declare more objects than a document has, before PDFium parses
    them (it builds its table of objects from what they declare).

    A trailer or a cross-reference stream, where ``/Size`` stands, is never inside an object stream, so the raw
    bytes show each one. The page count is not read here: PDFium reads it from the page tree it parsed, where
    an object stream cannot hide it (``extractor.ingest.pdf``).
    """
    objects = max((int(found) for found in _PDF_SIZE.findall(data)), default=0)
    if objects > MAX_PDF_OBJECTS:
        raise InputError(path, f"PDF declares {objects} objects (limit {MAX_PDF_OBJECTS}); refused")
