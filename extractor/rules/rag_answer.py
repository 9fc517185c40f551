"""Content rules of the ``rag_answer`` contract (docs/design.md#rules): citations exist in the block they name,
claims name known sources whose text covers the claim's terms.

Source blocks are the document's sentence units: the blocks of a ``{"blocks": [{"id", "text"}]}`` JSON
source, or ``s1..sN`` of any other document.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

from extractor.document import Document, Sentence
from extractor.evidence.fieldpath import location
from extractor.evidence.report import EvidenceSpan, FieldState, Finding, JudgeLink, Report, SentenceState
from extractor.evidence.source import Source
from extractor.evidence.support import support_score
from extractor.evidence.text import NormalizedText
from extractor.rules import Card, EvidenceModel, Hit, rule
from extractor.vocab import Severity

CONTRACT = "rag_answer"
NORMALISATION = "Unicode NFKC, case folded, whitespace runs collapsed to one space"


class Context:
    def __init__(self, candidate: dict[str, Any], source: Source, settings: Mapping[str, Any],
                 schema: Mapping[str, Any]) -> None:
        self.candidate = candidate
        self.source = source
        self.settings = settings
        self.normalisation = self.settings.get("evidence_normalisation", "nfkc_casefold_whitespace")
        self._block_matchers: dict[str, NormalizedText] = {}

    @property
    def blocks(self) -> dict[str, Sentence]:
        return self.source.ids

    def quote_spans(self, source_id: str, quote: str) -> list[tuple[int, int]]:
        """Spans (in document offsets) of ``quote`` inside the one block ``source_id``."""
        block = self.blocks[source_id]
        if source_id not in self._block_matchers:
            self._block_matchers[source_id] = NormalizedText(block.text, self.normalisation)
        limit = int(self.settings.get("max_occurrences_per_excerpt", 20))
        return [(block.start + a, block.start + b) for a, b in self._block_matchers[source_id].find_all(quote, limit)]

    @cached_property
    def citation_spans(self) -> list[list[tuple[int, int]]]:
        return [
            self.quote_spans(c["source_id"], c["quote"]) if c["source_id"] in self.blocks else []
            for c in self.candidate["citations"]
        ]

    @property
    def support(self) -> dict[str, Any]:
        support: dict[str, Any] = self.settings.get("lexical_support", {})
        return support


@rule(Card(
    "SOURCE_ID_UNKNOWN",
    contract=CONTRACT,
    stage="references",
    fires_when="a citation names a source_id the source does not have",
    inputs="citations[*].source_id, source block ids",
    normalisation="none (ids are compared exactly)",
    passes="every citation's source_id is a block id",
    location="$.citations[i].source_id",
))
def source_id_unknown(ctx: Context) -> Iterator[Hit]:
    for index, citation in enumerate(ctx.candidate["citations"]):
        if citation["source_id"] not in ctx.blocks:
            yield Hit(location("citations", index, "source_id"), f"unknown source_id: {citation['source_id']}")


@rule(Card(
    "CLAIM_SOURCE_UNKNOWN",
    contract=CONTRACT,
    stage="references",
    fires_when="a claim lists a source id the source does not have",
    inputs="claims[*].source_ids, source block ids",
    normalisation="none",
    passes="every id in every claim's source_ids is a block id",
    location="$.claims[i].source_ids",
))
def claim_source_unknown(ctx: Context) -> Iterator[Hit]:
    for index, claim in enumerate(ctx.candidate["claims"]):
        unknown = [sid for sid in claim["source_ids"] if sid not in ctx.blocks]
        if unknown:
            yield Hit(location("claims", index, "source_ids"), f"unknown source ids: {unknown}")


@rule(Card(
    "CITATION_NOT_FOUND",
    contract=CONTRACT,
    stage="evidence",
    fires_when="a normalised quote is not a substring of the normalised block it names",
    inputs="citations[*].quote, the text of block citations[*].source_id",
    normalisation=NORMALISATION + "; nothing else (punctuation, digits, negations stay)",
    passes="the quote occurs inside its own block (a quote found only in another block fails: wrong attribution)",
    location="$.citations[i].quote",
))
def citation_not_found(ctx: Context) -> Iterator[Hit]:
    for index, citation in enumerate(ctx.candidate["citations"]):
        if citation["source_id"] in ctx.blocks and not ctx.citation_spans[index]:
            yield Hit(location("citations", index, "quote"), f"quote is absent from source {citation['source_id']}")


SUPPORT_NORMALISATION = ("NFKC + casefold; Hangul: particles and endings stripped, stem bigrams; Cyrillic/Latin: "
                         "Snowball stems of words of min_word_length+ letters (default 4) without stop words; "
                         "numbers whole (extractor.evidence.support)")


@rule(Card(
    "CLAIM_NOT_CHECKABLE",
    contract=CONTRACT,
    stage="evidence",
    fires_when="a claim has no token to check (no number, no Hangul stem, no word of min_word_length letters)",
    inputs="claims[*].text",
    normalisation=SUPPORT_NORMALISATION,
    passes="the claim has at least one checkable token",
    location="$.claims[i].text",
    judge_needed_after_failure="yes: short claims need a judge or a person",
))
def claim_not_checkable(ctx: Context) -> Iterator[Hit]:
    min_length = int(ctx.support.get("min_word_length", 4))
    for index, claim in enumerate(ctx.candidate["claims"]):
        if not set(claim["source_ids"]) - set(ctx.blocks) and support_score(claim["text"], "", min_length) is None:
            yield Hit(location("claims", index, "text"), "claim has no checkable terms")


@rule(Card(
    "CLAIM_LOW_LEXICAL_SUPPORT",
    contract=CONTRACT,
    stage="evidence",
    fires_when="the blocks a claim names state too little of it (lexical support score)",
    inputs="claims[*].text, texts of claims[*].source_ids",
    normalisation=SUPPORT_NORMALISATION,
    passes="support_score(claim, its blocks) >= minimum_overlap (default 0.55); between judge_band_lower and "
    "minimum_overlap the finding is only a warning routed to a judge; both fitted on labelled rows by "
    "`extract rules calibrate CLAIM_LOW_LEXICAL_SUPPORT LABELS.csv` (contracts/rag_answer/v1/calibration.json)",
    location="$.claims[i]",
    judge_needed_after_failure="yes in the judge band; below it the claim lacks support",
))
def claim_low_lexical_support(ctx: Context) -> Iterator[Hit]:
    min_length = int(ctx.support.get("min_word_length", 4))
    minimum = float(ctx.support.get("minimum_overlap", 0.55))
    band_lower = float(ctx.support.get("judge_band_lower", minimum))
    for index, claim in enumerate(ctx.candidate["claims"]):
        if set(claim["source_ids"]) - set(ctx.blocks):
            continue
        overlap = support_score(claim["text"], " ".join(ctx.blocks[sid].text for sid in claim["source_ids"]),
                                min_length)
        if overlap is None:
            continue
        if overlap < band_lower:
            yield Hit(location("claims", index), f"Lexical support {overlap:.2f} is below {band_lower:.2f}",
                      {"overlap": round(overlap, 3)})
        elif overlap < minimum:
            yield Hit(location("claims", index), f"Lexical support {overlap:.2f} is in the judge band "
                      f"[{band_lower:.2f}, {minimum:.2f}): route to a judge", {"overlap": round(overlap, 3)},
                      severity=Severity.WARNING)


def states(ctx: Context, findings: list[Finding]) -> tuple[dict[str, FieldState], list[SentenceState], list[EvidenceSpan]]:
    """rag_answer has no field or sentence states; its evidence spans are the citations' quotes."""
    spans = [
        EvidenceSpan(index, f"citations[{index}]", tuple(found), (citation["source_id"],) if found else (),
                     source_id=citation["source_id"])
        for index, (citation, found) in enumerate(zip(ctx.candidate["citations"], ctx.citation_spans))
    ]
    return {}, [], spans


def links(report: Report) -> list[JudgeLink]:
    """Every claim with its found citation quotes (of the claim's own source ids) as the excerpt."""
    candidate = report.candidate
    if not isinstance(candidate, dict):
        return []
    quotes: dict[str, list[str]] = {}
    for span in report.evidence_spans:
        if span.found and span.source_id is not None:
            quotes.setdefault(span.source_id, []).append(candidate["citations"][span.index]["quote"])
    found: list[JudgeLink] = []
    for number, claim in enumerate(candidate.get("claims", [])):
        excerpts = [quote for source_id in claim.get("source_ids", []) for quote in quotes.get(source_id, [])]
        if excerpts and claim.get("text", "").strip():
            found.append(JudgeLink(len(found), f"claims[{number}]", claim["text"], " … ".join(excerpts),
                                   f"claims[{number}]"))
    return found


def unaccounted(report: Report, document: Document) -> set[str]:
    """No coverage here: the blocks no found citation quotes."""
    return {s.id for s in document.sentences} - {e.source_id for e in report.evidence_spans if e.found}


MODEL = EvidenceModel(context=Context, states=states, links=links, unaccounted=unaccounted, has_coverage=False)
