"""What the Python API reads: a path (a file, a folder or a glob, as ``extract run`` takes it), or a document given as
bytes with a name (``Source``), or text (``Source.text``).

A document given as bytes is written to a private scratch folder and read from there by the same sandboxed reader as
a file (``extractor.offload``); the run log records it under its name, and keeps its bytes (as an upload) so that
``extract show`` and ``approve`` read it from the run log later.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from extractor.errors import UsageError

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Source:
    """A document given as bytes: ``name``'s suffix says its format (``.pdf``, ``.md``, ``.txt``), and the run log
    records it under ``name``."""

    name: str
    data: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise UsageError(f"{self.name}: a Source holds bytes, not {type(self.data).__name__} (Source.text(...) "
                             "takes text)")
        if not self.name or not self.name.strip() or "\x00" in self.name or len(self.name) > 1000:
            raise UsageError(f"a Source needs a name with a suffix that says its format, e.g. order.pdf (not "
                             f"{self.name[:80]!r})")
        object.__setattr__(self, "data", bytes(self.data))

    @classmethod
    def text(cls, text: str, name: str | None = None) -> Source:
        """Text as a document (UTF-8 ``.txt`` unless ``name`` says otherwise: ``memo.md`` is read as Markdown); its
        default name, ``text-<sha256 prefix>.txt``, is one per content."""
        data = text.encode("utf-8")
        return cls(name or f"text-{hashlib.sha256(data).hexdigest()[:12]}.txt", data)


SourceLike = str | os.PathLike[str] | Source | tuple[str, bytes]
"""What ``extract`` and ``extract_many`` take: a path (a file, a folder or a glob), a ``Source``, or ``(name, bytes)``."""


def as_source(given: SourceLike) -> str | Source:
    """A path as a string, or a ``Source``; ``UsageError`` for anything else."""
    if isinstance(given, Source):
        return given
    if isinstance(given, tuple) and len(given) == 2 and isinstance(given[0], str):
        return Source(given[0], given[1])
    if isinstance(given, str | os.PathLike):
        return os.fspath(given)
    if isinstance(given, bytes | bytearray):
        raise UsageError("bytes need a name that says their format: Source('order.pdf', data) or ('order.pdf', data)")
    raise UsageError(f"a source is a path, a Source or (name, bytes), not {type(given).__name__}")


def write_sources(sources: Iterable[Source], folder: Path) -> dict[Path, Source]:
    """Each source as a file of ``folder`` (with its suffix, so it is read as its name says), by the file's path; two
    sources of one name are refused (the run log and the results would not tell them apart)."""
    from extractor.engine.discover import with_attachments

    written: dict[Path, Source] = {}
    names: set[str] = set()
    for number, source in enumerate(sources):
        for name, data in with_attachments(source.name, source.data):  # an e-mail's attachments are documents too
            if name in names:
                raise UsageError(f"two sources are named {name}: give each its own name")
            names.add(name)
            suffix = Path(name.replace("\\", "/")).suffix
            path = folder / f"{number}-{len(written)}{_SAFE.sub('_', suffix)[:16]}"
            path.write_bytes(data)
            written[path] = Source(name, data)
    return written
