"""What a person means by DOC: a document run id, a content sha256 (or a unique prefix), or a file path.

Ambiguity is an error listing the candidates, never a silent pick: approving the wrong candidate would
put a wrong record into the approved data.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from extractor.errors import ExtractorError
from extractor.runfilter import RunFilter, newest
from extractor.store import DocumentRunInfo, RunInfo, RunQuery, Store
from extractor.vocab import FINAL_STATES, MAX_ROW_ID, MIN_ID_PREFIX, REVIEWABLE, ExitCode

_HEX = re.compile(rf"^[0-9a-fA-F]{{{MIN_ID_PREFIX},64}}$")
"""A sha256 prefix; digits this long are tried as one too (shorter digits are only a document run id)."""
_RUN_ID = re.compile(rf"[0-9a-f]{{{MIN_ID_PREFIX},32}}")


class ReviewError(ExtractorError):
    """A one-line reason the command cannot do what was asked (nothing found, ambiguous, bad option): exit 2."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Resolved:
    """The chosen document run and the other runs of the same content (newest first)."""

    document_run: DocumentRunInfo
    others: list[DocumentRunInfo]


def _describe(document_run: DocumentRunInfo) -> str:
    return (f"{document_run.sha256[:12]} (document run {document_run.id}, {document_run.state}, "
            f"{document_run.path}, {document_run.started_at:%Y-%m-%d %H:%M})")


def _file_sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _same_path(stored: str, given: str, cwd: Path) -> bool:
    if stored == given:
        return True
    try:
        return (cwd / stored).resolve() == (cwd / given).resolve()
    except (OSError, RuntimeError):
        return False


def _row_id(ref: str) -> int | None:
    """``ref`` as a document run id: ASCII digits within what the table holds (a run id's prefix of ten digits is
    no document run, and PostgreSQL refuses to compare an INTEGER column with it)."""
    return int(ref) if ref.isascii() and ref.isdigit() and int(ref) <= MAX_ROW_ID else None


def candidates(store: Store, ref: str, cwd: Path | None = None) -> dict[str, list[DocumentRunInfo]]:
    """Document runs ``ref`` can mean, grouped by document sha256 (newest run first in each group)."""
    cwd = cwd or Path.cwd()
    ref = ref.strip()
    found: dict[int, DocumentRunInfo] = {}
    if (number := _row_id(ref)) is not None:
        for document_run in store.find_document_runs(ids=[number]):
            found[document_run.id] = document_run
    if _HEX.match(ref):
        for document_run in store.find_document_runs(sha_prefix=ref.lower()):
            found[document_run.id] = document_run
    if not found or os.sep in ref or "/" in ref or "." in ref:
        for document_run in store.find_document_runs(same_file_name=ref):
            if _same_path(document_run.path, ref, cwd):
                found[document_run.id] = document_run
    groups: dict[str, list[DocumentRunInfo]] = {}
    for document_run in sorted(found.values(), key=lambda d: (d.started_at, d.id), reverse=True):
        groups.setdefault(document_run.sha256, []).append(document_run)
    return groups


def resolve(store: Store, ref: str, *, for_decision: bool = False, cwd: Path | None = None) -> Resolved:
    """The document run ``ref`` means: the same one for ``show``, ``approve`` and ``reject``.

    A document run id names exactly one. A sha256 prefix or path naming several contents is ambiguous,
    unless it is a path and the file's current content is one of them. Among the runs of one content, it is
    the newest that reached a final state (else the newest). A decision (``for_decision``) on it is refused,
    naming the alternatives, when that run cannot be decided (it ended ERROR: the model never answered) or when
    another configuration has a result of the same content waiting too: a decision never falls back to a
    different run than ``extract show`` shows.
    """
    cwd = cwd or Path.cwd()
    groups = candidates(store, ref, cwd)
    if not groups:
        raise ReviewError(f"no document run matches {ref!r} (give a document run id from `extract review`, a "
                          f"content sha256 or its first {MIN_ID_PREFIX} or more characters, or the path given to `extract run`)")
    exact = [d for runs in groups.values() for d in runs if d.id == _row_id(ref.strip())]
    if exact and len(groups) > 1:
        listed = "; ".join(_describe(runs[0]) for runs in groups.values())
        raise ReviewError(f"{ref!r} is ambiguous (a document run id and a sha256 prefix): {listed}")
    if exact:
        chosen = exact[0]
        others = [d for d in groups[chosen.sha256] if d.id != chosen.id]
        return Resolved(chosen, others)
    if len(groups) > 1:
        current = _file_sha256(str(cwd / ref)) if (cwd / ref).is_file() else None
        if current in groups:
            groups = {current: groups[current]}
        else:
            listed = "; ".join(_describe(runs[0]) for runs in groups.values())
            raise ReviewError(f"{ref!r} matches {len(groups)} documents: {listed}")
    [runs] = groups.values()
    final = [d for d in runs if d.state in FINAL_STATES]
    chosen = (final or runs)[0]
    others = [d for d in runs if d.id != chosen.id]
    if for_decision:
        waiting = [d for d in others if d.state in REVIEWABLE and d.config_hash != chosen.config_hash]
        listed = "; ".join(f"document run {d.id} ({d.state}, run {d.run_id[:12]}, {d.started_at:%Y-%m-%d %H:%M})"
                           for d in [d for d in others if d.state in REVIEWABLE][:5])
        if chosen.state not in REVIEWABLE:
            cause = f" ({chosen.cause})" if chosen.cause else ""
            older = f"; an earlier result is decided by its id: {listed}" if listed else ""
            raise ReviewError(f"refused: {ref!r} is document run {chosen.id}, which ended {chosen.state}{cause}: "
                              f"nothing to decide{older}", ExitCode.FAILED)
        if waiting:
            raise ReviewError(f"{ref!r} has results from {len({d.config_hash for d in waiting}) + 1} configurations; "
                              f"`extract show {ref}` shows document run {chosen.id}; give the id of the one to decide: "
                              f"{chosen.id} or {listed}")
    return Resolved(chosen, others)


def resolve_shown(store: Store, ref: str) -> RunInfo | Resolved:
    """What ``extract show REF`` means: a run, or a document run; both at once is an error naming them."""
    run = resolve_run(store, ref)
    documents = candidates(store, ref)
    if run is not None and documents:
        raise ReviewError(f"{ref!r} is ambiguous: run {run.id} and document(s) "
                          + ", ".join(sha[:12] for sha in documents) + "; give more characters")
    return run if run is not None else resolve(store, ref)


def resolve_run(store: Store, ref: str) -> RunInfo | None:
    """The run ``ref`` names (full id or a unique prefix of at least ``MIN_ID_PREFIX`` characters, or ``latest``,
    ``latest~1``, ...: the newest runs in which a document reached the model), if any."""
    text = ref.strip().lower()
    if newest(text) is not None:
        found = RunFilter(run=text).select(store)
        if not found:
            raise ReviewError(f"{ref!r}: there are not that many runs (`extract runs` lists them)")
        return found[0]
    if not _RUN_ID.fullmatch(text):
        return None
    runs = store.find_runs(RunQuery(id_prefix=text), limit=10)
    exact = [run for run in runs if run.id == text]
    if exact:
        return exact[0]
    if len(runs) > 1:
        raise ReviewError(f"run id prefix {ref!r} matches {len(runs)} runs: " + ", ".join(r.id[:12] for r in runs))
    return runs[0] if runs else None
