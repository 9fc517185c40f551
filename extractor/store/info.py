"""What goes into the run log and what comes out of it: plain dataclasses, never ORM objects.

Writing: ``RunConfig`` starts a run, ``AttemptRecord`` is one model call. Reading: ``RunInfo``,
``DocumentInfo``, ``DocumentRunInfo``, ``AttemptInfo`` and ``CalibrationInfo`` outlive the session that read
them. An attempt's columns are declared once, in ``AttemptData``: writing and reading both take their fields
from it, so a new attempt column means the model, a migration and that class, nothing else.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from extractor.canonical import canonical_sha256
from extractor.vocab import FINAL_STATES, DocumentState

if TYPE_CHECKING:
    from extractor.calibration_report import CalibrationReport
    from extractor.generate import GenerationRequest


@dataclass(frozen=True)
class RunConfig:
    """What a run is started with; ``config_hash`` covers exactly the fields that decide its results."""

    contract: str
    contract_version: int
    prompt_version: str
    model: str
    provider: str
    validator_version: str
    segmenter: str
    judge_model: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)

    RESULT_FIELDS: ClassVar[tuple[str, ...]] = (
        "contract",
        "contract_version",
        "prompt_version",
        "model",
        "provider",
        "validator_version",
        "segmenter",
        "judge_model",
    )

    WINDOW_KEYS: ClassVar[tuple[str, ...]] = ("max_input_tokens", "max_output_tokens", "overlap")
    JUDGE_RESULT_KEYS: ClassVar[tuple[str, ...]] = ("rubric_version", "threshold", "mode", "metric_modes")
    """A judge's rubric, threshold and modes change routing as much as its model does."""

    @property
    def config_hash(self) -> str:
        payload: dict[str, Any] = {name: getattr(self, name) for name in self.RESULT_FIELDS}
        if "contract_settings_sha256" in self.config:  # thresholds, bands and modes decide results too
            payload["contract_settings"] = self.config["contract_settings_sha256"]
        if self.config.get("contract_hash"):  # an edited contract or catalogue is a new configuration
            payload["contract_hash"] = self.config["contract_hash"]
        judge = self.config.get("judge")
        if judge:
            payload["judge"] = {key: judge.get(key) for key in self.JUDGE_RESULT_KEYS}
        if self.config.get("guards") is not None:  # the contract's built-in checks decide BLOCKED and MANUAL_REVIEW
            payload["guards"] = self.config["guards"]
        windows = {key: self.config[key] for key in self.WINDOW_KEYS if self.config.get(key) is not None}
        if windows:  # budgets and overlap decide how a long document is cut into windows, so what is extracted
            payload["windows"] = windows
        return canonical_sha256(payload)


@dataclass(frozen=True)
class RunQuery:
    """Which runs ``Store.find_runs`` returns: every filter given must match.

    ``model`` matches the stored model id; with ``provider_model`` (``model`` read as a ``--model`` string, see
    ``extractor.providers.provider_model``) a run of that provider and model matches too."""

    ids: tuple[str, ...] | None = None
    id_prefix: str | None = None
    model: str | None = None
    provider_model: tuple[str, str | None] | None = None
    prompt_version: str | None = None
    contract: str | None = None
    validator_version: str | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class Claimant:
    """A run asking for a document under its configuration (``extractor.store.claims``): the name it read it by,
    the tags its new document run gets, and which finished claims it takes over instead of being told ``done``
    (every one with ``force``, else those ended in a state of ``retry``)."""

    run_id: str
    config_hash: str
    path: str
    tags: tuple[str, ...] = ()
    force: bool = False
    retry: frozenset[str] = frozenset()

    def takes_over(self, state: str) -> bool:
        """Whether a claim finished in ``state`` is redone by this claimant."""
        return self.force or state in self.retry


class ClaimResult(NamedTuple):
    """``("claimed", document_run_id)``, ``("done", earlier document_run_id)``, ``("busy", holder_run_id)``.

    A named tuple: ``status, ref = store.claim(...)`` works.
    """

    status: Literal["claimed", "done", "busy"]
    ref: int | str

    @property
    def document_run_id(self) -> int:
        """The document run to work on (claimed) or the one that already finished it (done)."""
        if not isinstance(self.ref, int):
            raise ValueError("a busy claim names the run holding the document, not a document run")
        return self.ref

    @property
    def detail(self) -> str:
        """What the outcome refers to, for messages."""
        if self.status == "busy":
            return f"run {self.ref} is processing it"
        return f"document run {self.ref}"


class FinishedClaim(NamedTuple):
    """Who finished a document for a configuration: its document run, that run, and the state it ended in."""

    document_run_id: int
    run_id: str
    state: DocumentState


@dataclass(frozen=True, kw_only=True)
class AttemptData:
    """The columns of one attempt that are written and read back as they are (see ``AttemptRecord``)."""

    document_run_id: int
    number: int
    kind: str
    """``extractor.vocab.AttemptKind``; each kind numbers its attempts from 1."""
    prompt_version: str
    outcome: str
    """``extractor.vocab.AttemptOutcome``."""
    raw_response: str | None = None
    """The model's answer verbatim, JSON or not (None when no answer came)."""
    parsed: Any = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    fields: Any = None
    sentences: Any = None
    evidence_spans: Any = None
    passed: bool | None = None
    mode: str | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Of ``prompt_tokens``, those the server read from its prompt cache (as it reported them)."""
    latency_ms: float | None = None
    transport: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    window: int | None = None
    """A long document's window (1-based; None: the whole document or the merged candidate)."""
    first_sentence: int | None = None
    last_sentence: int | None = None
    reused_from: int | None = None
    """The earlier attempt whose answer this one records again: no model call was made for it."""


@dataclass(frozen=True, kw_only=True)
class AttemptRecord(AttemptData):
    """One model call (generation, repair or judge) exactly as it happened, as ``Store.record_attempt`` takes it.

    The run and document come from the document run; ``created_at`` is when the call started (default:
    when it is recorded). The request is kept so that ``extract show`` prints exactly what was sent.
    """

    request: GenerationRequest
    created_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class AttemptInfo(AttemptData):
    """One stored attempt; ``request`` is exactly ``GenerationRequest.to_json()`` of the request sent."""

    id: int
    run_id: str
    document_id: int
    request: dict[str, Any]
    request_hash: str
    """``GenerationRequest.fingerprint`` of the request."""
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class RunInfo:
    id: str
    started_at: datetime
    finished_at: datetime | None
    status: str
    contract: str
    contract_version: int
    prompt_version: str
    model: str
    provider: str
    validator_version: str
    segmenter: str
    judge_model: str | None
    config_hash: str
    config: dict[str, Any]
    command: str
    host: str
    pid: int
    heartbeat_at: datetime
    counts: dict[str, int]
    """Document runs per state, e.g. ``{"READY_FOR_REVIEW": 12, "ERROR": 1}``."""
    outcome: str | None = None
    """The run's ``GateDecision`` once it ended (None while running, and for runs recorded before outcomes)."""
    decided: int = 0
    """Of its document runs, those a person has approved or rejected since."""


@dataclass(frozen=True)
class DocumentInfo:
    id: int
    sha256: str
    segmenter: str
    path: str
    format: str
    encoding: str | None
    char_count: int
    sentence_count: int
    sentences: list[dict[str, Any]]
    created_at: datetime


@dataclass(frozen=True)
class DocumentRunInfo:
    id: int
    run_id: str
    document_id: int
    sha256: str
    path: str
    config_hash: str
    state: str
    cause: str | None
    needs_person: list[str]
    final_attempt_id: int | None
    tags: list[str]
    started_at: datetime
    finished_at: datetime | None
    review_version: int = 0
    """Decisions taken on it when it was read: a decision is written only if it is still this (compare-and-set)."""


@dataclass(frozen=True)
class CalibrationInfo:
    """A stored judge calibration report; the columns repeat what the policy looks reports up by."""

    id: int
    created_at: datetime
    judge_model: str
    rubric_version: str
    threshold: float
    verdict: str
    labels_sha256: str
    n_cases: int
    report: CalibrationReport

    def to_json(self) -> dict[str, Any]:
        """The report's listing (``extract judge reports``): what it admits and its headline metrics."""
        judge = self.report.judge
        return {"id": self.id, "created_at": self.created_at.isoformat(), "judge_model": self.judge_model,
                "rubric_version": self.rubric_version, "threshold": self.threshold, "verdict": self.verdict,
                "n_cases": self.n_cases, "labels_sha256": self.labels_sha256,
                "auroc": None if judge.auroc is None else judge.auroc.to_json(),
                "mcc": None if judge.mcc is None else judge.mcc.to_json(), "summary": self.report.summary}


def newest_final(document_runs: Iterable[DocumentRunInfo]) -> dict[str, DocumentRunInfo]:
    """Per content sha256, the newest document run in a final state (else the newest at all), from document runs
    given newest first: what a selection of runs concluded about each document (``compare`` and ``eval`` both pair
    documents by it)."""
    chosen: dict[str, DocumentRunInfo] = {}
    for document_run in document_runs:
        current = chosen.get(document_run.sha256)
        if current is None or (current.state not in FINAL_STATES and document_run.state in FINAL_STATES):
            chosen[document_run.sha256] = document_run
    return chosen
