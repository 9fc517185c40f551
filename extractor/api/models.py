"""What the Python API returns: ``Report`` (a candidate checked, ``extractor.validate``), ``Result`` (one document
converted, ``extractor.extract``) and ``Batch`` (``extractor.extract_many``), as pydantic models.

They hold the facts ``extract validate --format json`` and ``extract show --format json`` print, under the same
names where a name is shared (``rule_id``, ``severity``, ``location``), each field with its value, presence and
evidence in one place. Offsets are Python string indices into the document's canonical text
(``extractor.split(...).text``); a box is ``(x0, top, x1, bottom)`` as fractions of its page.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from extractor.vocab import FAILING, DocumentState, GateDecision, Outcome, Severity

Box = tuple[float, float, float, float]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Finding(_Frozen):
    """One rule firing at one place (``extract rules RULE_ID`` explains the rule)."""

    rule_id: str
    severity: Severity
    location: str = Field(description="where in the candidate, as a JSON path: $.processSteps[2].actorId")
    message: str
    hint: dict[str, Any] | None = Field(default=None, description="what the repair was told, e.g. the nearest passage")


class Place(_Frozen):
    """A sentence an excerpt stands in, on its page (formats with pages: PDF, scans, images)."""

    page: int
    box: Box


class Evidence(_Frozen):
    """One excerpt of the candidate's ``evidence`` list, as found in the source."""

    index: int = Field(description="its position in the candidate's evidence list")
    field_path: str
    excerpt: str | None = Field(description="as the candidate quoted it")
    found: bool = Field(description="whether it is in the source (after the contract's normalisation)")
    spans: list[tuple[int, int]] = Field(description="where it is: (start, end) offsets into the canonical text")
    sentence_ids: list[str]
    places: list[Place] = Field(default_factory=list, description="the pages and boxes of those sentences, where known")


class FieldResult(_Frozen):
    """One value of the record: what it is, whether it is there (PRESENT) or a person is asked (NEEDS_INPUT), and the
    evidence that supports it."""

    path: str
    value: Any
    presence: str | None = Field(description="PRESENT, NEEDS_INPUT, or None with the rule that says why neither")
    rule_id: str | None = None
    question: str | None = Field(default=None, description="the missingFields question asked about it")
    evidence: list[Evidence] = Field(default_factory=list)


class SentenceState(_Frozen):
    """A sentence as the checked candidate left it: MAPPED / UNMAPPED / EXCLUDED as verified, or None with the rule
    that refused the model's claim about it."""

    id: str
    state: str | None
    field_paths: list[str] = Field(default_factory=list)
    reason: str | None = None
    rule_id: str | None = None


class Report(_Frozen):
    """The deterministic check of one candidate against its source (``extract validate``)."""

    passed: bool = Field(description="no finding of severity error or critical")
    contract: str
    contract_version: int
    validator_version: str
    candidate: Any = Field(description="the candidate as parsed (None when it was not JSON)")
    findings: list[Finding]
    fields: dict[str, FieldResult]
    sentences: list[SentenceState]
    evidence: list[Evidence]

    @property
    def errors(self) -> list[Finding]:
        """Findings that fail the candidate: errors and critical ones."""
        return [finding for finding in self.findings if finding.severity in FAILING]

    @property
    def warnings(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.severity is Severity.WARNING]


class Attempt(_Frozen):
    """One model call for the document (generation, the one repair, a judge call, a window of a long document)."""

    number: int = Field(description="1, 2, 3 in the order they were made (as extract show numbers them)")
    label: str = Field(description="what it is: generate, repair, judge, window 2 s14-s30, merged from the windows")
    kind: str
    outcome: str = Field(description="passed, failed, unparseable, transport_error, interrupted or protocol_error")
    final: bool = Field(description="the attempt the document's state rests on")
    model: str | None
    mode: str | None = Field(description="the structured-output mode the server accepted")
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cost_usd: float | None = Field(description="None when the model's price or the token counts are unknown")
    latency_ms: float | None
    error: str | None
    findings: list[Finding]
    raw_response: str | None = Field(description="the answer verbatim when it could not be parsed")


class Tokens(_Frozen):
    prompt: int = 0
    completion: int = 0
    cached: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class Sentence(_Frozen):
    """A sentence of the source and its mark in the result (MAPPED, UNMAPPED, EXCLUDED, UNACCOUNTED, NOT_EVALUATED,
    UNVERIFIED:<rule>), with its page and box where the format has pages."""

    id: str
    text: str
    start: int
    end: int
    block: int
    label: str
    page: int | None = None
    box: Box | None = None
    location: str | None = None


class Result(_Frozen):
    """One document of a run: where it ended and everything a reviewer would look at (``extract show``)."""

    path: str = Field(description="the path (or the name of a Source) as the run log records it")
    outcome: Outcome = Field(description="what this call did with it: a final state, SKIPPED (done before: the earlier "
                             "result is shown), INPUT_ERROR or INTERRUPTED")
    state: DocumentState | None = Field(description="the state of the document run shown (None: no document run)")
    cause: str | None = Field(description="why, when the state is not plain success")
    run_id: str | None = Field(description="the run of the document run shown")
    document_run_id: int | None
    sha256: str | None = Field(description="the file's content hash")
    contract: str | None
    contract_version: int | None
    candidate: Any = Field(description="the final candidate (else the last attempt's), as parsed")
    record: Any = Field(description="the candidate's record without the envelope: an instance of the contract's "
                        "pydantic model when it has one and the record fits it, else a dict (None: no candidate)")
    fields: dict[str, FieldResult] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list, description="the shown attempt's findings")
    needs_person: list[str] = Field(default_factory=list, description="warnings that sent it to a person")
    sentences: list[Sentence] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = Field(default=None, description="what its model calls cost (None: a price is unknown)")

    @property
    def passed(self) -> bool:
        """READY_FOR_REVIEW: every rule passed (a person still approves it before export)."""
        return self.state is DocumentState.READY_FOR_REVIEW

    @property
    def errors(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.severity in FAILING]


class Batch(_Frozen):
    """The documents of one ``extract_many`` call (the paths that match nothing first, then the documents in the order
    ``extract run`` takes them: the paths as found, then the ``Source``s) and the run's outcome."""

    run_id: str | None = Field(description="None when there was nothing to read (no run was recorded)")
    outcome: GateDecision = Field(description="as extract run decides it: PROMOTE, MANUAL_REVIEW, BLOCK, NOT_EVALUABLE")
    results: list[Result]
    interrupted: bool = False
    stopped: str | None = Field(default=None, description="why the run stopped early when no one stopped it "
                                "(max_cost)")
    seconds: float = 0.0
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    notes: list[str] = Field(default_factory=list, description="what extract run prints on stderr: the bundled model "
                             "is a demonstration, the judge's mode was lowered, links skipped")
    judge: dict[str, Any] | None = Field(default=None, description="the judge's summary, when the run had one")

    @property
    def counts(self) -> dict[str, int]:
        """Documents per outcome."""
        found: dict[str, int] = {}
        for result in self.results:
            found[result.outcome.value] = found.get(result.outcome.value, 0) + 1
        return dict(sorted(found.items()))
