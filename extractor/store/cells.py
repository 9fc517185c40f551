"""The CSV cells of values as export writes them, and the cells an approval stores with its record.

A cell is what ``csv.writer`` writes (Excel dialect: a cell with a comma, quote or line break is quoted, its quotes
doubled), as UTF-8 (a lone surrogate, which UTF-8 cannot hold, as its ``\\udXXXX`` escape). Text a spreadsheet would
run as a formula gets a leading apostrophe (OWASP), so a document that says ``=HYPERLINK(...)`` is shown, never run.

The cells live in the store because an approval writes its record's cells beside the record
(``approved_records.record_cells``, made by ``record_cells``): a CSV export then writes a record's row from them
without reading its JSON, which is most of what a CSV row costs (docs/runs.md#the-run-log-at-a-million-document-runs).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import msgspec

from extractor.errors import StoreError
from extractor.store.db import compact_json


class RawJSON:
    """JSON text as the database stores it (``text``), written into the export as it is: most records leave the
    database and reach the file without ever being decoded (no Python objects per value, the costly part). It holds
    the text rather than being a ``str``: a string subclass copies the record's text when made."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet may run as a formula when a cell starts with it (OWASP, CSV injection)."""
_FORMULA_FIRST = frozenset(FORMULA_STARTS)
"""``FORMULA_STARTS``, each one character: a cell's first character looked up, rather than each start tried."""
_FORMULA_BYTES = frozenset(start.encode() for start in FORMULA_STARTS)


def neutralised(text: str) -> str:
    """``text`` with a leading apostrophe when a spreadsheet would run it as a formula."""
    return "'" + text if text[:1] in _FORMULA_FIRST else text


def cells(values: Any) -> list[bytes]:
    """Each value as its cell, built from bytes operations: the csv module scans a cell character by character,
    about ten times slower on the long JSON cells of a record (tests compare the two). Nested values are JSON text
    as ``compact_json`` writes it, None an empty cell, booleans ``true``/``false``."""
    made: list[bytes] = []
    add = made.append
    for value in values:
        kind = value.__class__  # the common kinds first, by class: a row has dozens of cells
        if kind is str:
            cell = _SHORT_CELLS.get(value)
            if cell is None:
                cell = text_cell(neutralised(value))
                if len(value) <= SHORT_TEXT:
                    if len(_SHORT_CELLS) >= KEEP_SHORT_CELLS:
                        _SHORT_CELLS.clear()
                    _SHORT_CELLS[value] = cell
            add(cell)
        elif value is None:
            add(b"")
        elif kind is list or kind is dict:
            add(json_cell(json_bytes(value)) if value else b"[]" if kind is list else b"{}")
        elif kind is RawJSON:  # a provenance value as stored (evidence spans, block override)
            add(raw_json_cell(value.text))
        elif kind is int:  # a version or an attempt number: its digits, never quoted
            add(b"%d" % value)
        elif kind is bool:
            add(b"true" if value else b"false")
        else:
            add(text_cell(_text(value)))
    return made


SHORT_TEXT = 64
KEEP_SHORT_CELLS = 1024
_SHORT_CELLS: dict[str, bytes] = {}
"""The cells of short texts ``cells`` met (at most ``KEEP_SHORT_CELLS``, then it starts again): a run's contract,
model, prompt and validator version, reviewer and run id repeat over thousands of records' provenance, and a text's
cell is looked up in a fraction of the time it takes to make."""


def text_cell(text: str) -> bytes:
    """The cell of a text, formula apostrophe already added: quoted when it has a comma, quote or line break."""
    if '"' in text:
        return b'"' + text.encode("utf-8", "backslashreplace").replace(b'"', b'""') + b'"'
    if "," in text or "\n" in text or "\r" in text:
        return b'"' + text.encode("utf-8", "backslashreplace") + b'"'
    return text.encode("utf-8", "backslashreplace")


def json_cell(data: bytes) -> bytes:
    """The cell of JSON text (never a formula: it starts with [ or {, and it has no line break)."""
    quoted = data.replace(b'"', b'""')
    if len(quoted) != len(data) or data.find(b",") >= 0:
        return b'"' + quoted + b'"'
    return data


def raw_json_cell(text: str) -> bytes:
    """The cell of JSON text as stored: a list or an object as ``json_cell`` writes it, anything else as text."""
    if text.startswith(("[", "{")):
        return json_cell(text.encode("utf-8", "backslashreplace"))
    return text_cell(neutralised(text))


def json_bytes(value: list[Any] | dict[str, Any]) -> bytes:
    """``compact_json(value)`` as UTF-8. A list of strings (the approvers of every record) msgspec writes as the
    standard library does, character for character (tests compare them), ten times faster; it refuses a lone
    surrogate, whose escape ``compact_json`` writes."""
    strings = value.__class__ is list and all(item.__class__ is str for item in value)
    try:
        return _ENCODE(value) if strings else compact_json(value).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which msgspec refuses
        return compact_json(value).encode("utf-8")


_ENCODE = msgspec.json.Encoder().encode


def _text(value: Any) -> str:
    """The text of a cell of a value ``cells`` meets less often."""
    if isinstance(value, str):
        return neutralised(value)
    if isinstance(value, dict | list):
        return compact_json(value)
    return repr(value) if isinstance(value, float) else str(value)


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted columns (``supplier.name``); lists and scalars stay as they are."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if value.__class__ is dict and value or isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[prefix + key if prefix else key] = value
    return flat


_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
"""Reads a record's top-level keys and leaves each value as the JSON text it is in the record (no Python objects)."""


def stored_cells(text: str) -> dict[str, bytes] | None:
    """The cells of a record's columns cut from its JSON as stored, without decoding it (the costly part): a list's
    cell is its JSON text, a number's or boolean's its text, a string without escapes its UTF-8 bytes. The run log
    stores a record as ``compact_json`` writes it, which writes each value of an object as it would write that value
    alone, so a list's text is what ``compact_json`` writes of it. A nested object is decoded and flattened
    (``flatten``), and so is a string with escapes; ``None`` for a record msgspec refuses (NaN, a lone surrogate's
    escape), that is not an object, or whose JSON has spaces (``_compact``): the record decoded gives those."""
    try:
        values = _TOP_LEVEL.decode(text)
    except (msgspec.DecodeError, UnicodeEncodeError):
        return None
    if values and not _compact(text, next(iter(values))):
        return None
    found: dict[str, bytes] = {}
    for key, raw in values.items():
        data = bytes(raw)
        first = data[:1]
        if first == b"[":
            found[key] = json_cell(data)
        elif first == b'"' and data.find(b"\\") < 0:  # a string as it is: no quote, line break or tab inside
            data = data[1:-1]
            data = b"'" + data if data[:1] in _FORMULA_BYTES else data
            found[key] = b'"' + data + b'"' if data.find(b",") >= 0 else data
        elif first == b"{" and data != b"{}":
            nested = flatten(json.loads(data), f"{key}.")
            found.update(zip(nested, cells(nested.values())))
        elif first in _NUMBER_STARTS:  # a number, true or false: its text
            found[key] = data
        elif data == b"null":
            found[key] = b""
        else:  # a string with escapes, or {}
            found[key] = cells((json.loads(data),))[0]
    return found


def _compact(text: str, first: str) -> bool:
    """Whether a record's text is compact JSON (no space after a colon or comma), judged by its first key and value:
    a record is written by one call of one serializer (``compact_json`` since the run log stored less; ``json.dumps``
    with its spaces before), so the rest is written as they are. A key written with escapes is not judged: ``False``.
    """
    start = f'{{"{first}":'
    return text.startswith(start) and text[len(start):len(start) + 1] not in _SPACES


_SPACES = frozenset(" \t\r\n")
_NUMBER_STARTS = frozenset(bytes([byte]) for byte in b"-0123456789tf")


CELLS_VERSION = 1
"""The form of ``record_cells``: stored cells of another version are not used (export makes them from the record),
so a change to how a cell is written, or to this form, raises it."""
CURRENT = b"%d\n" % CELLS_VERSION
"""How stored cells of this version begin (what a query tells them by: ``extractor.store.approved``)."""


class StoredCells(NamedTuple):
    """A record's cells as its approval stored them: its columns (``names``: their JSON list, as stored, a key for
    where they go in a row), each cell's length (``lengths``, a JSON list), the cell of its evidence spans, and its
    columns' cells joined by commas."""

    names: bytes
    lengths: bytes
    evidence: bytes
    joined: bytes

    def columns(self) -> tuple[str, ...]:
        return tuple(msgspec.json.decode(self.names, type=list[str]))

    def by_column(self) -> dict[str, bytes]:
        """Each column's cell: ``joined`` cut at the stored lengths."""
        found: dict[str, bytes] = {}
        start = 0
        for name, length in zip(self.columns(), msgspec.json.decode(self.lengths, type=list[int]), strict=True):
            found[name] = self.joined[start:start + length]
            start += length + 1
        return found


def record_cells(record_json: str, evidence_json: str | None) -> bytes | None:
    """What an approval stores with its record (``approved_records.record_cells``), from the record's and the
    evidence spans' JSON as stored: the version, the columns, their cells' lengths, the evidence cell and the
    columns' cells, a line each (only the last may hold line breaks: JSON text has none). UTF-8, as every cell is.
    None for a record without columns, one whose cells are not cut from its text (``stored_cells``) or hold NUL:
    export makes those from the record."""
    found = stored_cells(record_json)
    if not found:
        return None
    evidence = b"" if evidence_json is None else raw_json_cell(evidence_json)
    payload = CURRENT + b"\n".join((_ENCODE(list(found)), _ENCODE([len(cell) for cell in found.values()]), evidence,
                                    b",".join(found.values())))
    return None if b"\x00" in payload else payload  # (PostgreSQL's text, which keeps them, holds no NUL)


def read_cells(payload: bytes | None) -> StoredCells | None:
    """``record_cells``'s payload read back; None when there is none or it is of another version."""
    if payload is None or not payload.startswith(CURRENT):
        return None
    parts = payload[len(CURRENT):].split(b"\n", 3)
    if len(parts) != 4:
        raise StoreError("the stored CSV cells of an approved record are damaged (`extract doctor --full` names it)")
    return StoredCells(*parts)
