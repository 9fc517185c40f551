"""Export approved records (and nothing else) as JSONL or CSV, each with its provenance.

Provenance per record: document path and sha256, contract and version, the run and attempt it came from
(with the run's model, prompt and validator version when the run log still has that run), whether a
person edited it, the validator's evidence spans (offsets into the canonical text, with the sentence ids
they touch), reviewer and every approver (``approved_by``), approval time and note; ``block_override`` when a
person approved a BLOCKED result over its critical finding (who, when, why, which rules); ``masked``: where personal
data was masked, for a contract whose guard setting ``source_personal_data`` is ``mask`` (the run log keeps the
values as the model gave them). ``Wanted.owner`` keeps the records of the contents one owner submitted.

The file is written to a temporary file beside the target, flushed to disk and renamed over the target:
a crash leaves either the old file or the new one, never half a file, and no temporary file behind.

Records are streamed from the database in batches (``extractor.store.approved.approved_batches``) and written as
they come, with their runs looked up once per batch: memory stays flat whatever the number of records. CSV takes
its header from the first rows and writes the rest straight after it; a column that appears later makes the file be
written again with it in the header (``_widen``). A record's cells are those its approval stored with it
(``extractor.store.cells.record_cells``), else cut from its JSON as stored without decoding its values
(``stored_cells``).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from json.encoder import encode_basestring
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec

from extractor.errors import ExtractorError, UsageError
from extractor.store.cells import RawJSON, StoredCells, cells, flatten, read_cells, stored_cells
from extractor.vocab import PersonalDataPolicy

if TYPE_CHECKING:
    from extractor.store import RunInfo, Store
    from extractor.store.approved import StoredApproval

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


def _encode(value: Any) -> str:
    """``json.dumps`` of ``value`` (non-ASCII kept), with every ``RawJSON`` in it written as the JSON it holds.

    Each raw text is first a marker string: NUL, this process's random token, its number, NUL (json.dumps writes
    NUL as ``\\u0000``, and no content can know the token), replaced in one pass by the text it stands for.
    """
    raw: list[str] = []

    def mark(item: Any) -> Any:
        if isinstance(item, RawJSON):
            raw.append(item.text)
            return f"\x00{_TOKEN}{len(raw) - 1}\x00"
        if isinstance(item, dict):  # only values that are raw text or hold some are rebuilt
            return {key: mark(child) if isinstance(child, RawJSON | dict) else child for key, child in item.items()}
        return item

    text = json.dumps(mark(value), ensure_ascii=False)
    return _MARKER.sub(lambda found: raw[int(found.group(1))], text) if raw else text


_TOKEN = uuid.uuid4().hex
_MARKER = re.compile(rf'"\\u0000{_TOKEN}(\d+)\\u0000"')


def _raw(text: str | None) -> RawJSON | None:
    return None if text is None else RawJSON(text)


def provenance(record: StoredApproval, run: Any | None, masked: list[str] | None = None) -> tuple[Any, ...]:
    """The record's provenance, a value per ``PROVENANCE_COLUMNS`` in its order: as a tuple, a CSV row is made of it
    without a dictionary per record."""
    return (
        record.document_path,
        record.document_sha256,
        record.contract,
        record.contract_version,
        record.run_id,
        record.attempt_id,
        None if run is None else run.model,
        None if run is None else run.prompt_version,
        None if run is None else run.validator_version,
        record.edited,
        record.reviewer,
        approvers(record),
        record.approved_at,
        record.note,
        _raw(record.block_override_json),
        masked or [],
        _raw(record.evidence_spans_json),
    )


def approvers(record: StoredApproval) -> list[str]:
    """Everyone who approved the record: the people who signed it off when its contract needs several, else its
    reviewer."""
    signed = json.loads(record.approvals_json) if record.approvals_json else None
    return [entry["reviewer"] for entry in signed] if signed else [record.reviewer]


def masked_record(record: StoredApproval, run: Any | None = None,
                  policy: PersonalDataPolicy | None = None) -> tuple[dict[str, Any] | RawJSON, list[str]]:
    """The record as export writes it: personal data masked when its contract's guards say ``mask``, and where
    (else the record's JSON as stored). ``policy`` is ``personal_data_policy(record, run)`` when the caller has it.
    """
    from extractor.evidence.sensitive import mask, personal_data

    if (policy or personal_data_policy(record, run)) is not PersonalDataPolicy.mask:
        return RawJSON(_json_of(record)), []
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

    return walk(json.loads(_json_of(record)), "$"), where


def _json_of(record: StoredApproval) -> str:
    """The record's JSON as stored: read with it, or by ``with_texts`` (``Rows.of``)."""
    assert record.record_json is not None, f"approved record {record.id} was read without its JSON"
    return record.record_json


def personal_data_policy(record: StoredApproval, run: Any | None) -> PersonalDataPolicy:
    """Whether the record's personal data is masked in export: the setting its run recorded (the contract as it
    was when the record was made and approved); a run that recorded none, or is not in the run log, takes it from
    the contract found as the run recorded it (``extractor.contracts.recorded``). A contract that cannot be found
    cannot say whether to mask, so nothing of it is exported."""
    recorded = ((run.config or {}).get("guards") or {}).get("source_personal_data") if run is not None else None
    if recorded is not None:
        return PersonalDataPolicy(recorded)
    return _contract_for(record, run).guards.source_personal_data  # type: ignore[no-any-return]


def _contract_for(record: StoredApproval, run: Any | None) -> Any:
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


def atomic_write(path: Path, write: Callable[[IO[Any]], None], *, binary: bool = False) -> None:
    """Call ``write`` on a temporary file in ``path``'s folder (text, UTF-8; with ``binary``, bytes, and the file can be
    read back), fsync it, then rename it to ``path``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``path`` is untouched.
    """
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.chmod(temporary, _mode_for(path))
        with os.fdopen(handle, "w+b") if binary else os.fdopen(handle, "w", encoding="utf-8") as stream:
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


Row = tuple[dict[str, Any] | RawJSON | StoredCells, tuple[Any, ...]]
"""What export writes per record: the record (decoded, or its JSON as stored) and its provenance."""


WRITE_EVERY = 16
"""Lines joined into one write: a write per line costs more, and so does joining hundreds of lines of a few kilobytes
(megabytes, out of the processor's caches)."""


def _jsonl(rows: Iterable[Row]) -> Callable[[IO[str]], None]:
    def write(stream: IO[str]) -> None:
        lines: list[str] = []
        for record, origin in rows:
            lines.append(jsonl_line(record, origin))
            if len(lines) == WRITE_EVERY:
                stream.write("".join(lines))
                lines.clear()
        stream.write("".join(lines))

    return write


def jsonl_line(record: dict[str, Any] | RawJSON | StoredCells, origin: tuple[Any, ...]) -> str:
    """``{"record": ..., "provenance": ...}`` and a newline, as ``_encode`` writes it, built from its parts: the
    record's JSON as stored, then each provenance value (``_value_json``) after its key. (A record read as its
    stored CSV cells alone has none: a ``TypeError``.)"""
    if isinstance(record, RawJSON):
        body = record.text
    elif isinstance(record, StoredCells):
        raise TypeError("a record read as its stored CSV cells has no JSON: read it without cells")
    else:
        body = _encode(record)
    fields = ", ".join([key + _value_json(value) for key, value in zip(_KEYS, origin, strict=True)])
    return f'{{"record": {body}, "provenance": {{{fields}}}}}\n'


_KEYS = tuple(f"{encode_basestring(key)}: " for key in PROVENANCE_COLUMNS)


def _value_json(value: Any) -> str:
    """One value as ``json.dumps(value, ensure_ascii=False)`` writes it (a ``RawJSON`` as it holds it), the
    provenance's plain values without the encoder's set-up for each."""
    if isinstance(value, RawJSON):
        return value.text
    if isinstance(value, str):
        return encode_basestring(value)  # type: ignore[no-any-return]
    if value is None:
        return "null"
    if value == []:  # "masked" of nearly every record
        return "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    return _encode(value)


def _decoded(stored: dict[str, Any] | RawJSON) -> dict[str, Any]:
    """A record as Python values: msgspec reads it in half the time ``json`` takes; it refuses what the standard library
    accepts and a record may hold (NaN, a lone surrogate's escape), which the standard library then reads."""
    if not isinstance(stored, RawJSON):
        return stored
    try:
        return msgspec.json.decode(stored.text)  # type: ignore[no-any-return]
    except msgspec.DecodeError:
        return json.loads(stored.text)  # type: ignore[no-any-return]


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    """``flatten(record)``: the record itself when none of its values can be an object (no copy)."""
    return record if set(map(type, record.values())) <= _NOT_OBJECTS else flatten(record)


_NOT_OBJECTS = {str, list, type(None), bool, int, float}


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


HEADER_AFTER = 256
"""Rows read before the header is written with their columns. A later row with a column none of them had makes the
file be written again at the end (``_widen``); records of one contract share their fields, so that is rare, and
holding more rows to avoid it would hold their decoded records."""


def _csv(rows: Iterable[Row], explode: str | None = None,
         spool: Path | None = None) -> Callable[[IO[bytes]], None]:
    """Provenance columns, then the record flattened: nested objects as dotted columns, lists as JSON text;
    one row per record, or with ``explode`` one row per item of that list. A record column named like a
    provenance column gets a ``record.`` prefix. Every cell is neutralised against formulas (``_csv_line``).
    Written as UTF-8 bytes (a lone surrogate, which UTF-8 cannot hold, as its ``\\udXXXX`` escape) to an empty
    stream that can be read back.

    Columns come in the order they first appear. The header is written with the columns of the first
    ``HEADER_AFTER`` rows and the rows follow it straight into the stream. A later row with a new column is written
    with it at its end; when the rows are done, ``_widen`` writes the header again with every column and pads the
    rows written before the last new column appeared (their spool is a temporary file in ``spool``'s folder, the
    system's temporary folder without one). ``explode`` naming a field no record has is a ``UsageError``.
    """

    def write(stream: IO[bytes]) -> None:
        lists: set[str] = set()
        exploded = False

        def made(stored: dict[str, Any] | RawJSON) -> Iterator[dict[str, bytes]]:
            """The cells of a record's rows made from the record (its JSON as stored cut, or decoded)."""
            nonlocal exploded
            found = stored_cells(stored.text) if explode is None and isinstance(stored, RawJSON) else None
            if found is not None:
                yield found
                return
            record = _decoded(stored)
            if explode is not None:
                exploded = exploded or explode in record
                lists.update(key for key, value in record.items() if isinstance(value, list))
            for row in _exploded(record, explode) if explode else [_flat(record)]:
                yield dict(zip(row, cells(row.values())))

        def flat() -> Iterator[tuple[dict[str, bytes] | StoredCells, tuple[Any, ...]]]:
            """Each row's cells (as its approval stored them, else made) and its provenance."""
            for stored, origin in rows:
                if isinstance(stored, StoredCells):
                    yield stored, origin  # (only without explode: ``_rows(cells=...)``)
                    continue
                for row in made(stored):
                    yield row, origin

        produced = flat()
        first = list(itertools.islice(produced, HEADER_AFTER))
        columns: dict[str, None] = {}
        for row, _ in first:
            columns.update(dict.fromkeys(row.columns() if isinstance(row, StoredCells) else row))
        header = _header(columns)
        stream.write(header)
        offset = len(header)
        short = 0  # rows written before the last new column appeared: they need padding
        padded_until = offset  # where they end in the stream
        written = 0
        lines: list[bytes] = []
        fits: dict[bytes, tuple[bytes, bytes] | None] = {}  # stored cells' columns: where they go (``_fit``)

        def grow(keys: Iterable[str]) -> None:
            nonlocal offset, short, padded_until
            columns.update(dict.fromkeys(keys))
            offset += stream.write(b"".join(lines))
            lines.clear()
            short, padded_until = written, offset
            fits.clear()

        for row, origin in itertools.chain(first, produced):
            if isinstance(row, StoredCells):  # provenance but the evidence spans (the last), whose cell is stored
                fit = fits.get(row.names, _UNSEEN)
                if fit is _UNSEEN:
                    names = row.columns()
                    if not columns.keys() >= set(names):
                        grow(names)
                    if len(fits) >= KEEP_FITS:
                        fits.clear()
                    fit = fits[row.names] = _fit(columns, names)
                if fit is not None:  # then the stored cells in their place
                    before, after = fit
                    lines += (b",".join(cells(origin[:-1])), b",", row.evidence, b",", before, row.joined, after,
                              b"\r\n")
                else:  # its columns are not side by side in the header: its cells one by one
                    line = cells(origin[:-1])
                    line.append(row.evidence)
                    line.extend(map(row.by_column().get, columns, _EMPTY))
                    lines += (b",".join(line), b"\r\n")
            else:
                if not columns.keys() >= row.keys():
                    grow(row)
                line = cells(origin)
                line.extend(map(row.get, columns, _EMPTY))
                lines += (b",".join(line), b"\r\n")  # (no copy of the line to end it)
            written += 1
            if len(lines) >= 2 * WRITE_EVERY:
                offset += stream.write(b"".join(lines))
                lines.clear()
        stream.write(b"".join(lines))
        if explode is not None and columns and not exploded:
            raise UsageError(f"--explode {explode}: no approved record has a field {explode!r} (list fields: "
                             f"{', '.join(sorted(lists)) or 'none'}); nothing written")
        if short:
            _widen(stream, columns, Written(len(header), short, padded_until), spool)

    return write


KEEP_FITS = 4096
"""Column lists of stored cells whose place in the row ``_csv`` keeps (then it starts again)."""
_UNSEEN = (b"", b"")


def _fit(columns: dict[str, None], names: tuple[str, ...]) -> tuple[bytes, bytes] | None:
    """Where a record's stored cells go in a row of ``columns`` (all of ``names`` among them): the empty cells before
    and after them, when its columns are side by side in ``columns`` in their order, as the records of one contract
    are; else None."""
    if not names:
        return None
    order = list(columns)
    start = order.index(names[0])
    if tuple(order[start:start + len(names)]) != names:
        return None
    return b"," * start, b"," * (len(order) - start - len(names))


_EMPTY = itertools.repeat(b"")
"""The cell of a column a row lacks."""


def _header(columns: Iterable[str]) -> bytes:
    names = [f"record.{key}" if key in PROVENANCE_COLUMNS else key for key in columns]
    return _csv_line((*PROVENANCE_COLUMNS, *names))


@dataclass(frozen=True)
class Written:
    """Where a CSV's rows are in its stream: they begin at ``rows_at``; the first ``short`` of them, which end at
    ``short_until``, lack the columns that appeared after them."""

    rows_at: int
    short: int
    short_until: int


def _widen(stream: IO[bytes], columns: dict[str, None], written: Written, spool: Path | None) -> None:
    """The CSV in ``stream`` written again under the header of every column: its rows moved to a spool, the short
    ones read back with the csv module and padded with empty cells, the rest copied as bytes."""
    header = _header(columns)
    stream.flush()
    with tempfile.TemporaryFile("w+b", dir=spool, prefix=".export-", suffix=".spool") as spooled:
        stream.seek(written.rows_at)
        _copy_rest(stream, spooled)
        stream.seek(0)
        stream.truncate()
        stream.write(header)
        spooled.seek(0)
        _pad(spooled, written.short, len(PROVENANCE_COLUMNS) + len(columns), stream)
        spooled.seek(written.short_until - written.rows_at)
        _copy_rest(spooled, stream)


def _copy_rest(spooled: IO[bytes], stream: IO[bytes]) -> None:
    """The rest of ``spooled`` written to ``stream``: inside the kernel where both are files on one file system
    (``os.copy_file_range``: no pass through this process), else through a buffer."""
    copy = getattr(os, "copy_file_range", None)
    try:
        source, target = spooled.fileno(), stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        copy = None
    if copy is not None:
        stream.flush()
        offset = spooled.tell()
        try:
            while done := copy(source, target, 1 << 30, offset):
                offset += done
            return
        except OSError:  # not supported between these files: the rest from where the kernel stopped
            spooled.seek(offset)
    shutil.copyfileobj(spooled, stream, 1 << 20)


def _pad(spooled: IO[bytes], rows: int, width: int, stream: IO[bytes]) -> None:
    """The first ``rows`` rows of ``spooled``, each padded with empty cells to ``width``, written to ``stream``."""
    source = io.TextIOWrapper(spooled, encoding="utf-8", newline="")  # type: ignore[type-var]
    target = io.TextIOWrapper(stream, encoding="utf-8", newline="")  # type: ignore[type-var]
    writer = csv.writer(target)
    for row in itertools.islice(csv.reader(source), rows):
        writer.writerow(row + [""] * (width - len(row)))
    target.detach()
    source.detach()


def _csv_line(values: Iterable[Any]) -> bytes:
    """One row of cells (``cells``) as ``csv.writer`` writes it: CRLF at the end."""
    return b",".join(cells(values)) + b"\r\n"


class _Runs:
    """The runs of the records being exported, looked up a batch at a time and kept while they keep coming
    (records come in approval order, so a run's records come together): at most ``KEEP`` at once (each holds its
    configuration: 10,000 of them grew an export of a million document runs by 36 MB)."""

    KEEP = 256

    def __init__(self, run_log: Store | None) -> None:
        self.run_log = run_log
        self.known: dict[str, RunInfo | None] = {}

    def load(self, run_ids: Iterable[str]) -> None:
        batch = set(run_ids)
        wanted = batch - self.known.keys()
        if not wanted or self.run_log is None:
            return
        if len(self.known) + len(wanted) > self.KEEP:
            self.known.clear()  # the batch's runs that were kept are looked up again with the new ones
            wanted = batch
        from extractor.store import RunQuery

        found = {run.id: run for run in self.run_log.find_runs(RunQuery(ids=tuple(wanted)), counts=False)}
        self.known.update({run_id: found.get(run_id) for run_id in wanted})

    def get(self, run_id: str | None) -> RunInfo | None:
        return self.known.get(run_id) if run_id else None


@dataclass(frozen=True)
class Wanted:
    """Which approved records an export writes: of this contract (and version), approved at or after ``since``,
    and ``owner``'s (the contents that owner submitted, found through the run log: ``owned``)."""

    contract: str | None = None
    contract_version: int | None = None
    since: datetime | None = None
    owner: str | None = None


def owned(run_log: Store, owner: str, batch: list[StoredApproval]) -> list[StoredApproval]:
    """The approved records of ``batch`` that are ``owner``'s: a task of its batches ended in a document run of that
    content under that contract version (``extractor.store.tasks.owned_keys``, read for the batch's keys alone); the
    same content submitted by two owners is one record, and each of them exports it."""
    from extractor.store.tasks import owned_keys

    mine = owned_keys(run_log.engine, owner, ((r.document_sha256, r.contract, r.contract_version) for r in batch))
    return [r for r in batch if (r.document_sha256, r.contract, r.contract_version) in mine]


class Rows:
    """``(record as exported, provenance)`` of approved records, a batch at a time, with their runs and each run's
    (or, for a record whose run is not in the log, each contract version's) personal-data policy kept across
    batches. A record read without its JSON (its CSV cells stored, ``approved_batches(cells=True)``) is its
    ``StoredCells``; its JSON is read from ``records`` when its personal data is to be masked."""

    def __init__(self, run_log: Store | None, records: Store | None = None) -> None:
        self.runs = _Runs(run_log)
        self.records = records
        self.policies: dict[str | tuple[str, int], PersonalDataPolicy] = {}

    def of(self, batch: list[StoredApproval]) -> Iterator[Row]:
        self.runs.load(r.run_id for r in batch if r.run_id)
        if len(self.policies) > _Runs.KEEP:
            self.policies.clear()
        texts: dict[int, StoredApproval] | None = None
        for approved in batch:
            run = self.runs.get(approved.run_id)
            key = run.id if run is not None else (approved.contract, approved.contract_version)
            policy = self.policies.get(key)
            if policy is None:
                policy = self.policies[key] = personal_data_policy(approved, run)
            if approved.record_json is None:
                if policy is not PersonalDataPolicy.mask:
                    yield _kept(approved.record_cells), provenance(approved, run)
                    continue
                if texts is None:
                    from extractor.store.approved import with_texts

                    assert self.records is not None, "records read without their JSON need the store they came from"
                    texts = {read.id: read for read in with_texts(self.records, batch)}
                if approved.id not in texts:  # withdrawn since it was read
                    continue
                approved = texts[approved.id]
            if policy is PersonalDataPolicy.mask:
                record, masked = masked_record(approved, run, policy)
                yield record, provenance(approved, run, masked)
            else:
                yield RawJSON(_json_of(approved)), provenance(approved, run)


def _kept(payload: bytes | None) -> StoredCells:
    """The stored cells of a record the query found of this version (``approved_batches(cells=True)``)."""
    kept = read_cells(payload)
    assert kept is not None, "a record is read without its JSON only where its stored cells are of this version"
    return kept


def _rows(records: Store, run_log: Store | None, wanted: Wanted, progress: Callable[[int, int], None], *,
          cells: bool = False) -> Iterator[Row]:
    """``(record as exported, provenance)`` of every approved record ``wanted``, streamed (``cells``: with the CSV
    cells their approvals stored); ``progress`` is told how many were read and how many written after each batch."""
    from extractor.store.approved import approved_batches

    rows = Rows(run_log, records)
    read = written = 0
    for batch in approved_batches(records, contract=wanted.contract, contract_version=wanted.contract_version,
                                  since=wanted.since, cells=cells):
        read += len(batch)
        kept = batch
        if wanted.owner is not None:
            if run_log is None:
                raise ValueError("an owner's records are found through the run log: pass run_log")
            kept = owned(run_log, wanted.owner, batch)
        yield from rows.of(kept)
        written += len(kept)
        progress(read, written)


def export(records: Store, out: Path, fmt: str, *, wanted: Wanted = Wanted(), run_log: Store | None = None,
           explode: str | None = None, progress: Callable[[int, int], None] | None = None) -> ExportResult:
    """Write the approved records ``wanted`` to ``out`` atomically; returns how many were written (``explode``: CSV
    only, one row per item of that list field). ``progress`` is told (records read, records in all) as it goes."""
    from extractor.store.approved import count_approved

    if fmt not in FORMATS:
        raise ValueError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if explode is not None and fmt != "csv":
        raise ValueError("--explode FIELD needs --format csv")
    written = 0
    total = count_approved(records, wanted.contract, wanted.contract_version, wanted.since) if progress else 0

    def counted(read: int, kept: int) -> None:
        nonlocal written
        written = kept
        if progress is not None:
            progress(read, total)

    rows = _rows(records, run_log, wanted, counted, cells=fmt == "csv" and explode is None)
    if fmt == "jsonl":
        atomic_write(out, _jsonl(rows))
    else:
        atomic_write(out, _csv(rows, explode, spool=out.parent), binary=True)
    return ExportResult(out, fmt, written)
