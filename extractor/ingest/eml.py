"""E-mail .eml: the headers as one block, the body as text (plain, else HTML), and its attachments as documents
of their own (docs/formats.md#e-mail).

An attachment is named ``mail.eml#attachment2/order.pdf``: the e-mail it came with, its place among the
attachments, and its file name, whose suffix picks its reader. Discovery lists the attachments of every
e-mail it finds (``attachment_paths``) and ingest reads one from its e-mail (``attachment``), so an attachment
is converted, stored, reviewed and exported like any file, and its path says which e-mail it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage, Message, MIMEPart
from email.parser import BytesParser
from pathlib import PurePath

from extractor.document import Block, BlockKind
from extractor.errors import InputError
from extractor.ingest.assemble import Assembler

HEADERS = ("From", "To", "Cc", "Date", "Subject")
MAX_ATTACHMENTS = 100
"""Attachments read as documents of their own, in the order the message holds them; the e-mail names how many
more it has. A hundred covers any business e-mail; each attachment read reads its e-mail again."""
MAX_PARTS = 1_000
"""MIME parts of one e-mail: more is refused (a message of 5,000 attachments takes seconds to parse each time
one of them is read)."""
_BOUNDARY = re.compile(rb'boundary\s*=\s*(?:"([^"\r\n]*)"|([^\s;"]+))')
"""A boundary a header declares, found in the message lowered (the parameter's name is read in any case; its value
is then taken from the message as it is)."""
_DELIMITER = re.compile(rb"\n--([^\r\n]*)")
"""A line that may be a boundary's (the message's first line is a header's)."""
_ATTACHED = re.compile(r"(?P<mail>.+\.eml)#attachment(?P<number>\d{1,4})/(?P<name>[^/\\]+)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Attachment:
    number: int  # 1-based, in the order the message holds them
    name: str  # the file name as sent, without any folder part
    part: Message
    mail: str  # the e-mail's path

    @property
    def payload(self) -> bytes:
        """The attachment's bytes, decoded from its transfer encoding when asked for (listing decodes none);
        ``InputError`` when its headers cannot be read."""
        with _read_as_mail(self.mail):
            payload = self.part.get_payload(decode=True)
        return payload if isinstance(payload, bytes) else b""


@contextmanager
def _read_as_mail(path: str) -> Iterator[None]:
    """What the ``email`` package raises while it reads the message as the file's fault (``InputError``): it is
    lenient, and what still fails is the input's. It parses a header when it is first asked for, so this holds
    for every look at the message, not only for its parse: a header of 20,000 ``(`` passed the recursion limit
    there, and ended the whole run with a traceback."""
    try:
        yield
    except (InputError, MemoryError):  # MemoryError: the reader's limit, which the reader reports
        raise
    except Exception as error:
        raise InputError(path, f"not a valid e-mail ({type(error).__name__}: {error})") from None


def _over_the_parts(data: bytes) -> bool:
    """Whether the parser would make more than ``MAX_PARTS`` parts of ``data``, counted without parsing it: the
    message, and one for each line that opens a part with a boundary a header declares (``--boundary``; the last,
    ``--boundary--``, opens none). The parser builds a message for each part before they can be counted, so this is
    looked at first: 860,000 empty parts fit in 9.5 MB, minutes of a reader's time (a line only looks like a
    delimiter when it is one: a boundary is chosen to appear nowhere else)."""
    lowered = data.lower()
    boundaries = {data[slice(*found.span(1 if found.group(1) is not None else 2))]
                  for found in _BOUNDARY.finditer(lowered)}
    boundaries.discard(b"")
    if not boundaries:
        return False
    opened = 1
    for line in _DELIMITER.finditer(data):
        if line[1].rstrip(b" \t") in boundaries:
            opened += 1
            if opened > MAX_PARTS:
                return True
    return False


def _message(data: bytes, path: str) -> EmailMessage:
    if _over_the_parts(data):
        raise InputError(path, f"e-mail has over {MAX_PARTS} MIME parts (limit {MAX_PARTS}); refused")
    with _read_as_mail(path):
        message = BytesParser(policy=policy.default).parsebytes(data)
        if not isinstance(message, EmailMessage) or not any(message.get(name) for name in HEADERS):
            raise InputError(path, "not an e-mail (no From, To, Date or Subject header)")
        parts = sum(1 for _ in message.walk())
    if parts > MAX_PARTS:
        raise InputError(path, f"e-mail has {parts} MIME parts (limit {MAX_PARTS}); refused")
    return message


def attachments(data: bytes, path: str) -> list[Attachment]:
    """The message's attachments read as documents (the first ``MAX_ATTACHMENTS``), numbered in order; a nameless
    one is named by its content type."""
    message = _message(data, path)
    with _read_as_mail(path):
        return _attachments(message, path)


def _attachments(message: EmailMessage, path: str) -> list[Attachment]:
    found = []
    for number, part in enumerate(message.iter_attachments(), start=1):
        if number > MAX_ATTACHMENTS:
            break
        found.append(Attachment(number, _file_name(part, number), part, path))
    return found


def _file_name(part: Message, number: int) -> str:
    """The attachment's own name without folders (a name is data from outside), else ``attachmentN.<ext>``."""
    import mimetypes

    raw = part.get_filename() or ""
    name = PurePath(raw.replace("\\", "/")).name.strip().replace("\x00", "")
    if name and name not in (".", ".."):
        return name
    return f"attachment{number}{mimetypes.guess_extension(part.get_content_type()) or '.bin'}"


def attachment_path(mail: str, attachment: Attachment) -> str:
    return f"{mail}#attachment{attachment.number}/{attachment.name}"


def split_attachment_path(path: str) -> tuple[str, int, str] | None:
    """``(e-mail path, attachment number, file name)`` of an attachment's path, or None for any other path."""
    found = _ATTACHED.fullmatch(path)
    return None if found is None else (found["mail"], int(found["number"]), found["name"])


def parse(data: bytes, path: str) -> tuple[str, list[Block], None]:
    """Headers (one block), the body, and a closing block naming the attachments read as their own documents."""
    from extractor.ingest import html

    message = _message(data, path)
    with _read_as_mail(path):
        headers = "\n".join(f"{name}: {' '.join(str(message[name]).split())}" for name in HEADERS if message.get(name))
        body = message.get_body(preferencelist=("plain", "html"))
        content = None if body is None else _content(body, path)
        html_body = body is not None and body.get_content_type() == "text/html"
        attached = _attachments(message, path)
        more = sum(1 for _ in message.iter_attachments()) - len(attached) if attached else 0
    assembler = Assembler()
    assembler.block(BlockKind.PARAGRAPH, headers)
    if content is not None:
        if html_body:
            for kind, piece in html.pieces_of(content):
                assembler.block(kind, piece)
        else:
            assembler.plain(content)
    if attached:  # from the one parse of the message
        names = ", ".join(f"{a.name} (attachment {a.number})" for a in attached)
        if more > 0:
            names += f", and {more} more not read (limit {MAX_ATTACHMENTS})"
        assembler.block(BlockKind.PARAGRAPH, f"Attachments: {names}")
    text, blocks, _ = assembler.result()
    return text, blocks, None


def _content(body: MIMEPart, path: str) -> str:
    try:
        return str(body.get_content())
    except (LookupError, UnicodeError, ValueError) as error:
        raise InputError(path, f"e-mail body cannot be decoded ({type(error).__name__}: {error})") from None


def attachment(path: str, max_bytes: int) -> tuple[bytes, str] | None:
    """The bytes and file name of the attachment ``path`` names, or None when ``path`` names no attachment.

    The e-mail itself is bounded like any file (``max_bytes``); so is what an attachment decodes to.
    """
    import os

    parts = split_attachment_path(path)
    if parts is None or os.path.exists(path):
        return None
    mail, number, name = parts
    try:
        size = os.stat(mail).st_size
    except OSError:
        return None
    if size > max_bytes:
        raise InputError(path, f"the e-mail {mail} is too large ({size} bytes; limit {max_bytes})")
    with open(mail, "rb") as handle:
        data = handle.read()
    for found in attachments(data, mail):  # only the one asked for is decoded
        if found.number == number:
            if found.name != name:
                raise InputError(path, f"attachment {number} of {mail} is now {found.name!r}, not {name!r}")
            return found.payload, found.name
    raise InputError(path, f"{mail} has no attachment {number} (attachments read: the first {MAX_ATTACHMENTS})")
