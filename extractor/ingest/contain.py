"""Hostile files contained before a parser sees them (docs/formats.md#hostile-files).

A 10 MB upload can be a zip that inflates to terabytes, an XML part that expands entities a billion times,
an image header claiming 50,000 x 50,000 pixels or a PDF declaring a million objects. Each is refused here,
from what the file declares, before anything is inflated, decoded or parsed: one ``InputError`` naming the
file and the limit, in milliseconds and without the memory the parser would have taken.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from io import BytesIO

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

_ENTITY = re.compile(b"|".join(re.escape(word.encode(encoding)) for word in ("<!DOCTYPE", "<!ENTITY")
                               for encoding in ("utf-8", "utf-16-le", "utf-16-be")))
"""A DTD declaration in the encodings an XML part may use (XML names are case-sensitive)."""
_PDF_SIZE = re.compile(rb"/Size\s+(\d{1,12})")
_PDF_COUNT = re.compile(rb"/Count\s+(\d{1,12})")


def open_zip(data: bytes, path: str, what: str) -> zipfile.ZipFile:
    """The package as a ``ZipFile`` once its declared sizes are within limits and no XML part declares a DTD.

    ``ZipFile`` never inflates a member past the size its directory declares (a lying header ends in a CRC
    error), so checking the declared sizes bounds what any parser reading the members can inflate.
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
    for member in members:
        if member.filename.lower().endswith((".xml", ".rels", ".hpf")):
            refuse_entities(read_member(package, member.filename, path, what), path, f"{what} part {member.filename}")
    return package


def read_member(package: zipfile.ZipFile, name: str, path: str, what: str) -> bytes:
    """One member's bytes (bounded by its declared size, checked in ``open_zip``); a broken one is the file's fault."""
    try:
        return package.read(name)
    except KeyError:
        raise InputError(path, f"not a valid {what} (no {name} in the package)") from None
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, RuntimeError) as error:
        raise InputError(path, f"not a valid {what} ({name}: {error})") from None


def refuse_entities(xml: bytes, path: str, part: str) -> None:
    """Office XML never declares a DTD; one that does may expand entities without end (billion laughs)."""
    if _ENTITY.search(xml):
        raise InputError(path, f"{part} declares a DTD or entities (<!DOCTYPE/<!ENTITY>); refused (entity expansion)")


def check_pixels(width: int, height: int, path: str, page: str = "image") -> None:
    """Refuse an image whose header claims more pixels than a page scan has, before decoding it."""
    if width * height > MAX_PIXELS:
        raise InputError(path, f"{page} is {width} x {height} pixels ({width * height / 1e6:.0f} megapixels; limit "
                               f"{MAX_PIXELS / 1e6:.0f}); refused")


def check_pdf(data: bytes, path: str) -> None:
    """Refuse a PDF whose cross-reference tables or page tree declare more objects or pages than a document has.

    Read from the raw bytes (trailers and xref streams name ``/Size``, page trees ``/Count``), so a PDF built to
    exhaust a parser is refused before one is started.
    """
    objects = max((int(found) for found in _PDF_SIZE.findall(data)), default=0)
    if objects > MAX_PDF_OBJECTS:
        raise InputError(path, f"PDF declares {objects} objects (limit {MAX_PDF_OBJECTS}); refused")
    pages = max((int(found) for found in _PDF_COUNT.findall(data)), default=0)
    if pages > MAX_PAGES:
        raise InputError(path, f"PDF declares {pages} pages (limit {MAX_PAGES}); refused")
