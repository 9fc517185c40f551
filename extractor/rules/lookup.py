"""Reference data for the ``lookup`` check: a catalogue of allowed values and its near-miss search.

The wrong-SKU incident (docs/design.md#rules): a value that is almost a catalogue entry is the dangerous kind, so a
miss names the nearest entries and how they differ ("483902: last two digits swapped"). Kinds of
difference, each one edit away, closest first: two neighbouring characters swapped, one character changed,
one character missing, one extra, or the same code behind a different prefix (``SKU-483920`` /
``483920``). The hint lists the closest kinds first and keeps a few: a swap is the likeliest slip and the
one a reviewer misses (every digit is there), so ``483902`` against ``483900, 483901, 483903, 483920``
names ``483920`` first, not three one-digit changes that happen to sort before it.

Speed: membership is a set lookup. The near-miss search generates the value's one-edit variants and
asks the set about all of them at once (``set.intersection`` runs in C); substituted and inserted
characters come only from the characters the catalogue has at that position among entries of that
length (a character never seen there cannot make an entry), so a 1,000,000-entry catalogue of 8-digit
codes answers in microseconds. The per-position alphabets and the prefix index are built on the first
miss, not at load. Catalogues are loaded once per process and file state (``load``), so a run reads
each file once however many documents it checks.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from pathlib import Path

_SEPARATOR = re.compile(r"[-_/.: ]")
_TRAILING_DIGITS = re.compile(r"\d{4,}$")


@dataclass(frozen=True)
class NearMiss:
    entry: str
    difference: str


class Kind(IntEnum):
    """The kinds of near miss, closest first: the order a hint lists them in."""

    SWAPPED = 0
    CHANGED = 1
    MISSING = 2
    EXTRA = 3
    PREFIX = 4


def _unit(a: str, b: str) -> str:
    return "digits" if (a + b).isdigit() else "characters"


def _core(value: str) -> str | None:
    """The code behind a prefix: a trailing run of 4+ digits, else the part after the last separator."""
    match = _TRAILING_DIGITS.search(value)
    if match and match.start() > 0:
        return match.group()
    parts = _SEPARATOR.split(value)
    return parts[-1] if len(parts) > 1 and parts[-1] else None


class Catalogue:
    """A set of allowed values with a near-miss search; ``name`` is how messages refer to it."""

    def __init__(self, values: Iterable[str], name: str) -> None:
        self.name = name
        self.values = frozenset(values)

    def __contains__(self, value: str) -> bool:
        return value in self.values

    def __len__(self) -> int:
        return len(self.values)

    @cached_property
    def _alphabets(self) -> dict[int, list[str]]:
        """Per length: for each position, the characters entries of that length have there (as one string)."""
        alphabets: dict[int, list[str]] = {}
        lengths = set(map(len, self.values))
        for length in lengths:
            group = self.values if len(lengths) == 1 else [value for value in self.values if len(value) == length]
            joined = "".join(group)  # position i of every entry is joined[i::length]: sliced in C, not looped
            alphabets[length] = ["".join(sorted(set(joined[i::length]))) for i in range(length)]
        return alphabets

    @cached_property
    def _by_core(self) -> dict[str, list[str]]:
        """Entries by the code behind their prefix (only entries that have a prefix)."""
        index: dict[str, list[str]] = defaultdict(list)
        for value in self.values:
            if value.isdigit():  # a plain number has no prefix
                continue
            core = _core(value)
            if core is not None:
                index[core].append(value)
        return index

    def nearest(self, value: str, limit: int = 3) -> list[NearMiss]:
        """Entries one edit away from ``value`` (or with its code behind another prefix), closest kinds first
        (``Kind``), then alphabetically; at most ``limit``."""
        found: dict[str, tuple[Kind, str]] = {}  # entry -> (its kind, how it differs)
        n = len(value)
        alphabets = self._alphabets
        swapped = [value[:i] + value[i + 1] + value[i] + value[i + 2:] for i in range(n - 1) if value[i] != value[i + 1]]
        for entry in self.values.intersection(swapped):
            i = next(k for k in range(n) if entry[k] != value[k])
            unit = _unit(value[i], value[i + 1])
            where = "last two" if i == n - 2 else ("first two" if i == 0 else f"{unit[:-1]}s {i + 1} and {i + 2}")
            found.setdefault(entry, (Kind.SWAPPED, f"{where} {unit} swapped" if i in (0, n - 2) else f"{where} swapped"))
        same = alphabets.get(n)
        if same is not None:
            # one list of every one-character change, asked about in one C-level intersection
            changed = [head + c + tail for i in range(n) for head, tail in ((value[:i], value[i + 1:]),) for c in same[i]]
            for entry in self.values.intersection(changed).difference((value,)):
                i = next(k for k in range(n) if entry[k] != value[k])
                found.setdefault(entry, (Kind.CHANGED, f"{_unit(value[i], entry[i])[:-1]} {i + 1} changed "
                                                  f"({value[i]} -> {entry[i]})"))
        longer = alphabets.get(n + 1)
        if longer is not None:
            added = {value[:i] + c + value[i:]: i for i in range(n + 1) for c in longer[i]}
            for entry in self.values.intersection(added):
                found.setdefault(entry, (Kind.MISSING, f"one character missing ({entry[added[entry]]!r} at position "
                                                  f"{added[entry] + 1})"))
        shorter = alphabets.get(n - 1)
        if shorter is not None:
            dropped = {value[:i] + value[i + 1:]: i for i in range(n)}
            for entry in self.values.intersection(dropped):
                found.setdefault(entry, (Kind.EXTRA, f"one extra character ({value[dropped[entry]]!r} at position "
                                                f"{dropped[entry] + 1})"))
        if len(found) < limit and (self._by_core or not value.isdigit()):
            core = _core(value) or value
            for entry in self._by_core.get(core, ()):
                if entry != value:
                    found.setdefault(entry, (Kind.PREFIX, "same code, different prefix"))
            if core != value and core in self.values:
                found.setdefault(core, (Kind.PREFIX, "same code without the prefix"))
        closest = sorted(found.items(), key=lambda item: (item[1][0], item[0]))[:limit]
        return [NearMiss(entry, difference) for entry, (_, difference) in closest]


_LOADED: dict[tuple[str, ...], Catalogue] = {}


def file_state(path: Path) -> str:
    """What identifies a file's current content cheaply (its catalogue is reloaded when this changes)."""
    stat = path.stat()
    return f"{stat.st_mtime_ns}:{stat.st_size}"


def columns(path: Path) -> list[str]:
    """The column names of a CSV file (its header) or of a JSONL file (the keys of its first record)."""
    with path.open(encoding="utf-8-sig", newline="") as stream:
        if path.suffix.lower() == ".jsonl":
            first = next((line for line in stream if line.strip()), "{}")
            record = json.loads(first)
            return list(record) if isinstance(record, dict) else []
        return next(csv.reader(stream), [])


def load_file(path: Path, column: str) -> Catalogue:
    """A CSV or JSONL column as a catalogue, read once per process and file state."""
    key = ("file", str(path.resolve()), column, file_state(path))
    if key not in _LOADED:
        with path.open(encoding="utf-8-sig", newline="") as stream:
            if path.suffix.lower() == ".jsonl":
                values = [str(json.loads(line)[column]).strip() for line in stream if line.strip()]
            else:
                reader = csv.reader(stream)
                position = next(reader).index(column)
                values = [row[position].strip() for row in reader if len(row) > position]
        _LOADED[key] = Catalogue((value for value in values if value), path.name)
    return _LOADED[key]


def load_query(url: str, query: str, name: str) -> Catalogue:
    """The first column of a SQL query's rows as a catalogue, read once per process."""
    key = ("sql", url, query)
    if key not in _LOADED:
        from sqlalchemy import create_engine, text

        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                values = [str(row[0]).strip() for row in connection.execute(text(query)) if row[0] is not None]
        finally:
            engine.dispose()
        _LOADED[key] = Catalogue(values, name)
    return _LOADED[key]


def database_url(value: str) -> str:
    """A database setting: ``env:NAME`` reads the URL from the environment (keeps secrets out of files)."""
    if value.startswith("env:"):
        return os.environ.get(value[4:], "")
    return value
