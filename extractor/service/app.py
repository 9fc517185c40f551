"""The FastAPI application of ``extract serve``: built by ``create_app`` around one run log.

Every route of the API (``/v1``) needs a bearer token; what a token may do is its role (``extractor.service.auth``):
submitters submit and read their owner's work, reviewers also decide it, admins also change the default settings.
Every token reads only its owner's batches, submissions, the document runs they ended in and their approved
records, unless it is department-wide (an admin, or a reviewer made with ``--all-owners``): another owner's id
answers 404 exactly like a missing one. Runs and compare mix every owner's documents: department-wide tokens only.
A decision is compare-and-set and waits for another person's claim (``extractor.review.decide``): 409 names the
decision that came first or who has the document open. ``GET /v1/approved`` streams approved records as JSONL, a
page at a time, with ``extract export``'s provenance.

Every refusal is a 4xx the OpenAPI document describes, never a 500: ids and limits are bounded where they
enter (a 64-bit id overflows SQLite, a 32-bit one PostgreSQL); a body the validators refuse, or one that cannot
be parsed at all (JSON nested too deeply included), is 422 with the list of errors FastAPI documents; other
refusals carry ``{"detail": "..."}`` (``Problem``). A request body over the document limit gets 413 as soon as
the bytes that came pass it (``extractor.service.limits``: counted as they arrive, never buffered whole first; a
multipart upload is spooled by Starlette, to disk past 1 MB); OpenAPI docs are at ``/docs``.

A submission is committed before its messages are sent: when the broker does not take them it answers 503 with
``Retry-After`` and the ids to follow (``NotSent``), and the outbox's sweep sends them once the broker is back
(``extractor.queue.outbox``). The review pages for people are under ``/review`` (``extractor.service.browser``:
sign in by pasting a token). Handlers are plain functions (FastAPI runs them in its thread pool): the run log is
a synchronous SQLAlchemy store.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Query, Request, UploadFile, status
from fastapi import Path as PathParam
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from extractor.engine.discover import with_attachments
from extractor.errors import ExtractorError, UsageError
from extractor.ingest import max_document_bytes
from extractor.options import SHOWN_CHARS, RunOptions, Tag, message, shown
from extractor.queue.endpoints import Endpoints, load_endpoints
from extractor.queue.fleet import is_redis
from extractor.queue.outbox import BrokerAway, Outbox, Sweeper
from extractor.queue.runner import Runner
from extractor.queue.settings import BatchSettings
from extractor.queue.uploads import plain_name
from extractor.service.auth import Principal, current_principal, require_everyone, require_role
from extractor.service.limits import BodyLimit, BodyTooLarge, over_limit
from extractor.service.metrics import Department, collected, health_routes, instrument, metrics
from extractor.store import DocumentRunInfo, Store, tasks
from extractor.store.tasks import Upload
from extractor.vocab import DEFAULT_MAX_PENDING, DEFAULT_REVIEW_PAGE, MAX_ROW_ID, REVIEW_CLAIM_S, Role, TaskState

FORM_OVERHEAD_BYTES = 64 << 10
"""Room for multipart boundaries and form fields around the documents of one request."""
RETRY_AFTER_S = 5
MAX_REQUEST_DOCUMENTS = 1000
"""Documents one request may submit, an e-mail's attachments counted (Starlette's own limit of files per form)."""
MAX_SENT_NAME_CHARS = 1000
"""How much of a name as sent the submission keeps (the document's own name is at most ``MAX_NAME_CHARS``)."""
MAX_TAGS = 20
"""A submission's tags: at most this many, each of 1 to this many printable characters."""
MAX_NOTE_CHARS = 10_000
"""A reviewer's note or reason for a rejection, at most."""
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
ContractName = Annotated[str, StringConstraints(max_length=200)]

# Module level: FastAPI resolves the (string) annotations of the handlers in this module's namespace.
Submitter = Annotated[Principal, Depends(require_role(Role.submitter))]
Reviewer = Annotated[Principal, Depends(require_role(Role.reviewer))]
Admin = Annotated[Principal, Depends(require_role(Role.admin))]
Everyone = Annotated[Principal, Depends(require_everyone)]

"""The largest id the run log's integer keys hold on every backend (PostgreSQL's ``integer``)."""
DocumentRunId = Annotated[int, PathParam(ge=1, le=MAX_ROW_ID, description="a document run id")]
TaskId = Annotated[uuid.UUID, PathParam(description="a submission id, as `POST /v1/documents` returned it")]
BatchId = Annotated[str, PathParam(pattern=r"^[0-9a-f]{32}$", description="a batch id")]
RunRef = Annotated[str, PathParam(pattern=r"^[0-9A-Fa-f]{4,64}$", description="a run id or a unique prefix of it")]
Selection = Annotated[str, Query(min_length=1, max_length=500, pattern=r"^[^\x00-\x1f\x7f]+$",
                                 description="runs as `extract compare` selects them: a run id, or key=value filters")]
Limit = Annotated[int, Query(ge=1, le=1000, description="at most this many items")]
Cursor = Annotated[str | None, Query(max_length=100, pattern=r"^[0-9T:.+\-]+~[0-9]+$",
                                     description="where the page starts: the X-Next-Cursor of the previous one")]
ApprovedLimit = Annotated[int, Query(ge=1, le=10_000, description="at most this many records")]
JSONL = "application/x-ndjson"
APPROVED_PAGE = 1000
SCAN_PER_PAGE = 20
"""``GET /v1/approved`` of one owner reads at most this many times ``limit`` records per request (the rest are
other owners'): a page may hold fewer records, even none, and still name the next one."""


@dataclass
class Service:
    """What the routes share: the run log, where submissions go, the default settings and the limits.

    ``publish`` hands committed task ids to the workers (Celery messages through the outbox: ``BrokerAway`` when
    the broker does not take them), or to ``runner`` in this process.
    """

    store: Store
    publish: Callable[[list[str]], None]
    defaults: RunOptions
    """The options of submissions (``PUT /v1/settings``); a submission may name its contract and tags."""
    endpoints: Endpoints
    """The model servers the operator configured: the API chooses among their names and models only."""
    max_upload_bytes: int = field(default_factory=max_document_bytes)
    """The one document limit (``EXTRACT_MAX_DOCUMENT_BYTES``): an upload the workers' ingest would refuse
    is refused here, with 413."""
    max_pending: int = DEFAULT_MAX_PENDING
    """Documents waiting for a worker past which a submission gets 429 (``extract serve --max-pending``)."""
    runner: Runner | None = None
    broker: str | None = None
    """The workers' broker (``/readyz`` checks it answers); None: documents are converted in this process."""
    sweeper: Sweeper | None = None
    """With a broker: sends what waits for it (``extractor.queue.outbox``)."""
    claim_s: float = REVIEW_CLAIM_S
    """How long opening a document to review it holds it (the page renews it while it is open)."""
    records: Store = field(init=False)
    """Where approved records go (``EXTRACT_APPROVED_DATABASE_URL``, else the run log)."""

    def __post_init__(self) -> None:
        from extractor.store.approved import open_approved

        self.records = open_approved(self.store)

    def close(self) -> None:
        if self.sweeper is not None:
            self.sweeper.stop()
            self.sweeper.outbox.close()
        if self.runner is not None:
            self.runner.close()
        if self.records is not self.store:
            self.records.close()
        self.store.close()


def build_service(store: Store, *, broker: str | None, concurrency: int, model: str,
                  endpoints: Endpoints | None = None, max_upload_bytes: int | None = None,
                  max_pending: int = DEFAULT_MAX_PENDING) -> Service:
    """Submissions go to Celery workers on ``broker``, or without one to a runner in this process, which first
    takes up what an earlier service left unfinished (stopped or killed before converting it).

    ``endpoints`` (default: ``EXTRACT_ENDPOINTS``, else this environment's ``OPENAI_*``) must have ``model``:
    the defaults of submissions name the first endpoint that has it (``UsageError`` when none has)."""
    endpoints = endpoints or load_endpoints(default_model=model)
    serving = endpoints.first_with(model)
    if serving is None:
        raise UsageError(f"--model {model} is not a model of any configured endpoint ({endpoints.source})")
    defaults = RunOptions(model=model, endpoint=serving.name)
    max_upload_bytes = max_document_bytes() if max_upload_bytes is None else max_upload_bytes
    if broker is not None:
        outbox = Outbox(store, broker)
        return Service(store, outbox.send, defaults, endpoints, max_upload_bytes, max_pending, broker=broker,
                       sweeper=Sweeper(outbox))
    runner = Runner(store, concurrency=concurrency, command="extract serve", endpoints=endpoints, observer=metrics())

    def publish(task_ids: list[str]) -> None:
        for task_id in task_ids:
            runner.submit(task_id)

    publish(tasks.unfinished_ids(store.engine))  # a task another live process holds is left to it
    return Service(store, publish, defaults, endpoints, max_upload_bytes, max_pending, runner)


# -- request and response bodies -------------------------------------------------------------------------

class TextDocument(BaseModel):
    """A document given as text; the base name of ``name`` is the document's name (its extension picks the
    reader), the name as sent is kept with the submission."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=500, examples=["purchase-request.md"])
    text: str = Field(min_length=1)
    contract: ContractName | None = None
    tags: Tags = Field(default_factory=list)


class Problem(BaseModel):
    """Why a request was refused (every 4xx but 422, whose ``detail`` lists the validation errors)."""

    detail: str


_WHY = {400: "the request names something that cannot be done (e.g. a selection of no run)",
        401: "no valid bearer token", 403: "the token's role may not do this",
        404: "no such item, or not the caller's", 409: "refused: the decision cannot be taken (see detail)",
        413: "a document or the request body is over the document limit, or the request has more documents than "
             f"one may have ({MAX_REQUEST_DOCUMENTS}, attachments counted)",
        429: "the queue is full: retry after Retry-After seconds"}


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these refusals."""
    return {code: {"model": Problem, "description": _WHY[code]} for code in codes}


def _cut(value: Any) -> Any:
    """A rejected value as a 422 shows it: as it came when short, else its first ``SHOWN_CHARS`` characters (a
    string) or ``extractor.options.shown`` of it (anything else)."""
    if isinstance(value, str):
        return value if len(value) <= SHOWN_CHARS else f"{value[:SHOWN_CHARS]}... ({len(value):,} characters)"
    if isinstance(value, int | float | bool) or value is None:
        return value
    return value if len(repr(value)) <= SHOWN_CHARS else shown(value)


def unprocessable(loc: tuple[str, ...], why: str, value: Any) -> RequestValidationError:
    """A 422 shaped like FastAPI's own (the schema ``/openapi.json`` documents), for a check the model cannot
    make (a contract name is checked against the contracts installed)."""
    return RequestValidationError([{"type": "value_error", "loc": loc, "msg": why, "input": value}])


class Submitted(BaseModel):
    batch: str
    documents: list[dict[str, str]] = Field(description="one {id, name} per document: GET /v1/submissions/{id}")


class NotSent(Submitted):
    """503: the documents are saved but the broker did not take them; they are sent as soon as it is back. Follow
    them by their ids (submitting them again would queue them twice)."""

    detail: str


class _BrokerAway(Exception):
    """A submission committed and not sent: answered 503 with its ``NotSent`` body."""

    def __init__(self, body: NotSent) -> None:
        super().__init__(body.detail)
        self.body = body


NOT_SENT: dict[int | str, dict[str, Any]] = {503: {
    "model": NotSent, "description": "the broker is away: the documents are saved and sent when it is back",
    "headers": {"Retry-After": {"description": "seconds after which to look at the submissions",
                                "schema": {"type": "integer"}}}}}


VERSION_HELP = ("the document run's review_version as the caller read it (GET /v1/review/{id}): the decision is "
                "refused with 409 when another was taken since; left out, the one read by this request")


class Approve(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(default=None, max_length=MAX_NOTE_CHARS)
    replace: bool = False  # override an earlier decision: a rejection, or an approval of a different record
    version: int | None = Field(default=None, ge=0, le=MAX_ROW_ID, description=VERSION_HELP)


class Reject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)
    force: bool = False  # withdraw an approval a person gave this document run
    version: int | None = Field(default=None, ge=0, le=MAX_ROW_ID, description=VERSION_HELP)


# -- the app ---------------------------------------------------------------------------------------------

def create_app(service: Service) -> FastAPI:
    """The API over ``service``; mount further routers with ``app.include_router``."""
    app = FastAPI(title="extractor", summary="Submit documents, read candidates and findings, review them.",
                  version="1")
    app.state.service = service
    body_limit = service.max_upload_bytes + FORM_OVERHEAD_BYTES
    app.add_middleware(BodyLimit, limit=body_limit)

    @app.exception_handler(ExtractorError)
    def extractor_error(request: Request, error: ExtractorError) -> JSONResponse:
        from extractor.review.decide import Refused

        code = status.HTTP_409_CONFLICT if isinstance(error, Refused) else status.HTTP_400_BAD_REQUEST
        return JSONResponse({"detail": str(error)}, status_code=code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        """422 shaped as FastAPI's own, each problem's message in words (a pattern not matched says what it asks
        for) and its rejected value cut short: a request may send a megabyte, its error never sends it back."""
        detail = [problem | {"msg": message(problem), "input": _cut(problem.get("input"))} for problem in error.errors()]
        return JSONResponse({"detail": jsonable_encoder(detail)}, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)

    @app.exception_handler(_BrokerAway)
    def broker_away(request: Request, error: _BrokerAway) -> JSONResponse:
        return JSONResponse(error.body.model_dump(), status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Any:
        """FastAPI answers a body it could not parse at all (JSON nested past the parser's recursion limit,
        bytes that are not UTF-8, a broken multipart stream) with a bare 400 raised *from* the parser's
        error, and Starlette a form past its limits (1,000 files or fields, 1 MB a field) with a 400 raised
        while handling its ``MultiPartException``; both are malformed bodies, so 422 with the error list like
        any other."""
        if isinstance(error.__cause__, BodyTooLarge):  # FastAPI was reading the body when it passed the limit
            return JSONResponse({"detail": over_limit(body_limit)}, status_code=HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                headers={"Connection": "close"})
        if error.status_code == status.HTTP_400_BAD_REQUEST and isinstance(error.__context__, MultiPartException):
            detail = [{"type": "body_invalid", "loc": ["body"], "input": None,
                       "msg": f"the form cannot be read: {error.__context__.message}"}]
            return JSONResponse({"detail": detail}, status_code=HTTPStatus.UNPROCESSABLE_ENTITY)
        if error.status_code == status.HTTP_400_BAD_REQUEST and isinstance(error.__cause__, Exception):
            cause = error.__cause__
            detail = [{"type": "body_invalid", "loc": ["body"], "input": None,
                       "msg": f"the body cannot be parsed: {type(cause).__name__}"}]
            return JSONResponse({"detail": jsonable_encoder(detail)}, status_code=HTTPStatus.UNPROCESSABLE_ENTITY)
        return await http_exception_handler(request, error)

    @app.get("/health")
    def health() -> dict[str, str]:
        """Liveness, without a token (for load balancers)."""
        return {"status": "ok"}

    # /metrics, /healthz, /readyz: the conversion metrics only when this process converts (no broker), the
    # department's view and the HTTP metrics always (docs/service.md#metrics)
    counted = [instrument(app), *([metrics().registry] if service.runner is not None else [])]
    health_routes(app, service.store, lambda: service.broker, counted,
                  [collected(Department(service.store, service.records, service.broker))])

    api = APIRouter(prefix="/v1", responses=problems(401, 403))

    @api.get("/me")
    def me(principal: Annotated[Principal, Depends(current_principal)]) -> dict[str, Any]:
        """The caller's token name, role and owner (whose work it reads), and whether it reads every owner's."""
        return {"name": principal.name, "role": principal.role, "owner": principal.owner or principal.name,
                "all_owners": principal.scope is None}

    @api.post("/documents", status_code=status.HTTP_202_ACCEPTED, responses=problems(413, 429) | NOT_SENT)
    def submit_files(principal: Submitter, files: Annotated[list[UploadFile], File(description="the documents")],
                     contract: Annotated[ContractName | None, Form()] = None,
                     tags: Annotated[Tags | None, Form()] = None) -> Submitted:
        """Submit documents as a multipart upload; each gets an id to follow (``GET /v1/submissions/{id}``)."""
        documents: list[tuple[str | None, bytes]] = []
        for upload in files:  # spooled by Starlette (to disk past 1 MB); read once, to be stored
            content = upload.file.read(service.max_upload_bytes + 1)
            if len(content) > service.max_upload_bytes:
                raise HTTPException(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                    f"{plain_name(upload.filename)}: over the limit of {service.max_upload_bytes} bytes")
            documents.append((upload.filename, content))
        return _submit(service, principal, documents, contract, tags or [])

    @api.post("/documents/text", status_code=status.HTTP_202_ACCEPTED, responses=problems(413, 429) | NOT_SENT)
    def submit_text(principal: Submitter, document: TextDocument) -> Submitted:
        """Submit one document as JSON text."""
        content = document.text.encode("utf-8")
        if len(content) > service.max_upload_bytes:
            raise HTTPException(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"{plain_name(document.name)}: over the limit of {service.max_upload_bytes} bytes")
        return _submit(service, principal, [(document.name, content)], document.contract, document.tags)

    @api.get("/submissions/{task_id}", responses=problems(404))
    def submission(principal: Submitter, task_id: TaskId) -> dict[str, Any]:
        """Where a submitted document is: queued, started, finished (with its outcome and document run)."""
        found = tasks.get_task(service.store.engine, str(task_id), principal.scope)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {task_id}")
        return found.to_json()

    @api.get("/batches")
    def batches(principal: Submitter, limit: Limit = 20) -> list[dict[str, Any]]:
        """The newest batches (a submitter's own; every batch for reviewers), with documents per task state."""
        return [batch.to_json() for batch in tasks.list_batches(service.store.engine, principal.scope, limit=limit)]

    @api.get("/batches/{batch_id}", responses=problems(404))
    def batch(principal: Submitter, batch_id: BatchId) -> dict[str, Any]:
        """A batch's documents and how many are queued, started and finished."""
        found = tasks.tasks_of_batch(service.store.engine, batch_id, owner=principal.scope)
        if not found:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no batch {batch_id}")
        return {"batch": batch_id, "counts": tasks.batch_counts(service.store.engine, batch_id),
                "documents": [task.to_json() for task in found]}

    @api.get("/document-runs/{document_run_id}", responses=problems(404))
    def document_run(principal: Submitter, document_run_id: DocumentRunId) -> dict[str, Any]:
        """A document run: its state and cause, the candidate, field states, every attempt's findings
        (what ``extract show --format json`` prints). A submitter reads the ones its submissions ended in."""
        return _view(service, _document_run(service, document_run_id, principal))

    @api.get("/review/queue")
    def review_queue(principal: Reviewer, limit: Limit = DEFAULT_REVIEW_PAGE) -> dict[str, Any]:
        """What waits for a person (of the caller's owner, unless it reads every owner's), READY_FOR_REVIEW first,
        with the approvals given so far and who has each document open."""
        from extractor.review.queue import QueueQuery, waiting

        page = waiting(service.store, service.records, QueueQuery(owner=principal.scope), limit=limit)
        return {"total": page.total, "items": [item.to_json() for item in page.items]}

    @api.get("/review/{document_run_id}", responses=problems(404))
    def review_show(principal: Reviewer, document_run_id: DocumentRunId) -> dict[str, Any]:
        """One document run as a reviewer sees it (``review_version`` in ``document_run``: what a decision compares
        against; ``claim``: who has it open; ``approvals``: the approvals so far, when its contract needs several)."""
        return _view(service, _document_run(service, document_run_id, principal))

    @api.post("/review/{document_run_id}/claim", responses=problems(404, 409))
    def review_claim(principal: Reviewer, document_run_id: DocumentRunId) -> dict[str, Any]:
        """Claim the document run to review it (or renew the caller's claim) for ``claim_seconds``: nobody else
        decides it until the caller decides, releases it or the claim expires. 409 naming who has it when another
        person's claim is live."""
        from extractor.store.review_claims import claim

        _document_run(service, document_run_id, principal)
        held = claim(service.store.engine, document_run_id, principal.name, service.claim_s)
        if held is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document run {document_run_id}")
        if held.reviewer != principal.name:
            raise HTTPException(status.HTTP_409_CONFLICT, f"document run {document_run_id}: {held.describe()}")
        return {"document_run_id": document_run_id, "claim": held.to_json(), "claim_seconds": service.claim_s}

    @api.delete("/review/{document_run_id}/claim", responses=problems(404))
    def review_release(principal: Reviewer, document_run_id: DocumentRunId) -> dict[str, Any]:
        """Release the caller's claim on the document run (a decision releases it too)."""
        from extractor.store.review_claims import release

        _document_run(service, document_run_id, principal)
        return {"document_run_id": document_run_id,
                "released": release(service.store.engine, document_run_id, principal.name)}

    @api.post("/review/{document_run_id}/approve", responses=problems(400, 404, 409))
    def review_approve(principal: Reviewer, document_run_id: DocumentRunId, body: Approve) -> dict[str, Any]:
        """Approve the final candidate as produced; the caller's token name is recorded as the reviewer. On a
        contract that needs several people this signs it off (``outcome`` "signed", ``approvals``: "1 of 2"), and
        the record is approved once enough distinct people signed it off; while sign-offs are pending it signs off
        the record they signed (``pending_record`` of ``GET /v1/review/{id}``, edited or not), not the candidate.
        409 when refused (error findings, changed source, an earlier decision overridden without ``replace``, a
        decision taken since ``version``, another person's claim)."""
        from extractor.review.decide import Overrides, approve_document

        found = _versioned(_document_run(service, document_run_id, principal), body.version)
        approval = approve_document(service.store, service.records, found, reviewer=principal.name,
                                    note=body.note, overrides=Overrides(force=body.replace))  # the source: its upload, by hash
        return approval.to_json()

    @api.post("/review/{document_run_id}/reject", responses=problems(400, 404, 409))
    def review_reject(principal: Reviewer, document_run_id: DocumentRunId, body: Reject) -> dict[str, Any]:
        """Reject a document run, saying why; withdraws an approval that came from it (409 as for approve)."""
        from extractor.review.decide import reject_document

        found = _versioned(_document_run(service, document_run_id, principal), body.version)
        rejection = reject_document(service.store, service.records, found, reviewer=principal.name, reason=body.reason,
                                    force=body.force)
        return rejection.to_json()

    @api.get("/approved", response_class=StreamingResponse, responses={
        200: {"content": {JSONL: {}}, "description": "one approved record per line: {record, provenance}; the next "
              "page's cursor in X-Next-Cursor (absent at the end)"}, **problems(400, 403)})
    def approved(principal: Submitter, cursor: Cursor = None, limit: ApprovedLimit = APPROVED_PAGE,
                 owner: Annotated[str | None, Query(min_length=1, max_length=200, description=(
                     "only this owner's records (a department-wide token; others always read their own)"))] = None,
                 contract: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
                 contract_version: Annotated[int | None, Query(ge=1, le=MAX_ROW_ID)] = None) -> StreamingResponse:
        """Approved records (only those), oldest approval first, as JSONL with the provenance columns of ``extract
        export``, for downstream systems: a page of at most ``limit``, then the next page from ``X-Next-Cursor``
        (also in a ``Link: rel="next"`` header). A record approved again comes again, at its new place; a withdrawn
        one is not sent. A token reads its owner's records (the contents its owner submitted) unless it is
        department-wide."""
        if owner is not None and principal.scope is not None and owner != principal.scope:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"token {principal.name!r} reads only {principal.scope!r}'s "
                                "records")
        page, following = _approved_page(service, principal.scope or owner, _cursor(cursor), limit, contract,
                                         contract_version)
        headers = {}
        if following is not None:
            query = _next_query(following, limit, owner, contract, contract_version)
            headers = {"X-Next-Cursor": following, "Link": f'</v1/approved?{query}>; rel="next"'}
        return StreamingResponse(iter(page), media_type=JSONL, headers=headers)

    @api.get("/runs")
    def runs(principal: Everyone, limit: Limit = 20) -> list[dict[str, Any]]:
        """Recent runs (worker runs included), newest first, with their documents per state."""
        from extractor.review.view import run_summary

        return [run_summary(run) for run in service.store.find_runs(limit=limit)]

    @api.get("/runs/{run_id}", responses=problems(400, 404))
    def run(principal: Everyone, run_id: RunRef) -> dict[str, Any]:
        """One run: configuration, counts, every document with its state and rule ids."""
        from extractor.review import resolve_run
        from extractor.review.view import run_view

        found = resolve_run(service.store, run_id)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
        return run_view(service.store, found).to_json()

    @api.get("/compare", responses=problems(400))
    def compare(principal: Everyone, baseline: Selection, candidate: Selection) -> dict[str, Any]:
        """The regression gate between two selections of runs (as ``extract compare`` takes them)."""
        from extractor.compare import compare as compare_runs

        return compare_runs(service.store, baseline, candidate).to_json()

    @api.get("/settings")
    def settings(principal: Submitter) -> dict[str, Any]:
        """The options submissions get: those of ``extract run`` (docs/runs.md#options), with the model
        servers named by endpoint."""
        return service.defaults.to_json()

    @api.put("/settings")
    def change_settings(principal: Admin, body: RunOptions) -> dict[str, Any]:
        """Change the options of later submissions (admin only): the options of ``extract run``, each model server
        named by one of ``GET /v1/endpoints`` (never a URL), a contract the service has. An option left out takes
        its default."""
        service.defaults = _checked(service, body)
        return service.defaults.to_json()

    @api.get("/endpoints")
    def endpoints(principal: Submitter) -> list[dict[str, Any]]:
        """The model servers the operator configured, by name, with the models each may be asked for."""
        return [endpoint.to_json() for endpoint in service.endpoints.by_name.values()]

    app.include_router(api)

    from extractor.service.browser import mount_review

    mount_review(app, service.store, service.records, claim_s=service.claim_s)  # for people, under /review
    return app


REFUSED_URL = ("the API names a model server by endpoint (GET /v1/endpoints), never by URL: a key goes only where "
               "the operator configured it")


def _checked(service: Service, body: RunOptions) -> RunOptions:
    """The options as the service can use them: its contract, endpoints and models; 422 naming the field why not."""
    _check_contract(body.contract, ("body", "contract"))
    for url in ("base_url", "judge_base_url"):
        if getattr(body, url) is not None:
            raise unprocessable(("body", url), REFUSED_URL, getattr(body, url))
    if body.model is None:
        raise unprocessable(("body", "model"), "name the model (one of an endpoint's, GET /v1/endpoints)", None)
    endpoint = body.endpoint or getattr(service.endpoints.first_with(body.model), "name", None)
    _allowed(service, ("endpoint", endpoint), ("model", body.model))
    if body.judge is not None:
        _allowed(service, ("judge_endpoint", body.judge_endpoint or endpoint), ("judge", body.judge))
    if body.max_cost is not None and service.broker is not None and not is_redis(service.broker):
        raise unprocessable(("body", "max_cost"), "a budget is kept in the broker, which must be Redis; this service's "
                            f"is {service.broker.split(':', 1)[0]}", body.max_cost)
    return body.model_copy(update={"endpoint": endpoint})


def _allowed(service: Service, endpoint: tuple[str, str | None], model: tuple[str, str]) -> None:
    """422 at the endpoint's field when the service has no such endpoint, at the model's when it may not serve it."""
    try:
        service.endpoints.get(endpoint[1] or "")
    except ValueError as error:
        raise unprocessable(("body", endpoint[0]), str(error), endpoint[1]) from None
    try:
        service.endpoints.allowed(endpoint[1] or "", model[1])
    except ValueError as error:
        raise unprocessable(("body", model[0]), str(error), model[1]) from None


def _check_contract(name: str, loc: tuple[str, ...]) -> None:
    from extractor.contracts import get_contract

    try:
        get_contract(name)
    except KeyError as error:
        raise unprocessable(loc, str(error.args[0]), name) from None


def _submit(service: Service, principal: Principal, sent: list[tuple[str | None, bytes]], contract: str | None,
            tags: list[str]) -> Submitted:
    """Record the documents as a batch of the caller's owner, then hand them to the workers; 429 while the
    queue is full, 503 (``NotSent``) when the broker did not take them (they are sent when it is back). A
    document is named by the base name of the name sent (``plain_name``), which the submission keeps as sent.
    An e-mail's attachments of supported types are documents of their own, as in ``extract run``."""
    documents = [Upload(name, data, as_sent[:MAX_SENT_NAME_CHARS] if index == 0 and as_sent is not None
                        and as_sent != name else None)
                 for as_sent, content in sent
                 for index, (name, data) in enumerate(with_attachments(plain_name(as_sent), content))]
    if len(documents) > MAX_REQUEST_DOCUMENTS:
        raise HTTPException(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"{len(documents)} documents in one request (e-mails' "
                            f"attachments counted), over the limit of {MAX_REQUEST_DOCUMENTS}; submit them in several")
    chosen: dict[str, Any] = {}
    if contract is not None:
        _check_contract(contract, ("body", "contract"))
        chosen["contract"] = contract
    if tags:
        chosen["tags"] = tags
    try:
        settings = BatchSettings.model_validate(service.defaults.to_json() | chosen)
    except ValidationError as error:
        raise RequestValidationError([problem | {"loc": ("body", *problem["loc"])}
                                      for problem in error.errors(include_url=False)]) from None
    pending = tasks.pending_count(service.store.engine)
    if pending + len(documents) > service.max_pending:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, f"queue full: {pending} documents wait for a worker "
                            f"(at most {service.max_pending}); retry later", headers={"Retry-After": str(RETRY_AFTER_S)})
    batch_id, task_ids = tasks.add_batch(service.store.engine, settings.to_json(), principal.name, documents,
                                         owner=principal.owner or principal.name,
                                         state=TaskState.queued if service.runner is not None else TaskState.unsent)
    submitted = Submitted(batch=batch_id, documents=[{"id": task_id, "name": document.name}
                                                     for task_id, document in zip(task_ids, documents)])
    try:
        service.publish(task_ids)
    except BrokerAway as away:
        raise _BrokerAway(NotSent(detail=f"saved, not yet queued: the broker did not take the documents ({away}); "
                                  "they are sent as soon as it is back: follow them at GET /v1/submissions/{id}, "
                                  "do not submit them again", **submitted.model_dump())) from None
    return submitted


def _document_run(service: Service, document_run_id: int, principal: Principal) -> DocumentRunInfo:
    """The document run, if it exists and the caller may read it (a submitter: one its submissions ended in);
    404 alike for a missing one and another owner's."""
    scope = principal.scope
    found = service.store.find_document_runs(ids=[document_run_id])
    if not found or (scope is not None and not tasks.owns_document_run(service.store.engine, scope, document_run_id)):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no document run {document_run_id}")
    return found[0]


def _versioned(document_run: DocumentRunInfo, version: int | None) -> DocumentRunInfo:
    """The document run with the ``review_version`` the caller saw, when it says which."""
    return document_run if version is None else replace(document_run, review_version=version)


def _cursor(cursor: str | None) -> tuple[datetime, int] | None:
    """The last record of the previous page, from its cursor (``<approval time>~<id>``); 400 for a broken one."""
    if cursor is None:
        return None
    at, _, record_id = cursor.rpartition("~")
    try:
        when = datetime.fromisoformat(at)
        last = int(record_id)
    except ValueError:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "cursor: not one X-Next-Cursor gave") from None
    if when.tzinfo is None or not 0 <= last <= MAX_ROW_ID:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "cursor: not one X-Next-Cursor gave")
    return when, last


def _next_query(following: str, limit: int, owner: str | None, contract: str | None, version: int | None) -> str:
    from urllib.parse import urlencode

    chosen = {"cursor": following, "limit": limit, "owner": owner, "contract": contract, "contract_version": version}
    return urlencode({key: value for key, value in chosen.items() if value is not None})


def _approved_page(service: Service, owner: str | None, after: tuple[datetime, int] | None, limit: int,
                   contract: str | None, version: int | None) -> tuple[list[str], str | None]:
    """The JSONL lines of the next page and the cursor after it (None at the end). For one owner, records are read
    in approval order and kept when the owner's, at most ``SCAN_PER_PAGE`` times ``limit`` per request."""
    from extractor.export import Rows, jsonl_line, owned
    from extractor.store.approved import approved_after

    lines: list[str] = []
    rows = Rows(service.store)
    for _ in range(SCAN_PER_PAGE if owner is not None else 1):
        wanted = limit - len(lines)
        chunk = approved_after(service.records, after, wanted, contract=contract, contract_version=version)
        kept = chunk if owner is None else owned(service.store, owner, chunk)
        lines.extend(jsonl_line(record, origin) for record, origin in rows.of(kept))
        if len(chunk) < wanted:
            return lines, None
        after = (datetime.fromisoformat(chunk[-1].approved_at), chunk[-1].id)
        if len(lines) == limit:
            break
    assert after is not None
    return lines, f"{after[0].isoformat()}~{after[1]}"


def _view(service: Service, document_run: DocumentRunInfo) -> dict[str, Any]:
    from extractor.review.view import document_view

    return document_view(service.store, service.records, document_run).to_json()
