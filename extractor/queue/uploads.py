"""Submitted documents live in the run log (``uploads``), not on a shared disk, and are read from there.

A document converted by a worker (``extract worker``, ``extract serve``) has as its path only the name its
submitter gave it: no file of any machine to open. Review, approval, page images and the document view read it
from its upload instead, found by content hash (``source_of``), on any machine that reaches the run log: the
bytes are read from the run log and parsed in memory, never copied to a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from extractor.document import Document
    from extractor.store import DocumentRunInfo, Store

QUEUE_COMMANDS = ("extract worker", "extract serve")
"""The commands of runs whose documents came as uploads (recorded as each worker run's command)."""
MAX_NAME_CHARS = 200
"""The longest name an upload is stored and shown with (a longer base name is cut, its extension kept)."""
UNNAMED = "document"
"""The name of an upload sent without one (or with only folders, ``.`` or ``..``)."""


def plain_name(sent: str | None) -> str:
    """An upload's name: the base name of the name its client sent, whatever the client's separators (``x.txt``
    for ``../../x.txt``, ``/tmp/x.txt`` and ``..\\..\\x.txt``), without control characters, at most
    ``MAX_NAME_CHARS``. The name as sent is data from outside: kept as the submission's provenance, never a path."""
    printable = "".join(char for char in sent or "" if char.isprintable())
    base = re.split(r"[/\\]", printable)[-1].strip()
    if base in ("", ".", ".."):
        return UNNAMED
    if len(base) > MAX_NAME_CHARS:
        suffix = safe_suffix(base)
        base = base[:MAX_NAME_CHARS - len(suffix)] + suffix
    return base


def safe_suffix(name: str) -> str:
    """The submitted name's extension if it is a plain one (``.md``, ``.docx``): nothing else reaches the disk."""
    suffix = Path(name.replace("\\", "/")).suffix
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""


@dataclass(frozen=True)
class Source:
    """Where a document run's source is read again: the bytes of its upload (``data``, read from the run log, no
    copy anywhere), or the file a local run read (``path``). ``name`` is what messages call it; its suffix picks
    the reader."""

    name: str
    data: bytes | None = None
    path: Path | None = None

    def document(self) -> Document:
        """The source read as ingest reads it; ``InputError`` when it cannot be (a file moved, a broken upload)."""
        from extractor.ingest import load, load_bytes

        if self.data is not None:
            return load_bytes(self.name, self.data)
        assert self.path is not None
        return load(self.path)

    def content(self) -> tuple[bytes, str]:
        """Its bytes and the suffix that names its format (``InputError`` when a file cannot be read)."""
        from extractor.ingest import source_bytes

        if self.data is not None:
            return self.data, safe_suffix(self.name).lower()
        assert self.path is not None
        return source_bytes(str(self.path))


def uploaded(engine: Engine, sha256: str, like: str) -> bytes | None:
    """The bytes of the upload with this content whose name has the extension of ``like`` (so it is read as the
    run read it); None when the run log has no such upload."""
    from extractor.store.tasks import upload_with

    suffix = safe_suffix(like).lower()
    return upload_with(engine, sha256, lambda name: safe_suffix(name).lower() == suffix)


def source_of(store: Store, document_run: DocumentRunInfo) -> Source | None:
    """Where to read a document run's source: its upload (by content hash) when the run log has one; else, for a
    run of local files (``extract run``), the path it read; else None: a worker's document whose upload is gone
    is never looked for under the name a submitter gave it."""
    data = uploaded(store.engine, document_run.sha256, document_run.path)
    if data is not None:
        return Source(document_run.path, data=data)
    run = store.get_run(document_run.run_id)
    if run is None or run.command in QUEUE_COMMANDS:
        return None
    return Source(document_run.path, path=Path(document_run.path))
