"""One document's candidate against its gold record: list items aligned, then every value counted.

Field paths are named with ``[]`` for list items (``processSteps[].actorId``). A list's items are aligned
before they are compared (docs/design.md#evaluation):

1. by the contract's identity keys (its ``unique`` checks, as the merge spec reads them: ``"~name"``
   compared normalised with case folded, ``"name"`` exactly, ``"~"`` a plain item's own text, normalised with
   case folded), one to one, in order;
2. the items left over by an optimal assignment on value similarity (``scipy.optimize.linear_sum_assignment``),
   keeping pairs at least ``MIN_SIMILARITY`` alike: a line item whose SKU the model got wrong is one item with
   one wrong field, not one missing item and one invented item.

An id that other fields refer to (``participants[].id``, the target of a ``reference`` check) is a label the
model chooses, so it is not scored; a reference (``processSteps[].actorId``) is right when it points at the
candidate item aligned with the gold item the gold reference points at.

Per field path the counts are ``COLUMNS``: gold values, candidate values, values right exactly and normalised
(``extractor.evaluation.values``; case folded only for a field a ``unique`` check compares without case, or in a
contract whose evidence normalisation folds case), false values (a value where gold is null or has no item: the costly error),
misses (null or absent where gold has a value), misses the candidate asked a question about (NEEDS_INPUT), and
nulls gold agrees with that carry a question. Precision is right / candidate values, recall right / gold values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from extractor.contracts import Contract, inline_refs
from extractor.contracts.envelope import ENVELOPE
from extractor.contracts.merge_spec import EVIDENCE_KEY
from extractor.evaluation.values import exact, normalised, text_key
from extractor.evidence import fieldpath
from extractor.rules.generic import variants

MIN_SIMILARITY = 0.5
"""Items left over after the identity keys are paired only this alike (mean per-field similarity, 0..1)."""

COLUMNS = ("gold", "candidate", "exact", "normalised", "false_values", "misses", "asked_misses", "asked_correct")
GOLD, CANDIDATE, EXACT, NORMALISED, FALSE_VALUES, MISSES, ASKED_MISSES, ASKED_CORRECT = range(len(COLUMNS))
EVIDENCE_COLUMNS = ("gold", "checked", "overlap")
"""Per evidence unit: gold values with located gold evidence; of those, aligned candidate values that cite
evidence; and of those, the ones whose evidence shares a sentence with gold's."""

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class ListKeys:
    identity: tuple[str, ...]
    id_field: str | None = None


@dataclass
class DocumentScore:
    """The counts of one document: per field path (``COLUMNS``) and per evidence unit (``EVIDENCE_COLUMNS``)."""

    fields: dict[str, list[int]] = field(default_factory=dict)
    evidence: dict[str, list[int]] = field(default_factory=dict)

    @property
    def fully_right(self) -> bool:
        """Every gold value right (normalised) and no value gold does not have."""
        return all(row[NORMALISED] == row[GOLD] == row[CANDIDATE] for row in self.fields.values())

    def row(self, label: str) -> list[int]:
        found = self.fields.get(label)
        if found is None:
            found = self.fields[label] = [0] * len(COLUMNS)
        return found


class Alignment:
    """Which candidate item is which gold item, per list (by concrete path), and ids through it."""

    def __init__(self) -> None:
        self.to_gold: dict[tuple[str, Path], dict[int, int]] = {}


class Scorer:
    """Scores candidates of one contract against gold records; build once per contract, call ``score`` per document."""

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        schema = inline_refs(contract.schema)
        self.schema = schema
        self.casefold_all = "casefold" in str(contract.settings.get("evidence_normalisation", ""))
        self.lists: dict[str, ListKeys] = {}
        self.references: dict[str, str] = {}  # "<list>[].<field>" -> target list label
        self.casefold: set[str] = set()
        merge = contract.merge
        self.order: tuple[str, ...] = ()
        if merge is not None:
            for spec in merge.lists:
                label = f"{spec.path}[]"
                self.lists[label] = ListKeys(tuple(key for key in spec.identity if key != EVIDENCE_KEY), spec.id_field)
                # a field a `unique` check compares without case ("~name"); a bare "~" is the merge's own way of
                # telling plain items apart (no check declared it), so their values keep their case
                self.casefold.update(f"{label}.{key[1:]}" for key in spec.identity if key.startswith("~") and key != "~")
            self.references = {f"{ref.path}[].{ref.field}": f"{ref.target}[]" for ref in merge.references}
            self.order = tuple(f"{spec.path}[]" for spec in merge.lists)
        self.id_labels = frozenset(f"{label}.{keys.id_field}" for label, keys in self.lists.items() if keys.id_field)
        """Ids other fields refer to: labels the model chooses, compared only through references."""
        self._shapes: dict[int, tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = {}

    def shape(self, node: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        """A schema node's object option and array option (None where it has none), read once per node."""
        found = self._shapes.get(id(node))
        if found is None:
            options, _ = variants(self.schema, node)
            found = (next((o for o in options if o.get("type") == "object"), None),
                     next((o for o in options if o.get("type") == "array"), None))
            self._shapes[id(node)] = found
        return found

    # -- public -------------------------------------------------------------------------------------------------

    def score(self, gold: Mapping[str, Any], candidate: Mapping[str, Any] | None,
              gold_evidence: Iterable[tuple[str, Iterable[str]]] = (),
              candidate_evidence: Iterable[tuple[str, Iterable[str]]] = ()) -> DocumentScore:
        """Counts for one document. ``candidate`` None: no final candidate (every gold value is a miss).
        Evidence entries are ``(fieldPath, sentence ids)``, gold's in gold indices, the candidate's in its own."""
        result = DocumentScore()
        state = _Walk(self, result, candidate)
        for label in self.order:  # targets of references first: a reference is compared through them
            path = label[:-2]
            state.align(label, (path,), self._items_schema(path), _list(gold.get(path)),
                        _list(candidate.get(path)) if candidate is not None else [])
        state.node(self.schema, gold, candidate, "", (), top=True)
        self._evidence(result, state.alignment, gold_evidence, candidate_evidence)
        return result

    def changed_fields(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
        """The field paths whose values a person changed (``after`` is the approved record, ``before`` the
        model's candidate), compared exactly after alignment: what ``extract stats --corrections`` counts."""
        counts = self.score(after, before).fields
        return sorted(label for label, row in counts.items()
                      if row[EXACT] != row[GOLD] or row[EXACT] != row[CANDIDATE])

    # -- helpers ----------------------------------------------------------------------------------------------

    def _items_schema(self, path: str) -> Mapping[str, Any]:
        options, _ = variants(self.schema, self.schema.get("properties", {}).get(path, {}))
        array = next((o for o in options if o.get("type") == "array"), {})
        return array.get("items", {})

    def casefolds(self, label: str) -> bool:
        return self.casefold_all or label in self.casefold

    def _evidence(self, result: DocumentScore, alignment: Alignment, gold_evidence: Iterable[tuple[str, Iterable[str]]],
                  candidate_evidence: Iterable[tuple[str, Iterable[str]]]) -> None:
        gold_units: dict[tuple[str, int | None], set[str]] = {}
        for path, sentences in gold_evidence:
            unit = _unit(path)
            if unit is not None:
                gold_units.setdefault(unit, set()).update(sentences)
        cited: dict[tuple[str, int | None], set[str]] = {}
        for path, sentences in candidate_evidence:
            unit = _unit(path)
            if unit is None:
                continue
            label, index = unit
            if index is not None:
                mapped = alignment.to_gold.get((label, (label[:-2],)), {}).get(index)
                if mapped is None:
                    continue  # evidence of an item gold does not have: its value is a false value already
                unit = (label, mapped)
            cited.setdefault(unit, set()).update(sentences)
        for unit, sentences in gold_units.items():
            if not sentences:
                continue  # gold's excerpt was not found in the source: nothing to compare with
            row = result.evidence.setdefault(unit[0], [0] * len(EVIDENCE_COLUMNS))
            row[0] += 1
            if unit in cited:
                row[1] += 1
                row[2] += bool(cited[unit] & sentences)


class _Walk:
    """One document's walk: the alignment so far and where the counts go."""

    def __init__(self, scorer: Scorer, result: DocumentScore, candidate: Mapping[str, Any] | None) -> None:
        self.scorer = scorer
        self.result = result
        self.alignment = Alignment()
        self.asked = _asked(candidate)
        self.ids: dict[str, tuple[dict[Any, int], list[Any]]] = {}  # target label -> (candidate id -> index, gold ids)

    def node(self, schema: Mapping[str, Any], gold: Any, candidate: Any, label: str, path: Path,
             top: bool = False) -> None:
        obj, array = self.scorer.shape(schema)
        if obj is not None and (isinstance(gold, dict) or isinstance(candidate, dict) or gold is candidate is None):
            properties = obj.get("properties", {})
            if properties:
                for name, child in properties.items():
                    if top and name in ENVELOPE:
                        continue
                    self.node(child, gold.get(name) if isinstance(gold, dict) else None,
                              candidate.get(name) if isinstance(candidate, dict) else None,
                              f"{label}.{name}" if label else name, (*path, name))
                return
        if array is not None and (isinstance(gold, list) or isinstance(candidate, list) or gold is candidate is None):
            items = array.get("items", {})
            item_label = f"{label}[]"
            gold_items, candidate_items = _list(gold), _list(candidate)
            pairs = self.align(item_label, path, items, gold_items, candidate_items)
            for g, c in pairs:
                self.node(items, None if g is None else gold_items[g], None if c is None else candidate_items[c],
                          item_label, (*path, -1 if c is None else c))
            return
        self.leaf(gold, candidate, label, path)

    def leaf(self, gold: Any, candidate: Any, label: str, path: Path) -> None:
        scorer = self.scorer
        if label in scorer.id_labels:
            return
        row = self.result.row(label)
        if gold is not None:
            row[GOLD] += 1
        if candidate is not None:
            row[CANDIDATE] += 1
        if gold is not None and candidate is not None:
            if label in scorer.references:
                right = self.resolve(label, candidate) == exact(gold)
                row[EXACT] += right
                row[NORMALISED] += right
            elif exact(gold) == exact(candidate):  # equal values are equal when normalised too
                row[EXACT] += 1
                row[NORMALISED] += 1
            else:
                fold = scorer.casefolds(label)
                row[NORMALISED] += normalised(gold, fold) == normalised(candidate, fold)
        elif candidate is not None:
            row[FALSE_VALUES] += 1
        elif gold is not None:
            row[MISSES] += 1
            row[ASKED_MISSES] += path in self.asked
        elif path in self.asked:
            row[ASKED_CORRECT] += 1

    def resolve(self, label: str, candidate_id: Any) -> Any:
        """The gold id a candidate reference means: the id of the gold item aligned with the item it points at."""
        target = self.scorer.references[label]
        found = self.ids.get(target)
        if found is None:
            return ("unresolved", exact(candidate_id))
        index_of, gold_ids = found
        index = index_of.get(exact(candidate_id))
        mapped = None if index is None else self.alignment.to_gold.get((target, (target[:-2],)), {}).get(index)
        return ("unresolved", exact(candidate_id)) if mapped is None else exact(gold_ids[mapped])

    def align(self, label: str, path: Path, schema: Mapping[str, Any], gold: Sequence[Any],
              candidate: Sequence[Any]) -> list[tuple[int | None, int | None]]:
        """Pairs ``(gold index, candidate index)``, either None when unpaired: identity keys, then similarity.
        Cached per concrete list, so the pre-pass over reference targets and the walk agree."""
        key = (label, tuple(step if not isinstance(step, int) else step for step in path))
        cached = self.alignment.to_gold.get(key)
        if cached is not None:
            return _pairs(cached, len(gold), len(candidate))
        to_gold: dict[int, int] = {}
        keys = self.scorer.lists.get(label) if len(path) == 1 else None
        if keys is not None:
            for name in keys.identity:
                self._match_on(name, label, gold, candidate, to_gold)
        self._match_similar(label, schema, gold, candidate, to_gold, keys.id_field if keys else None)
        self.alignment.to_gold[key] = to_gold
        if keys is not None and keys.id_field is not None:
            field_name = keys.id_field
            index_of: dict[Any, int] = {}
            for index, item in enumerate(candidate):
                if isinstance(item, dict):
                    index_of.setdefault(exact(item.get(field_name)), index)
            self.ids[label] = (index_of, [item.get(field_name) if isinstance(item, dict) else None for item in gold])
        return _pairs(to_gold, len(gold), len(candidate))

    def _match_on(self, name: str, label: str, gold: Sequence[Any], candidate: Sequence[Any],
                  to_gold: dict[int, int]) -> None:
        fold = name.startswith("~")
        field_name = name.lstrip("~")

        def key(item: Any) -> Any:
            value = item if not field_name else item.get(field_name) if isinstance(item, dict) else None
            if value is None:
                return None
            return normalised(value, True) if fold else exact(value)

        waiting: dict[Any, list[int]] = {}
        taken = set(to_gold.values())
        for index, item in enumerate(gold):
            if index not in taken and (value := key(item)) is not None:
                waiting.setdefault(value, []).append(index)
        for index, item in enumerate(candidate):
            if index in to_gold:
                continue
            value = key(item)
            if value is not None and waiting.get(value):
                to_gold[index] = waiting[value].pop(0)

    def _match_similar(self, label: str, schema: Mapping[str, Any], gold: Sequence[Any], candidate: Sequence[Any],
                       to_gold: dict[int, int], id_field: str | None) -> None:
        taken = set(to_gold.values())
        left_gold = [i for i in range(len(gold)) if i not in taken]
        left_candidate = [i for i in range(len(candidate)) if i not in to_gold]
        if not left_gold or not left_candidate:
            return
        if len(left_gold) == len(left_candidate) == 1:  # one of each left: nothing to assign
            g, c = left_gold[0], left_candidate[0]
            if self.similarity(label, gold[g], candidate[c], id_field) >= MIN_SIMILARITY:
                to_gold[c] = g
            return
        import numpy as np
        from scipy.optimize import linear_sum_assignment

        similarity = np.array([[self.similarity(label, gold[g], candidate[c], id_field) for c in left_candidate]
                               for g in left_gold])
        rows, columns = linear_sum_assignment(similarity, maximize=True)
        for row, column in zip(rows, columns):
            if similarity[row, column] >= MIN_SIMILARITY:
                to_gold[left_candidate[column]] = left_gold[row]

    def similarity(self, label: str, gold: Any, candidate: Any, id_field: str | None) -> float:
        """How alike two items are, 0..1: the mean over fields either has of each field's likeness."""
        if isinstance(gold, dict) and isinstance(candidate, dict):
            scores = []
            for name in dict.fromkeys([*gold, *candidate]):
                if name == id_field:
                    continue
                a, b = gold.get(name), candidate.get(name)
                if a is None and b is None:
                    continue
                if a is None or b is None:
                    scores.append(0.0)
                elif f"{label}.{name}" in self.scorer.references:
                    scores.append(float(self.resolve(f"{label}.{name}", b) == exact(a)))
                else:
                    scores.append(_likeness(a, b))
            return sum(scores) / len(scores) if scores else 0.0
        if gold is None or candidate is None:
            return 0.0
        return _likeness(gold, candidate)


def _likeness(gold: Any, candidate: Any) -> float:
    """1 for values equal when normalised; for two texts their similarity (rapidfuzz ratio, case folded); else 0."""
    if exact(gold) == exact(candidate) or normalised(gold, True) == normalised(candidate, True):
        return 1.0
    if isinstance(gold, str) and isinstance(candidate, str):
        from rapidfuzz import fuzz

        return fuzz.ratio(text_key(gold, True), text_key(candidate, True)) / 100.0
    return 0.0


def _pairs(to_gold: dict[int, int], gold: int, candidate: int) -> list[tuple[int | None, int | None]]:
    """Gold items in order (each with its candidate item or None), then the candidate items nothing matched."""
    by_gold = {g: c for c, g in to_gold.items()}
    pairs: list[tuple[int | None, int | None]] = [(g, by_gold.get(g)) for g in range(gold)]
    pairs += [(None, c) for c in range(candidate) if c not in to_gold]
    return pairs


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _asked(candidate: Mapping[str, Any] | None) -> set[Path]:
    """Concrete paths the candidate asks a person about (its ``missingFields``)."""
    asked: set[Path] = set()
    entries = candidate.get("missingFields") if isinstance(candidate, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        steps = fieldpath.parse(entry.get("fieldPath", "")) if isinstance(entry, dict) else None
        if steps is not None:
            asked.add(steps)
    return asked


@lru_cache(maxsize=4096)
def _unit(path: str) -> tuple[str, int | None] | None:
    """The value an evidence entry backs: a top-level list's item ``("processSteps[]", 3)`` or a field outside
    lists ``("supplier.name", None)``; None for a path that is not one."""
    steps = fieldpath.parse(path)
    if not steps:
        return None
    if len(steps) >= 2 and isinstance(steps[0], str) and isinstance(steps[1], int):
        return f"{steps[0]}[]", steps[1]
    if any(isinstance(step, int) for step in steps):
        return None
    return ".".join(str(step) for step in steps), None
