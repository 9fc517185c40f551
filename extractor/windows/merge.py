"""The deterministic merge of windows' partial candidates into one candidate, driven by a ``MergeSpec``.

Windows are merged in source order and each item keeps its first window's version:

- list items that are one by an identity key of the spec become one item; paths that pointed at a window's
  item (evidence, coverage, missingFields) are rewritten to the merged item, and a path to an item the window
  does not have becomes ``window<N>:<path>`` so validation reports it instead of it landing on another item;
- ids are reconciled: a participant that two windows named under two ids is one, under the first id, and
  every reference to the second is rewritten; an id an earlier window gave to another item is renamed;
- sequences (``order_field``) are renumbered 1..n in source order (window order, then the window's order);
- a window's coverage entries for sentences another window owns (its context) are dropped; entries for
  sentence ids of no window stay, for validation to report;
- a ``missingFields`` question for a scalar that a window found is dropped;
- two different evidenced values for one scalar are never resolved silently: the first is kept and a
  ``MERGE_VALUE_CONFLICT`` finding, which needs a person, names both values and excerpts.

``origin`` remembers which window (and which of its local indices) every merged entry came from, so the
findings of the whole-document validation can be sent back to the windows that own them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from extractor.contracts.merge_spec import EVIDENCE_KEY, ListMerge, MergeSpec
from extractor.evidence import fieldpath
from extractor.evidence.fieldpath import Step, location
from extractor.evidence.report import Finding
from extractor.rules.merge import MERGE_VALUE_CONFLICT
from extractor.vocab import Severity

Locate = Callable[[str, int], int | None]
"""``locate(excerpt, window index)``: where the excerpt starts in the source within that window, or None."""


@dataclass(frozen=True)
class Partial:
    """One window's answer: its index, the sentence ids it owns, and its candidate (a schema-valid object)."""

    window: int
    own: frozenset[str]
    candidate: Mapping[str, Any]


@dataclass
class Merged:
    """The merged candidate, the merge's own findings, and where each merged entry came from."""

    candidate: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    origin: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per list (spec lists, evidence, missing, coverage): ``(window, local index)`` of each merged entry."""
    scalar_origin: dict[str, int] = field(default_factory=dict)
    dropped_context: int = 0
    """Coverage entries dropped because another window owns their sentence."""


def normalise(text: str) -> str:
    """NFC, case folded, whitespace collapsed: how names and rule texts are compared."""
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


@dataclass
class _Scalar:
    value: Any
    window: int
    excerpt: str | None  # its first evidence excerpt in its window, None when it had none


class _Merge:
    def __init__(self, spec: MergeSpec, partials: Sequence[Partial], locate: Locate) -> None:
        self.spec = spec
        self.partials = partials
        self.locate = locate
        self.lists: dict[str, list[dict[str, Any] | Any]] = {m.path: [] for m in spec.lists}
        self.keys: dict[str, dict[tuple[str, Any], int]] = {m.path: {} for m in spec.lists}
        self.item_origin: dict[str, list[tuple[int, int]]] = {m.path: [] for m in spec.lists}
        self.item_order: dict[str, list[tuple[int, Any, int]]] = {m.path: [] for m in spec.lists}
        self.id_window: dict[str, dict[str, int]] = {m.path: {} for m in spec.lists if m.id_field}
        # entries whose paths are rewritten once the sequences are renumbered: (steps or raw text) per slot
        self.evidence: list[tuple[int, int, tuple[Step, ...] | str, str]] = []
        self.evidence_seen: set[tuple[Any, str]] = set()
        self.missing: list[tuple[int, int, tuple[Step, ...] | str, dict[str, Any]]] = []
        self.missing_seen: set[Any] = set()
        self.coverage: list[tuple[int, int, dict[str, Any], list[tuple[Step, ...] | str]]] = []
        self.scalars: dict[str, _Scalar] = {}
        self.findings: list[Finding] = []
        owners = {sentence_id: partial.window for partial in partials for sentence_id in partial.own}
        self.owners = owners
        self.dropped_context = 0

    # -- one window -----------------------------------------------------------------------------------

    def add(self, partial: Partial) -> None:
        candidate, window = partial.candidate, partial.window
        evidence = candidate.get(self.spec.evidence) or []
        by_item: dict[tuple[str, int], list[str]] = {}
        for entry in evidence:
            steps = fieldpath.parse(str(entry.get("fieldPath", "")))
            if steps and len(steps) >= 2 and isinstance(steps[1], int):
                by_item.setdefault((str(steps[0]), steps[1]), []).append(str(entry.get("sourceExcerpt", "")))
        local: dict[str, dict[int, int]] = {}
        ids: dict[str, dict[str, str]] = {}
        added: dict[str, list[int]] = {}
        for spec in self.spec.lists:
            local[spec.path], ids[spec.path], added[spec.path] = {}, {}, []
            for index, item in enumerate(candidate.get(spec.path) or []):
                excerpts = by_item.get((spec.path, index), [])
                merged = self._identify(spec, window, item, excerpts)
                if merged is None:
                    merged = self._append(spec, window, index, item, excerpts)
                    added[spec.path].append(merged)
                local[spec.path][index] = merged
                if spec.id_field and isinstance(item, dict) and isinstance(item.get(spec.id_field), str):
                    target = self.lists[spec.path][merged]
                    ids[spec.path][item[spec.id_field]] = target[spec.id_field]  # type: ignore[index]
        for reference in self.spec.references:
            for merged in added.get(reference.path, []):
                item = self.lists[reference.path][merged]
                value = item.get(reference.field) if isinstance(item, dict) else None
                if isinstance(value, str) and value in ids.get(reference.target, {}):
                    item[reference.field] = ids[reference.target][value]  # type: ignore[index]
        self._scalars(window, candidate, evidence)
        rewrite = _Rewriter(window, local, {m.path for m in self.spec.lists})
        for index, entry in enumerate(evidence):
            path = rewrite(str(entry.get("fieldPath", "")))
            excerpt = str(entry.get("sourceExcerpt", ""))
            if (path, normalise(excerpt)) in self.evidence_seen:
                continue
            self.evidence_seen.add((path, normalise(excerpt)))
            self.evidence.append((window, index, path, excerpt))
        for index, entry in enumerate(candidate.get(self.spec.missing) or []):
            path = rewrite(str(entry.get("fieldPath", "")))
            if path in self.missing_seen:
                continue
            self.missing_seen.add(path)
            self.missing.append((window, index, path, dict(entry)))
        for index, entry in enumerate(candidate.get(self.spec.coverage) or []):
            owner = self.owners.get(str(entry.get("sentenceId")))
            if owner is not None and owner != window:
                self.dropped_context += 1
                continue
            self.coverage.append((window, index, dict(entry), [rewrite(str(p)) for p in entry.get("fieldPaths") or []]))

    def _identify(self, spec: ListMerge, window: int, item: Any, excerpts: list[str]) -> int | None:
        for key in self._keys(spec, window, item, excerpts):
            if key in self.keys[spec.path]:
                return self.keys[spec.path][key]
        return None

    def _keys(self, spec: ListMerge, window: int, item: Any, excerpts: list[str]) -> list[tuple[str, Any]]:
        keys: list[tuple[str, Any]] = []
        for key in spec.identity:
            if key == EVIDENCE_KEY:
                keys += [(key, start) for excerpt in excerpts if (start := self.locate(excerpt, window)) is not None]
            elif key == "~":
                if isinstance(item, str):
                    keys.append((key, normalise(item)))
            elif isinstance(item, dict) and isinstance(item.get(key.lstrip("~")), str):
                value = item[key.lstrip("~")]
                keys.append((key, normalise(value) if key.startswith("~") else value))
        return keys

    def _append(self, spec: ListMerge, window: int, index: int, item: Any, excerpts: list[str]) -> int:
        copy = dict(item) if isinstance(item, dict) else item
        if spec.id_field and isinstance(copy, dict) and isinstance(copy.get(spec.id_field), str):
            owners = self.id_window[spec.path]
            wanted = copy[spec.id_field]
            if owners.get(wanted, window) != window:  # an earlier window gave this id to another item
                suffix = 2
                while f"{wanted}-{suffix}" in owners:
                    suffix += 1
                copy[spec.id_field] = f"{wanted}-{suffix}"
            owners.setdefault(copy[spec.id_field], window)
        merged = len(self.lists[spec.path])
        self.lists[spec.path].append(copy)
        self.item_origin[spec.path].append((window, index))
        order = copy.get(spec.order_field) if spec.order_field and isinstance(copy, dict) else None
        self.item_order[spec.path].append((window, order if isinstance(order, int) else index, index))
        for key in self._keys(spec, window, item, excerpts):
            self.keys[spec.path].setdefault(key, merged)
        return merged

    def _scalars(self, window: int, candidate: Mapping[str, Any], evidence: list[dict[str, Any]]) -> None:
        for name in self.spec.scalars:
            value = candidate.get(name)
            if value is None:
                continue
            excerpt = next((str(e.get("sourceExcerpt", "")) for e in evidence
                            if (fieldpath.parse(str(e.get("fieldPath", ""))) or ())[:1] == (name,)), None)
            kept = self.scalars.get(name)
            if kept is None or (kept.excerpt is None and excerpt is not None):
                self.scalars[name] = _Scalar(value, window, excerpt)
            elif excerpt is not None and _same(kept.value) != _same(value):
                self.findings.append(Finding(
                    MERGE_VALUE_CONFLICT, Severity.WARNING, location(name),
                    f'window {kept.window} and window {window} give {name} different values: "{kept.value}" '
                    f'(from "{kept.excerpt}") and "{value}" (from "{excerpt}"); the first is kept, a person decides',
                    {"windows": [kept.window, window], "values": [kept.value, value],
                     "excerpts": [kept.excerpt, excerpt]}))

    # -- the whole ------------------------------------------------------------------------------------

    def result(self) -> Merged:
        order: dict[str, list[int]] = {}
        for spec in self.spec.lists:
            positions = sorted(range(len(self.lists[spec.path])), key=lambda i: self.item_order[spec.path][i])
            order[spec.path] = positions
            if spec.order_field:
                for number, position in enumerate(positions, start=1):
                    self.lists[spec.path][position][spec.order_field] = number  # type: ignore[index]
        renumber = {path: {old: new for new, old in enumerate(positions)} for path, positions in order.items()}

        def render(steps: tuple[Step, ...] | str) -> str:
            if isinstance(steps, str):
                return steps
            if len(steps) >= 2 and steps[0] in renumber and isinstance(steps[1], int):
                steps = (steps[0], renumber[str(steps[0])][steps[1]], *steps[2:])
            return fieldpath.render(steps)

        candidate: dict[str, Any] = {}
        origin: dict[str, list[tuple[int, int]]] = {}
        for spec in self.spec.lists:
            candidate[spec.path] = [self.lists[spec.path][i] for i in order[spec.path]]
            origin[spec.path] = [self.item_origin[spec.path][i] for i in order[spec.path]]
        for name in self.spec.scalars:
            candidate[name] = self.scalars[name].value if name in self.scalars else None
        present = {(name,) for name in self.scalars}
        missing = [(w, i, entry | {"fieldPath": render(steps)}) for w, i, steps, entry in self.missing
                   if steps not in present]
        candidate[self.spec.missing] = [entry for _, _, entry in missing]
        origin[self.spec.missing] = [(w, i) for w, i, _ in missing]
        candidate[self.spec.evidence] = [{"fieldPath": render(steps), "sourceExcerpt": excerpt}
                                         for _, _, steps, excerpt in self.evidence]
        origin[self.spec.evidence] = [(w, i) for w, i, _, _ in self.evidence]
        coverage = sorted(self.coverage, key=lambda c: _sentence_number(c[2].get("sentenceId")))
        candidate[self.spec.coverage] = [entry | ({"fieldPaths": [render(p) for p in paths]} if "fieldPaths" in entry
                                                  else {}) for _, _, entry, paths in coverage]
        origin[self.spec.coverage] = [(w, i) for w, i, _, _ in coverage]
        return Merged(candidate, self.findings, origin, {n: s.window for n, s in self.scalars.items()},
                      self.dropped_context)


class _Rewriter:
    """A window's field paths as steps of the merged candidate (list indices still before renumbering)."""

    def __init__(self, window: int, local: dict[str, dict[int, int]], lists: set[str]) -> None:
        self.window, self.local, self.lists = window, local, lists

    def __call__(self, raw: str) -> tuple[Step, ...] | str:
        steps = fieldpath.parse(raw)
        if steps is None:
            return raw  # not a path: validation reports it as written
        if len(steps) >= 2 and steps[0] in self.lists and isinstance(steps[1], int):
            merged = self.local[str(steps[0])].get(steps[1])
            if merged is None:
                return f"window{self.window}:{raw.strip()}"  # points at no item of its window
            return (steps[0], merged, *steps[2:])
        return steps


def _same(value: Any) -> Any:
    return normalise(value) if isinstance(value, str) else value


def _sentence_number(sentence_id: Any) -> tuple[int, str]:
    text = str(sentence_id)
    return (int(text[1:]), text) if text[:1] == "s" and text[1:].isdigit() else (1 << 62, text)


def merge(spec: MergeSpec, partials: Sequence[Partial], locate: Locate) -> Merged:
    """One candidate from the windows' partials (in window order); the same input always gives the same output.

    Keys of the candidate that the spec does not name are taken from the first window that has them.
    """
    work = _Merge(spec, sorted(partials, key=lambda p: p.window), locate)
    for partial in work.partials:
        work.add(partial)
    merged = work.result()
    named = {m.path for m in spec.lists} | set(spec.scalars) | {spec.evidence, spec.missing, spec.coverage}
    for partial in work.partials:
        for key, value in partial.candidate.items():
            if key not in named and key not in merged.candidate:
                merged.candidate[key] = value
    first = list(work.partials[0].candidate) if work.partials else []  # the contract's key order, as answered
    merged.candidate = {key: merged.candidate[key] for key in first if key in merged.candidate} | merged.candidate
    return merged
