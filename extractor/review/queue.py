"""The review queue: candidates waiting for a person, READY_FOR_REVIEW first, then MANUAL_REVIEW.

A document run waits when it ended in one of those states, is the newest run of its content under its
configuration (a forced rerun supersedes the older result), has no decision yet, and its content has no
approved record under the run's contract version. Only undecided document runs are read (an index holds
them), so listing the queue costs the same with a year of decided runs behind it.

The unit of approval is the content (one approved record per sha256 and contract version), so by default
each content is listed once: its READY_FOR_REVIEW result if any configuration produced one, else its
newest MANUAL_REVIEW result; the other waiting results of the same content are named in ``alternatives``
(``every_result`` lists them all). Order: state, then oldest run first, then path; ``urgent_first`` (the
web queue) puts critical (BLOCKED) and needs-a-person results before READY_FOR_REVIEW instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from extractor.review.decide import approvals_required
from extractor.review.resolve import ReviewError
from extractor.runfilter import RunFilter
from extractor.store import DocumentRunInfo, RunQuery, Store
from extractor.vocab import FAILING, REVIEWABLE, DocumentState

if TYPE_CHECKING:
    from extractor.store.approved import Approvals
    from extractor.store.review_claims import ReviewClaim

QUEUE_STATES: dict[str, tuple[DocumentState, ...]] = {
    "ready": (DocumentState.READY_FOR_REVIEW,),
    "manual": (DocumentState.MANUAL_REVIEW,),
    "blocked": (DocumentState.BLOCKED,),
    "all": REVIEWABLE,
}
"""What ``extract review --state`` lists."""


@dataclass(frozen=True)
class QueueQuery:
    """Which waiting document runs ``waiting`` lists, and in what order: of this ``contract``, of these runs
    (``run_ids``; None: every run), in these ``states``, with this ``tag``, of this ``owner`` (what a task of that
    owner's batches ended in, as a reviewer of that owner sees it); one result per document unless
    ``every_result``; the urgent first (BLOCKED, then what needs a person) when ``urgent_first``."""

    contract: str | None = None
    run_ids: tuple[str, ...] | None = None
    states: tuple[str, ...] = REVIEWABLE
    tag: str | None = None
    owner: str | None = None
    every_result: bool = False
    urgent_first: bool = False


@dataclass(frozen=True)
class QueueItem:
    document_run_id: int
    state: str
    path: str
    sha256: str
    run_id: str
    contract: str
    contract_version: int
    model: str
    prompt_version: str
    cause: str | None
    needs_person: list[str]
    tags: list[str]
    finished_at: datetime | None
    errors: dict[str, int] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)
    alternatives: list[int] = field(default_factory=list)
    approvals: Approvals | None = None
    """Where its approvals stand, when its contract needs more than one person ("1 of 2 approvals")."""
    claim: ReviewClaim | None = None
    """Who has it open to review it now, if anybody."""

    def to_json(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["finished_at"] = None if self.finished_at is None else self.finished_at.isoformat(timespec="seconds")
        out["approvals"] = None if self.approvals is None else self.approvals.to_json()
        out["claim"] = None if self.claim is None else self.claim.to_json()
        return out

    def review_status(self) -> str:
        """Its approvals and who has it open, in words (empty when neither applies)."""
        parts = [] if self.approvals is None else [self.approvals.describe()]
        if self.claim is not None:
            parts.append(f"open by {self.claim.reviewer} since {self.claim.claimed_at:%H:%M} UTC")
        return "; ".join(parts)


@dataclass(frozen=True)
class QueuePage:
    """The first ``len(items)`` of ``total`` documents waiting, in queue order."""

    items: list[QueueItem]
    total: int
    counts: dict[str, int] = field(default_factory=dict)  # of the ``total``, per state
    order: list[int] = field(default_factory=list)  # every waiting document run id in queue order (not only the page's)
    states: dict[int, str] = field(default_factory=dict)  # the state of each of ``order``


def runs_matching(store: Store, selection: RunFilter) -> tuple[str, ...] | None:
    """The ids of the runs a queue is narrowed to (None: no filter); a filter that matches no run is an error,
    not an empty queue, so a typo in ``--model`` is not mistaken for "nothing waits"."""
    if selection.empty:
        return None
    runs = selection.select(store)
    if not runs:
        raise ReviewError(f"no run matches {selection.describe()}")
    return tuple(run.id for run in runs)


def waiting(store: Store, records: Store, query: QueueQuery = QueueQuery(), *, limit: int | None = None) -> QueuePage:
    """What ``query`` finds waiting, in queue order, the first ``limit`` of it listed (None: all); only the page's
    findings, approvals and claims are read. The work follows the document runs nobody decided yet
    (``Store.undecided_document_runs``), not the size of the run log."""
    from extractor.store.approved import Approvals, approved_among, pending_signoffs
    from extractor.store.review_claims import live_claims

    document_runs = store.undecided_document_runs(query.states, query.run_ids, query.owner)
    runs = {run.id: run for run in store.find_runs(RunQuery(ids=tuple({d.run_id for d in document_runs})))}
    candidates = [d for d in document_runs if (query.contract is None or runs[d.run_id].contract == query.contract)
                  and (query.tag is None or query.tag in d.tags)]
    approved = approved_among(records, ((d.sha256, runs[d.run_id].contract, runs[d.run_id].contract_version)
                                        for d in candidates))
    candidates = [d for d in candidates
                  if (d.sha256, runs[d.run_id].contract, runs[d.run_id].contract_version) not in approved]
    order: dict[str, int] = {state: position for position, state in enumerate(REVIEWABLE)}
    candidates.sort(key=lambda d: (_urgency(d) if query.urgent_first else 0, order.get(d.state, len(order)),
                                   runs[d.run_id].started_at, d.path, d.id))
    alternatives: dict[int, list[int]] = {d.id: [] for d in candidates}
    if not query.every_result:
        first: dict[tuple[str, str, int], Any] = {}
        for d in sorted(candidates, key=lambda d: (order.get(d.state, len(order)), -runs[d.run_id].started_at.timestamp())):
            key = (d.sha256, runs[d.run_id].contract, runs[d.run_id].contract_version)
            if key in first:
                alternatives[first[key].id].append(d.id)
            else:
                first[key] = d
        chosen = {d.id for d in first.values()}
        candidates = [d for d in candidates if d.id in chosen]
    total = len(candidates)
    counts = dict(sorted(Counter(d.state for d in candidates).items()))
    sequence = [d.id for d in candidates]
    states_of = {d.id: str(d.state) for d in candidates}
    if limit is not None:
        candidates = candidates[:limit]
    findings = store.findings_of_attempts(d.final_attempt_id for d in candidates if d.final_attempt_id)
    required = {d.id: approvals_required(runs[d.run_id]) for d in candidates}
    signed = pending_signoffs(store, [d.id for d in candidates if required[d.id] > 1])
    claims = live_claims(store.engine, [d.id for d in candidates])
    items = []
    for d in candidates:
        run = runs[d.run_id]
        final = findings.get(d.final_attempt_id or -1, [])
        errors = Counter(f["rule_id"] for f in final if f.get("severity") in FAILING)
        warnings = Counter(f["rule_id"] for f in final if f.get("severity") == "warning")
        items.append(QueueItem(
            document_run_id=d.id, state=d.state, path=d.path, sha256=d.sha256, run_id=d.run_id,
            contract=run.contract, contract_version=run.contract_version, model=run.model,
            prompt_version=run.prompt_version, cause=d.cause, needs_person=d.needs_person, tags=d.tags,
            finished_at=d.finished_at, errors=dict(sorted(errors.items())), warnings=dict(sorted(warnings.items())),
            alternatives=alternatives[d.id],
            approvals=Approvals(required[d.id], tuple(signed.get(d.id, []))) if required[d.id] > 1 else None,
            claim=claims.get(d.id),
        ))
    return QueuePage(items, total, counts, sequence, states_of)


def _urgency(document_run: DocumentRunInfo) -> int:
    """0 critical (BLOCKED), 1 a warning that needs a person, 2 the rest (then ordered by state)."""
    if document_run.state == DocumentState.BLOCKED:
        return 0
    return 1 if document_run.needs_person else 2


def backlog(store: Store, records: Store) -> Counter[tuple[str, str]]:
    """The department's queue (as a reviewer of every owner sees it) counted by state and owner: each document run
    under every owner whose task ended in it, under "" when none did (``extract run``, ``extract run --queue``)."""
    from extractor.store.tasks import owners_of

    page = waiting(store, records, limit=0)
    owners = owners_of(store.engine, page.order)
    return Counter((state, owner) for document_run_id, state in page.states.items()
                   for owner in sorted(owners.get(document_run_id) or {""}))
