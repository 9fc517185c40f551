"""Declarative checks: what a contract's ``checks.toml`` declares, turned into rules with cards.

Every ``[[check]]`` has a ``type``, a stable rule ``id`` and a ``severity``: ``error``, ``warning`` or
``review`` (a warning that sends the document to a person). Field paths use ``[]`` for "every item":
``processSteps[].actorId``. A declaration's shape is its model in ``extractor.configfile`` (``ReferenceCheck``,
``LookupCheck``, ...: checks.toml and the Python API share them); what needs the contract is checked here, each
problem a ``CheckError`` naming the key. Types:

- ``reference``: ``field`` must be one of the values at ``target`` (``participants[].id``);
- ``unique``: no two values at ``field`` are equal (``normalise = "casefold"``: NFC, case folded, whitespace
  collapsed); ``same_item = "id"`` lets a repeat with the same sibling value pass (it is one entity, named twice);
- ``sequence``: the numbers at ``field`` run ``start..n`` with no duplicate (rule ``<id>_DUPLICATE``) and no
  gap (``<id>_GAP``); ``follow_source = "review"`` (or ``true``, or another severity) adds ``<id>_INVERTED``: an item whose
  evidence lies wholly before the previous item's evidence;
- ``lookup``: the value must be in a catalogue (``catalogue`` + ``column``: a CSV or JSONL file in the contract
  folder; or ``database`` + ``query``); a miss names the nearest entries and how they differ;
- ``range``: a number, or an ISO date, within ``min``/``max`` (either may be left out);
- ``pattern``: the value must match (``matches``) or must not match (``forbids``) a regular expression
  (``re.search``; anchor with ``^...$`` for the whole value).

Null values are never checked here: whether a null needs a question is the generic rules' business.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import date
from heapq import heapify, heapreplace
from pathlib import Path
from typing import Any, Generic, TypeVar

from extractor.configfile import (
    Check,
    CheckBase,
    CheckSeverity,
    LookupCheck,
    PatternCheck,
    RangeCheck,
    ReferenceCheck,
    SequenceCheck,
    UniqueCheck,
)
from extractor.evidence import fieldpath
from extractor.evidence.fieldpath import Pattern, Step, location, parse_pattern
from extractor.rules import Card, Hit, Rule
from extractor.rules.generic import Context, variants
from extractor.rules.lookup import Catalogue, columns, database_url, load_file, load_query
from extractor.vocab import Severity

C = TypeVar("C", bound=CheckBase)


class CheckError(ValueError):
    """A declaration that cannot be checked with this contract; the message is one line a contract author can act
    on, about the declaration's ``key``."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Declared:
    """The rules one ``[[check]]`` declares, and what the contract's spec reads from it."""

    type: str
    rules: list[Rule[Context]]
    needs_person: frozenset[str] = frozenset()
    field: str = ""
    target: str | None = None
    identity: bool = False  # a unique check on raw values: the field identifies an item of its list
    files: tuple[Path, ...] = ()  # catalogue files: part of the contract's content hash


def pattern_nodes(schema: Mapping[str, Any], pattern: Pattern) -> list[Mapping[str, Any]] | None:
    """The schema node variants at ``pattern``, or ``None`` when the schema has no such path."""
    node: Mapping[str, Any] = schema
    for step in pattern:
        options, _ = variants(schema, node)
        if step is None:
            arrays = [o for o in options if o.get("type") == "array"]
            if not arrays:
                return None
            node = arrays[0].get("items", {})
        else:
            objects = [o for o in options if step in o.get("properties", {})]
            if not objects:
                return None
            node = objects[0]["properties"][step]
    return variants(schema, node)[0]


def values_at(candidate: Any, pattern: Pattern) -> Iterator[tuple[tuple[Step, ...], Any]]:
    """Every non-null value at ``pattern`` with its concrete path, in document order."""
    stack: list[tuple[tuple[Step, ...], Any, int]] = [((), candidate, 0)]
    found: list[tuple[tuple[Step, ...], Any]] = []
    while stack:
        path, node, depth = stack.pop()
        if depth == len(pattern):
            if node is not None:
                found.append((path, node))
            continue
        step = pattern[depth]
        if step is None and isinstance(node, list):
            stack.extend(((*path, index), item, depth + 1) for index, item in reversed(list(enumerate(node))))
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            stack.append(((*path, step), node[step], depth + 1))
    yield from found


def _show(pattern: str) -> str:
    return pattern.replace("[]", "[*]")


def _key(value: Any, normalise: str) -> Any:
    if normalise == "casefold" and isinstance(value, str):
        return " ".join(unicodedata.normalize("NFC", value).casefold().split())
    return value


@dataclass
class Build(Generic[C]):
    """What building a check needs: the contract, its full schema and folder, the declaration, and the rule ids
    taken so far (the rules every contract runs, the checks before this one)."""

    contract: str
    schema: Mapping[str, Any]
    folder: Path
    check: C
    known: set[str]

    def path(self, name: str) -> tuple[str, Pattern, list[Mapping[str, Any]]]:
        raw: str = getattr(self.check, name)
        pattern = parse_pattern(raw)
        assert pattern is not None, raw  # the declaration's model checked it is a path
        nodes = pattern_nodes(self.schema, pattern)
        if nodes is None:
            raise CheckError(name, f"{raw!r} names no field of schema.json")
        return raw, pattern, nodes

    @staticmethod
    def severity(value: CheckSeverity) -> tuple[Severity, bool]:
        return (Severity.ERROR if value == "error" else Severity.WARNING), value == "review"

    def rule_id(self, suffix: str = "") -> str:
        rule_id = self.check.id + suffix
        if rule_id in self.known:
            raise CheckError("id", f"rule id {rule_id} is taken (by a check before this one, or a rule every "
                             "contract runs)")
        self.known.add(rule_id)
        return rule_id

    def card(self, draft: Card, review: bool) -> Card:
        """``draft`` as this contract's card: the check's description before what fires it, and whether a person
        decides after a failure (``review``)."""
        described = self.check.description
        fires_when = f"{described} ({draft.fires_when})" if described else draft.fires_when
        return replace(draft, contract=self.contract, fires_when=fires_when,
                       judge_needed_after_failure="yes: severity review, a person decides" if review else "no")


def _reference(build: Build[ReferenceCheck]) -> Declared:
    raw, pattern, _ = build.path("field")
    target_raw, target, _ = build.path("target")
    rule_id = build.rule_id()
    severity, review = build.severity(build.check.severity)
    leaf = next((step for step in reversed(pattern) if step), raw)

    def check(ctx: Context) -> Iterator[Hit]:
        known = [value for _, value in values_at(ctx.candidate, target)]
        allowed = set(map(str, known))
        for steps, value in values_at(ctx.candidate, pattern):
            if str(value) not in allowed:
                shown = ", ".join(map(str, known)) or "none"
                yield Hit(location(*steps), f'{leaf} "{value}" is not one of {_show(target_raw)} (known: {shown}); '
                          "use an existing one or add it with its evidence")

    card = build.card(Card(rule_id, stage="references", severity=severity,
            fires_when=f"a value of {_show(raw)} is not one of {_show(target_raw)}",
            inputs=f"{_show(raw)}, {_show(target_raw)}",
            normalisation="none (values are compared exactly, as text)",
            passes=f"every {_show(raw)} equals some {_show(target_raw)}",
            location=f"$.{_show(raw)} of the unknown value"), review)
    return Declared("reference", [Rule(card, check)], frozenset({rule_id} if review else ()), raw, target_raw)


def _unique(build: Build[UniqueCheck]) -> Declared:
    raw, pattern, _ = build.path("field")
    rule_id = build.rule_id()
    severity, review = build.severity(build.check.severity)
    normalise, same_item = build.check.normalise, build.check.same_item
    if same_item is not None and (not pattern or pattern[-1] is None
                                  or pattern_nodes(build.schema, (*pattern[:-1], same_item)) is None):
        raise CheckError("same_item", f"{same_item!r} names no field next to {raw}")

    def check(ctx: Context) -> Iterator[Hit]:
        first: dict[Any, tuple[tuple[Step, ...], Any]] = {}
        for steps, value in values_at(ctx.candidate, pattern):
            key = _key(value, normalise)
            sibling = fieldpath.resolve(ctx.candidate, (*steps[:-1], same_item)) if same_item else None
            if key in first:
                earlier, earlier_sibling = first[key]
                if same_item is None or earlier_sibling != sibling:
                    also = f' (as "{earlier_sibling}", here "{sibling}")' if same_item else ""
                    yield Hit(location(*steps), f'"{value}" is already used by {fieldpath.render(earlier[:-1]) or "$"}'
                              f"{also}; each value of {_show(raw)} must be unique: merge or rename the repeat")
            else:
                first[key] = (steps, sibling)

    how = "NFC, case folded, whitespace collapsed" if normalise == "casefold" else "none (compared exactly)"
    card = build.card(Card(rule_id, stage="references", severity=severity,
            fires_when=f"two values of {_show(raw)} are equal" + (f" under different {same_item}" if same_item else ""),
            inputs=_show(raw),
            normalisation=how,
            passes=f"every value of {_show(raw)} is used once",
            location=f"$.{_show(raw)} of every repeat after the first"), review)
    return Declared("unique", [Rule(card, check)], frozenset({rule_id} if review else ()), raw,
                    identity=normalise == "none" and same_item is None)


def _first_consistent(spans: list[tuple[int, int]], previous: tuple[int, int] | None) -> tuple[int, int] | None:
    """Of an item's evidence spans, the earliest-starting one not wholly before ``previous`` (None: all are).

    Overlapping or containing the previous item's evidence is consistent (one sentence often states two
    steps); choosing the earliest start leaves the most room for the items after it.
    """
    allowed = [span for span in spans if previous is None or span[1] > previous[0]]
    return min(allowed, default=None)


Span = tuple[int, int]


def _placed(occurrences: list[list[Span]], sentence_of: Callable[[int], int]) -> list[Span]:
    """Where one item stands in the source: each of its excerpts at its occurrences in the tightest stretch of
    sentences that holds every one of them.

    ``occurrences``: per excerpt of the item, every place it is found. A short excerpt ("1", "0.5", a name)
    is found all over a document, and a table row quoted cell by cell is several such excerpts side by side;
    pooling every occurrence would let any item pass as in order. The stretch is the smallest window of
    sentences with an occurrence of each excerpt (its row, when a row is quoted cell by cell: an equal cell of
    the next row is further from the rest). Equally small windows (two identical rows) are all kept: any
    consistent one counts, so the check never guesses between them.
    """
    found = [sorted(spans) for spans in occurrences if spans]
    if len(found) <= 1:
        return found[0] if found else []
    at = [sorted({sentence_of(span[0]) for span in spans}) for spans in found]
    heap = [(positions[0], which, 0) for which, positions in enumerate(at)]
    heapify(heap)
    high = max(positions[0] for positions in at)
    windows: list[tuple[int, int]] = []
    while True:  # each position as the window's first sentence, with each excerpt's next occurrence from there
        low, which, index = heap[0]
        if not windows or high - low < windows[0][1] - windows[0][0]:
            windows = [(low, high)]
        elif high - low == windows[0][1] - windows[0][0]:
            windows.append((low, high))
        if index + 1 == len(at[which]):
            break
        heapreplace(heap, (at[which][index + 1], which, index + 1))
        high = max(high, at[which][index + 1])
    return sorted({span for spans in found for span in spans
                   if any(low <= sentence_of(span[0]) <= high for low, high in windows)})


def _sequence(build: Build[SequenceCheck]) -> Declared:
    raw, pattern, nodes = build.path("field")
    if not any(node.get("type") == "integer" for node in nodes) or len(pattern) < 2 or pattern[-2] is not None:
        raise CheckError("field", f"{raw!r} must be an integer field of list items (like steps[].order)")
    lists_at = pattern[:-2]
    start, follow = build.check.start, build.check.follow_source
    duplicate_id, gap_id = build.rule_id("_DUPLICATE"), build.rule_id("_GAP")
    shown = _show(raw)

    def duplicates(ctx: Context) -> Iterator[Hit]:
        first: dict[Any, tuple[Step, ...]] = {}
        for steps, value in values_at(ctx.candidate, pattern):
            if value in first:
                yield Hit(location(*steps), f"{steps[-1]} {value} is already used by {fieldpath.render(first[value][:-1])}")
            else:
                first[value] = steps

    key = pattern[-1]

    def gaps(ctx: Context) -> Iterator[Hit]:
        for list_steps, items in values_at(ctx.candidate, lists_at):
            numbers = sorted({item[key] for item in items if isinstance(item, dict) and isinstance(item.get(key), int)})
            expected = list(range(start, start + len(numbers)))
            if numbers != expected:
                missing = sorted(set(expected) - set(numbers))
                yield Hit(location(*list_steps), f"{pattern[-1]} values are {numbers}, expected {expected}"
                          + (f" (missing {missing})" if missing else ""))

    severity, _ = build.severity(build.check.severity)
    rules = [
        Rule(build.card(Card(duplicate_id, stage="order", severity=severity,
                fires_when=f"two items share a {shown} number",
                inputs=shown,
                normalisation="none",
                passes="every number is used once",
                location=f"$.{shown} of every repeat after the first"), False), duplicates),
        Rule(build.card(Card(gap_id, stage="order", severity=severity,
                fires_when=f"the distinct {shown} numbers are not exactly {start}..n",
                inputs=shown,
                normalisation=f"repeats counted once ({duplicate_id} reports them)",
                passes=f"sorted distinct numbers == [{start}, ..., n]",
                location="$.<the list>"), False), gaps),
    ]
    needs_person: set[str] = set()
    if follow is not False:
        inverted_severity, review = build.severity("review" if follow is True else follow)
        inverted_id = build.rule_id("_INVERTED")
        if review:
            needs_person.add(inverted_id)

        def inverted(ctx: Context) -> Iterator[Hit]:
            starts = [sentence.start for sentence in ctx.source.document.sentences]

            def sentence_of(offset: int) -> int:
                return bisect_right(starts, offset)

            for list_steps, items in values_at(ctx.candidate, lists_at):
                ordered = sorted((item.get(pattern[-1]), index) for index, item in enumerate(items)
                                 if isinstance(item, dict) and isinstance(item.get(pattern[-1]), int))
                depth = len(list_steps)
                excerpts: dict[Step, list[list[Span]]] = defaultdict(list)  # item index -> its excerpts' spans
                for entry in ctx.evidence:  # the excerpts at the item's own paths: the item and its fields, but
                    # not its number: where "2" is written says where a 2 is, not where the item renumbered 2 is
                    if entry.steps is not None and len(entry.steps) > depth and entry.steps[:depth] == list_steps \
                            and entry.steps[depth + 1:] != (key,):
                        excerpts[entry.steps[depth]].append(list(entry.spans))
                previous: tuple[Span, int] | None = None
                for number, index in ordered:
                    steps = (*list_steps, index)
                    spans = _placed(excerpts.get(index, []), sentence_of)
                    if not spans:
                        continue
                    chosen = _first_consistent(spans, previous[0] if previous else None)
                    if chosen is None and previous is not None:
                        yield Hit(location(*steps),
                                  f"{pattern[-1]} {number} is backed by source text at offset {spans[0][0]}, wholly "
                                  f"before the text of the item before it ({fieldpath.render((*list_steps, previous[1]))}"
                                  f" at offset {previous[0][0]})")
                    previous = (chosen or spans[0], index)

        rules.append(Rule(build.card(Card(
            inverted_id, stage="order", severity=inverted_severity,
            fires_when=f"an item's evidence lies wholly before the evidence of the item numbered before it ({shown})",
            inputs=f"{shown}, the evidence spans of each item",
            normalisation="evidence as for EVIDENCE_NOT_IN_SOURCE, of the item and its fields; of an excerpt found "
            "several times, the occurrences nearest the item's other excerpts (a table row quoted cell by cell stays "
            "one row); evidence that overlaps or contains the previous item's counts as in order",
            passes="following the numbers, each item has an evidence span ending after the previous item's chosen span "
            "starts",
            location="$.<list>[i] of the item that comes too early"), review), inverted))
    return Declared("sequence", rules, frozenset(needs_person), raw)


def _catalogue_source(build: Build[LookupCheck]) -> tuple[Callable[[], Catalogue], tuple[Path, ...], str]:
    file, column = build.check.catalogue, build.check.column
    if file is not None and column is not None:
        path = (build.folder / file).resolve()
        if not path.is_relative_to(build.folder.resolve()):
            raise CheckError("catalogue", f"{file!r} must be inside the contract folder")
        if not path.is_file():
            raise CheckError("catalogue", f"{file} does not exist in {build.folder}")
        try:
            names = columns(path)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise CheckError("catalogue", f"{file} cannot be read ({error})") from None
        if column not in names:
            raise CheckError("column", f"{file} has no column {column!r} (columns: {', '.join(names) or 'none'})")
        return (lambda: load_file(path, column)), (path,), f"{file} column {column}"
    database, query = build.check.database, build.check.query
    assert database is not None and query is not None  # the declaration's model: a catalogue or a query
    if not database_url(database):
        raise CheckError("database", f"{database!r} is empty (is the environment variable set?)")
    name = build.check.name or "the catalogue query"
    return (lambda: load_query(database_url(database), query, name)), (), f"{database}: {query}"


def _lookup(build: Build[LookupCheck]) -> Declared:
    raw, pattern, _ = build.path("field")
    rule_id = build.rule_id()
    severity, review = build.severity(build.check.severity)
    load, files, described = _catalogue_source(build)
    leaf = next((step for step in reversed(pattern) if step), raw)

    def check(ctx: Context) -> Iterator[Hit]:
        catalogue = load()
        for steps, value in values_at(ctx.candidate, pattern):
            text = str(value).strip()
            if text in catalogue:
                continue
            near = catalogue.nearest(text)
            message = f"{leaf} {text} is not in {catalogue.name}"
            if near:
                message += "; nearest " + ", ".join(f"{n.entry} ({n.difference})" for n in near)
            yield Hit(location(*steps), message, {"nearest": [{"entry": n.entry, "difference": n.difference}
                                                              for n in near]})

    card = build.card(Card(rule_id, stage="values", severity=severity,
            fires_when=f"a value of {_show(raw)} is not in the catalogue",
            inputs=f"{_show(raw)}, {described}",
            normalisation="surrounding whitespace stripped; otherwise exact",
            passes="the value is an entry of the catalogue",
            location=f"$.{_show(raw)} (message and hint: the nearest entries, one edit away, and how they differ)"),
        review)
    return Declared("lookup", [Rule(card, check)], frozenset({rule_id} if review else ()), raw, files=files)


def _bound(value: float | date | None, name: str, dated: bool) -> float | date | None:
    if dated and value is not None and not isinstance(value, date):
        raise CheckError(name, f"{value!r} is not an ISO date (YYYY-MM-DD): the field is a date")
    return value


def _range(build: Build[RangeCheck]) -> Declared:
    raw, pattern, nodes = build.path("field")
    rule_id = build.rule_id()
    severity, review = build.severity(build.check.severity)
    dated = any(node.get("format") == "date" for node in nodes) or isinstance(
        build.check.max if build.check.min is None else build.check.min, date)
    if not dated and not any(node.get("type") in ("integer", "number") for node in nodes):
        raise CheckError("field", f"{raw!r} is neither a number nor a date (format: date) in schema.json")
    low, high = _bound(build.check.min, "min", dated), _bound(build.check.max, "max", dated)
    corridor = f"[{'' if low is None else low}, {'' if high is None else high}]"

    def check(ctx: Context) -> Iterator[Hit]:
        for steps, value in values_at(ctx.candidate, pattern):
            if dated:
                try:
                    number: Any = date.fromisoformat(str(value))
                except ValueError:
                    yield Hit(location(*steps), f'{fieldpath.render(steps)} "{value}" is not a date (YYYY-MM-DD)')
                    continue
            elif isinstance(value, bool) or not isinstance(value, int | float):
                continue  # the schema says what type it is; a range only reads numbers
            else:
                number = value
            if (low is not None and number < low) or (high is not None and number > high):
                yield Hit(location(*steps), f"{fieldpath.render(steps)} is {value}, outside {corridor}; check the "
                          "source (a misread digit or unit?) or leave it to a person")

    card = build.card(Card(rule_id, stage="values", severity=severity,
            fires_when=f"a value of {_show(raw)} lies outside {corridor}",
            inputs=_show(raw),
            normalisation="dates read as ISO YYYY-MM-DD" if dated else "none",
            passes=f"min <= value <= max {corridor}",
            location=f"$.{_show(raw)}"), review)
    return Declared("range", [Rule(card, check)], frozenset({rule_id} if review else ()), raw)


def _regex(build: Build[PatternCheck]) -> Declared:
    raw, pattern, _ = build.path("field")
    rule_id = build.rule_id()
    severity, review = build.severity(build.check.severity)
    must_match = build.check.matches is not None
    expression = build.check.matches or build.check.forbids or ""
    compiled = re.compile(expression)  # the declaration's model checked it compiles

    def check(ctx: Context) -> Iterator[Hit]:
        for steps, value in values_at(ctx.candidate, pattern):
            if bool(compiled.search(str(value))) != must_match:
                verb = "does not match" if must_match else "matches the forbidden"
                yield Hit(location(*steps), f'{fieldpath.render(steps)} "{value}" {verb} pattern {expression}')

    card = build.card(Card(rule_id, stage="values", severity=severity,
            fires_when=f"a value of {_show(raw)} {'does not match' if must_match else 'matches'} {expression}",
            inputs=_show(raw),
            normalisation="none (re.search on the value as text)",
            passes=f"the value {'matches' if must_match else 'does not match'} {expression}",
            location=f"$.{_show(raw)}"), review)
    return Declared("pattern", [Rule(card, check)], frozenset({rule_id} if review else ()), raw)


TYPES: dict[str, Callable[[Build[Any]], Declared]] = {
    "reference": _reference, "unique": _unique, "sequence": _sequence, "lookup": _lookup, "range": _range,
    "pattern": _regex,
}


def build(contract: str, schema: Mapping[str, Any], folder: Path, check: Check, known: set[str]) -> Declared:
    """One declared check (its shape already checked by its model) as rules; ``CheckError`` says in one line why it
    cannot be with this contract (a path the schema lacks, a missing catalogue, a rule id in ``known``)."""
    return TYPES[check.type](Build(contract, schema, folder, check, known))
