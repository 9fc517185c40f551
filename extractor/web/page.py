"""The document page's model: ``extractor.review.view.document_view`` cut into what the template draws.

The view already holds the facts (sentence states, evidence spans clipped to sentences, findings per
attempt); this module only arranges them: the source as runs of text between sentence boundaries and
evidence boundaries (so each excerpt is its own element, linked to its field), and the candidate as the
contract's form tree with its findings and evidence beside each field.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from extractor.document import language_of, line_boxes, words_in
from extractor.evidence.fieldpath import parse
from extractor.review.view import label_counts, record_sentences
from extractor.vocab import CoverageStatus, SentenceMark
from extractor.web.schemaform import Node, SchemaForm, finding_anchor

QUESTIONS = "missingFields"
"""The envelope's list of NEEDS_INPUT questions (``{fieldPath, question}``), drawn as questions, not as a field."""

if TYPE_CHECKING:
    from extractor.review.view import DocumentView, EvidenceMark, SentenceView

SENTENCE_STATES = (*CoverageStatus, *SentenceMark)
"""The states a sentence is coloured by; anything else (UNVERIFIED:<rule>) is drawn as a problem."""


@dataclass(frozen=True)
class Piece:
    """A run of source text inside one sentence, and the evidence items (by index) that cover it."""

    text: str
    evidence: tuple[int, ...] = ()
    fields: tuple[str, ...] = ()


@dataclass
class SentenceRun:
    """One sentence: the text before it (between sentences), its state and its pieces."""

    id: str
    label: str
    lead: str
    pieces: list[Piece]
    field_paths: list[str]
    reason: str | None
    rule_id: str | None

    @property
    def css(self) -> str:
        return self.label if self.label in SENTENCE_STATES else "PROBLEM"


@dataclass(frozen=True)
class EvidenceBox:
    """One line of one excerpt on a page: which evidence entry, for which field, and where (fractions of the page)."""

    index: int
    field_path: str
    box: tuple[float, float, float, float]

    @property
    def edges(self) -> str:
        return " ".join(f"{edge:.4f}" for edge in self.box)


@dataclass(frozen=True)
class PageBoxes:
    number: int
    boxes: list[EvidenceBox]


@dataclass
class DocumentPage:
    view: DocumentView
    sentences: list[SentenceRun]
    tail: str
    tree: Node | None
    findings: dict[str, list[dict[str, Any]]]  # by form name; "" for the whole record
    evidence_by_field: dict[str, list[dict[str, Any]]]
    questions: dict[str, str]
    """Each NEEDS_INPUT question by field path: shown once, beside its field when the page draws that field."""
    field_states: dict[str, dict[str, Any]]
    lang: str
    extra_paths: list[str] = field(default_factory=list)
    top: list[Node] = field(default_factory=list)
    """The record's fields the page draws: the ones the candidate has, but ``missingFields`` when every entry of
    it is a question (each is shown once: beside its field, or in the list of questions)."""
    drawn: frozenset[str] = frozenset()
    """The field paths the page draws; a question on another path has no field to stand beside, so the page
    lists it on its own."""
    pages: list[PageBoxes] = field(default_factory=list)
    """The source's pages, each with a box on every line of every excerpt on it (docs/formats.md#pages-and-boxes)."""
    approved: bool = False
    """The page shows the approved record of this content (not the model's candidate)."""
    edits: dict[str, str] = field(default_factory=dict)
    """In a person's record (approved, or waiting for more approvals), each field a person changed from the model's
    candidate, with what the model had (``the model's value: ...``, ``the model had none``, ``the model had 2
    items``)."""
    added: list[str] = field(default_factory=list)
    """In a person's record, the list items a person added (the model's list had no item at that place)."""
    pending: bool = False
    """The page shows the record waiting for more approvals (what Approve signs off), not the model's candidate."""

    @property
    def sentence_counts(self) -> dict[str, int]:
        """Sentences per label, as this page colours them."""
        return label_counts(self.sentences)

    @property
    def questions_at_fields(self) -> list[str]:
        return [path for path in self.questions if path in self.drawn]

    @property
    def questions_elsewhere(self) -> dict[str, str]:
        return {path: question for path, question in self.questions.items() if path not in self.drawn}


def _pieces(text: str, start: int, evidence: list[EvidenceMark]) -> list[Piece]:
    """``text`` (starting at offset ``start``) cut at every evidence boundary inside it."""
    end = start + len(text)
    cuts = {start, end}
    for mark in evidence:
        cuts.update((max(start, mark.start), min(end, mark.end)))
    bounds = sorted(cuts)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        if a == b:
            continue
        covering = [m for m in evidence if m.start <= a and m.end >= b]
        out.append(Piece(text[a - start:b - start], tuple(sorted({m.index for m in covering if m.index is not None})),
                         tuple(sorted({m.field_path for m in covering if m.field_path}))))
    return out


def source_runs(view: DocumentView, sentences: list[SentenceView] | None = None) -> tuple[list[SentenceRun], str]:
    """The sentences in order (the view's, or ``sentences``) with the text between them (the source as the run read
    it, when it is unchanged; else each sentence's own text, blocks separated by blank lines)."""
    text = view.text
    out: list[SentenceRun] = []
    previous_end, previous_block = 0, None
    for position, sentence in enumerate(view.sentences if sentences is None else sentences):
        start, end = sentence.start, sentence.end
        if text is not None:
            lead, body = text[previous_end:start], text[start:end]
        else:
            lead = "" if not position else ("\n\n" if sentence.block != previous_block else " ")
            body = sentence.text
        out.append(SentenceRun(sentence.id, sentence.label, lead, _pieces(body, start, sentence.evidence),
                               sentence.field_paths, sentence.reason, sentence.rule_id))
        previous_end, previous_block = end, sentence.block
    return out, (text[previous_end:] if text is not None else "")


def document_page(view: DocumentView, schema: dict[str, Any] | None) -> DocumentPage:
    """Everything the document template needs, from ``document_view`` and the contract's schema: the model's
    candidate with its final attempt's findings, or, once a person approved this content, the approved record,
    or, while it waits for more approvals, the record the others signed off (what approving it signs off), each
    with its own evidence and the fields a person changed marked (the model's findings are about a candidate that
    is not that record)."""
    approved, pending = view.approved, view.pending if view.approved is None else None
    decided = approved is not None or pending is not None
    record = (approved.record if approved is not None else pending.record if pending is not None
              else view.candidate)
    spans = (list(approved.evidence_spans or []) if approved is not None
             else list(pending.evidence_spans or []) if pending is not None else view.evidence_spans)
    sentences, tail = source_runs(view, record_sentences(view.document, record, spans) if decided else None)
    tree = SchemaForm(schema).tree(record) if schema is not None and isinstance(record, dict) else None
    names = {node.name for node in tree.walk()} if tree is not None else set()
    shown_id = None if view.shown is None else view.shown.id
    final = next((a for a in view.attempts if a.attempt.id == shown_id), None)
    findings: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in [] if final is None or decided else final.findings:
        findings[finding_anchor(finding.get("location"), names)].append(finding)
    evidence: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        evidence[str(span.get("fieldPath"))].append(span)
    missing = record.get(QUESTIONS) if isinstance(record, dict) else None
    questions = {str(m.get("fieldPath")): str(m.get("question")) for m in missing or () if isinstance(m, dict)}
    extra = [f"{node.name + '.' if node.name else ''}{key}" for node in (tree.walk() if tree else ())
             for key in node.extra_keys]
    source = view.text or " ".join(s.text for s in view.sentences)
    asked = isinstance(missing, list) and all(isinstance(m, dict) for m in missing)
    top = [child for child in (tree.children if tree is not None else ())
           if child.present and not (asked and child.name == QUESTIONS)]
    edits, added = edited_fields(tree, view.candidate) if decided and tree is not None else ({}, [])
    return DocumentPage(view, sentences, tail, tree, dict(findings), dict(evidence), questions,
                        {} if decided else dict(view.fields or {}), language_of(source), extra, top,
                        frozenset(name for child in top for name in _drawn(child)), page_boxes(view, spans),
                        approved is not None, edits, added, pending is not None)


def edited_fields(tree: Node, candidate: Any) -> tuple[dict[str, str], list[str]]:
    """What a person changed in an approved record (``tree``) from the model's ``candidate``, path by path: the
    fields whose value differs, each with what the model had (its value, none, or a list's count of items),
    and the list items the model did not have at all (their fields are not listed one by one)."""
    edits: dict[str, str] = {}
    added: list[str] = []

    def visit(node: Node) -> None:
        before = value_at(candidate, node.name) if node.name else candidate
        if node.name and before is MISSING_VALUE and node.key.startswith("["):
            added.append(node.name)
            return
        if node.kind == "array" and isinstance(node.value, list) and node.name:
            if not isinstance(before, list):
                edits[node.name] = "the model had none"
            elif len(before) != len(node.value):
                edits[node.name] = f"the model had {len(before)} item{'' if len(before) == 1 else 's'}"
        elif node.kind not in ("object", "array") and (before is MISSING_VALUE or before != node.value):
            edits[node.name] = ("the model had none" if before is MISSING_VALUE else "the model's value: "
                                + (before if isinstance(before, str) else json.dumps(before, ensure_ascii=False)))
        for child in node.children:
            if child.present:
                visit(child)

    visit(tree)
    return edits, added


MISSING_VALUE: Any = object()


def value_at(value: Any, path: str) -> Any:
    """The value at a field path (``processSteps[1].action``) of ``value``, or ``MISSING_VALUE``."""
    steps = parse(path)
    if steps is None:
        return MISSING_VALUE
    for step in steps:
        if isinstance(step, int) and isinstance(value, list) and 0 <= step < len(value):
            value = value[step]
        elif isinstance(step, str) and isinstance(value, dict) and step in value:
            value = value[step]
        else:
            return MISSING_VALUE
    return value


def hint_text(hint: Any) -> str:
    """A finding's hint (machine-usable help for the repair) as a person reads it: ``sentence id s11 · text
    “If the request ...”``, never a Python dict."""
    if not isinstance(hint, dict):
        return str(hint) if isinstance(hint, str) else json.dumps(hint, ensure_ascii=False)
    parts = []
    for key, value in hint.items():
        name = str(key).replace("_", " ")
        shown = (value if isinstance(value, str) and str(key).endswith("id") else f"“{value}”" if isinstance(value, str)
                 else f"{value:.2f}" if isinstance(value, float) else json.dumps(value, ensure_ascii=False))
        parts.append(f"{name} {shown}")
    return " · ".join(parts)


def page_boxes(view: DocumentView, spans: list[dict[str, Any]] | None = None) -> list[PageBoxes]:
    """Every page of a paged source, with a box around each line of each excerpt found on it (the view's evidence,
    or ``spans``)."""
    if not view.pages:
        return []
    boxes: dict[int, list[EvidenceBox]] = defaultdict(list)
    for span in view.evidence_spans if spans is None else spans:
        for start, end in span.get("spans") or ():
            for page, box in line_boxes(words_in(view.words, start, end)):
                boxes[page].append(EvidenceBox(int(span.get("index") or 0), str(span.get("fieldPath")), box))
    return [PageBoxes(number, boxes.get(number, [])) for number in range(1, view.pages + 1)]


def _drawn(node: Node) -> Iterator[str]:
    """The names of ``node`` and of what the template's ``show`` macro draws under it: the present children of
    an object, every item of a list."""
    yield node.name
    if node.is_null or not node.present:
        return
    for child in node.children:
        if node.kind == "array" or child.present:
            yield from _drawn(child)


def path_breaks(path: str) -> Markup:
    """A path that may wrap only after its ``/`` separators (a table column never breaks a name mid-word)."""
    return Markup("/<wbr>").join(escape(part) for part in path.split("/"))


def pretty(value: Any) -> str:
    """A candidate or request as indented JSON (non-ASCII kept readable)."""
    return json.dumps(value, ensure_ascii=False, indent=2)
