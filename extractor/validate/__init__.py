"""Deterministic validation: the same candidate, source and contract always give the same report.

Order is fixed: ``OUTPUT_NOT_JSON`` -> ``SCHEMA_VIOLATION`` -> content rules in stage order
(references, order, evidence, coverage, completeness). No content rule runs when structure fails.
"""

from __future__ import annotations

from extractor.contracts import Contract
from extractor.document import Document
from extractor.validate.report import Finding, Report
from extractor.validate.source import Source

VALIDATOR_VERSION = "1.0.0"  # bump on any change that can alter a verdict: rules, cards' logic, normalisation

__all__ = ["VALIDATOR_VERSION", "Report", "Finding", "Source", "validate"]


def validate(raw: str, source: Source | Document, contract: Contract) -> Report:
    """Check one raw model response (or a candidate file's text) against its source document."""
    from extractor.rules import content_rules, get, rag_answer, work_procedure
    from extractor.rules.structure import RawCandidate, SchemaInput

    if isinstance(source, Document):
        source = Source(source)
    report = Report(contract.name, contract.version, VALIDATOR_VERSION,
                    needs_person=tuple(contract.settings.get("needs_person", ())))
    parsed = RawCandidate(raw)
    report.findings = list(get("OUTPUT_NOT_JSON").run(parsed))
    if report.findings:
        return report
    report.candidate = parsed.value
    report.findings = list(get("SCHEMA_VIOLATION").run(SchemaInput(parsed.value, contract)))
    if report.findings:
        return report

    module = {"work_procedure": work_procedure, "rag_answer": rag_answer}[contract.name]
    context = module.Context(parsed.value, source, contract)
    findings: list[Finding] = []
    for content_rule in content_rules(contract.name):
        findings.extend(content_rule.run(context))
    report.findings = findings
    report.fields, report.sentences, report.evidence_spans = module.states(context, findings)
    return report
