"""Content rules of the ``work_procedure`` contract (docs/design.md#rules), in stage order.

They run only on a candidate that passed the schema, so they may index fields without guarding.
Evidence matching is exact after the contract's normalisation (NFC + whitespace collapse): case,
punctuation, digits and negations stay significant.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from extractor.document import Document
from extractor.evidence import fieldpath
from extractor.evidence.fieldpath import Step, location
from extractor.evidence.report import EvidenceSpan, FieldState, Finding, JudgeLink, Report, SentenceState, Severity
from extractor.evidence.source import Source
from extractor.evidence.support import support_score
from extractor.rules import EvidenceModel, Hit, rule

CONTRACT = "work_procedure"
NULLABLE_FIELDS = ("documentPurpose", "assignmentRule")
_ITEM_TEXT = {"participants": "name", "processSteps": "action", "rules": None}


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
    """A value that must be backed by evidence: a non-null scalar field or one list item."""

    steps: tuple[Step, ...]
    text: str

    @property
    def path(self) -> str:
        return fieldpath.render(self.steps)


class Context:
    """A schema-valid candidate and its source, with the shared derived facts computed once."""

    def __init__(self, candidate: dict[str, Any], source: Source, settings: Mapping[str, Any],
                 schema: Mapping[str, Any]) -> None:
        self.candidate = candidate
        self.source = source
        self.schema = schema
        self.settings = settings
        self.matcher = source.matcher(self.settings.get("evidence_normalisation", "nfc_whitespace"))

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
        units = [ValueUnit((name,), self.candidate[name]) for name in NULLABLE_FIELDS if self.candidate[name] is not None]
        for list_name, text_key in _ITEM_TEXT.items():
            for index, item in enumerate(self.candidate[list_name]):
                units.append(ValueUnit((list_name, index), item if text_key is None else item[text_key]))
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


def _name_key(name: str) -> str:
    return " ".join(unicodedata.normalize("NFC", name).casefold().split())


# ---------------------------------------------------------------- references


@rule(
    "PARTICIPANT_ID_DUPLICATE",
    contract=CONTRACT,
    stage="references",
    fires_when="two participants share an id",
    inputs="participants[*].id",
    normalisation="none (ids are compared exactly)",
    passes="every participant id is unique",
    location="$.participants[i].id of every repeat after the first",
)
def participant_id_duplicate(ctx: Context) -> Iterator[Hit]:
    first_seen: dict[str, int] = {}
    for index, participant in enumerate(ctx.candidate["participants"]):
        pid = participant["id"]
        if pid in first_seen:
            yield Hit(location("participants", index, "id"),
                      f'participant id "{pid}" is already used by participants[{first_seen[pid]}]; give each '
                      "participant one id and merge or rename the repeat")
        else:
            first_seen[pid] = index


@rule(
    "PARTICIPANT_NAME_DUPLICATE",
    contract=CONTRACT,
    stage="references",
    fires_when="one name appears under two different ids",
    inputs="participants[*].name, participants[*].id",
    normalisation="NFC, case folded, whitespace collapsed",
    passes="each name belongs to exactly one id",
    location="$.participants[i].name of the later entry",
)
def participant_name_duplicate(ctx: Context) -> Iterator[Hit]:
    owner: dict[str, tuple[int, str]] = {}
    for index, participant in enumerate(ctx.candidate["participants"]):
        key = _name_key(participant["name"])
        if key in owner and owner[key][1] != participant["id"]:
            first_index, first_id = owner[key]
            yield Hit(location("participants", index, "name"),
                      f'"{participant["name"]}" is both "{first_id}" (participants[{first_index}]) and '
                      f'"{participant["id"]}"; one person or role must have one id')
        owner.setdefault(key, (index, participant["id"]))


@rule(
    "ACTOR_UNKNOWN",
    contract=CONTRACT,
    stage="references",
    fires_when="a step's actorId is not the id of any participant",
    inputs="processSteps[*].actorId, participants[*].id",
    normalisation="none (ids are compared exactly)",
    passes="every actorId is a participant id",
    location="$.processSteps[i].actorId",
)
def actor_unknown(ctx: Context) -> Iterator[Hit]:
    known = [p["id"] for p in ctx.candidate["participants"]]
    for index, step in enumerate(ctx.candidate["processSteps"]):
        if step["actorId"] not in known:
            yield Hit(location("processSteps", index, "actorId"),
                      f'actorId "{step["actorId"]}" is not a participant id (known: {", ".join(known) or "none"}); '
                      "use an existing id or add the participant with its evidence")


# ---------------------------------------------------------------- order


@rule(
    "STEP_ORDER_DUPLICATE",
    contract=CONTRACT,
    stage="order",
    fires_when="two steps share an order number",
    inputs="processSteps[*].order",
    normalisation="none",
    passes="every order number is used once",
    location="$.processSteps[i].order of every repeat after the first",
)
def step_order_duplicate(ctx: Context) -> Iterator[Hit]:
    first_seen: dict[int, int] = {}
    for index, step in enumerate(ctx.candidate["processSteps"]):
        if step["order"] in first_seen:
            yield Hit(location("processSteps", index, "order"),
                      f"order {step['order']} is already used by processSteps[{first_seen[step['order']]}]")
        else:
            first_seen[step["order"]] = index


@rule(
    "STEP_ORDER_GAP",
    contract=CONTRACT,
    stage="order",
    fires_when="the distinct order numbers are not exactly 1..n",
    inputs="processSteps[*].order",
    normalisation="repeats counted once (STEP_ORDER_DUPLICATE reports them)",
    passes="sorted distinct orders == [1, 2, ..., n]",
    location="$.processSteps",
)
def step_order_gap(ctx: Context) -> Iterator[Hit]:
    orders = sorted({step["order"] for step in ctx.candidate["processSteps"]})
    expected = list(range(1, len(orders) + 1))
    if orders != expected:
        missing = sorted(set(expected) - set(orders))
        yield Hit(location("processSteps"),
                  f"step orders are {orders}, expected {expected}" + (f" (missing {missing})" if missing else ""))


@rule(
    "STEP_ORDER_INVERTED",
    contract=CONTRACT,
    stage="order",
    severity=Severity.WARNING,
    fires_when="a later step's evidence lies before an earlier step's evidence in the source",
    inputs="processSteps[*].order, evidence spans of each step",
    normalisation="evidence as for EVIDENCE_NOT_IN_SOURCE; of repeated excerpts the first occurrence after "
    "the previous step's is used",
    passes="following steps by order, each step's evidence starts after the previous step's",
    location="$.processSteps[i] of the step that comes too early",
    judge_needed_after_failure="yes: a person decides whether the source order or the extracted order is right",
)
def step_order_inverted(ctx: Context) -> Iterator[Hit]:
    steps = sorted(enumerate(ctx.candidate["processSteps"]), key=lambda pair: pair[1]["order"])
    previous: tuple[int, int] | None = None  # (start offset, step index)
    for index, step in steps:
        starts = sorted(span[0] for entry in ctx.evidence_for(("processSteps", index)) for span in entry.spans)
        if not starts:
            continue
        if previous is None:
            previous = (starts[0], index)
            continue
        after = [start for start in starts if start >= previous[0]]
        if not after:
            yield Hit(location("processSteps", index),
                      f"step order {step['order']} is backed by source text at offset {starts[0]}, before the text "
                      f"of the step before it (processSteps[{previous[1]}] at offset {previous[0]})")
        previous = (after[0] if after else starts[0], index)


# ---------------------------------------------------------------- evidence


@rule(
    "EVIDENCE_NOT_IN_SOURCE",
    contract=CONTRACT,
    stage="evidence",
    fires_when="a sourceExcerpt, normalised, is not a substring of the normalised document",
    inputs="evidence[*].sourceExcerpt, the document's canonical text",
    normalisation="Unicode NFC and whitespace runs collapsed to one space; nothing else (case, punctuation, "
    "digits and negations are significant)",
    passes="the normalised excerpt occurs in the normalised document",
    location="$.evidence[i].sourceExcerpt (hint: nearest sentence id and similarity, for repair only)",
)
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


@rule(
    "EVIDENCE_FIELD_PATH_INVALID",
    contract=CONTRACT,
    stage="evidence",
    fires_when="an evidence fieldPath is not a path, or resolves to nothing (or to null) in the candidate",
    inputs="evidence[*].fieldPath, the candidate",
    normalisation="an optional leading '$.' is ignored; indices are 0-based",
    passes="the path resolves to a non-null value of the candidate",
    location="$.evidence[i].fieldPath",
)
def evidence_field_path_invalid(ctx: Context) -> Iterator[Hit]:
    for entry in ctx.evidence:
        if not entry.points_at_value:
            yield Hit(location("evidence", entry.index, "fieldPath"),
                      f'fieldPath "{entry.field_path}" points at no value of this candidate (paths are 0-based: '
                      "processSteps[0] is the first step)")


@rule(
    "VALUE_WITHOUT_EVIDENCE",
    contract=CONTRACT,
    stage="evidence",
    fires_when="a participant, step, rule or non-null scalar field has no evidence entry",
    inputs="participants[*], processSteps[*], rules[*], documentPurpose, assignmentRule, evidence[*].fieldPath",
    normalisation="an evidence path inside a value (processSteps[1].action) counts for it",
    passes="every value has at least one evidence entry pointing at it",
    location="$.<field> or $.<list>[i] of the unsupported value",
    judge_needed_after_failure="no: a value without a source is removed or asked about, not judged",
)
def value_without_evidence(ctx: Context) -> Iterator[Hit]:
    for unit in ctx.units:
        if not ctx.evidence_for(unit.steps):
            yield Hit(location(*unit.steps),
                      f"{unit.path} has no evidence; add an excerpt copied from the source, or, if the source does "
                      "not state it, remove it (for documentPurpose/assignmentRule: null plus a missingFields question)")


@rule(
    "EVIDENCE_WEAK_SUPPORT",
    contract=CONTRACT,
    stage="evidence",
    severity=Severity.WARNING,
    fires_when="a value's found excerpts state too little of it (lexical support score)",
    inputs="the value text (name, action, rule, scalar) and its found excerpts",
    normalisation="NFKC + casefold; Hangul: particles and endings stripped, stem bigrams; Cyrillic/Latin: Snowball "
    "stems without stop words; numbers whole (extractor.evidence.support)",
    passes="support_score(value, its excerpts) >= weak_support.threshold; below judge_band_lower it is likely "
    "unsupported, between the two a judge decides; both fitted by `extract rules calibrate EVIDENCE_WEAK_SUPPORT "
    "LABELS.csv` (contracts/work_procedure/v1/rules.json)",
    location="$.<field> or $.<list>[i]",
    judge_needed_after_failure="yes: exact match proves the excerpt exists, not that it supports the value; "
    "routed to a judge or reviewer, never auto-rejected",
)
def evidence_weak_support(ctx: Context) -> Iterator[Hit]:
    section = ctx.settings.get("weak_support", {})
    threshold = float(section.get("threshold", 0.5))
    band_lower = float(section.get("judge_band_lower", threshold))
    min_length = int(section.get("min_word_length", 3))
    for unit in ctx.units:
        found = [entry for entry in ctx.evidence_for(unit.steps) if entry.spans]
        if not found:
            continue
        share = support_score(unit.text, " ".join(entry.excerpt for entry in found), min_length)
        if share is None or share >= threshold:
            continue
        verdict = ("likely unsupported" if share < band_lower
                   else f"in the judge band [{band_lower:.2f}, {threshold:.2f})")
        yield Hit(location(*unit.steps),
                  f"{unit.path}'s evidence supports {share:.0%} of it (threshold {threshold:.0%}, {verdict}); "
                  "check that the excerpt really says this",
                  {"support": round(share, 3), "threshold": threshold, "judge_band_lower": band_lower})


# ---------------------------------------------------------------- coverage


def _coverage_entries(ctx: Context) -> dict[str, list[int]]:
    entries: dict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        entries[entry["sentenceId"]].append(index)
    return entries


@rule(
    "SENTENCE_NOT_ACCOUNTED",
    contract=CONTRACT,
    stage="coverage",
    fires_when="a sentence id of the document has no sentenceCoverage entry",
    inputs="the document's sentence ids, sentenceCoverage[*].sentenceId",
    normalisation="none",
    passes="every sentence s1..sN has an entry (MAPPED, UNMAPPED or EXCLUDED)",
    location="$.sentenceCoverage (hint: the sentence id and text)",
    judge_needed_after_failure="no: the model skipped a sentence; repair asks for it",
)
def sentence_not_accounted(ctx: Context) -> Iterator[Hit]:
    covered = _coverage_entries(ctx)
    for sentence in ctx.source.document.sentences:
        if sentence.id not in covered:
            yield Hit(location("sentenceCoverage"),
                      f"{sentence.id} is not accounted for: map it to a field, or mark it UNMAPPED/EXCLUDED with a reason",
                      ctx.coverage_hint(sentence.id, text=sentence.text))


@rule(
    "SENTENCE_ID_UNKNOWN",
    contract=CONTRACT,
    stage="coverage",
    fires_when="a coverage entry names a sentence id the document does not have",
    inputs="sentenceCoverage[*].sentenceId, the document's sentence ids",
    normalisation="none",
    passes="every sentenceId is one of s1..sN",
    location="$.sentenceCoverage[i].sentenceId",
)
def sentence_id_unknown(ctx: Context) -> Iterator[Hit]:
    count = len(ctx.source.document.sentences)
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        if entry["sentenceId"] not in ctx.source.ids:
            yield Hit(location("sentenceCoverage", index, "sentenceId"),
                      f'"{entry["sentenceId"]}" is not a sentence of this document (it has s1..s{count})')


@rule(
    "SENTENCE_COVERAGE_DUPLICATE",
    contract=CONTRACT,
    stage="coverage",
    fires_when="one sentence has more than one coverage entry",
    inputs="sentenceCoverage[*].sentenceId",
    normalisation="none",
    passes="each sentence id appears at most once (list several fieldPaths in one MAPPED entry instead)",
    location="$.sentenceCoverage[i] of every repeat after the first",
)
def sentence_coverage_duplicate(ctx: Context) -> Iterator[Hit]:
    for sentence_id, indices in _coverage_entries(ctx).items():
        for index in indices[1:]:
            yield Hit(location("sentenceCoverage", index),
                      f"{sentence_id} already has an entry at sentenceCoverage[{indices[0]}]; give one entry per sentence",
                      ctx.coverage_hint(sentence_id))


@rule(
    "COVERAGE_MAPPED_WITHOUT_EVIDENCE",
    contract=CONTRACT,
    stage="coverage",
    fires_when="a sentence declared MAPPED has no fieldPaths, a fieldPath resolves to nothing, or no found "
    "evidence span of those fields overlaps the sentence",
    inputs="sentenceCoverage[*] (MAPPED), evidence spans, sentence offsets",
    normalisation="paths as for EVIDENCE_FIELD_PATH_INVALID; an evidence path counts when it is one of the "
    "fieldPaths, inside one, or contains one",
    passes="all fieldPaths resolve and an excerpt of one of them overlaps the sentence's characters",
    location="$.sentenceCoverage[i]",
)
def coverage_mapped_without_evidence(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        sentence = ctx.source.ids.get(entry["sentenceId"])
        if entry["status"] != "MAPPED" or sentence is None:
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


@rule(
    "COVERAGE_REASON_MISSING",
    contract=CONTRACT,
    stage="coverage",
    fires_when="a sentence is UNMAPPED or EXCLUDED without a reason",
    inputs="sentenceCoverage[*].status, sentenceCoverage[*].reason",
    normalisation="a reason of only whitespace counts as missing",
    passes="every UNMAPPED/EXCLUDED entry has a non-blank reason",
    location="$.sentenceCoverage[i].reason",
)
def coverage_reason_missing(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["sentenceCoverage"]):
        if entry["status"] in ("UNMAPPED", "EXCLUDED") and not (entry.get("reason") or "").strip():
            yield Hit(location("sentenceCoverage", index, "reason"),
                      f"{entry['sentenceId']} is {entry['status']} without a reason; say why no field holds it",
                      ctx.coverage_hint(entry["sentenceId"]))


# ---------------------------------------------------------------- completeness


def _asked(ctx: Context) -> Counter[tuple[Step, ...] | None]:
    return Counter(fieldpath.parse(entry["fieldPath"]) for entry in ctx.candidate["missingFields"])


@rule(
    "NULL_WITHOUT_QUESTION",
    contract=CONTRACT,
    stage="completeness",
    fires_when="a nullable required field is null and no missingFields entry asks for it",
    inputs="documentPurpose, assignmentRule, missingFields[*].fieldPath",
    normalisation="paths parsed as for evidence",
    passes="every null field has a missingFields question with its path",
    location="$.<field>",
)
def null_without_question(ctx: Context) -> Iterator[Hit]:
    asked = _asked(ctx)
    for name in NULLABLE_FIELDS:
        if ctx.candidate[name] is None and asked[(name,)] == 0:
            yield Hit(location(name), f"{name} is null but missingFields has no question for it; ask what the "
                      "source leaves open, or fill it from the source with evidence")


@rule(
    "QUESTION_FOR_PRESENT_VALUE",
    contract=CONTRACT,
    stage="completeness",
    fires_when="missingFields asks for a field that has a non-null scalar value",
    inputs="missingFields[*].fieldPath, the candidate",
    normalisation="paths parsed as for evidence; lists and objects are never 'present' (a question may ask "
    "what is missing from a list)",
    passes="no question targets a field holding a string, number or boolean",
    location="$.missingFields[i].fieldPath",
)
def question_for_present_value(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["missingFields"]):
        value = ctx.value_at(fieldpath.parse(entry["fieldPath"]))
        if value is not None and not isinstance(value, (list, dict)):
            yield Hit(location("missingFields", index, "fieldPath"),
                      f'{entry["fieldPath"]} already has a value; either remove the question or set the value to '
                      "null if the source does not state it")


@rule(
    "MISSING_FIELD_PATH_INVALID",
    contract=CONTRACT,
    stage="completeness",
    fires_when="a missingFields fieldPath names no field of the contract",
    inputs="missingFields[*].fieldPath, the contract schema",
    normalisation="an optional leading '$.' is ignored; array indices are allowed",
    passes="the path exists in the contract's JSON Schema",
    location="$.missingFields[i].fieldPath",
)
def missing_field_path_invalid(ctx: Context) -> Iterator[Hit]:
    for index, entry in enumerate(ctx.candidate["missingFields"]):
        steps = fieldpath.parse(entry["fieldPath"])
        if steps is None or not fieldpath.in_schema(ctx.schema, steps):
            yield Hit(location("missingFields", index, "fieldPath"),
                      f'"{entry["fieldPath"]}" is not a field of {CONTRACT} (e.g. documentPurpose, assignmentRule)')


# ---------------------------------------------------------------- states for the report


def states(ctx: Context, findings: list[Finding]) -> tuple[dict[str, FieldState], list[SentenceState], list[EvidenceSpan]]:
    """Field states, sentence states and evidence spans, derived from the checked candidate and findings."""
    asked = _asked(ctx)
    fields: dict[str, FieldState] = {}
    for name in NULLABLE_FIELDS:
        if ctx.candidate[name] is None:
            fields[name] = (FieldState(name, "NEEDS_INPUT") if asked[(name,)]
                            else FieldState(name, None, "NULL_WITHOUT_QUESTION"))
    for unit in ctx.units:
        entries = ctx.evidence_for(unit.steps)
        if not entries:
            fields[unit.path] = FieldState(unit.path, None, "VALUE_WITHOUT_EVIDENCE")
        elif not any(entry.spans for entry in entries):
            fields[unit.path] = FieldState(unit.path, None, "EVIDENCE_NOT_IN_SOURCE")
        else:
            fields[unit.path] = FieldState(unit.path, "PRESENT")

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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _describe(candidate: dict[str, Any], value: Any) -> str:
    """A value as a person would state it: a step as ``actor: action``, a participant by name.

    Internal ids (``requester``) are not claims of the document; showing them would invite the judge to
    call them unsupported.
    """
    if isinstance(value, dict) and isinstance(value.get("action"), str):
        names = {p.get("id"): p.get("name") for p in candidate.get("participants", []) if isinstance(p, dict)}
        actor = names.get(value.get("actorId")) or value.get("actorId")
        return f"{actor}: {value['action']}" if actor else str(value["action"])
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        name: str = value["name"]
        return name
    return _text(value)


def links(report: Report) -> list[JudgeLink]:
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
        if value is fieldpath.MISSING or value is None or not excerpt.strip():
            continue
        found.append(JudgeLink(len(found), span.field_path, _describe(candidate, value), excerpt,
                               f"evidence[{span.index}]"))
    return found


def unaccounted(report: Report, document: Document) -> set[str]:
    """The sentences no coverage entry accounts for."""
    return set(report.unaccounted)


MODEL = EvidenceModel(context=Context, states=states, links=links, unaccounted=unaccounted, has_coverage=True)
