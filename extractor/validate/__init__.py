"""Deterministic validation: the same candidate, source and contract always give the same report.

Order is fixed: the response is parsed first; ``OUTPUT_NOT_JSON`` reports a parse that failed ->
``SCHEMA_VIOLATION`` -> the contract's content rules in stage order (references, order, evidence, coverage,
completeness) -> the extent warnings (``EXTRACTION_*``). No content rule runs when structure fails; the critical
rules (``extractor.rules.guards``) run on every response, JSON or not, and their findings come first.
"""

from __future__ import annotations

from extractor.contracts import Contract
from extractor.document import Document
from extractor.evidence.report import Finding, Report
from extractor.evidence.source import Source
from extractor.rules import get
from extractor.rules.guards import critical_findings, extent_findings
from extractor.rules.structure import SchemaInput, parse_candidate

VALIDATOR_VERSION = "1.3.0"  # bump on any change that can alter a verdict: rules, cards' logic, normalisation

__all__ = ["VALIDATOR_VERSION", "check_structure", "validate"]


def check_structure(raw: str, contract: Contract) -> Report:
    """The structure rules alone: JSON, then the schema. A window of a long document is checked this far
    (its partial candidate is validated as part of the merged one); ``candidate`` is set once it parsed."""
    report = Report(contract.name, contract.version, VALIDATOR_VERSION)
    parsed = parse_candidate(raw)
    report.findings = list(get("OUTPUT_NOT_JSON").run(parsed))
    if parsed.problem is not None:
        return report
    report.candidate = parsed.value
    report.findings = list(get("SCHEMA_VIOLATION").run(SchemaInput(parsed.value, contract.validator)))
    return report


def validate(raw: str, source: Source | Document, contract: Contract) -> Report:
    """Check one raw model response (or a candidate file's text) against its source document."""
    if isinstance(source, Document):
        source = Source(source)
    report = check_structure(raw, contract)
    critical = critical_findings(report.candidate, raw, source, contract.guards, contract.prompt_shingles)
    structural = report.findings
    report.findings = critical + structural
    if structural or report.candidate is None:
        return report
    parsed = report.candidate

    context = contract.model.context(parsed, source, contract.settings, contract.schema)
    findings: list[Finding] = []
    for content_rule in contract.rules:
        findings.extend(content_rule.run(context))
    report.fields, report.sentences, report.evidence_spans = contract.model.states(context, findings)
    report.findings = critical + findings
    report.findings += extent_findings(report, source, contract.guards)
    return report
