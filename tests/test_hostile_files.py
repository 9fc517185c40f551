"""Hostile files are contained: each ends in one ``InputError`` line, fast, in a process capped at 1 GB.

Every file here is built to exhaust a reader: zip bombs as .docx/.hwpx/.xlsx (a member inflating to 1 GB),
XML parts declaring entities (billion laughs), an image header claiming 50,000 x 50,000 pixels, a PDF of a
million objects. Each is read by ``extractor.ingest.load`` in a child process whose address space is limited to
1 GB (``RLIMIT_AS``): a reader that tried would die of ``MemoryError`` instead of answering with the cause.
The seconds and the peak memory each took are printed (``pytest -s``); the bounds asserted are generous, so
a loaded machine does not fail them, and far below what the readers would need without the checks.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

from tests.support.batch import ROOT

LIMIT_BYTES = 1 << 30
CHILD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from extractor.errors import InputError
from extractor.ingest import load
started = time.monotonic()
try:
    document = load(sys.argv[1])
    outcome = {{"error": None, "chars": len(document.text)}}
except InputError as error:
    outcome = {{"error": str(error)}}
outcome["seconds"] = time.monotonic() - started
with open("/proc/self/status") as status:
    outcome["peak_mb"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(json.dumps(outcome))
"""


def read_contained(path: Path) -> dict[str, object]:
    """``load(path)`` in a child capped at 1 GB of address space: its error line, seconds and peak memory."""
    done = subprocess.run([sys.executable, "-c", CHILD.format(limit=LIMIT_BYTES), str(path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    outcome: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{path.name}: {outcome}")
    return outcome


def bomb_member(package: zipfile.ZipFile, name: str, head: bytes, size: int) -> None:
    """A member of ``size`` bytes (mostly spaces: a thousand to one when deflated), written in 1 MB pieces."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with package.open(info, "w", force_zip64=True) as member:
        member.write(head)
        chunk = b" " * (1 << 20)
        for _ in range(size // len(chunk)):
            member.write(chunk)


def write_package(path: Path, parts: dict[str, bytes], bomb: tuple[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as package:
        for name, data in parts.items():
            package.writestr(name, data)
        if bomb is not None:
            bomb_member(package, bomb[0], bomb[1], 1 << 30)
    return path


CONTENT_TYPES = (b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                 b'<Default Extension="xml" ContentType="application/xml"/></Types>')
LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
          + b"".join(b'<!ENTITY lol%d "%s">' % (n, (b"&lol%d;" % (n - 1) if n > 1 else b"&lol;") * 10) for n in range(1, 10))
          + b']><root>&lol9;</root>')
PACKAGES = {  # suffix -> (the parts a reader needs, the part that is bombed or poisoned)
    ".docx": ({"[Content_Types].xml": CONTENT_TYPES}, "word/document.xml"),
    ".xlsx": ({"[Content_Types].xml": CONTENT_TYPES}, "xl/worksheets/sheet1.xml"),
    ".hwpx": ({"mimetype": b"application/hwp+zip"}, "Contents/header.xml"),
}


@pytest.mark.parametrize("suffix", sorted(PACKAGES))
def test_zip_bomb_is_refused_from_its_directory(tmp_path: Path, suffix: str) -> None:
    parts, target = PACKAGES[suffix]
    path = write_package(tmp_path / f"bomb{suffix}", parts, (target, b'<?xml version="1.0"?><root>'))
    assert path.stat().st_size < 5_000_000  # 1 GB of XML in a few MB
    outcome = read_contained(path)
    assert outcome["error"] == (f"{path}: {suffix} package inflates to 1074 MB (limit 200 MB); refused as a zip bomb")
    assert float(str(outcome["seconds"])) < 10
    assert float(str(outcome["peak_mb"])) < 300


@pytest.mark.parametrize("suffix", sorted(PACKAGES))
def test_one_member_inflating_a_thousand_times_is_refused(tmp_path: Path, suffix: str) -> None:
    parts, target = PACKAGES[suffix]
    path = tmp_path / f"dense{suffix}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as package:
        for name, data in parts.items():
            package.writestr(name, data)
        package.writestr(target, b"<root>" + b" " * 150_000_000 + b"</root>")
    outcome = read_contained(path)
    assert "inflates" in str(outcome["error"]) and "(limit 200); refused as a zip bomb" in str(outcome["error"])


@pytest.mark.parametrize("suffix", sorted(PACKAGES))
def test_xml_entity_expansion_is_refused(tmp_path: Path, suffix: str) -> None:
    parts, target = PACKAGES[suffix]
    path = write_package(tmp_path / f"laughs{suffix}", {**parts, target: LAUGHS})
    outcome = read_contained(path)
    assert outcome["error"] == (f"{path}: {suffix} part {target} declares a DTD or entities (<!DOCTYPE/<!ENTITY>); "
                                "refused (entity expansion)")


def test_utf16_entity_declaration_is_refused_too(tmp_path: Path) -> None:
    parts, target = PACKAGES[".docx"]
    path = write_package(tmp_path / "laughs16.docx", {**parts, target: LAUGHS.decode().encode("utf-16-le")})
    assert "declares a DTD or entities" in str(read_contained(path)["error"])


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def huge_png(path: Path, width: int = 50_000, height: int = 50_000) -> Path:
    """A real, complete 1-bit PNG of ``width`` x ``height`` white pixels (312 MB of rows deflated to ~300 KB)."""
    row = b"\x00" + b"\xff" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    rows_per_piece = max(1, (1 << 22) // len(row))
    pieces = []
    for first in range(0, height, rows_per_piece):
        pieces.append(compressor.compress(row * min(rows_per_piece, height - first)))
    pieces.append(compressor.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", b"".join(pieces))
                     + png_chunk(b"IEND", b""))
    return path


def test_a_50000_by_50000_pixel_image_is_refused(tmp_path: Path) -> None:
    path = huge_png(tmp_path / "huge.png")
    assert path.stat().st_size < 2_000_000
    outcome = read_contained(path)
    assert outcome["error"] == f"{path}: image is 50000 x 50000 pixels (2500 megapixels; limit 120); refused"
    assert float(str(outcome["seconds"])) < 10


def million_object_pdf(path: Path, objects: int = 1_000_000) -> Path:
    """A valid PDF whose one page lists a million annotation objects, all kept in compressed object streams
    (a few MB on disk), with a cross-reference stream declaring them: a reader that follows the page's
    annotations builds a million objects."""
    first_annotation = 5
    per_stream = 10_000
    body = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    offsets: dict[int, int] = {}

    def add(number: int, data: bytes) -> None:
        offsets[number] = len(body)
        body.extend(b"%d 0 obj\n" % number + data + b"\nendobj\n")

    annots = b"[" + b" ".join(b"%d 0 R" % n for n in range(first_annotation, first_annotation + objects)) + b"]"
    add(1, b"<< /Type /Catalog /Pages 2 0 R >>")
    add(2, b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>")
    add(3, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Annots 4 0 R >>")
    compressed = [(4, annots)] + [(n, b"<< /Type /Annot /Subtype /Text /Rect [0 0 1 1] >>")
                                   for n in range(first_annotation, first_annotation + objects)]
    streams: list[tuple[int, list[int]]] = []
    number = first_annotation + objects
    for start in range(0, len(compressed), per_stream):
        chunk = compressed[start:start + per_stream]
        header, position = [], 0
        for member, text in chunk:
            header.append(b"%d %d" % (member, position))
            position += len(text) + 1
        head = b" ".join(header) + b" "
        data = zlib.compress(head + b" ".join(text for _, text in chunk), 1)
        add(number, b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>\nstream\n" % (
            len(chunk), len(head), len(data)) + data + b"\nendstream")
        streams.append((number, [member for member, _ in chunk]))
        number += 1
    size = number + 1
    rows = [struct.pack(">BIH", 0, 0, 65535)] + [b""] * (size - 1)  # object 0: the head of the free list
    for n, offset in offsets.items():
        rows[n] = struct.pack(">BIH", 1, offset, 0)
    for stream_number, members in streams:
        for index, member in enumerate(members):
            rows[member] = struct.pack(">BIH", 2, stream_number, index)
    xref_offset = len(body)
    rows[size - 1] = struct.pack(">BIH", 1, xref_offset, 0)  # the xref stream itself
    data = zlib.compress(b"".join(rows), 1)
    body.extend(b"%d 0 obj\n<< /Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Filter /FlateDecode /Length %d >>\nstream\n"
                % (size - 1, size, len(data)) + data + b"\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n" % xref_offset)
    path.write_bytes(bytes(body))
    return path


def test_a_pdf_of_a_million_objects_is_refused(tmp_path: Path) -> None:
    path = million_object_pdf(tmp_path / "million.pdf")
    assert path.stat().st_size < 10_000_000  # under the default size limit: the size check does not catch it
    outcome = read_contained(path)
    assert outcome["error"] == f"{path}: PDF declares 1000107 objects (limit 500000); refused"
    assert float(str(outcome["seconds"])) < 10


@pytest.mark.parametrize("suffix", sorted(PACKAGES))
def test_member_inflating_past_its_declared_size_is_refused_while_inflating(tmp_path: Path, suffix: str) -> None:
    """A member whose directory declares 1,667 bytes (and the CRC of its first 1,667) while its deflate stream
    holds 1 GB: ``ZipFile.read()`` would inflate it whole before comparing; streamed, it stops one megabyte in."""
    parts, target = PACKAGES[suffix]
    path = write_package(tmp_path / f"liar{suffix}", parts, (target, b'<?xml version="1.0"?><root>'))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as package:
        member = package.getinfo(target)
        head = package.open(target).read(1667)
    central = data.rindex(target.encode()) - 46  # its central directory entry: what readers take sizes from
    assert data[central:central + 4] == b"PK\x01\x02"
    data[central + 16:central + 28] = struct.pack("<III", zlib.crc32(head), member.compress_size, 1667)
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as package:
        assert package.getinfo(target).file_size == 1667  # what a reader trusting the directory sees
    outcome = read_contained(path)
    assert outcome["error"] == f"{path}: {suffix} part {target} inflates past the 1667 bytes it declares; refused as a zip bomb"
    assert float(str(outcome["peak_mb"])) < 300


def pages_in_an_object_stream(path: Path, count: int) -> Path:
    """A valid PDF of one page whose page tree, kept in a compressed object stream with its catalogue, declares
    ``count`` pages: the raw bytes never show ``/Count``."""
    objects = [(1, b"<< /Type /Catalog /Pages 2 0 R >>"),
               (2, b"<< /Type /Pages /Kids [4 0 R] /Count %d >>" % count),
               (4, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>")]
    header, position = [], 0
    for number, text in objects:
        header.append(b"%d %d" % (number, position))
        position += len(text) + 1
    head = b" ".join(header) + b" "
    packed = zlib.compress(head + b" ".join(text for _, text in objects))
    body = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    stream_offset = len(body)
    body.extend(b"3 0 obj\n<< /Type /ObjStm /N 3 /First %d /Filter /FlateDecode /Length %d >>\nstream\n"
                % (len(head), len(packed)) + packed + b"\nendstream\nendobj\n")
    rows = [struct.pack(">BIH", 0, 0, 65535), struct.pack(">BIH", 2, 3, 0), struct.pack(">BIH", 2, 3, 1),
            struct.pack(">BIH", 1, stream_offset, 0), struct.pack(">BIH", 2, 3, 2)]
    xref_offset = len(body)
    rows.append(struct.pack(">BIH", 1, xref_offset, 0))
    table = zlib.compress(b"".join(rows))
    body.extend(b"5 0 obj\n<< /Type /XRef /Size 6 /W [1 4 2] /Root 1 0 R /Filter /FlateDecode /Length %d >>\nstream\n"
                % len(table) + table + b"\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n" % xref_offset)
    path.write_bytes(bytes(body))
    return path


def test_pages_declared_inside_an_object_stream_are_counted(tmp_path: Path) -> None:
    """The page count comes from the page tree as PDFium parsed it, not from a scan of the bytes for ``/Count``
    (which finds nothing here: the page tree is compressed)."""
    path = pages_in_an_object_stream(tmp_path / "pages.pdf", 100_000)
    assert b"/Count" not in path.read_bytes()
    outcome = read_contained(path)
    assert outcome["error"] == f"{path}: PDF has 100000 pages (limit 2000); refused"
    assert float(str(outcome["seconds"])) < 10


def test_pages_of_an_image_are_counted_before_any_is_decoded(tmp_path: Path) -> None:
    """A TIFF of 20 pages of 110 megapixels each (2.2 billion pixels; each page under the page limit): refused
    from the pages' headers, before one is decoded or OCR'd."""
    from PIL import Image

    page = Image.new("1", (10_500, 10_500), 1)
    path = tmp_path / "pages.tif"
    page.save(path, save_all=True, append_images=[page] * 19, compression="group4")
    assert path.stat().st_size < 1_000_000
    outcome = read_contained(path)
    assert outcome["error"] == f"{path}: image has 20 pages of 2205 megapixels in all (limit 2000); refused"
    assert float(str(outcome["peak_mb"])) < 300
