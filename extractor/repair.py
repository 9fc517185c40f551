"""The one bounded repair: the original request, the first raw answer, and every finding with its hint.

Repair is a correction, not a retry: the model is told exactly what failed and where (docs/design.md#repair). The
pipeline calls this at most once per document per run.
"""

from __future__ import annotations

from dataclasses import replace

from extractor.contracts import Contract
from extractor.document import Document
from extractor.evidence.report import Finding, Report
from extractor.generate import GenerationRequest
from extractor.generate.prompt import PromptTemplate, fixed_pieces


def describe_finding(finding: Finding) -> str:
    """One line per finding, with the nearest-source hint where the validator found one."""
    line = f"- {finding.rule_id} at {finding.location}: {finding.message}"
    hint = finding.hint or {}
    if "nearest_sentence_id" in hint:
        line += f'\n  nearest source sentence [{hint["nearest_sentence_id"]}]: "{hint["nearest_sentence"]}"'
    return line


def unaccounted_lines(report: Report, document: Document, contract: Contract) -> str:
    """The sentences the contract says are not accounted for; every sentence when the answer could not be read."""
    missing = {s.id for s in document.sentences} if report.structure_failed else contract.model.unaccounted(report,
                                                                                                            document)
    lines = [f"[{s.id}] {' '.join(s.text.split())}" for s in document.sentences if s.id in missing]
    return "\n".join(lines) or "(none)"


def render_repair(prompt: PromptTemplate, first: GenerationRequest, raw_response: str, report: Report,
                  document: Document, contract: Contract) -> GenerationRequest:
    """The repair request: the first conversation, the model's own answer, then the findings."""
    findings = "\n".join(describe_finding(f) for f in report.findings if f.severity.value == "error")
    text = prompt.repair.substitute(findings=findings or "(none)", unaccounted=unaccounted_lines(report, document, contract))
    messages = [*first.messages,
                {"role": "assistant", "content": raw_response if raw_response.strip() else "(empty response)"},
                {"role": "user", "content": text}]
    return replace(first, messages=messages, shared=(*first.shared, *fixed_pieces(prompt.repair)))
