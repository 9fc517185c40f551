"""The API's models made from what the stages produce: a validator ``Report`` with its document, and a document run
as the run log has it (the rows ``extract show`` reads, so the API and the CLI show the same facts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from extractor.api.models import (
    Attempt,
    Evidence,
    FieldResult,
    Finding,
    Place,
    Report,
    Result,
    Sentence,
    SentenceState,
    Tokens,
)
from extractor.evidence import fieldpath
from extractor.evidence.report import Report as Checked
from extractor.vocab import DocumentState, Outcome

if TYPE_CHECKING:
    from pydantic import BaseModel

    from extractor.document import Document
    from extractor.engine import DocumentOutcome
    from extractor.store import Store


def report_of(checked: Checked, document: Document) -> Report:
    """``extract validate``'s report as the API's model."""
    sentences = [sentence.to_json() for sentence in document.sentences]
    as_json = checked.to_json()
    evidence = _evidence(as_json["evidence_spans"], checked.candidate, sentences)
    return Report(passed=checked.passed, contract=checked.contract, contract_version=checked.contract_version,
                  validator_version=checked.validator_version, candidate=checked.candidate,
                  findings=_findings(as_json["findings"]), fields=_fields(as_json["fields"], checked.candidate, evidence),
                  sentences=[_sentence_state(state) for state in as_json["sentences"]], evidence=evidence)


def result_of(store: Store, outcome: DocumentOutcome, pydantic: type[BaseModel] | None) -> Result:
    """One outcome of a run with its document run read back from the run log (none: the outcome alone)."""
    from extractor.review.view import attempt_views, sentence_label

    bare = Result(path=outcome.path, outcome=outcome.state, state=None, cause=outcome.cause, run_id=None,
                  document_run_id=outcome.document_run_id, sha256=None, contract=None, contract_version=None,
                  candidate=None, record=None)
    if outcome.document_run_id is None:
        return bare
    found = store.find_document_runs(ids=[outcome.document_run_id])
    if not found:
        return bare
    document_run = found[0]
    run = store.get_run(document_run.run_id)
    document = store.get_document(document_run.document_id)
    if run is None or document is None:
        return bare
    attempts = store.attempts_for(document_run.id)
    views = attempt_views(store, run, document_run, attempts)
    shown = next((a for a in attempts if a.id == document_run.final_attempt_id), attempts[-1] if attempts else None)
    candidate = None if shown is None else shown.parsed
    states = {state["id"]: state for state in (shown.sentences or [])} if shown is not None else {}
    evidence = _evidence(shown.evidence_spans or [] if shown is not None else [], candidate, document.sentences)
    sentences = [Sentence(id=s["id"], text=s["text"], start=s["start"], end=s["end"], block=s["block"],
                          label=sentence_label(states.get(s["id"]) if states else None), page=s.get("page"),
                          box=tuple(s["box"]) if s.get("box") else None, location=s.get("location"))
                 for s in document.sentences]
    calls = [view for view in views if view.attempt.reused_from is None]
    costs = [view.cost for view in calls]
    return bare.model_copy(update=dict(
        state=DocumentState(document_run.state), cause=document_run.cause if outcome.state is not Outcome.SKIPPED
        else outcome.cause, run_id=run.id, sha256=document.sha256, contract=run.contract,
        contract_version=run.contract_version, candidate=candidate, record=record_of(candidate, pydantic),
        fields=_fields(shown.fields or {} if shown is not None else {}, candidate, evidence),
        findings=_findings(shown.findings if shown is not None else []), needs_person=list(document_run.needs_person),
        sentences=sentences,
        attempts=[Attempt(number=view.position, label=view.label, kind=view.attempt.kind, outcome=view.attempt.outcome,
                          final=view.final, model=view.attempt.model, mode=view.attempt.mode,
                          prompt_tokens=view.attempt.prompt_tokens, completion_tokens=view.attempt.completion_tokens,
                          cached_tokens=view.attempt.cached_tokens, cost_usd=view.cost,
                          latency_ms=view.attempt.latency_ms, error=view.attempt.error,
                          findings=_findings(view.findings), raw_response=view.raw_response) for view in views],
        tokens=Tokens(prompt=sum(v.attempt.prompt_tokens or 0 for v in calls),
                      completion=sum(v.attempt.completion_tokens or 0 for v in calls),
                      cached=sum(v.attempt.cached_tokens or 0 for v in calls)),
        cost_usd=None if any(cost is None for cost in costs) else round(sum(c for c in costs if c is not None), 6)))


def record_of(candidate: Any, pydantic: type[BaseModel] | None) -> Any:
    """The candidate's record without the envelope: an instance of ``pydantic`` when the record fits it."""
    from extractor.contracts.envelope import ENVELOPE

    if not isinstance(candidate, dict):
        return None
    record = {key: value for key, value in candidate.items() if key not in ENVELOPE}
    if pydantic is None:
        return record
    from pydantic import ValidationError

    try:
        return pydantic.model_validate(record)
    except ValidationError:  # a candidate that failed the schema: the dict, as the model gave it
        return record


def _findings(found: Sequence[Mapping[str, Any]]) -> list[Finding]:
    return [Finding(rule_id=f["rule_id"], severity=f["severity"], location=f["location"], message=f["message"],
                    hint=f.get("hint")) for f in found]


def _sentence_state(state: Mapping[str, Any]) -> SentenceState:
    return SentenceState(id=state["id"], state=state.get("state"), field_paths=list(state.get("fieldPaths") or ()),
                         reason=state.get("reason"), rule_id=state.get("rule_id"))


def _evidence(spans: Sequence[Mapping[str, Any]], candidate: Any, sentences: Sequence[Mapping[str, Any]]
              ) -> list[Evidence]:
    """The evidence spans of a report, each with the excerpt the candidate gave and the pages its sentences are on."""
    listed = candidate.get("evidence") if isinstance(candidate, dict) else None
    by_id = {sentence["id"]: sentence for sentence in sentences}
    found = []
    for span in spans:
        index = int(span["index"])
        item = listed[index] if isinstance(listed, list) and 0 <= index < len(listed) else None
        excerpt = item.get("sourceExcerpt") if isinstance(item, dict) else None
        places = [Place(page=s["page"], box=tuple(s["box"])) for sid in span.get("sentence_ids") or ()
                  if (s := by_id.get(sid)) is not None and s.get("page") is not None and s.get("box")]
        found.append(Evidence(index=index, field_path=str(span.get("fieldPath")),
                              excerpt=excerpt if isinstance(excerpt, str) else None,
                              found=bool(span.get("found", bool(span.get("spans")))),
                              spans=[(int(a), int(b)) for a, b in span.get("spans") or ()],
                              sentence_ids=list(span.get("sentence_ids") or ()), places=places))
    return found


def _fields(states: Mapping[str, Mapping[str, Any]], candidate: Any, evidence: Sequence[Evidence]
            ) -> dict[str, FieldResult]:
    """Each field the report has a state for, with its value, the question asked about it and its evidence."""
    questions: dict[str, str] = {}
    listed = candidate.get("missingFields") if isinstance(candidate, dict) else None
    for item in listed if isinstance(listed, list) else ():
        if isinstance(item, dict) and isinstance(item.get("fieldPath"), str) and isinstance(item.get("question"), str):
            steps = fieldpath.parse(item["fieldPath"])
            questions.setdefault(fieldpath.render(steps) if steps else item["fieldPath"], item["question"])
    fields = {}
    for path, state in states.items():
        steps = fieldpath.parse(path)
        value = None if steps is None else fieldpath.resolve(candidate, steps)
        mine = [e for e in evidence if steps is not None and (theirs := fieldpath.parse(e.field_path)) is not None
                and fieldpath.related(steps, theirs) and len(theirs) >= len(steps)]
        fields[path] = FieldResult(path=path, value=None if value is fieldpath.MISSING else value,
                                   presence=state.get("state"), rule_id=state.get("rule_id"),
                                   question=questions.get(path), evidence=mine)
    return fields
