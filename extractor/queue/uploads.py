"""Submitted documents live in the run log (``uploads``), not on a shared disk: a local copy when a reader needs a file.

A document converted by a worker (``extract worker``, ``extract serve``) has as its path only the name its
submitter gave it: no file of any machine to open. Review, approval and the document view read it from its
upload instead, found by content hash (``source_file``), on any machine that reaches the run log.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from extractor.store import DocumentRunInfo, Store

QUEUE_COMMANDS = ("extract worker", "extract serve")
"""The commands of runs whose documents came as uploads (recorded as each worker run's command)."""


def safe_suffix(name: str) -> str:
    """The submitted name's extension if it is a plain one (``.md``, ``.docx``): nothing else reaches the disk."""
    suffix = Path(name.replace("\\", "/")).suffix
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""


@contextmanager
def uploaded_copy(engine: Engine, sha256: str, like: str) -> Iterator[Path | None]:
    """A scratch file with the uploaded document of this content whose name has the extension of ``like`` (so
    it is read as the run read it), removed afterwards; None when no such upload is in the run log."""
    from extractor.store.tasks import upload_content, uploads_with

    suffix = safe_suffix(like).lower()
    upload_id = next((found for found, name in uploads_with(engine, sha256) if safe_suffix(name).lower() == suffix),
                     None)
    if upload_id is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="extract-upload-") as folder:
        path = Path(folder) / f"source{suffix}"
        path.write_bytes(upload_content(engine, upload_id))
        yield path


@contextmanager
def source_file(store: Store, document_run: DocumentRunInfo) -> Iterator[Path | None]:
    """Where to read a document run's source: its upload (by content hash) when the run log has one; else,
    for a run of local files (``extract run``), the path it read; else None: a worker's document whose upload
    is gone is never looked for under the name a submitter gave it."""
    with uploaded_copy(store.engine, document_run.sha256, document_run.path) as copy:
        if copy is not None:
            yield copy
            return
    run = store.get_run(document_run.run_id)
    yield None if run is None or run.command in QUEUE_COMMANDS else Path(document_run.path)
