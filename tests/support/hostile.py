"""Hostile files built at run time with the real writers (openpyxl, python-hwpx, the standard library's e-mail
package) or as raw bytes: each is small on disk and costs a reader far more than its size (tests/test_sandbox.py,
bench/bench_sandbox.py)."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from pathlib import Path

import openpyxl
from hwpx import HwpxDocument


def shared_string_bomb(path: Path, cells: int = 2000, size: int = 900_000) -> Path:
    """An xlsx whose one 900 KB shared string is named by 2,000 cells: 1.8 GB of text from a small file."""
    book = openpyxl.Workbook()
    sheet = book.active
    text = "Purchase request approved by the manager. " * (size // 43)
    for row in range(1, cells + 1):
        sheet.cell(row=row, column=1, value=text)
    book.save(path)
    return path


def long_hwpx(path: Path, characters: int = 3_000_000) -> Path:
    """An HWPX document of ``characters`` characters of ordinary text: over the text cap."""
    document = HwpxDocument.new()
    written = number = 0
    while written < characters:  # numbered sentences: text that deflates like a document's, not like a bomb's
        paragraph = " ".join(f"작업 요청 {number + n}호를 검토했습니다. 팀장이 {(number + n) * 7919 % 100_003}번 항목을 승인했습니다."
                             for n in range(50))
        document.add_paragraph(paragraph)
        written += len(paragraph)
        number += 50
    document.save_to_path(path)
    return path


def reference_loop_pdf(path: Path) -> Path:
    """A PDF whose page's MediaBox is a reference to a reference to itself (7 0 R -> 8 0 R -> 7 0 R)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox 7 0 R /Contents 4 0 R >>",
               b"<< /Length 44 >>\nstream\nBT /F1 12 Tf 72 712 Td (Loop) Tj ET\nendstream", b"<< >>", b"<< >>",
               b"8 0 R", b"7 0 R"]
    body = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, data in enumerate(objects, start=1):
        offsets.append(len(body))
        body += b"%d 0 obj\n" % number + data + b"\nendobj\n"
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    body += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    body += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(body))
    return path


def many_elements_html(path: Path, elements: int = 1_200_000) -> Path:
    """9.6 MB of HTML in 1,200,000 paragraphs of one letter: within the size limit, gigabytes and minutes to read."""
    path.write_text("<html><body>" + "<p>x</p>" * elements + "</body></html>", encoding="ascii")
    return path


def sparse_text(path: Path, size: int = 600 << 20) -> Path:
    """600 MB of NUL bytes that take no disk: more than a reader may hold once the size limit is raised for it."""
    with path.open("wb") as stream:
        stream.truncate(size)
    return path


def many_attachments(path: Path, count: int = 5000, binary: int = 0) -> Path:
    """An e-mail with ``count`` small text attachments, each of its own content (the first ``binary`` of them named
    ``.bin``, a type no reader reads): work that grows with their number, or with its square. The standard library
    writes the message with its first attachment; the others are copies of that part, each with its own name and
    text (the writer takes seconds per thousand)."""
    message = EmailMessage()
    message["Subject"] = "Purchase orders"
    message["From"] = "buyer@example.com"
    message["To"] = "clerk@example.com"
    message.set_content("The purchase orders are attached.")
    message.add_attachment(_order(0), maintype="text", subtype="plain", filename="order0.txt")
    written = message.as_bytes()
    boundary = f"--{message.get_boundary()}".encode()
    head, body, part, end = written.split(boundary)
    encoded = base64.b64encode(_order(0))
    assert part.count(encoded) == 1 and part.count(b'filename="order0.txt"') == 1
    parts = [part.replace(encoded, base64.b64encode(_order(number))).replace(
        b'filename="order0.txt"', f'filename="order{number}.{"bin" if number < binary else "txt"}"'.encode())
        for number in range(count)]
    path.write_bytes(boundary.join([head, body, *parts, end]))
    return path


def _order(number: int) -> bytes:
    return f"Order {number}: {number % 7 + 1} boxes of paper for room {number}.".encode()


_MAIL_HEAD = (b"From: buyer@example.com\r\nTo: clerk@example.com\r\nSubject: Purchase orders\r\nMIME-Version: 1.0\r\n"
              b'Content-Type: multipart/mixed; boundary="B"\r\n\r\n')


def many_parts(path: Path, size: int = 9_500_000) -> Path:
    """An e-mail of as many empty MIME parts as fit in ``size`` bytes (860,000 in 9.5 MB): the parser would build a
    message for each, minutes of a reader's time, before the parts could be counted."""
    part = b"--B\r\n\r\nx\r\n"
    path.write_bytes(_MAIL_HEAD + part * ((size - len(_MAIL_HEAD)) // len(part)) + b"--B--\r\n")
    return path


def nested_parts(path: Path, depth: int = 50_000) -> Path:
    """An e-mail of multipart parts each inside the one before, ``depth`` deep (3.7 MB): recursion in whatever walks
    the message."""
    body = bytearray(_MAIL_HEAD.replace(b'boundary="B"', b'boundary="b0"'))
    for level in range(1, depth):
        body += b'--b%d\r\nContent-Type: multipart/mixed; boundary="b%d"\r\n\r\n' % (level - 1, level)
    body += b"--b%d\r\nContent-Type: text/plain\r\n\r\nPurchase order.\r\n" % (depth - 1)
    for level in reversed(range(depth)):
        body += b"--b%d--\r\n" % level
    path.write_bytes(bytes(body))
    return path


def large_attachment(path: Path, size: int = 7_000_000) -> Path:
    """An e-mail whose one text attachment is ``size`` bytes in base64 (9.5 MB of e-mail): over the text cap once
    read."""
    text = (b"Order 1: 3 boxes of paper for room 12. " * (size // 39 + 1))[:size]
    path.write_bytes(_MAIL_HEAD + b"--B\r\nContent-Type: text/plain\r\n\r\nThe order is attached.\r\n--B\r\n"
                     b'Content-Type: text/plain\r\nContent-Disposition: attachment; filename="order.txt"\r\n'
                     b"Content-Transfer-Encoding: base64\r\n\r\n" + base64.encodebytes(text) + b"--B--\r\n")
    return path


def attachment_header(path: Path, *headers: bytes) -> Path:
    """An e-mail of a short body and one text attachment ``order.txt`` with ``headers`` among its headers (each
    replacing the one of its name): a header the standard library's parser takes long over, or recurses on, when
    asked for (``deep_comment``)."""
    given = {header.split(b":", 1)[0].lower(): header for header in headers}
    own = [b"Content-Type: text/plain", b'Content-Disposition: attachment; filename="order.txt"']
    part = b"\r\n".join([*headers, *(h for h in own if h.split(b":", 1)[0].lower() not in given)])
    path.write_bytes(_MAIL_HEAD + b"--B\r\nContent-Type: text/plain\r\n\r\nThe order is attached.\r\n--B\r\n" + part
                     + b"\r\n\r\nOrder 1: 3 boxes of paper.\r\n--B--\r\n")
    return path


def deep_comment(name: bytes, value: bytes = b"") -> bytes:
    """The header ``name: value`` followed by 20,000 opening comments: the parser recurses into each (20 KB)."""
    return name + b": " + value + b" " + b"(" * 20_000


def many_parameters(path: Path, attachments: int = 20, count: int = 30_000) -> Path:
    """An e-mail of ``attachments`` attachments, each named in a Content-Disposition of ``count`` parameters (290 KB
    each, 5.8 MB in all): the parser takes seconds and a few hundred MB over each one's name, minutes over all."""
    header = b"Content-Disposition: attachment; " + b"; ".join(b"p%d=a" % n for n in range(count)) + b"; filename="
    parts = [b"--B\r\nContent-Type: text/plain\r\n" + header + b"order%d.txt\r\n\r\nOrder %d.\r\n" % (n, n)
             for n in range(attachments)]
    path.write_bytes(_MAIL_HEAD + b"--B\r\nContent-Type: text/plain\r\n\r\nThe orders are attached.\r\n" + b"".join(parts)
                     + b"--B--\r\n")
    return path
