"""The review pages as a FastAPI router: queue, document, approve, reject, edit.

The router does not know how people log in: ``review_router(open_stores, current_principal)`` takes the
principal as a FastAPI dependency (the local ``extract review --web`` login, or the service's bearer
tokens), and the reviewer recorded with a decision is that principal's ``name``, never a typed name.
Every fact shown comes from ``extractor.review`` (queue, view, decide) and the store; this module only
arranges requests and pages.

Whose documents: the principal's ``scope`` (an owner, or None for every owner's) limits the queue and every
page; another owner's document answers 404 like a missing one. Opening a document to review it claims it for the
principal (``extractor.store.review_claims``): the page renews the claim while it stays open and releases it when
left; another person sees who has it and since when, and cannot decide it meanwhile. A decision carries the
``review_version`` the page showed, so a decision taken since refuses it (409, naming that decision).

Safety: Jinja2 autoescapes every value (document text, findings, raw model answers); every response
carries a strict Content-Security-Policy (scripts and styles only from this router's static files, no
inline script, forms post only here); every POST needs the CSRF token the pages embed (an HMAC of the
principal's name under a per-process secret), else 403.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.routing import APIRoute

from extractor.review.decide import Overrides
from extractor.review.queue import QueuePage, QueueQuery, waiting
from extractor.review.resolve import ReviewError
from extractor.store import DocumentRunInfo, RunInfo, Store
from extractor.vocab import DEFAULT_REVIEW_PAGE, MAX_ROW_ID, REVIEW_CLAIM_S, REVIEWABLE, DocumentState, ReviewDecision

if TYPE_CHECKING:
    from extractor.store.review_claims import ReviewClaim

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
REVIEW_ROLES = frozenset({"reviewer", "admin"})
QUEUE_STATES: tuple[str, ...] = REVIEWABLE
"""States the web queue lists: the reviewable ones (BLOCKED among them: a person rejects it or overrides)."""


class Principal(Protocol):
    """Who is asking: ``name`` is recorded as the reviewer; ``role`` must be reviewer or admin to decide; ``scope``
    is the owner whose documents it reads (None: every owner's)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def scope(self) -> str | None: ...


DocumentRunId = Annotated[int, PathParam(ge=1, le=MAX_ROW_ID)]
PageNumber = Annotated[int, PathParam(ge=1, le=10_000)]
"""A document run id as the store's integer key holds it (a larger one is a 422, not a database error)."""
DONE = re.compile(r"^(approved|signed|rejected) \d+$")
"""The only notice a page shows from its address (after a decision), so a link cannot put words on the page."""

OpenStores = Callable[[], tuple[Store, Store]]
"""Returns the run log and the approved-records store (long-lived: called once per request)."""


class SecuredRoute(APIRoute):
    """Every response of the router carries the security headers (also the error pages it renders)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def secured(request: Request) -> Response:
            response = await handler(request)
            response.headers.update(SECURITY_HEADERS)
            return response

        return secured


def _shown(value: Any) -> Any:
    """Every value a page shows, with control characters escaped as the terminal shows them (``printable``; line
    breaks kept: the page draws a document's lines)."""
    from markupsafe import Markup

    from extractor.printable import printable

    if isinstance(value, Markup):
        return Markup(printable(value, lines=True))
    return printable(value, lines=True) if isinstance(value, str) else value


@lru_cache(maxsize=1)
def _environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    from extractor.review.view import latency, when
    from extractor.web.page import hint_text, path_breaks, pretty

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, finalize=_shown)
    env.filters["pretty"] = pretty
    env.filters["when"] = when
    env.filters["hint"] = hint_text
    env.filters["latency"] = latency
    env.filters["path"] = path_breaks
    return env


def no_favicon(app: FastAPI) -> None:
    """Answer the browser's own ``/favicon.ico`` request with 204: a 404 is a console error on every page."""

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204, headers=SECURITY_HEADERS)


def render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_environment().get_template(template).render(**context), status_code=status)


async def form_items(request: Request) -> list[tuple[str, str]]:
    """The posted form as (name, value) pairs; a schema form of a long document has many fields."""
    form = await request.form(max_fields=200_000)
    return [(key, value) for key, value in form.multi_items() if isinstance(value, str)]


def csrf_token(secret: bytes, principal: Principal) -> str:
    return hmac.new(secret, f"review-csrf|{principal.name}".encode(), hashlib.sha256).hexdigest()


def _field(items: Sequence[tuple[str, str]], name: str) -> str:
    return next((value for key, value in reversed(items) if key == name), "")


def review_router(open_stores: OpenStores, current_principal: Callable[..., Any], *,
                  secret: bytes | None = None, prefix: str = "/review", claim_s: float = REVIEW_CLAIM_S) -> APIRouter:
    """The review pages under ``prefix``; ``current_principal`` is a FastAPI dependency returning a
    ``Principal`` (or raising 401). ``secret`` keys the CSRF tokens (random per process by default); ``claim_s``
    is how long opening a document holds it (the page renews it five times as often). A decision is checked
    against the source as ``extractor.review.decide`` reads it (an uploaded document: its upload in the run log)."""
    key = secret or secrets.token_bytes(32)
    router = APIRouter(prefix=prefix, route_class=SecuredRoute)
    principal_of = Depends(current_principal)

    def allowed(principal: Principal) -> Response | None:
        if principal.role not in REVIEW_ROLES:
            return _problem(403, f"{principal.name} ({principal.role}) may not review")
        return None

    def checked(principal: Principal, items: Sequence[tuple[str, str]]) -> Response | None:
        """403 unless the principal may review and the form carries its CSRF token."""
        if (refused := allowed(principal)) is not None:
            return refused
        if not hmac.compare_digest(_field(items, "csrf").encode(), csrf_token(key, principal).encode()):
            return _problem(403, "missing or wrong CSRF token: reload the page and try again")
        return None

    def _problem(status: int, message: str) -> HTMLResponse:
        return render("problem.html", status, message=message, prefix=prefix, lang="en")

    def context(request: Request, principal: Principal, **values: Any) -> dict[str, Any]:
        return {"prefix": prefix, "user": principal.name, "csrf": csrf_token(key, principal),
                "filters": _filters(request), **values}

    @router.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        path = STATIC / name
        if "/" in name or path.suffix not in STATIC_TYPES or not path.is_file():
            return PlainTextResponse("not found", status_code=404)
        return Response(path.read_bytes(), media_type=STATIC_TYPES[path.suffix])

    @router.get("/", response_class=HTMLResponse)
    def queue(request: Request, principal: Any = principal_of) -> Response:
        if (refused := allowed(principal)) is not None:
            return refused
        store, records = open_stores()
        filters = _filters(request)
        everything = request.query_params.get("all") == "1"
        try:
            page = _queue(store, records, filters, principal.scope, limit=None if everything else DEFAULT_REVIEW_PAGE)
            counts = _queue(store, records, {**filters, "state": ""}, principal.scope, limit=0).counts
        except ReviewError as error:
            return _problem(400, str(error))
        state_query = {state: _query({**filters, "state": state}) for state in ("", *QUEUE_STATES)}
        return render("queue.html", **context(request, principal, page=page, counts=counts, states=QUEUE_STATES,
                                              lang="en", query=_query(filters), state_query=state_query))

    @router.get("/doc/{document_run_id}", response_class=HTMLResponse)
    def document(request: Request, document_run_id: DocumentRunId, principal: Any = principal_of) -> Response:
        if (refused := allowed(principal)) is not None:
            return refused
        return _document_page(request, principal, document_run_id)

    def _document_page(request: Request, principal: Principal, document_run_id: int, *, status: int = 200,
                       error: str | None = None) -> Response:
        from extractor.review.view import document_view
        from extractor.store.review_claims import claim
        from extractor.web.page import document_page

        store, records = open_stores()
        found = _document_run(store, document_run_id, principal.scope)
        if found is None:
            return _problem(404, f"no document run {document_run_id}")
        others = [d for d in store.find_document_runs(sha_prefix=found.sha256)
                  if d.id != found.id and _readable(store, d.id, principal.scope)]
        try:
            view = document_view(store, records, found, others)
        except ReviewError as error_:
            return _problem(409, str(error_))
        approved = view.approved
        latest = view.reviews[-1] if view.reviews else None
        rejected = latest if approved is None and latest is not None and latest.decision == ReviewDecision.rejected \
            else None
        history = [r for r in view.reviews  # the approval the page shows is not listed again
                   if approved is None or (r.decision, r.reviewer, r.created_at) != (ReviewDecision.approved,
                                                                                   approved.reviewer, approved.approved_at)]
        decidable = found.state in QUEUE_STATES and approved is None and rejected is None
        if decidable:  # opening it to review it claims it (or renews this person's claim)
            view = replace(view, claim=claim(store.engine, found.id, principal.name, claim_s))
        page = document_page(view, _schema(view.run))
        raw = {a.attempt.id: a.attempt.raw_response for a in view.attempts}
        filters = _filters(request)
        previous, following = _neighbours(store, records, filters, found.id, principal.scope)
        held = view.claim if view.claim is not None and view.claim.reviewer != principal.name else None
        return render("document.html", status, **context(
            request, principal, page=page, view=view, raw=raw, error=error, lang=page.lang,
            blocked=found.state == DocumentState.BLOCKED, rejected=rejected, history=history, decidable=decidable,
            held=held, until=view.claim.expires_at.isoformat() if view.claim is not None and held is None else "",
            renew_ms=int(claim_s * 1000 / 5), previous=previous, following=following, query=_query(filters),
            done=request.query_params.get("done") if DONE.match(request.query_params.get("done", "")) else None))

    def own_form(principal: Principal, items: list[tuple[str, str]], document_run_id: int) -> Store | Response:
        """The run log, for a form this person's page sent (``checked``) about a document run they may see; else the
        answer that refuses it."""
        if (refused := checked(principal, items)) is not None:
            return refused
        store, _ = open_stores()
        if _document_run(store, document_run_id, principal.scope) is None:
            return PlainTextResponse("not found", status_code=404)
        return store

    @router.post("/doc/{document_run_id}/claim")
    def renew(document_run_id: DocumentRunId, principal: Any = principal_of,
              items: list[tuple[str, str]] = Depends(form_items)) -> Response:
        """The open page renews its claim (or takes it once the other person's is gone): who holds it now."""
        from extractor.store.review_claims import claim

        store = own_form(principal, items, document_run_id)
        if isinstance(store, Response):
            return store
        held = claim(store.engine, document_run_id, principal.name, claim_s)
        if held is None:
            return PlainTextResponse("not found", status_code=404)
        mine = held.reviewer == principal.name
        return JSONResponse({"mine": mine, "claim": held.to_json(),
                             "message": None if mine else _held_message(held)})

    @router.post("/doc/{document_run_id}/release")
    def leave(document_run_id: DocumentRunId, principal: Any = principal_of,
              items: list[tuple[str, str]] = Depends(form_items)) -> Response:
        """The page is left (``navigator.sendBeacon``): this person's claim ends."""
        from extractor.store.review_claims import release

        store = own_form(principal, items, document_run_id)
        if isinstance(store, Response):
            return store
        try:
            until = datetime.fromisoformat(_field(items, "until")) if _field(items, "until") else None
        except ValueError:
            return PlainTextResponse("until: not a time this page was given", status_code=400)
        return JSONResponse({"released": release(store.engine, document_run_id, principal.name, until)})

    @router.get("/doc/{document_run_id}/page/{page}", include_in_schema=False)
    def page_image(document_run_id: DocumentRunId, page: PageNumber, principal: Any = principal_of) -> Response:
        """One page of the source as PNG, for the page image beside the text (docs/formats.md#pages-and-boxes)."""
        if (refused := allowed(principal)) is not None:
            return refused
        from extractor.errors import InputError
        from extractor.queue.uploads import source_of
        from extractor.web.pages import page_png

        store, _ = open_stores()
        found = _document_run(store, document_run_id, principal.scope)
        document = None if found is None else store.get_document(found.document_id)
        last = max((s.get("page") or 0 for s in (document.sentences if document is not None else ())), default=0)
        if found is None or document is None or not page <= last:
            return PlainTextResponse("no such page", status_code=404)
        source = source_of(store, found)
        if source is None:
            return PlainTextResponse("the source is not available", status_code=404)
        try:
            data = page_png(source, document.sha256, page)
        except (InputError, IndexError, EOFError, ValueError) as error:
            return PlainTextResponse(f"cannot show the page: {error}", status_code=404)
        return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    @router.post("/doc/{document_run_id}/approve")
    def approve(request: Request, document_run_id: DocumentRunId, principal: Any = principal_of,
                items: list[tuple[str, str]] = Depends(form_items)) -> Response:
        if (refused := checked(principal, items)) is not None:
            return refused
        return _decided(request, principal, document_run_id, "approve", items)

    @router.post("/doc/{document_run_id}/reject")
    def reject(request: Request, document_run_id: DocumentRunId, principal: Any = principal_of,
               items: list[tuple[str, str]] = Depends(form_items)) -> Response:
        if (refused := checked(principal, items)) is not None:
            return refused
        return _decided(request, principal, document_run_id, "reject", items)

    def _decide(request: Request, principal: Principal, found: DocumentRunInfo, verb: str,
                items: Sequence[tuple[str, str]], edited: str | None = None) -> Response:
        """Approve or reject through ``extractor.review.decide``, then on to the next waiting document;
        a refusal is raised (``ReviewError``) for the caller to show where the reviewer is."""
        from extractor.review.decide import approve_document, reject_document

        store, records = open_stores()
        filters = _filters(request)
        _, following = _neighbours(store, records, filters, found.id, principal.scope)
        version = _field(items, "version")
        if version.isdigit() and len(version) < 10:  # what the page showed: a decision taken since refuses this one
            found = replace(found, review_version=int(version))
        if verb == "reject":
            reason = _field(items, "reason").strip()
            if not reason:
                raise ReviewError("a rejection needs a reason: say what is wrong")
            reject_document(store, records, found, reviewer=principal.name, reason=reason)
            outcome = "rejected"
        else:
            approval = approve_document(store, records, found, reviewer=principal.name,
                                        note=_field(items, "note").strip() or None, edited=edited,
                                        overrides=_block_override(found, _field(items, "override").strip()))
            outcome = "signed" if approval.approved is None else "approved"
        target = f"{prefix}/doc/{following}" if following is not None else f"{prefix}/"
        done = {"done": f"{outcome} {found.id}"}
        return RedirectResponse(f"{target}?{urlencode({**_query_dict(filters), **done})}", status_code=303)

    def _decided(request: Request, principal: Principal, document_run_id: int, verb: str,
                 items: Sequence[tuple[str, str]]) -> Response:
        found = _document_run(open_stores()[0], document_run_id, principal.scope)
        if found is None:
            return _problem(404, f"no document run {document_run_id}")
        try:
            return _decide(request, principal, found, verb, items)
        except ReviewError as error:
            return _document_page(request, principal, document_run_id, status=409, error=str(error))

    @router.get("/doc/{document_run_id}/edit", response_class=HTMLResponse)
    def edit(request: Request, document_run_id: DocumentRunId, principal: Any = principal_of) -> Response:
        if (refused := allowed(principal)) is not None:
            return refused
        store, records = open_stores()
        found = _document_run(store, document_run_id, principal.scope)
        if found is None:
            return _problem(404, f"no document run {document_run_id}")
        from extractor.store.approved import pending_record

        # Edit starts from what approving as it is would sign off: the record others signed off, else the model's
        waiting = pending_record(store, found.id)
        final = store.get_attempt(found.final_attempt_id) if found.final_attempt_id and waiting is None else None
        candidate = waiting.record if waiting is not None else final.parsed if final is not None else None
        unparsed = final.raw_response if final is not None and candidate is None else None  # to salvage as JSON
        return _edit_page(request, principal, found, _Edit(candidate, json_text=unparsed,
                                                           raw_mode=request.query_params.get("mode") == "json"))

    @router.post("/doc/{document_run_id}/edit", response_class=HTMLResponse)
    def edit_post(request: Request, document_run_id: DocumentRunId, principal: Any = principal_of,
                  items: list[tuple[str, str]] = Depends(form_items)) -> Response:
        """``action=check`` validates the edit against the source and shows its findings beside the fields;
        ``action=approve`` approves it (``approve_document`` validates it again and refuses errors)."""
        from extractor.review.decide import Refused, check_edited
        from extractor.web.schemaform import SchemaForm

        if (refused := checked(principal, items)) is not None:
            return refused
        store, _records = open_stores()
        found = _document_run(store, document_run_id, principal.scope)
        if found is None:
            return _problem(404, f"no document run {document_run_id}")
        run = store.get_run(found.run_id)
        schema = _schema(run)
        raw_mode = any(k == "raw_json" for k, _ in items) or schema is None
        if raw_mode:
            text = _field(items, "raw_json")
            try:
                candidate = json.loads(text)
            except ValueError:
                candidate = None
        else:
            candidate = SchemaForm(schema or {}).read(items)
            text = json.dumps(candidate, ensure_ascii=False)
        report, error = None, None
        try:
            if _field(items, "action") == "approve":
                return _decide(request, principal, found, "approve", items, edited=text)
            if run is None:
                raise ReviewError(f"document run {document_run_id} refers to a missing run")
            report = check_edited(store, found, run, text)
        except Refused as refused_:
            report, error = refused_.report, refused_.reason
        except ReviewError as error_:
            error = str(error_)
        status = 200 if error is None else 409
        return _edit_page(request, principal, found, _Edit(candidate, json_text=text if raw_mode else None,
                                                           raw_mode=raw_mode, report=report, error=error,
                                                           checked=error is None, status=status))

    def _edit_page(request: Request, principal: Principal, found: DocumentRunInfo, edit: _Edit) -> Response:
        from extractor.document import language_of
        from extractor.store.review_claims import claim
        from extractor.web.schemaform import SchemaForm, finding_anchor

        store, _ = open_stores()
        held = claim(store.engine, found.id, principal.name, claim_s)  # editing holds it as reading it does
        run = store.get_run(found.run_id)
        schema = _schema(run)
        tree = SchemaForm(schema).tree(edit.candidate) if schema is not None and not edit.raw_mode else None
        names = {node.name for node in tree.walk()} if tree is not None else set()
        findings: dict[str, list[dict[str, Any]]] = {}
        for finding in [f.to_json() for f in edit.report.findings] if edit.report is not None else []:
            findings.setdefault(finding_anchor(finding.get("location"), names), []).append(finding)
        document = store.get_document(found.document_id)
        sample = " ".join(s["text"] for s in (document.sentences if document is not None else [])[:40])
        json_text = edit.json_text if edit.json_text is not None else json.dumps(edit.candidate, ensure_ascii=False,
                                                                                 indent=2)
        return render("edit.html", edit.status, **context(
            request, principal, document_run=found, run=run, tree=tree, findings=findings, error=edit.error,
            checked=edit.checked, raw_mode=edit.raw_mode, blocked=found.state == DocumentState.BLOCKED, json_text=json_text,
            lang=language_of(sample) if sample else "und", query=_query(_filters(request)),
            sentences=document.sentences if document is not None else [], renew_ms=int(claim_s * 1000 / 5),
            held=held if held is not None and held.reviewer != principal.name else None,
            until=held.expires_at.isoformat() if held is not None and held.reviewer == principal.name else ""))

    return router


@dataclass(frozen=True)
class _Edit:
    """What the edit page shows of a person's edit: the candidate (as the form's fields), its JSON text when shown
    as text (None: the candidate's own), the edit's findings (``report``, an ``extractor.evidence.report.Report``) or
    why it was refused (``error``), whether it was checked clean, and the page's status."""

    candidate: Any
    json_text: str | None = None
    raw_mode: bool = False
    report: Any = None
    error: str | None = None
    checked: bool = False
    status: int = 200


def _block_override(document_run: DocumentRunInfo, override: str) -> Overrides:
    """``approve_document``'s overrides: a BLOCKED document (a critical finding, docs/design.md#rules) is
    approved only over the block, with the reason the reviewer typed; any other state needs none."""
    if document_run.state != DocumentState.BLOCKED:
        return Overrides()
    if not override:
        raise ReviewError(f"document run {document_run.id} is BLOCKED (a critical finding): approving it needs "
                          "the override reason")
    return Overrides(override_block=True, reason=override)


def _document_run(store: Store, document_run_id: int, scope: str | None) -> DocumentRunInfo | None:
    """The document run, if it exists and ``scope`` (an owner; None: every owner) may read it."""
    found = store.find_document_runs(ids=[document_run_id])
    return found[0] if found and _readable(store, document_run_id, scope) else None


def _readable(store: Store, document_run_id: int, scope: str | None) -> bool:
    from extractor.store.tasks import owns_document_run

    return scope is None or owns_document_run(store.engine, scope, document_run_id)


def _held_message(held: ReviewClaim) -> str:
    return f"{held.describe()}: you can decide it once they decide, leave it, or the claim expires"


def _schema(run: RunInfo | None) -> dict[str, Any] | None:
    """The schema of the contract ``run`` used, as it used it; None (the page offers the JSON text to edit, and
    a check says why) when it cannot be found so (``extractor.contracts.recorded``)."""
    from extractor.contracts.recorded import contract_of_run
    from extractor.errors import ExtractorError

    if run is None:
        return None
    try:
        return contract_of_run(run).schema
    except ExtractorError:
        return None


FILTER_KEYS = ("state", "model", "prompt", "tag", "contract")


def _filters(request: Request) -> dict[str, str]:
    return {key: request.query_params.get(key, "").strip() for key in FILTER_KEYS}


def _query_dict(filters: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in filters.items() if value}


def _query(filters: dict[str, str]) -> str:
    """The filters as a query string (for links that keep the reviewer's place in the filtered queue)."""
    return urlencode(_query_dict(filters))


def _queue(store: Store, records: Store, filters: dict[str, str], owner: str | None, *, limit: int | None) -> QueuePage:
    from extractor.runfilter import RunFilter

    run_ids = None
    if filters["model"] or filters["prompt"]:
        runs = RunFilter(model=filters["model"] or None, prompt_version=filters["prompt"] or None).select(store)
        run_ids = tuple(run.id for run in runs)
        if not run_ids:
            return QueuePage([], 0, {})
    states = (filters["state"],) if filters["state"] in QUEUE_STATES else QUEUE_STATES
    query = QueueQuery(contract=filters["contract"] or None, run_ids=run_ids, states=states,
                       tag=filters["tag"] or None, owner=owner, urgent_first=True)
    return waiting(store, records, query, limit=limit)


def _neighbours(store: Store, records: Store, filters: dict[str, str], document_run_id: int,
                owner: str | None) -> tuple[int | None, int | None]:
    """The document runs before and after this one in the (filtered) queue; the first waiting one as the
    next when this one is not in the queue (decided already)."""
    ids = _queue(store, records, filters, owner, limit=0).order  # the order only: no findings read
    if document_run_id not in ids:
        return None, ids[0] if ids else None
    at = ids.index(document_run_id)
    return (ids[at - 1] if at else None), (ids[at + 1] if at + 1 < len(ids) else None)
