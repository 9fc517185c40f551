"""Export approved records (and nothing else) as JSONL or CSV, each with its provenance.

Provenance per record: document path and sha256, contract and version, the run and attempt it came from
(with the run's model, prompt and validator version when the run log still has that run), whether a
person edited it, the validator's evidence spans (offsets into the canonical text, with the sentence ids
they touch), reviewer, approval time and note; ``block_override`` when a person approved a BLOCKED result over
its critical finding (who, when, why, which rules); ``masked``: where personal data was masked, for a contract
whose guard setting ``source_personal_data`` is ``mask`` (the run log keeps the values as the model gave them).

The file is written to a temporary file beside the target, flushed to disk and renamed over the target:
a crash leaves either the old file or the new one, never half a file, and no temporary file behind.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from extractor.errors import ExtractorError, UsageError

if TYPE_CHECKING:
    from extractor.store import Store
    from extractor.store.approved import ApprovedRecordInfo

FORMATS = ("jsonl", "csv")
PROVENANCE_COLUMNS = (
    "document_path",
    "document_sha256",
    "contract",
    "contract_version",
    "run_id",
    "attempt_id",
    "model",
    "prompt_version",
    "validator_version",
    "edited",
    "reviewer",
    "approved_by",
    "approved_at",
    "note",
    "block_override",
    "masked",
    "evidence_spans",
)


@dataclass(frozen=True)
class ExportResult:
    path: Path
    format: str
    records: int

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": self.format, "records": self.records}


def provenance(record: ApprovedRecordInfo, run: Any | None, masked: list[str] | None = None) -> dict[str, Any]:
    return {
        "document_path": record.document_path,
        "document_sha256": record.document_sha256,
        "contract": record.contract,
        "contract_version": record.contract_version,
        "run_id": record.run_id,
        "attempt_id": record.attempt_id,
        "model": None if run is None else run.model,
        "prompt_version": None if run is None else run.prompt_version,
        "validator_version": None if run is None else run.validator_version,
        "edited": record.edited,
        "reviewer": record.reviewer,
        "approved_by": [entry["reviewer"] for entry in record.approvals] if record.approvals else [record.reviewer],
        "approved_at": record.approved_at.isoformat(timespec="microseconds"),
        "note": record.note,
        "block_override": record.block_override,
        "masked": masked or [],
        "evidence_spans": record.evidence_spans,
    }


def masked_record(record: ApprovedRecordInfo, run: Any | None = None) -> tuple[dict[str, Any], list[str]]:
    """The record as export writes it: personal data masked when its contract's guards say ``mask``, and where.

    The setting is the one its run recorded (the contract as it was when the record was made and approved);
    a run that recorded none, or is not in the run log, takes it from the contract found as the run recorded it
    (``extractor.contracts.recorded``). A contract that cannot be found cannot say whether to mask, so nothing of
    it is exported.
    """
    from extractor.evidence.sensitive import mask, personal_data
    from extractor.vocab import PersonalDataPolicy

    recorded = ((run.config or {}).get("guards") or {}).get("source_personal_data") if run is not None else None
    if recorded is not None:
        policy = PersonalDataPolicy(recorded)
    else:
        policy = _contract_for(record, run).guards.source_personal_data
    if policy is not PersonalDataPolicy.mask:
        return record.record, []
    where: list[str] = []

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {key: walk(child, f"{path}.{key}") for key, child in value.items()}
        if isinstance(value, list):
            return [walk(child, f"{path}[{index}]") for index, child in enumerate(value)]
        if isinstance(value, str):
            found = personal_data(value)
            where.extend(f"{path}: {match.kind}" for match in found)
            return mask(value, found) if found else value
        return value

    return walk(record.record, "$"), where


def _contract_for(record: ApprovedRecordInfo, run: Any | None) -> Any:
    from extractor.contracts.recorded import Recorded, resolve

    if run is not None:
        recorded, why = Recorded.of_run(run), ""
    else:  # the run log does not have its run: the contract by name and version, from the search path
        recorded = Recorded(record.contract, record.contract_version, None, "", run_id=record.run_id)
        why = f" (its run {(record.run_id or '?')[:12]} is not in this run log)"
    try:
        return resolve(recorded)
    except ExtractorError as error:
        raise UsageError(f"cannot export record {record.id}{why}: {error}") from None


def atomic_write(path: Path, write: Callable[[IO[str]], None], *, newline: str | None = None) -> None:
    """Call ``write`` on a temporary file in ``path``'s folder, fsync it, then rename it to ``path``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path`` is untouched.
    """
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.chmod(temporary, _mode_for(path))
        with os.fdopen(handle, "w", encoding="utf-8", newline=newline) as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    if os.name == "posix":  # make the rename itself durable
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _mode_for(path: Path) -> int:
    """The existing file's permissions, else what a plain ``open()`` would create (mkstemp makes 0600)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def jsonl_line(record: dict[str, Any], origin: dict[str, Any]) -> str:
    """One approved record as a JSONL line: what ``extract export --format jsonl`` writes and ``GET /v1/approved``
    sends."""
    return json.dumps({"record": record, "provenance": origin}, ensure_ascii=False) + "\n"


def _jsonl(rows: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> Callable[[IO[str]], None]:
    def write(stream: IO[str]) -> None:
        for record, origin in rows:
            stream.write(jsonl_line(record, origin))

    return write


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet may run as a formula when a cell starts with it (OWASP, CSV injection)."""


def _cell(value: Any) -> Any:
    """A CSV cell: text a spreadsheet would run as a formula gets a leading apostrophe (OWASP), so a document
    that says ``=HYPERLINK(...)`` is shown, never run; nested values are JSON text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted columns (``supplier.name``); lists and scalars stay as they are."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _exploded(record: dict[str, Any], field: str) -> list[dict[str, Any]]:
    """One flat row per item of the list ``field`` (item fields as ``field.<name>``, its 0-based position as
    ``field.index``); a record whose list is empty or missing keeps one row with those columns empty."""
    items = record.get(field)
    rest = flatten({key: value for key, value in record.items() if key != field})
    if not isinstance(items, list) or not items:
        return [rest | {f"{field}.index": None}]
    rows = []
    for index, item in enumerate(items):
        columns = flatten(item, f"{field}.") if isinstance(item, dict) else {field: item}
        rows.append(rest | {f"{field}.index": index} | columns)
    return rows


def _csv(rows: list[tuple[dict[str, Any], dict[str, Any]]], explode: str | None = None) -> Callable[[IO[str]], None]:
    """Provenance columns, then the record flattened: nested objects as dotted columns, lists as JSON text;
    one row per record, or with ``explode`` one row per item of that list. A record column named like a
    provenance column gets a ``record.`` prefix. Every cell is neutralised against formulas (``_cell``)."""
    table = [(row, origin) for record, origin in rows
             for row in (_exploded(record, explode) if explode else [flatten(record)])]
    fields: dict[str, None] = {}
    for row, _ in table:
        fields.update(dict.fromkeys(row))
    names = {key: f"record.{key}" if key in PROVENANCE_COLUMNS else key for key in fields}

    def write(stream: IO[str]) -> None:
        writer = csv.writer(stream)
        writer.writerow([_cell(name) for name in (*PROVENANCE_COLUMNS, *names.values())])
        for row, origin in table:
            writer.writerow([_cell(origin[c]) for c in PROVENANCE_COLUMNS] + [_cell(row.get(k)) for k in names])

    return write


def owned_records(run_log: Store, owner: str, approved: list[ApprovedRecordInfo]) -> list[ApprovedRecordInfo]:
    """The approved records that are ``owner``'s: a task of its batches ended in a document run of that content under
    that contract version (``extractor.store.tasks.owned_keys``); the same content submitted by two owners is one
    record, and each of them exports it."""
    from extractor.store.tasks import owned_keys

    mine = owned_keys(run_log.engine, owner, ((r.document_sha256, r.contract, r.contract_version) for r in approved))
    return [r for r in approved if (r.document_sha256, r.contract, r.contract_version) in mine]


def export_rows(approved: list[ApprovedRecordInfo], run_log: Store | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each record as exported (personal data masked where its contract says so) with its provenance, the runs read
    once from ``run_log``."""
    runs: dict[str, Any] = {}
    if run_log is not None:
        wanted = {r.run_id for r in approved if r.run_id}
        runs = {run.id: run for run in run_log.find_runs(ids=wanted)} if wanted else {}
    rows = []
    for r in approved:
        run = runs.get(r.run_id or "")
        record, masked = masked_record(r, run)
        rows.append((record, provenance(r, run, masked)))
    return rows


@dataclass(frozen=True)
class Wanted:
    """Which approved records an export writes: of this contract (and version), approved at or after ``since``,
    and ``owner``'s (the contents that owner submitted, found through the run log)."""

    contract: str | None = None
    contract_version: int | None = None
    since: datetime | None = None
    owner: str | None = None


def export(records: Store, out: Path, fmt: str, *, wanted: Wanted = Wanted(), run_log: Store | None = None,
           explode: str | None = None) -> ExportResult:
    """Write the approved records ``wanted`` to ``out`` atomically; returns how many were written (``explode``: CSV
    only, one row per item of that list field)."""
    from extractor.store.approved import approved_records

    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    approved = approved_records(records, contract=wanted.contract, contract_version=wanted.contract_version,
                                since=wanted.since)
    if wanted.owner is not None:
        if run_log is None:
            raise ValueError("an owner's records are found through the run log: pass run_log")
        approved = owned_records(run_log, wanted.owner, approved)
    if explode is not None and fmt != "csv":
        raise ValueError("--explode FIELD needs --format csv")
    rows = export_rows(approved, run_log)
    if explode is not None and rows and not any(explode in record for record, _ in rows):
        lists = sorted({key for record, _ in rows for key, value in record.items() if isinstance(value, list)})
        raise UsageError(f"--explode {explode}: no approved record has a field {explode!r} (list fields: "
                         f"{', '.join(lists) or 'none'}); nothing written")
    if fmt == "jsonl":
        atomic_write(out, _jsonl(rows))
    else:
        atomic_write(out, _csv(rows, explode), newline="")
    return ExportResult(out, fmt, len(rows))
