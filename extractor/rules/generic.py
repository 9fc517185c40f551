"""The generic content rules every contract written as files gets (docs/contracts.md), in stage order.

They read the standard envelope around any record (``evidence``, ``missingFields``, ``sentenceCoverage``)
and the record's shape derived from its schema (``Shape``): which values need evidence (every non-null
scalar leaf outside a list and every list item, minus exempt paths), which fields may be null (then a
``missingFields`` question makes them NEEDS_INPUT), which item fields hold an item's text. A contract
gets its own copies (``for_contract``), so a card names the contract it belongs to.

They run only on a candidate that passed the schema, so they may index the envelope without guarding.
Evidence matching is exact after the contract's normalisation (default NFC + whitespace collapse): case,
punctuation, digits and negations stay significant.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any

from extractor.document import Document, words_in
from extractor.evidence import fieldpath
from extractor.evidence.fieldpath import Step, location
from extractor.evidence.report import EvidenceSpan, FieldState, Finding, JudgeLink, Report, SentenceState
from extractor.evidence.source import Source
from extractor.evidence.support import best_support
from extractor.rules import Card, EvidenceModel, Hit, Rule
from extractor.vocab import CoverageStatus, FieldPresence, Severity

ENVELOPE = ("missingFields", "evidence", "sentenceCoverage")
Path = tuple[str, ...]


@dataclass(frozen=True)
class ListShape:
    """A list of the record: its items are values that need evidence."""

    path: Path
    text: tuple[str, ...] | None  # item fields whose text states the item; None: the item is a scalar


@dataclass(frozen=True)
class Label:
    """An item field that refers to another list's item: a step is shown as ``<actor's name>: <action>``."""

    list_path: Path
    field: str
    target: Path
    key: str


@dataclass(frozen=True)
class Shape:
    """What the generic rules read from a record schema (and a contract's ``[evidence]`` settings)."""

    scalars: tuple[Path, ...]  # scalar leaves outside lists, in schema order
    nullable: tuple[Path, ...]  # those the schema lets be null: a question makes them NEEDS_INPUT
    lists: tuple[ListShape, ...]
    exempt: frozenset[Path] = frozenset()  # values that need no evidence
    labels: tuple[Label, ...] = ()
    words: Mapping[Path, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    """``x-enum-words`` of the schema: for a scalar path, or a list path plus an item field, each enum value's
    words in any language (docs/contracts.md#enum-words)."""

    @classmethod
    def of(cls, schema: Mapping[str, Any], text: Mapping[str, Iterable[str]] | None = None,
           exempt: Iterable[Path] = (), labels: Iterable[Label] = ()) -> Shape:
        """The shape of ``schema`` (refs inlined or not); ``text`` overrides an object list's text fields."""
        scalars: list[Path] = []
        nullable: list[Path] = []
        lists: list[ListShape] = []
        words: dict[Path, Mapping[str, tuple[str, ...]]] = {}
        chosen = {name: tuple(fields) for name, fields in (text or {}).items()}

        def walk(node: Mapping[str, Any], path: Path) -> None:
            options, can_be_null = variants(schema, node)
            kinds = {option.get("type") for option in options}
            if "object" in kinds:
                obj = next(option for option in options if option.get("type") == "object")
                for name, child in obj.get("properties", {}).items():
                    if path or name not in ENVELOPE:
                        walk(child, (*path, name))
            elif "array" in kinds:
                array = next(option for option in options if option.get("type") == "array")
                item_options, _ = variants(schema, array.get("items", {}))
                item = next((option for option in item_options if option.get("type") == "object"), None)
                dotted = ".".join(path)
                if item is None:
                    fields = None
                    if found := enum_words(options_of(array.get("items", {}))):
                        words[path] = found
                elif dotted in chosen:
                    fields = chosen[dotted]
                else:
                    fields = tuple(name for name, child in item.get("properties", {}).items() if _is_text(schema, child))
                for name, child in (item or {}).get("properties", {}).items():
                    if found := enum_words(options_of(child)):
                        words[(*path, name)] = found
                lists.append(ListShape(path, fields))
            else:
                scalars.append(path)
                if can_be_null:
                    nullable.append(path)
                if found := enum_words(options):
                    words[path] = found

        def options_of(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
            return variants(schema, node)[0]

        walk(schema, ())
        return cls(tuple(scalars), tuple(nullable), tuple(lists), frozenset(exempt), tuple(labels), words)


ENUM_WORDS = "x-enum-words"
"""The schema keyword that gives an enum value its words per language (docs/contracts.md#enum-words)."""


def enum_words(options: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """``{value: its words in every language}`` from the ``x-enum-words`` of a node's alternatives (checked when
    the contract is loaded: ``extractor.contracts.files``)."""
    found: dict[str, tuple[str, ...]] = {}
    for option in options:
        for value, by_language in (option.get(ENUM_WORDS) or {}).items():
            found[value] = tuple(word for words in by_language.values() for word in words)
    return found


def variants(root: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], bool]:
    """The non-null alternatives a schema node allows, and whether it allows null."""
    node = fieldpath.deref(root, node)
    options = [fieldpath.deref(root, option) for option in node.get("anyOf", node.get("oneOf", [node]))]
    expanded: list[Mapping[str, Any]] = []
    for option in options:
        kind = option.get("type")
        if isinstance(kind, list):
            expanded.extend({**option, "type": each} for each in kind)
        else:
            expanded.append(option)
    can_be_null = any(option.get("type") == "null" for option in expanded)
    return [option for option in expanded if option.get("type") != "null"], can_be_null


def _is_text(root: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A free-text item field: a string without a pattern or enum (ids and codes are not what a value says)."""
    options, _ = variants(root, node)
    return any(o.get("type") == "string" and "pattern" not in o and "enum" not in o for o in options)


@dataclass(frozen=True)
class ResolvedEvidence:
    """One ``evidence[i]`` entry with its parsed path and where its excerpt occurs in the source."""

    index: int
    field_path: str
    steps: tuple[Step, ...] | None
    excerpt: str
    spans: tuple[tuple[int, int], ...]
    sentence_ids: tuple[str, ...]

    @property
    def points_at_value(self) -> bool:
        return self.steps is not None


@dataclass(frozen=True)
class ValueUnit:
    """A value that must be backed by evidence: a non-null scalar field or one list item, with the other ways of
    stating it (an enum code in its words)."""

    steps: tuple[Step, ...]
    text: str
    alternatives: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return fieldpath.render(self.steps)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def item_text(item: Any, fields: tuple[str, ...] | None) -> str:
    """What a list item states: a scalar item itself, else its text fields joined."""
    if fields is None or not isinstance(item, dict):
        return _text(item)
    return " ".join(_text(item[name]) for name in fields if item.get(name) is not None)


MAX_ALTERNATIVES = 16
"""Ways of stating one item scored at most (its enum fields' words combined)."""


def item_alternatives(item: Any, fields: tuple[str, ...] | None, words: Mapping[str, Mapping[str, tuple[str, ...]]]
                      ) -> tuple[str, ...]:
    """An item's text with its enum values in their words instead (``words``: per item field, or ``""`` for a
    scalar item), every combination up to ``MAX_ALTERNATIVES``."""
    if fields is None or not isinstance(item, dict):
        return words.get("", {}).get(item, ()) if isinstance(item, str) else ()
    choices = [(_text(item[name]), *words.get(name, {}).get(item[name], ()))
               for name in fields if item.get(name) is not None]
    variants: list[list[str]] = [[]]
    for options in choices:
        variants = [[*variant, option] for variant in variants for option in options][:MAX_ALTERNATIVES + 1]
    return tuple(" ".join(variant) for variant in variants[1:])


class Context:
    """A schema-valid candidate and its source, with the shared derived facts computed once."""

    def __init__(self, candidate: dict[str, Any], source: Source, settings: Mapping[str, Any],
                 schema: Mapping[str, Any], shape: Shape) -> None:
        self.candidate = candidate
        self.source = source
        self.schema = schema
        self.settings = settings
        self.shape = shape
        self.matcher = source.matcher(self.settings.get("evidence_normalisation", "nfc_whitespace"))

    @property
    def example_field(self) -> str:
        """A field of this contract to name in messages."""
        paths = self.shape.nullable or self.shape.scalars or tuple(s.path for s in self.shape.lists)
        return ", ".join(fieldpath.render(path) for path in paths[:2]) or "a field of the record"

    @property
    def example_list(self) -> str:
        return fieldpath.render(self.shape.lists[0].path) if self.shape.lists else "items"

    def value_at(self, steps: tuple[Step, ...] | None) -> Any:
        """The value a path points at, or ``None`` when it points at nothing or at null."""
        if steps is None:
            return None
        value = fieldpath.resolve(self.candidate, steps)
        return None if value is fieldpath.MISSING else value

    @cached_property
    def evidence(self) -> list[ResolvedEvidence]:
        limit = int(self.settings.get("max_occurrences_per_excerpt", 20))
        resolved = []
        for index, entry in enumerate(self.candidate["evidence"]):
            steps = fieldpath.parse(entry["fieldPath"])
            if self.value_at(steps) is None:
                steps = None
            spans = tuple(self.matcher.find_all(entry["sourceExcerpt"], limit))
            touched = tuple(dict.fromkeys(s.id for a, b in spans for s in self.source.sentences_overlapping(a, b)))
            resolved.append(ResolvedEvidence(index, entry["fieldPath"], steps, entry["sourceExcerpt"], spans, touched))
        return resolved

    @cached_property
    def units(self) -> list[ValueUnit]:
        words = self.shape.words
        units = [ValueUnit(path, _text(value), words.get(path, {}).get(value, ()) if isinstance(value, str) else ())
                 for path in self.shape.scalars
                 if path not in self.shape.exempt and (value := self.value_at(path)) is not None]
        for shape in self.shape.lists:
            if shape.path in self.shape.exempt:
                continue
            item_words = {str(path[-1]) if len(path) > len(shape.path) else "": found for path, found in words.items()
                          if path[:len(shape.path)] == shape.path and len(path) <= len(shape.path) + 1}
            for index, item in enumerate(self.value_at(shape.path) or ()):
                units.append(ValueUnit((*shape.path, index), item_text(item, shape.text),
                                       item_alternatives(item, shape.text, item_words) if item_words else ()))
        return units

    def evidence_for(self, steps: tuple[Step, ...]) -> list[ResolvedEvidence]:
        """Evidence entries pointing at this value or inside it (``processSteps[1].action`` backs step 1)."""
        return self._evidence_by_unit.get(steps, [])

    @cached_property
    def _evidence_by_unit(self) -> dict[tuple[Step, ...], list[ResolvedEvidence]]:
        by_unit: dict[tuple[Step, ...], list[ResolvedEvidence]] = defaultdict(list)
        unit_steps = {unit.steps for unit in self.units}
        for entry in self.evidence:
            if entry.steps is None:
                continue
            for length in range(len(entry.steps), 0, -1):
                if entry.steps[:length] in unit_steps:
                    by_unit[entry.steps[:length]].append(entry)
                    break
        return by_unit

    def evidence_in(self, sentence_id: str) -> list[ResolvedEvidence]:
        """Evidence entries with a found span overlapping this sentence."""
        return self._evidence_by_sentence.get(sentence_id, [])

    @cached_property
    def _evidence_by_sentence(self) -> dict[str, list[ResolvedEvidence]]:
        by_sentence: dict[str, list[ResolvedEvidence]] = defaultdict(list)
        for entry in self.evidence:
            for sentence_id in entry.sentence_ids:
                by_sentence[sentence_id].append(entry)
        return by_sentence

    def coverage_hint(self, sentence_id: str, **extra: Any) -> dict[str, Any]:
        return {"sentence_id": sentence_id, **extra}




TEMPLATES: list[Rule[Context]] = []


def generic_rule(card: Card) -> Callable[[Callable[[Context], Iterable[Hit]]], Callable[[Context], Iterable[Hit]]]:
    """Add a generic rule (its card says contract ``*`` until a contract takes a copy)."""
    def add(check: Callable[[Context], Iterable[Hit]]) -> Callable[[Context], Iterable[Hit]]:
        TEMPLATES.append(Rule(card, check))
        return check

    return add


def for_contract(name: str) -> list[Rule[Context]]:
    """The generic rules as ``name``'s own: same checks, cards that name the contract."""
    return [Rule(replace(template.card, contract=name), template.check) for template in TEMPLATES]


# ---------------------------------------------------------------- references


# ---------------------------------------------------------------- evidence


@generic_rule(Card(
    "EVIDENCE_NOT_IN_SOURCE",
    stage="evidence",
    fires_when="a sourceExcerpt, normalised, is not a substring of the normalised document",
    inputs="evidence[*].sourceExcerpt, the document's canonical text",
    normalisation="Unicode NFC and whitespace runs collapsed to one space; nothing else (case, punctuation, "
    "digits and negations are significant)",
    passes="the normalised excerpt occurs in the normalised document",
    location="$.evidence[i].sourceExcerpt (hint: nearest sentence id and similarity, for repair only)",
))
def evidence_not_in_source(ctx: Context) -> Iterator[Hit]:
    normalisation = ctx.settings.get("evidence_normalisation", "nfc_whitespace")
    for entry in ctx.evidence:
        if entry.spans:
            continue
        nearest = ctx.source.nearest_sentence(entry.excerpt, normalisation)
        hint = None
        message = "this excerpt does not occur in the source; copy the source words exactly"
        if nearest is not None:
            sentence = ctx.source.ids[nearest[0]]
            hint = {"nearest_sentence_id": nearest[0], "similarity": nearest[1], "nearest_sentence": sentence.text}
            message += f" (closest: {nearest[0]}, similarity {nearest[1]:.2f})"
        yield Hit(location("evidence", entry.index, "sourceExcerpt"), message, hint)


@generic_rule(Card(
    "EVIDENCE_FIELD_PATH_INVALID",
    stage="evidence",
    fires_when="an evidence fieldPath is not a path, or resolves to nothing (or to null) in the candidate",
    inputs="evidence[*].fieldPath, the candidate",
    normalisation="an optional leading '$.' is ignored; indices are 0-based",
    passes="the path resolves to a non-null value of the candidate",
    location="$.evidence[i].fieldPath",
))
def evidence_field_path_invalid(ctx: Context) -> Iterator[Hit]:
    for entry in ctx.evidence:
        if not entry.points_at_value:
            yield Hit(location("evidence", entry.index, "fieldPath"),
                      f'fieldPath "{entry.field_path}" points at no value of this candidate (paths are 0-based: '
                      f"{ctx.example_list}[0] is the first item)")


@generic_rule(Card(
    "VALUE_WITHOUT_EVIDENCE",
    stage="evidence",
    fires_when="a list item or a non-null scalar field outside lists has no evidence entry (paths the contract "
    "exempts in checks.toml [evidence] exempt need none)",
    inputs="every list item, every non-null scalar leaf outside lists, evidence[*].fieldPath",
    normalisation="an evidence path inside a value (processSteps[1].action) counts for it",
    passes="every value has at least one evidence entry pointing at it",
    location="$.<field> or $.<list>[i] of the unsupported value",
    judge_needed_after_failure="no: a value without a source is removed or asked about, not judged",
))
def value_without_evidence(ctx: Context) -> Iterator[Hit]:
    nullable = "/".join(fieldpath.render(path) for path in ctx.shape.nullable)
    for unit in ctx.units:
        if not ctx.evidence_for(unit.steps):
            yield Hit(location(*unit.steps),
                      f"{unit.path} has no evidence; add an excerpt copied from the source, or, if the source does "
                      "not state it, remove it" + (f" (for {nullable}: null plus a missingFields question)" if nullable
                                                    else ""))


@generic_rule(Card(
    "EVIDENCE_WEAK_SUPPORT",
    stage="evidence",
    severity=Severity.WARNING,
    fires_when="a value's found excerpts state too little of it (lexical support score)",
    inputs="the value text (a scalar; an item's free-text fields, or those checks.toml [evidence] text names), an "
    "enum value's words (schema x-enum-words), and its found excerpts",
    normalisation="NFKC + casefold; dates and numbers read into one spelling (2026-03-14 = 2026년 3월 14일 = "
    "14.03.2026 = March 14, 2026; 2000 = 2,000 = 2 000), units and currencies as tokens; Hangul: particles and "
    "endings stripped, stem bigrams; Cyrillic/Latin: Snowball stems without stop words (extractor.evidence.support); "
    "an enum code scores as its best-supported words",
    passes="support_score(value, its excerpts) >= weak_support.threshold (checks.toml [evidence] "
    "weak_support_threshold, default 0.5); below judge_band_lower it is likely unsupported, between the two a "
    "judge decides; both fitted by `extract rules calibrate EVIDENCE_WEAK_SUPPORT LABELS.csv` (written to the "
    "contract folder's calibration.json)",
    location="$.<field> or $.<list>[i]",
    judge_needed_after_failure="yes: exact match proves the excerpt exists, not that it supports the value; "
    "routed to a judge or reviewer, never auto-rejected",
))
def evidence_weak_support(ctx: Context) -> Iterator[Hit]:
    section = ctx.settings.get("weak_support", {})
    threshold = float(section.get("threshold", 0.5))
    band_lower = float(section.get("judge_band_lower", threshold))
    min_length = int(section.get("min_word_length", 3))
    for unit in ctx.units:
        found = [entry for entry in ctx.evidence_for(unit.steps) if entry.spans]
        if not found:
            continue
        share = best_support((unit.text, *unit.alternatives), " ".join(entry.excerpt for entry in found), min_length)
        if share is None or share >= threshold:
            continue
        verdict = ("likely unsupported" if share < band_lower
                   else f"in the judge band [{band_lower:.2f}, {threshold:.2f})")
        yield Hit(location(*unit.steps),
                  f"{unit.path}'s evidence supports {share:.0%} of it (threshold {threshold:.0%}, {verdict}); "
                  "check that the excerpt really says this",
                  {"support": round(share, 3), "threshold": threshold, "judge_band_lower": band_lower})


@generic_rule(Card(
    "EVIDENCE_LOW_OCR_CONFIDENCE",
    stage="evidence",
    severity=Severity.WARNING,
    fires_when="an excerpt was found in text OCR read, and a word of it has a low OCR confidence",
    inputs="each found excerpt's spans and the words under them (Document.words: Tesseract's confidence per word)",
    normalisation="none: the confidence is Tesseract's (0-100), read as a share (0-1)",
    passes="every OCR'd word under the excerpt has confidence >= ocr_confidence.threshold (default 0.6, fitted by "
    "`extract rules calibrate EVIDENCE_LOW_OCR_CONFIDENCE LABELS.csv` on words whose reading is known); text "
    "from a text layer or a text file has no confidence and always passes",
    location="$.evidence[i] (hint: the words, their confidence and page)",
    judge_needed_after_failure="yes, a person: the excerpt matches what OCR read, and OCR may have misread the page "
    "(a digit, a name); the reviewer compares it with the page image",
))
def evidence_low_ocr_confidence(ctx: Context) -> Iterator[Hit]:
    words = ctx.source.document.words
    if not words or all(word.confidence is None for word in words):
        return
    threshold = float(ctx.settings.get("ocr_confidence", {}).get("threshold", 0.6))
    text = ctx.source.document.text
    for entry in ctx.evidence:
        weak = {(word.start, word.end): word for start, end in entry.spans for word in words_in(words, start, end)
                if word.confidence is not None and word.confidence / 100 < threshold}
        if not weak:
            continue
        shown = sorted(weak.values(), key=lambda word: word.start)
        listed = ", ".join(f"{text[w.start:w.end]!r} {(w.confidence or 0) / 100:.2f} (page {w.page})"
                           for w in shown[:5])
        yield Hit(location("evidence", entry.index),
                  f"evidence[{entry.index}] rests on words OCR read with low confidence: {listed} (threshold "
                  f"{threshold:.2f}); compare the excerpt with the page",
                  {"words": [{"text": text[w.start:w.end], "confidence": round(w.confidence / 100, 3), "page": w.page,
                              "box": [round(edge, 4) for edge in w.box]} for w in shown if w.confidence is not None],
                   "threshold": threshold})


# ---------------------------------------------------------------- coverage


def _coverage_entries(ctx: Context) -> dict[str, list[int]]:
    entries: dict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        entries[entry["sentenceId"]].append(index)
    return entries


@generic_rule(Card(
    "SENTENCE_NOT_ACCOUNTED",
    stage="coverage",
    fires_when="a sentence id of the document has no sentenceCoverage entry",
    inputs="the document's sentence ids, sentenceCoverage[*].sentenceId",
    normalisation="none",
    passes="every sentence s1..sN has an entry (MAPPED, UNMAPPED or EXCLUDED)",
    location="$.sentenceCoverage (hint: the sentence id and text)",
    judge_needed_after_failure="no: the model skipped a sentence; repair asks for it",
))
def sentence_not_accounted(ctx: Context) -> Iterator[Hit]:
    covered = _coverage_entries(ctx)
    for sentence in ctx.source.document.sentences:
        if sentence.id not in covered:
            yield Hit(location("sentenceCoverage"),
                      f"{sentence.id} is not accounted for: map it to a field, or mark it UNMAPPED/EXCLUDED with a reason",
                      ctx.coverage_hint(sentence.id, text=sentence.text))


@generic_rule(Card(
    "SENTENCE_ID_UNKNOWN",
    stage="coverage",
    fires_when="a coverage entry names a sentence id the document does not have",
    inputs="sentenceCoverage[*].sentenceId, the document's sentence ids",
    normalisation="none",
    passes="every sentenceId is one of s1..sN",
    location="$.sentenceCoverage[i].sentenceId",
))
def sentence_id_unknown(ctx: Context) -> Iterator[Hit]:
    sentences = ctx.source.document.sentences
    held = f"{sentences[0].id}..{sentences[-1].id}" if sentences else "none"  # a window's part holds its own range
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        if entry["sentenceId"] not in ctx.source.ids:
            yield Hit(location("sentenceCoverage", index, "sentenceId"),
                      f'"{entry["sentenceId"]}" is not a sentence of this document (it has {held})')


@generic_rule(Card(
    "SENTENCE_COVERAGE_DUPLICATE",
    stage="coverage",
    fires_when="one sentence has more than one coverage entry",
    inputs="sentenceCoverage[*].sentenceId",
    normalisation="none",
    passes="each sentence id appears at most once (list several fieldPaths in one MAPPED entry instead)",
    location="$.sentenceCoverage[i] of every repeat after the first",
))
def sentence_coverage_duplicate(ctx: Context) -> Iterator[Hit]:
    for sentence_id, indices in _coverage_entries(ctx).items():
        for index in indices[1:]:
            yield Hit(location("sentenceCoverage", index),
                      f"{sentence_id} already has an entry at sentenceCoverage[{indices[0]}]; give one entry per sentence",
                      ctx.coverage_hint(sentence_id))


@generic_rule(Card(
    "COVERAGE_MAPPED_WITHOUT_EVIDENCE",
    stage="coverage",
    fires_when="a sentence declared MAPPED has no fieldPaths, a fieldPath resolves to nothing, or no found "
    "evidence span of those fields overlaps the sentence",
    inputs="sentenceCoverage[*] (MAPPED), evidence spans, sentence offsets",
    normalisation="paths as for EVIDENCE_FIELD_PATH_INVALID; an evidence path counts when it is one of the "
    "fieldPaths, inside one, or contains one",
    passes="all fieldPaths resolve and an excerpt of one of them overlaps the sentence's characters",
    location="$.sentenceCoverage[i]",
))
def coverage_mapped_without_evidence(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        sentence = ctx.source.ids.get(entry["sentenceId"])
        if entry["status"] != CoverageStatus.MAPPED or sentence is None:
            continue
        where, hint = location("sentenceCoverage", index), ctx.coverage_hint(sentence.id)
        paths = [fieldpath.parse(path) for path in entry["fieldPaths"]]
        if not paths:
            yield Hit(where, f"{sentence.id} is MAPPED but names no fieldPaths", hint)
            continue
        dangling = [raw for raw, steps in zip(entry["fieldPaths"], paths) if ctx.value_at(steps) is None]
        if dangling:
            yield Hit(where, f"{sentence.id} is MAPPED to {', '.join(dangling)}, which point at no value", hint)
            continue
        overlapping = any(
            evidence.steps is not None and any(fieldpath.related(evidence.steps, p) for p in paths if p)
            for evidence in ctx.evidence_in(sentence.id)
        )
        if not overlapping:
            yield Hit(where, f"{sentence.id} is MAPPED to {', '.join(entry['fieldPaths'])}, but no evidence of those "
                      "fields quotes this sentence; add an excerpt from it or change its status", hint)


@generic_rule(Card(
    "COVERAGE_REASON_MISSING",
    stage="coverage",
    fires_when="a sentence is UNMAPPED or EXCLUDED without a reason",
    inputs="sentenceCoverage[*].status, sentenceCoverage[*].reason",
    normalisation="a reason of only whitespace counts as missing",
    passes="every UNMAPPED/EXCLUDED entry has a non-blank reason",
    location="$.sentenceCoverage[i].reason",
))
def coverage_reason_missing(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        if entry["status"] in (CoverageStatus.UNMAPPED, CoverageStatus.EXCLUDED) and not (entry.get("reason") or "").strip():
            yield Hit(location("sentenceCoverage", index, "reason"),
                      f"{entry['sentenceId']} is {entry['status']} without a reason; say why no field holds it",
                      ctx.coverage_hint(entry["sentenceId"]))


# ---------------------------------------------------------------- completeness


def _asked(ctx: Context) -> Counter[tuple[Step, ...] | None]:
    return Counter(fieldpath.parse(entry["fieldPath"]) for entry in ctx.candidate["missingFields"])


@generic_rule(Card(
    "NULL_WITHOUT_QUESTION",
    stage="completeness",
    fires_when="a nullable required field is null and no missingFields entry asks for it",
    inputs="the fields the schema lets be null (outside lists), missingFields[*].fieldPath",
    normalisation="paths parsed as for evidence",
    passes="every null field has a missingFields question with its path",
    location="$.<field>",
))
def null_without_question(ctx: Context) -> Iterator[Hit]:
    asked = _asked(ctx)
    for path in ctx.shape.nullable:
        if fieldpath.resolve(ctx.candidate, path) is None and asked[path] == 0:
            yield Hit(location(*path), f"{fieldpath.render(path)} is null but missingFields has no question for it; "
                      "ask what the source leaves open, or fill it from the source with evidence")


@generic_rule(Card(
    "QUESTION_FOR_PRESENT_VALUE",
    stage="completeness",
    fires_when="missingFields asks for a field that has a non-null scalar value",
    inputs="missingFields[*].fieldPath, the candidate",
    normalisation="paths parsed as for evidence; lists and objects are never 'present' (a question may ask "
    "what is missing from a list)",
    passes="no question targets a field holding a string, number or boolean",
    location="$.missingFields[i].fieldPath",
))
def question_for_present_value(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["missingFields"]):
        value = ctx.value_at(fieldpath.parse(entry["fieldPath"]))
        if value is not None and not isinstance(value, (list, dict)):
            yield Hit(location("missingFields", index, "fieldPath"),
                      f'{entry["fieldPath"]} already has a value; either remove the question or set the value to '
                      "null if the source does not state it")


@generic_rule(Card(
    "MISSING_FIELD_PATH_INVALID",
    stage="completeness",
    fires_when="a missingFields fieldPath names no field of the contract",
    inputs="missingFields[*].fieldPath, the contract schema",
    normalisation="an optional leading '$.' is ignored; array indices are allowed",
    passes="the path exists in the contract's JSON Schema",
    location="$.missingFields[i].fieldPath",
))
def missing_field_path_invalid(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["missingFields"]):
        steps = fieldpath.parse(entry["fieldPath"])
        if steps is None or not fieldpath.in_schema(ctx.schema, steps):
            yield Hit(location("missingFields", index, "fieldPath"),
                      f'"{entry["fieldPath"]}" is not a field of this contract (e.g. {ctx.example_field})')


# ---------------------------------------------------------------- states for the report


def states(ctx: Context, findings: list[Finding]) -> tuple[dict[str, FieldState], list[SentenceState], list[EvidenceSpan]]:
    """Field states, sentence states and evidence spans, derived from the checked candidate and findings."""
    asked = _asked(ctx)
    fields: dict[str, FieldState] = {}
    for path in ctx.shape.nullable:
        if fieldpath.resolve(ctx.candidate, path) is None:
            name = fieldpath.render(path)
            fields[name] = (FieldState(name, FieldPresence.NEEDS_INPUT) if asked[path]
                            else FieldState(name, None, "NULL_WITHOUT_QUESTION"))
    for path in ctx.shape.exempt:
        if ctx.value_at(path) is not None:
            fields[fieldpath.render(path)] = FieldState(fieldpath.render(path), FieldPresence.PRESENT)
    for unit in ctx.units:
        entries = ctx.evidence_for(unit.steps)
        if not entries:
            fields[unit.path] = FieldState(unit.path, None, "VALUE_WITHOUT_EVIDENCE")
        elif not any(entry.spans for entry in entries):
            fields[unit.path] = FieldState(unit.path, None, "EVIDENCE_NOT_IN_SOURCE")
        else:
            fields[unit.path] = FieldState(unit.path, FieldPresence.PRESENT)

    blocking: dict[str, str] = {}
    for finding in findings:
        if finding.hint and "sentence_id" in finding.hint:
            blocking.setdefault(finding.hint["sentence_id"], finding.rule_id)
    first_entry: dict[str, dict[str, Any]] = {}
    for entry in ctx.candidate["sentenceCoverage"]:
        first_entry.setdefault(entry["sentenceId"], entry)
    sentences = []
    for sentence in ctx.source.document.sentences:
        entry = first_entry.get(sentence.id, {})
        rule_id = blocking.get(sentence.id)
        sentences.append(SentenceState(
            sentence.id,
            None if rule_id else entry["status"],
            tuple(entry.get("fieldPaths") or ()),
            entry.get("reason"),
            rule_id,
        ))

    spans = [EvidenceSpan(entry.index, entry.field_path, entry.spans, entry.sentence_ids) for entry in ctx.evidence]
    return fields, sentences, spans


# ---------------------------------------------------------------- what the judge and the repair read


def _describe(candidate: dict[str, Any], steps: tuple[Step, ...], value: Any, shape: Shape) -> str:
    """A value as a person would state it: an item by its text fields, prefixed by the text of the item one of
    its fields refers to (a step as ``<actor's name>: <action>``).

    Internal ids (``requester``) are not claims of the document; showing them would invite the judge to
    call them unsupported.
    """
    if not isinstance(value, dict) or len(steps) < 2 or not isinstance(steps[-1], int):
        return _text(value)
    list_path = tuple(step for step in steps[:-1] if isinstance(step, str))
    lists = {s.path: s for s in shape.lists}
    own = lists.get(list_path)
    text = item_text(value, own.text if own else None)
    for label in shape.labels:
        if label.list_path != list_path or value.get(label.field) is None:
            continue
        targets = fieldpath.resolve(candidate, label.target)
        target_shape = lists.get(label.target)
        for target in targets if isinstance(targets, list) else ():
            if isinstance(target, dict) and target.get(label.key) == value[label.field]:
                name = item_text(target, target_shape.text if target_shape else None) or value[label.field]
                return f"{name}: {text}"
        return f"{value[label.field]}: {text}"
    return text


def links(report: Report, shape: Shape) -> list[JudgeLink]:
    """Every evidence entry with a found span, with the value at its ``fieldPath``."""
    candidate = report.candidate
    if not isinstance(candidate, dict):
        return []
    found: list[JudgeLink] = []
    evidence = candidate.get("evidence", [])
    for span in report.evidence_spans:
        if not span.found or span.index >= len(evidence):
            continue
        steps = fieldpath.parse(span.field_path)
        value = fieldpath.MISSING if steps is None else fieldpath.resolve(candidate, steps)
        excerpt = evidence[span.index].get("sourceExcerpt", "")
        if steps is None or value is fieldpath.MISSING or value is None or not excerpt.strip():
            continue
        found.append(JudgeLink(len(found), span.field_path, _describe(candidate, steps, value, shape), excerpt,
                               f"evidence[{span.index}]"))
    return found


def unaccounted(report: Report, document: Document) -> set[str]:
    """The sentences no coverage entry accounts for."""
    return set(report.unaccounted)


def evidence_model(shape: Shape) -> EvidenceModel[Context]:
    """The evidence model of a contract with this record shape."""
    return EvidenceModel(context=partial(Context, shape=shape), states=states, links=partial(links, shape=shape),
                         unaccounted=unaccounted, has_coverage=True)
