"""Everything a reviewer needs about one document run (or one run), as typed views.

``extract show`` renders a view with ``extractor.ui``; ``--format json`` prints its ``to_json()``, so both
show the same facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from extractor.review.resolve import ReviewError
from extractor.store import AttemptInfo, DocumentInfo, DocumentRunInfo, RunInfo, Store
from extractor.vocab import FAILING, AttemptKind, SentenceMark

if TYPE_CHECKING:
    from extractor.document import Document, Word
    from extractor.queue.uploads import Source
    from extractor.store.approved import Approvals, ApprovedRecordInfo, PendingRecord, ReviewInfo
    from extractor.store.review_claims import ReviewClaim

def iso(value: datetime | None) -> str | None:
    """A time as the views print it (UTC, to the second)."""
    return None if value is None else value.isoformat(timespec="seconds")


def when(value: datetime | None) -> str:
    """A time as people read it, in UTC: ``2026-05-01 12:30 UTC`` (``-`` when there is none)."""
    return "-" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def latency(milliseconds: float | None) -> str:
    """A model call's time as ``extract show`` and the review page both show it: ``11.9 s`` (``-`` unmeasured)."""
    return f"{milliseconds / 1000:.1f} s" if milliseconds else "-"


def run_summary(run: RunInfo) -> dict[str, Any]:
    return {
        "id": run.id,
        "status": run.status,
        "outcome": run.outcome,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "contract": run.contract,
        "contract_version": run.contract_version,
        "prompt_version": run.prompt_version,
        "model": run.model,
        "provider": run.provider,
        "validator_version": run.validator_version,
        "segmenter": run.segmenter,
        "judge_model": run.judge_model,
        "config_hash": run.config_hash,
        "config": run.config,
        "command": run.command,
        "counts": dict(sorted(run.counts.items())),
        "documents": sum(run.counts.values()),
        "decided": run.decided,
    }


def _source(source: Source, sha256: str) -> tuple[Document | None, str, str | None]:
    """The document as the run read it, when its upload or file is there unchanged (read by a sandboxed reader,
    ``Source.document``).

    Returns ``(document, status, detail)`` with status ``unchanged``, ``changed`` or ``unreadable``.
    """
    from extractor.errors import InputError

    try:
        document = source.document()
    except InputError as error:
        return None, "unreadable", str(error)
    if document.sha256 != sha256:
        return None, "changed", f"{source.name} now has sha256 {document.sha256[:12]}, the run read {sha256[:12]}"
    return document, "unchanged", None


def sentence_label(state: dict[str, Any] | None) -> str:
    """MAPPED / UNMAPPED / EXCLUDED as verified; UNACCOUNTED; or the rule that refused the model's claim."""
    if state is None:
        return SentenceMark.NOT_EVALUATED
    if state.get("state"):
        return str(state["state"])
    rule = state.get("rule_id")
    return SentenceMark.UNACCOUNTED if rule in (None, "SENTENCE_NOT_ACCOUNTED") else f"UNVERIFIED:{rule}"


@dataclass(frozen=True)
class EvidenceMark:
    """Part of an evidence span that falls inside one sentence (offsets into the canonical text)."""

    start: int
    end: int
    field_path: str | None
    index: int | None

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "fieldPath": self.field_path, "index": self.index}


@dataclass(frozen=True)
class SentenceView:
    """One sentence of the source as the shown attempt left it: its label and the evidence inside it."""

    id: str
    text: str
    start: int
    end: int
    block: int
    label: str
    state: str | None
    field_paths: list[str]
    reason: str | None
    rule_id: str | None
    evidence: list[EvidenceMark]
    page: int | None = None  # where the format has pages (docs/formats.md#pages-and-boxes)
    box: list[float] | None = None
    location: str | None = None  # a workbook cell's address, or a place outside the body flow (footnote 2)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "start": self.start, "end": self.end, "block": self.block,
                "label": self.label, "state": self.state, "fieldPaths": self.field_paths, "reason": self.reason,
                "rule_id": self.rule_id, "evidence": [mark.to_json() for mark in self.evidence], "page": self.page,
                "box": self.box, "location": self.location}


@dataclass(frozen=True)
class Excerpt:
    """One evidence excerpt of the shown candidate as the source has it, with the pages it stands on."""

    field_path: str
    index: int | None
    text: str
    pages: list[int]

    def to_json(self) -> dict[str, Any]:
        return {"fieldPath": self.field_path, "index": self.index, "text": self.text, "pages": self.pages}


@dataclass(frozen=True)
class WindowView:
    """Which window of a long document an attempt answered, and whose answer it recorded again (no call)."""

    index: int
    first_sentence: int | None
    last_sentence: int | None
    reused_from: int | None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "first_sentence": self.first_sentence, "last_sentence": self.last_sentence,
                "reused_from": self.reused_from}


@dataclass(frozen=True)
class ReusedAnswer:
    """Where a window's answer recorded again came from: that attempt's place in its own document run."""

    document_run_id: int
    position: int

    def describe(self, here: int) -> str:
        where = "" if self.document_run_id == here else f" of document run {self.document_run_id}"
        return f"answer of attempt {self.position}{where} reused"

    def to_json(self) -> dict[str, Any]:
        return {"document_run_id": self.document_run_id, "attempt": self.position}


@dataclass(frozen=True)
class AttemptView:
    """One model call of the document run, and whether it is the one the run's state rests on.

    ``position`` numbers the document run's attempts 1, 2, 3 in the order they were made: the one numbering a
    person reads (``extract show``, the review page); ``label`` says what the attempt is, from what it is and
    what came before it, never from a stored number."""

    attempt: AttemptInfo
    final: bool
    position: int = 0
    label: str = ""
    reused: ReusedAnswer | None = None
    in_process: bool = False
    """Its model ran in the run's process (``extractor.prices.RunModels``): the call cost no API money."""

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.attempt.findings or []

    @property
    def errors(self) -> int:
        """Findings that fail the attempt: errors and critical ones."""
        return sum(1 for f in self.findings if f.get("severity") in FAILING)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.get("severity") == "warning")

    @property
    def raw_response(self) -> str | None:
        """The raw answer when it could not be parsed (a parsed one is the candidate)."""
        return self.attempt.raw_response if self.attempt.parsed is None else None

    @property
    def merged(self) -> bool:
        """A long document's candidate merged from its windows' answers (no model call of its own)."""
        return any(m.get("role") == "merge" for m in self.attempt.request.get("messages") or ())

    @property
    def window(self) -> WindowView | None:
        """The long document's window this attempt answered, if it was one."""
        a = self.attempt
        if a.window is None:
            return None
        return WindowView(a.window, a.first_sentence, a.last_sentence, a.reused_from)

    @property
    def cost(self) -> float | None:
        """What this call cost in US dollars (``extractor.prices``); None when unknown (no price, no token counts)
        or when no call was made (an answer reused from an earlier attempt)."""
        from extractor.prices import price_for

        a = self.attempt
        if self.in_process and a.reused_from is None:
            return 0.0
        price = price_for(a.model)
        if price is None or a.reused_from is not None or a.prompt_tokens is None or a.completion_tokens is None:
            return None
        return price.cost(a.prompt_tokens, a.cached_tokens, a.completion_tokens)

    def to_json(self) -> dict[str, Any]:
        from extractor.generate import messages_as_sent  # not for read-only commands (docs/design.md#data-flow)

        a = self.attempt
        return {
            "id": a.id, "number": a.number, "kind": a.kind, "final": self.final, "outcome": a.outcome,
            "passed": a.passed, "model": a.model, "mode": a.mode, "prompt_version": a.prompt_version,
            "prompt_tokens": a.prompt_tokens, "completion_tokens": a.completion_tokens,
            "cached_tokens": a.cached_tokens, "cost_usd": self.cost, "in_process": self.in_process,
            "latency_ms": a.latency_ms, "error": a.error,
            "errors": self.errors, "warnings": self.warnings, "findings": self.findings,
            "raw_response": self.raw_response, "created_at": iso(a.created_at), "request_hash": a.request_hash,
            "request": a.request, "merged": self.merged, "attempt": self.position, "label": self.label,
            "sent_messages": messages_as_sent(a.request.get("messages") or [], a.request.get("schema_at"), a.mode),
            "window": None if self.window is None else self.window.to_json(),
            "reused": None if self.reused is None else self.reused.to_json(),
        }


@dataclass(frozen=True)
class DocumentView:
    """Everything a reviewer needs about one document run (``extract show DOC``)."""

    document_run: DocumentRunInfo
    run: RunInfo
    document: DocumentInfo
    text: str | None  # the canonical text, when the file is still there unchanged
    source_status: str  # unchanged, changed or unreadable
    source_detail: str | None
    sentences: list[SentenceView]
    shown: AttemptInfo | None  # the final attempt, else the last one
    attempts: list[AttemptView]
    reviews: list[ReviewInfo]
    approved: ApprovedRecordInfo | None
    others: list[DocumentRunInfo] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)  # where each word is on its page (paged formats, source unchanged)
    pages: int = 0
    approvals: Approvals | None = None  # where its approvals stand, when its contract needs several people
    claim: ReviewClaim | None = None  # who has it open to review it now, if anybody
    pending: PendingRecord | None = None
    """The record waiting for more approvals (what approving it as it is signs off), when sign-offs are pending."""
    kind: ClassVar[str] = "document_run"

    @property
    def candidate(self) -> Any:
        return None if self.shown is None else self.shown.parsed

    @property
    def fields(self) -> dict[str, Any] | None:
        return None if self.shown is None else self.shown.fields

    @property
    def evidence_spans(self) -> list[dict[str, Any]]:
        return [] if self.shown is None else list(self.shown.evidence_spans or [])

    @property
    def excerpts(self) -> list[Excerpt]:
        """Every excerpt found in the source, in field order, with its text and pages (empty pages: no pages)."""
        found = []
        for span in self.evidence_spans:
            pieces, pages = [], []
            for start, end in span.get("spans") or ():
                for sentence in self.sentences:
                    if sentence.start < end and sentence.end > start:
                        low, high = max(start, sentence.start), min(end, sentence.end)
                        pieces.append(sentence.text[low - sentence.start:high - sentence.start])
                        if sentence.page is not None and sentence.page not in pages:
                            pages.append(sentence.page)
            if pieces:
                found.append(Excerpt(str(span.get("fieldPath")), span.get("index"), " ".join(pieces), pages))
        return found

    @property
    def missing_fields(self) -> Any:
        candidate = self.candidate
        return candidate.get("missingFields") if isinstance(candidate, dict) else None

    @property
    def sentence_counts(self) -> dict[str, int]:
        return label_counts(self.sentences)

    @property
    def approved_same_as_candidate(self) -> bool:
        return self.approved is not None and self.approved.record == self.candidate

    @property
    def shown_position(self) -> int | None:
        """The place among the attempts (1..) of the one whose candidate is shown: its number as people read it."""
        return next((a.position for a in self.attempts if self.shown is not None and a.attempt.id == self.shown.id),
                    None)

    def to_json(self) -> dict[str, Any]:
        d, document, approved = self.document_run, self.document, self.approved
        return {
            "kind": self.kind,
            "document_run": {
                "id": d.id, "state": d.state, "cause": d.cause, "needs_person": d.needs_person, "tags": d.tags,
                "final_attempt_id": d.final_attempt_id, "started_at": iso(d.started_at),
                "finished_at": iso(d.finished_at), "review_version": d.review_version,
            },
            "approvals": None if self.approvals is None else self.approvals.to_json(),
            "pending_record": None if self.pending is None else self.pending.to_json(),
            "claim": None if self.claim is None else self.claim.to_json(),
            "run": run_summary(self.run),
            "document": {
                "path": d.path, "sha256": document.sha256, "format": document.format, "encoding": document.encoding,
                "segmenter": document.segmenter, "char_count": document.char_count,
                "sentence_count": document.sentence_count, "source_status": self.source_status,
                "source_detail": self.source_detail,
            },
            "text": self.text,
            "sentences": [s.to_json() for s in self.sentences],
            "sentence_counts": self.sentence_counts,
            "evidence_spans": self.evidence_spans,
            "excerpts": [excerpt.to_json() for excerpt in self.excerpts],
            "shown_attempt_id": None if self.shown is None else self.shown.id,
            "shown_attempt": self.shown_position,
            "candidate": self.candidate,
            "fields": self.fields,
            "missing_fields": self.missing_fields,
            "attempts": [a.to_json() for a in self.attempts],
            "reviews": [{"decision": r.decision, "reviewer": r.reviewer, "note": r.note, "at": iso(r.created_at)}
                        for r in self.reviews],
            "approved": None if approved is None else {
                "id": approved.id, "reviewer": approved.reviewer, "at": iso(approved.approved_at),
                "approved_by": [entry["reviewer"] for entry in approved.approvals or ()] or [approved.reviewer],
                "note": approved.note, "edited": approved.edited, "run_id": approved.run_id,
                "attempt_id": approved.attempt_id, "same_as_candidate": self.approved_same_as_candidate,
            },
            "other_runs": [{"document_run_id": o.id, "run_id": o.run_id, "state": o.state,
                            "started_at": iso(o.started_at)} for o in self.others],
        }


def attempt_label(attempt: AttemptInfo, merged: bool, after_judge: bool) -> str:
    """What an attempt is: a generation, the one repair, a judge call, the regeneration after a judge fail, a
    long document's window call or the candidate merged from its windows."""
    repair = attempt.kind == AttemptKind.repair
    if attempt.window is not None:
        return f"window {attempt.window} s{attempt.first_sentence}-s{attempt.last_sentence}" + (", repair" if repair else "")
    if merged:
        return "merged from the windows' repairs" if repair else "merged from the windows"
    if attempt.kind == AttemptKind.generate and after_judge:
        return "regeneration after a judge fail"
    return str(attempt.kind)


def attempt_views(store: Store, run: RunInfo, document_run: DocumentRunInfo,
                  attempts: Sequence[AttemptInfo]) -> list[AttemptView]:
    """The attempts as a person reads them: numbered 1.. in order, labelled by what they are, a reused window
    answer named by its place in its own document run (not by a database id)."""
    from extractor.prices import RunModels

    local = RunModels.of_run(run).in_process
    positions = {a.id: (document_run.id, number) for number, a in enumerate(attempts, 1)}
    views: list[AttemptView] = []
    judged = False
    for number, attempt in enumerate(attempts, 1):
        view = AttemptView(attempt, attempt.id == document_run.final_attempt_id,
                           in_process=(attempt.model or run.model) in local)
        reused = None
        if attempt.reused_from is not None:
            if attempt.reused_from not in positions:
                earlier = store.get_attempt(attempt.reused_from)
                if earlier is not None:
                    positions |= {a.id: (earlier.document_run_id, n)
                                  for n, a in enumerate(store.attempts_for(earlier.document_run_id), 1)}
            if attempt.reused_from in positions:
                reused = ReusedAnswer(*positions[attempt.reused_from])
        views.append(replace(view, position=number, label=attempt_label(attempt, view.merged, judged), reused=reused))
        judged = judged or attempt.kind == AttemptKind.judge
    return views


def document_view(store: Store, records: Store, document_run: DocumentRunInfo,
                  others: list[DocumentRunInfo] | None = None) -> DocumentView:
    """The source with sentence states and evidence spans, the candidate, field states, questions,
    every attempt's findings, the decisions taken, the approvals so far and the record they signed off, who has it
    open, and the approved record (if any)."""
    from extractor.review.decide import approvals_of
    from extractor.store.approved import approved_record_for, pending_record, reviews_for
    from extractor.store.review_claims import live_claims

    run = store.get_run(document_run.run_id)
    document = store.get_document(document_run.document_id)
    if run is None or document is None:
        raise ReviewError(f"document run {document_run.id} refers to a missing run or document; "
                          "the run log is damaged (see the store's integrity check)")
    attempts = store.attempts_for(document_run.id)
    final = next((a for a in attempts if a.id == document_run.final_attempt_id), None)
    shown = final or (attempts[-1] if attempts else None)
    from extractor.queue.uploads import source_of

    # A document submitted to the queue or the API is read from its upload in the run log: its path is only the
    # name a client gave it, never a file of this machine to open.
    source: Document | None = None
    source_status = "unreadable"
    source_detail: str | None = f"{document_run.path}: its upload is not in the run log"
    found = source_of(store, document_run)
    if found is not None:
        source, source_status, source_detail = _source(found, document.sha256)
    text = None if source is None else source.text

    states = {s["id"]: s for s in (shown.sentences or [])} if shown is not None else {}
    spans = list(shown.evidence_spans or []) if shown is not None else []
    approvals = approvals_of(store, document_run, run)
    return DocumentView(
        document_run, run, document, text, source_status, source_detail, sentence_views(document, states, spans),
        shown,
        attempt_views(store, run, document_run, attempts),
        reviews_for(store, document_run.id),
        approved_record_for(records, document.sha256, run.contract, run.contract_version),
        list(others or []),
        [] if source is None else source.words, 0 if source is None else source.pages,
        approvals if approvals.required > 1 else None,
        live_claims(store.engine, [document_run.id]).get(document_run.id),
        pending_record(store, document_run.id) if approvals.pending else None,
    )


COVERAGE = "sentenceCoverage"
"""The envelope's list of sentence states (``{sentenceId, status, fieldPaths, reason}``)."""


def record_sentences(document: DocumentInfo, record: Any, spans: list[dict[str, Any]]) -> list[SentenceView]:
    """The sentences as a person's record (approved, or signed off and waiting) leaves them: its coverage entries
    (checked when it was approved: an error among them refuses an approval) and its evidence."""
    coverage = record.get(COVERAGE) if isinstance(record, dict) else None
    states = {str(entry.get("sentenceId")): {"id": entry.get("sentenceId"), "state": entry.get("status"),
                                            "fieldPaths": entry.get("fieldPaths"), "reason": entry.get("reason")}
              for entry in coverage or () if isinstance(entry, dict)}
    return sentence_views(document, states, spans)


def sentence_views(document: DocumentInfo, states: dict[str, dict[str, Any]],
                   spans: Sequence[dict[str, Any]]) -> list[SentenceView]:
    """The document's sentences as a record leaves them: each one's state by sentence id (``states``: none, every
    sentence NOT_EVALUATED) and the parts of the record's evidence ``spans`` that fall inside it."""
    sentences = []
    for sentence in document.sentences:
        start, end = sentence["start"], sentence["end"]
        state = states.get(sentence["id"]) if states else None
        evidence = [EvidenceMark(max(s, start), min(e, end), span.get("fieldPath"), span.get("index"))
                    for span in spans for s, e in span.get("spans") or () if s < end and e > start]
        sentences.append(SentenceView(
            sentence["id"], sentence["text"], start, end, sentence["block"], sentence_label(state),
            None if state is None else state.get("state"),
            [] if state is None else state.get("fieldPaths") or [],
            None if state is None else state.get("reason"),
            None if state is None else state.get("rule_id"),
            evidence,
            sentence.get("page"),
            sentence.get("box"),
            sentence.get("location"),
        ))
    return sentences


@dataclass(frozen=True)
class RunDocument:
    """One document of a run, with the rule ids of its final attempt's findings."""

    document_run: DocumentRunInfo
    rule_ids: list[str]


@dataclass(frozen=True)
class RunView:
    """One run (``extract show RUN``): its configuration and counts, and the documents it processed (the first of
    them, with a limit)."""

    run: RunInfo
    documents: list[RunDocument]
    kind: ClassVar[str] = "run"

    @property
    def total(self) -> int:
        """How many documents the run processed (its counts per state)."""
        return sum(self.run.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run": run_summary(self.run),
            "documents_total": self.total,
            "documents": [
                {"document_run_id": d.document_run.id, "path": d.document_run.path, "sha256": d.document_run.sha256,
                 "state": d.document_run.state, "cause": d.document_run.cause, "tags": d.document_run.tags,
                 "rule_ids": d.rule_ids}
                for d in self.documents
            ],
        }


def run_view(store: Store, run: RunInfo, limit: int | None = None) -> RunView:
    """One run: its configuration, counts per state, and every document (the first ``limit``) with its state and
    rule ids."""
    document_runs = store.document_runs_for(run.id, limit)
    findings = store.findings_of_attempts(d.final_attempt_id for d in document_runs if d.final_attempt_id)
    return RunView(run, [RunDocument(d, sorted({f["rule_id"] for f in findings.get(d.final_attempt_id or -1, [])}))
                         for d in document_runs])


def label_counts(sentences: Iterable[Any]) -> dict[str, int]:
    """How many sentences have each label (``label``), by label."""
    counts: dict[str, int] = {}
    for sentence in sentences:
        counts[sentence.label] = counts.get(sentence.label, 0) + 1
    return dict(sorted(counts.items()))
