"""Submitted documents live in the run log (``uploads``), not on a shared disk: a local copy when a reader needs a file."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine


def safe_suffix(name: str) -> str:
    """The submitted name's extension if it is a plain one (``.md``, ``.docx``): nothing else reaches the disk."""
    suffix = Path(name.replace("\\", "/")).suffix
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""


@contextmanager
def uploaded_copy(engine: Engine, sha256: str) -> Iterator[Path | None]:
    """A scratch file with the uploaded document of this content (named so its extension picks the reader),
    removed afterwards; None when no upload has it."""
    from extractor.store.tasks import upload_with

    upload = upload_with(engine, sha256)
    if upload is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="extract-upload-") as folder:
        path = Path(folder) / f"source{safe_suffix(upload[0])}"
        path.write_bytes(upload[1])
        yield path
