"""The document page's model: ``extractor.review.view.document_view`` cut into what the template draws.

The view already holds the facts (sentence states, evidence spans clipped to sentences, findings per
attempt); this module only arranges them: the source as runs of text between sentence boundaries and
evidence boundaries (so each excerpt is its own element, linked to its field), and the candidate as the
contract's form tree with its findings and evidence beside each field.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from extractor.web.schemaform import Node, SchemaForm, finding_anchor

SENTENCE_STATES = ("MAPPED", "UNMAPPED", "EXCLUDED", "UNACCOUNTED", "NOT_EVALUATED")
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


@dataclass
class DocumentPage:
    view: dict[str, Any]
    sentences: list[SentenceRun]
    tail: str
    tree: Node | None
    findings: dict[str, list[dict[str, Any]]]  # by form name; "" for the whole record
    evidence_by_field: dict[str, list[dict[str, Any]]]
    questions: dict[str, str]
    field_states: dict[str, dict[str, Any]]
    lang: str
    extra_paths: list[str] = field(default_factory=list)


def lang_of(text: str) -> str:
    """A BCP 47 tag for the page's ``lang`` attribute, so fonts and line breaking fit the script."""
    hangul = len(re.findall(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]", text))
    cyrillic = len(re.findall(r"[\u0400-\u04ff]", text))
    latin = len(re.findall(r"[A-Za-z]", text))
    best = max((hangul, "ko"), (cyrillic, "ru"), (latin, "en"))
    return best[1] if best[0] else "und"


def _pieces(text: str, start: int, evidence: list[dict[str, Any]]) -> list[Piece]:
    """``text`` (starting at offset ``start``) cut at every evidence boundary inside it."""
    end = start + len(text)
    cuts = {start, end}
    for span in evidence:
        cuts.update((max(start, span["start"]), min(end, span["end"])))
    bounds = sorted(cuts)
    out = []
    for a, b in zip(bounds, bounds[1:]):
        if a == b:
            continue
        covering = [s for s in evidence if s["start"] <= a and s["end"] >= b]
        out.append(Piece(text[a - start:b - start], tuple(sorted({s["index"] for s in covering})),
                         tuple(sorted({s["fieldPath"] for s in covering if s.get("fieldPath")}))))
    return out


def source_runs(view: dict[str, Any]) -> tuple[list[SentenceRun], str]:
    """The sentences in order with the text between them (the source as the run read it, when it is
    unchanged; else each sentence's own text, blocks separated by blank lines)."""
    text: str | None = view.get("text")
    out: list[SentenceRun] = []
    previous_end, previous_block = 0, None
    for position, sentence in enumerate(view["sentences"]):
        start, end = sentence["start"], sentence["end"]
        if text is not None:
            lead, body = text[previous_end:start], text[start:end]
        else:
            lead = "" if not position else ("\n\n" if sentence.get("block") != previous_block else " ")
            body = sentence["text"]
        out.append(SentenceRun(sentence["id"], sentence["label"], lead, _pieces(body, start, sentence["evidence"]),
                               sentence.get("fieldPaths") or [], sentence.get("reason"), sentence.get("rule_id")))
        previous_end, previous_block = end, sentence.get("block")
    return out, (text[previous_end:] if text is not None else "")


def document_page(view: dict[str, Any], schema: dict[str, Any] | None) -> DocumentPage:
    """Everything the document template needs, from ``document_view`` and the contract's schema."""
    sentences, tail = source_runs(view)
    candidate = view.get("candidate")
    tree = SchemaForm(schema).tree(candidate) if schema is not None and isinstance(candidate, dict) else None
    names = {node.name for node in tree.walk()} if tree is not None else set()
    final = next((a for a in view["attempts"] if a["id"] == view.get("shown_attempt_id")), None)
    findings: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for finding in (final or {}).get("findings") or ():
        findings[finding_anchor(finding.get("location"), names)].append(finding)
    evidence: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in view.get("evidence_spans") or ():
        evidence[str(span.get("fieldPath"))].append(span)
    questions = {str(m.get("fieldPath")): str(m.get("question")) for m in view.get("missing_fields") or ()
                 if isinstance(m, dict)}
    extra = [f"{node.name + '.' if node.name else ''}{key}" for node in (tree.walk() if tree else ())
             for key in node.extra_keys]
    source = view.get("text") or " ".join(s["text"] for s in view["sentences"])
    return DocumentPage(view, sentences, tail, tree, dict(findings), dict(evidence), questions,
                        dict(view.get("fields") or {}), lang_of(source), extra)


def pretty(value: Any) -> str:
    """A candidate or request as indented JSON (non-ASCII kept readable)."""
    return json.dumps(value, ensure_ascii=False, indent=2)
