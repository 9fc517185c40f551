"""The one regeneration after a judge ``fail`` (docs/design.md#judge): the generator asked again with stronger context.

Stronger context is three things: the judge's findings (each unsupported link with its score, the invented
facts, a contradiction), the full source sentences around every excerpt the candidate quoted (the judge
saw only excerpts; the generator now sees what surrounds them), and the instruction to answer only from the
attached text and leave a value null with a question when the text does not state it. The conversation is
the first request, the candidate the judge failed, then this message: the model corrects its own answer.
"""

from __future__ import annotations

from dataclasses import replace

from extractor.document import Document
from extractor.evidence.report import Report
from extractor.generate import GenerationRequest
from extractor.generate.prompt import fixed_pieces
from extractor.judge.stage import JudgeOutcome, Rubric

NEIGHBOURS = 1
"""Sentences taken on each side of a sentence an excerpt touches."""


def findings_text(outcome: JudgeOutcome, threshold: float) -> str:
    """The judge's findings as lines the generator can act on."""
    verdict = outcome.verdict
    if verdict is None:
        return "- the judge could not score the answer"
    by_index = {link.index: link for link in outcome.links}
    lines = []
    for score in verdict.links:
        if score.supported is not None and score.supported < threshold:
            link = by_index[score.index]
            lines.append(f"- {link.field_path}: value {link.value!r} is supported {score.supported:.2f} "
                         f"by its excerpt {link.excerpt!r}")
    lines += [f"- invented fact: {fact!r}" for fact in verdict.invented_facts]
    if verdict.contradicts_context:
        lines.append("- a value contradicts its excerpt")
    if verdict.comment:
        lines.append(f"- judge's comment: {verdict.comment}")
    return "\n".join(lines) or f"- verdict {verdict.verdict}"


def context_sentences(report: Report, document: Document, neighbours: int = NEIGHBOURS) -> str:
    """``[id] text`` of every sentence an excerpt touches and its neighbours, in document order."""
    position = {sentence.id: number for number, sentence in enumerate(document.sentences)}
    wanted: set[int] = set()
    for span in report.evidence_spans:
        for sentence_id in span.sentence_ids if span.found else ():
            if sentence_id in position:
                middle = position[sentence_id]
                wanted.update(range(max(0, middle - neighbours), min(len(document.sentences), middle + neighbours + 1)))
    return "\n".join(f"[{document.sentences[n].id}] {' '.join(document.sentences[n].text.split())}"
                     for n in sorted(wanted)) or "(no excerpt was found in the source)"


def render_regeneration(rubric: Rubric, first: GenerationRequest, raw_response: str, outcome: JudgeOutcome,
                        threshold: float, report: Report, document: Document) -> GenerationRequest:
    """The regeneration request: the first conversation, the failed answer, the findings and the context."""
    text = rubric.regenerate.substitute(findings=findings_text(outcome, threshold),
                                        context=context_sentences(report, document))
    messages = [*first.messages, {"role": "assistant", "content": raw_response if raw_response.strip() else "(empty)"},
                {"role": "user", "content": text}]
    return replace(first, messages=messages, shared=(*first.shared, *fixed_pieces(rubric.regenerate)))
