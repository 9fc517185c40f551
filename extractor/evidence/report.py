"""The validator's verdict: findings with locations, field and sentence states, evidence spans, and the
value-excerpt links a judge is asked about."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extractor.document import by_fields
from extractor.vocab import FAILING, Severity


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule firing at one place: what a person (or the repair prompt) needs to fix it."""

    rule_id: str
    severity: Severity
    location: str
    message: str
    hint: dict[str, Any] | None = None

    __reduce__ = by_fields

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule_id": self.rule_id,
            "severity": self.severity.value,
            "location": self.location,
            "message": self.message,
        }
        if self.hint is not None:
            out["hint"] = self.hint
        return out


@dataclass(frozen=True, slots=True)
class FieldState:
    """``PRESENT`` / ``NEEDS_INPUT``, or ``None`` with the rule that says why neither applies."""

    path: str
    state: str | None
    rule_id: str | None = None

    __reduce__ = by_fields

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "rule_id": self.rule_id}


@dataclass(frozen=True, slots=True)
class SentenceState:
    """``MAPPED`` / ``UNMAPPED`` / ``EXCLUDED`` as verified, or ``None`` with the rule that says why."""

    id: str
    state: str | None
    field_paths: tuple[str, ...] = ()
    reason: str | None = None
    rule_id: str | None = None

    __reduce__ = by_fields

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "fieldPaths": list(self.field_paths),
            "reason": self.reason,
            "rule_id": self.rule_id,
        }


@dataclass(frozen=True, slots=True)
class EvidenceSpan:
    """Where an excerpt was found: original-text spans and the sentence ids they touch."""

    index: int
    field_path: str
    spans: tuple[tuple[int, int], ...]
    sentence_ids: tuple[str, ...]
    source_id: str | None = None

    __reduce__ = by_fields

    @property
    def found(self) -> bool:
        return bool(self.spans)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "fieldPath": self.field_path,
            "found": self.found,
            "spans": [list(span) for span in self.spans],
            "sentence_ids": list(self.sentence_ids),
        }
        if self.source_id is not None:
            out["source_id"] = self.source_id
        return out


@dataclass(frozen=True)
class JudgeLink:
    """One thing a judge is asked about: does ``excerpt`` support ``value``?"""

    index: int  # position in the judge request, 0..n-1
    field_path: str  # the candidate's field the value lives at
    value: str
    excerpt: str
    origin: str  # where the link came from: "evidence[5]" or "claims[2]"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "fieldPath": self.field_path, "value": self.value, "excerpt": self.excerpt,
                "origin": self.origin}


@dataclass
class Report:
    """Everything ``extract validate`` prints; ``passed`` means no error- or critical-severity finding."""

    contract: str
    contract_version: int
    validator_version: str
    findings: list[Finding] = field(default_factory=list)
    fields: dict[str, FieldState] = field(default_factory=dict)
    sentences: list[SentenceState] = field(default_factory=list)
    evidence_spans: list[EvidenceSpan] = field(default_factory=list)
    candidate: Any = None

    @property
    def passed(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Finding]:
        """Findings that fail the candidate: errors and critical findings."""
        return [f for f in self.findings if f.severity in FAILING]

    @property
    def critical(self) -> list[Finding]:
        """Findings that block the document (``BLOCKED``) whatever mode or statistics say."""
        return [f for f in self.findings if f.severity is Severity.CRITICAL]

    @property
    def parsed(self) -> bool:
        return not any(f.rule_id == "OUTPUT_NOT_JSON" for f in self.findings)

    @property
    def structure_failed(self) -> bool:
        """No content rule ran: the candidate was not JSON or did not match the schema."""
        return any(f.rule_id in ("OUTPUT_NOT_JSON", "SCHEMA_VIOLATION") for f in self.findings)

    @property
    def unaccounted(self) -> list[str]:
        return [s.id for s in self.sentences if s.rule_id == "SENTENCE_NOT_ACCOUNTED"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.WARNING]

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "contract": self.contract,
            "contract_version": self.contract_version,
            "validator_version": self.validator_version,
            "findings": [f.to_json() for f in self.findings],
            "fields": {path: state.to_json() for path, state in self.fields.items()},
            "sentences": [s.to_json() for s in self.sentences],
            "evidence_spans": [e.to_json() for e in self.evidence_spans],
        }
