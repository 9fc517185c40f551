"""Everything a reviewer needs about one document run (or one run), assembled as plain JSON-ready data.

``extract show`` renders it with rich; ``--format json`` prints it as is, so both show the same facts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from extractor.evidence.report import FAILING
from extractor.review.resolve import ReviewError
from extractor.store import AttemptInfo, DocumentRunInfo, RunInfo, Store

UNACCOUNTED = "UNACCOUNTED"
NOT_EVALUATED = "NOT_EVALUATED"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="seconds")


def run_summary(run: RunInfo) -> dict[str, Any]:
    return {
        "id": run.id,
        "status": run.status,
        "outcome": run.outcome,
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
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
    }


def _source_text(path: str, sha256: str) -> tuple[str | None, str, str | None]:
    """The canonical text as the run saw it, when the file is still there unchanged.

    Returns ``(text, status, detail)`` with status ``unchanged``, ``changed`` or ``unreadable``.
    """
    from extractor.errors import InputError
    from extractor.ingest import load

    try:
        document = load(path)
    except InputError as error:
        return None, "unreadable", str(error)
    if document.sha256 != sha256:
        return None, "changed", f"{path} now has sha256 {document.sha256[:12]}, the run read {sha256[:12]}"
    return document.text, "unchanged", None


def sentence_label(state: dict[str, Any] | None) -> str:
    """MAPPED / UNMAPPED / EXCLUDED as verified; UNACCOUNTED; or the rule that refused the model's claim."""
    if state is None:
        return NOT_EVALUATED
    if state.get("state"):
        return str(state["state"])
    rule = state.get("rule_id")
    return UNACCOUNTED if rule in (None, "SENTENCE_NOT_ACCOUNTED") else f"UNVERIFIED:{rule}"


def _attempt_json(attempt: AttemptInfo, final_id: int | None) -> dict[str, Any]:
    findings = attempt.findings or []
    return {
        "id": attempt.id,
        "number": attempt.number,
        "kind": attempt.kind,
        "final": attempt.id == final_id,
        "outcome": attempt.outcome,
        "passed": attempt.passed,
        "model": attempt.model,
        "mode": attempt.mode,
        "prompt_version": attempt.prompt_version,
        "prompt_tokens": attempt.prompt_tokens,
        "completion_tokens": attempt.completion_tokens,
        "latency_ms": attempt.latency_ms,
        "error": attempt.error,
        "errors": sum(1 for f in findings if f.get("severity") in FAILING),
        "warnings": sum(1 for f in findings if f.get("severity") == "warning"),
        "findings": findings,
        "raw_response": attempt.raw_response if attempt.parsed is None else None,
        "created_at": _iso(attempt.created_at),
        "request_hash": attempt.request_hash,
        "request": attempt.request,
        "window": None if attempt.window is None else {
            "index": attempt.window, "first_sentence": attempt.first_sentence, "last_sentence": attempt.last_sentence,
            "reused_from": attempt.reused_from},
    }


def document_view(store: Store, records: Store, document_run: DocumentRunInfo,
                  others: list[DocumentRunInfo] | None = None) -> dict[str, Any]:
    """The source with sentence states and evidence spans, the candidate, field states, questions,
    every attempt's findings, the decisions taken and the approved record (if any)."""
    from extractor.store.approved import approved_record_for, reviews_for

    run = store.get_run(document_run.run_id)
    document = store.get_document(document_run.document_id)
    if run is None or document is None:
        raise ReviewError(f"document run {document_run.id} refers to a missing run or document; "
                          "the run log is damaged (see the store's integrity check)")
    attempts = store.attempts_for(document_run.id)
    final = next((a for a in attempts if a.id == document_run.final_attempt_id), None)
    shown = final or (attempts[-1] if attempts else None)
    from extractor.queue.uploads import uploaded_copy

    # A document submitted to the queue or the API is read from its upload in the run log: its path is only the
    # name a client gave it, never a file of this machine to open.
    with uploaded_copy(store.engine, document.sha256) as copy:
        text, source_status, source_detail = _source_text(str(copy or document_run.path), document.sha256)

    states = {s["id"]: s for s in (shown.sentences or [])} if shown is not None else {}
    spans = list(shown.evidence_spans or []) if shown is not None else []
    sentences = []
    for sentence in document.sentences:
        start, end = sentence["start"], sentence["end"]
        state = states.get(sentence["id"]) if states else None
        evidence = [
            {"start": max(s, start), "end": min(e, end), "fieldPath": span.get("fieldPath"), "index": span.get("index")}
            for span in spans
            for s, e in span.get("spans") or ()
            if s < end and e > start
        ]
        sentences.append({
            **sentence,
            "label": sentence_label(state),
            "state": None if state is None else state.get("state"),
            "fieldPaths": [] if state is None else state.get("fieldPaths") or [],
            "reason": None if state is None else state.get("reason"),
            "rule_id": None if state is None else state.get("rule_id"),
            "evidence": evidence,
        })
    candidate = shown.parsed if shown is not None else None
    missing = candidate.get("missingFields") if isinstance(candidate, dict) else None
    approved = approved_record_for(records, document.sha256, run.contract, run.contract_version)
    return {
        "kind": "document_run",
        "document_run": {
            "id": document_run.id,
            "state": document_run.state,
            "cause": document_run.cause,
            "needs_person": document_run.needs_person,
            "tags": document_run.tags,
            "final_attempt_id": document_run.final_attempt_id,
            "started_at": _iso(document_run.started_at),
            "finished_at": _iso(document_run.finished_at),
        },
        "run": run_summary(run),
        "document": {
            "path": document_run.path,
            "sha256": document.sha256,
            "format": document.format,
            "encoding": document.encoding,
            "segmenter": document.segmenter,
            "char_count": document.char_count,
            "sentence_count": document.sentence_count,
            "source_status": source_status,
            "source_detail": source_detail,
        },
        "text": text,
        "sentences": sentences,
        "sentence_counts": _count(s["label"] for s in sentences),
        "evidence_spans": spans,
        "shown_attempt_id": None if shown is None else shown.id,
        "candidate": candidate,
        "fields": None if shown is None else shown.fields,
        "missing_fields": missing,
        "attempts": [_attempt_json(a, document_run.final_attempt_id) for a in attempts],
        "reviews": [
            {"decision": r.decision, "reviewer": r.reviewer, "note": r.note, "at": _iso(r.created_at)}
            for r in reviews_for(store, document_run.id)
        ],
        "approved": None if approved is None else {
            "id": approved.id, "reviewer": approved.reviewer, "at": _iso(approved.approved_at),
            "note": approved.note, "edited": approved.edited, "run_id": approved.run_id,
            "attempt_id": approved.attempt_id, "same_as_candidate": approved.record == candidate,
        },
        "other_runs": [
            {"document_run_id": d.id, "run_id": d.run_id, "state": d.state, "started_at": _iso(d.started_at)}
            for d in (others or [])
        ],
    }


def run_view(store: Store, run: RunInfo) -> dict[str, Any]:
    """One run: its configuration, counts per state, and every document with its state and rule ids."""
    document_runs = store.document_runs_for(run.id)
    findings = store.findings_of_attempts(d.final_attempt_id for d in document_runs if d.final_attempt_id)
    return {
        "kind": "run",
        "run": run_summary(run),
        "documents": [
            {
                "document_run_id": d.id,
                "path": d.path,
                "sha256": d.sha256,
                "state": d.state,
                "cause": d.cause,
                "tags": d.tags,
                "rule_ids": sorted({f["rule_id"] for f in findings.get(d.final_attempt_id or -1, [])}),
            }
            for d in document_runs
        ],
    }


def _count(labels: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items()))
