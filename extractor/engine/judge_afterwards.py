"""``extract judge run RUN``: judge a finished run afterwards, in place.

For every document run of RUN waiting for a person (READY_FOR_REVIEW or MANUAL_REVIEW, no decision yet)
whose final candidate passes the rules, the candidate is checked again against its source file (which must
still have the recorded content: a changed file is reported, not judged) and judged with the judge's own
queue, concurrency and timeout. Each call is recorded as a ``judge`` attempt of that document run (numbered
after any earlier judge attempts), and the document is routed again exactly as a judged run routes it:
a warning stays READY_FOR_REVIEW and is shown first, a fail or a judge that cannot answer goes to a person.
There is no generator here, so no regeneration: a fail goes straight to a person (said in the cause).
Documents judged before are skipped unless ``force``; decided ones are never touched.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from extractor import offload
from extractor.contracts.recorded import contract_of_run
from extractor.engine.route import route
from extractor.engine.settings import RunSettings
from extractor.errors import InputError
from extractor.judge.modes import Judge, attempt_fields
from extractor.store import AttemptRecord, RunInfo, Store
from extractor.store.info import DocumentRunInfo
from extractor.validate import validate
from extractor.vocab import REVIEWABLE, AttemptKind, DocumentState


@dataclass(frozen=True)
class Afterwards:
    """What ``extract judge run`` did to one document run (``result`` None: skipped, ``why`` says why)."""

    document_run_id: int
    path: str
    before: str
    state: str
    result: str | None
    why: str | None

    @property
    def to_person(self) -> bool:
        """Judged now, and a person must look at it (``extract judge run`` then exits 3)."""
        return self.result is not None and self.state == DocumentState.MANUAL_REVIEW

    def to_json(self) -> dict[str, Any]:
        return {"document_run_id": self.document_run_id, "path": self.path, "before": self.before,
                "state": self.state, "result": self.result, "cause": self.why}


def _skip(document_run: DocumentRunInfo, why: str) -> Afterwards:
    return Afterwards(document_run.id, document_run.path, document_run.state, document_run.state, None, why)


async def judge_run(store: Store, run: RunInfo, judge: Judge, *, force: bool = False) -> list[Afterwards]:
    """Judge every waiting document run of ``run`` that passed the rules; one result per document run."""
    contract = contract_of_run(run)  # as the run used it: the candidates are checked again by its rules
    settings = RunSettings(contract=contract)

    waiting = {d.id for d in store.undecided_document_runs(REVIEWABLE, [run.id])}

    async def one(document_run: DocumentRunInfo) -> Afterwards:
        if document_run.state not in REVIEWABLE:
            return _skip(document_run, f"{document_run.state}: nothing to judge")
        if document_run.id not in waiting:
            return _skip(document_run, "a person decided it already")
        attempts = store.attempts_for(document_run.id)
        judged = [a for a in attempts if a.kind == AttemptKind.judge]
        if judged and not force:
            return _skip(document_run, f"judged before ({len(judged)} judge attempt(s)); --force judges it again")
        final = next((a for a in attempts if a.id == document_run.final_attempt_id), None)
        if final is None or final.raw_response is None:
            return _skip(document_run, "no final candidate")
        try:
            document, _ = await offload.read(Path(document_run.path))
        except (InputError, OSError) as error:
            return _skip(document_run, f"source unreadable: {error}")
        if document.sha256 != document_run.sha256:
            return _skip(document_run, "the source file changed since the run: not judged")
        report = validate(final.raw_response, document, contract)
        if not report.passed:
            return _skip(document_run, "the candidate fails the rules: the judge only sees what passed them")
        started = datetime.now(UTC)
        async with judge.queue.slot():
            outcome, decision = await judge.evaluate(report)
        if outcome.request is not None:
            store.record_attempt(AttemptRecord(
                document_run_id=document_run.id, number=len(judged) + 1, kind=AttemptKind.judge,
                prompt_version=judge.rubric.prompt_version, request=outcome.request, created_at=started,
                **attempt_fields(outcome, decision, judge.policy)))
        routed = route(report, decision, settings)
        cause = routed.cause
        if cause is not None:
            cause = f"{cause} (judged afterwards by extract judge run{'; no regeneration' if decision.regenerate else ''})"
        store.finish_document(document_run.id, routed.state, cause, routed.needs_person, document_run.final_attempt_id)
        return Afterwards(document_run.id, document_run.path, document_run.state, routed.state, decision.result, cause)

    return list(await asyncio.gather(*(one(d) for d in store.document_runs_for(run.id))))


def judge_finished_run(store: Store, run: RunInfo, judge: Judge, *, force: bool = False) -> list[Afterwards]:
    """``judge_run`` from synchronous code; the judge's connections are closed however it ends."""

    async def judged() -> list[Afterwards]:
        try:
            return await judge_run(store, run, judge, force=force)
        finally:
            await judge.aclose()

    return asyncio.run(judged())
