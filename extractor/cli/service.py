"""Beyond one process: ``extract worker`` (a Celery worker), ``extract serve`` (the HTTP API) and
``extract tokens`` (the API's bearer tokens)."""


from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

import typer

from extractor.cli.app import App, Commands, ContractsOption, Format, FormatOption, app, emit_json, fail, search_contracts
from extractor.cli.review import DatabaseOption
from extractor.queue.celery_app import DEFAULT_VISIBILITY_TIMEOUT_S, REDELIVERY_SLACK_S
from extractor.vocab import DEFAULT_MAX_DELIVERIES, DEFAULT_MAX_PENDING, DEFAULT_TOKEN_DAYS, Role

QueueOption = Annotated[str | None, typer.Option("--queue", help="broker URL, e.g. redis://127.0.0.1:6379/0 "
                                                 "[env EXTRACT_BROKER_URL]")]
EndpointsOption = Annotated[str | None, typer.Option(
    "--endpoints", metavar="FILE", help="the model servers this service may call, by name, with their URLs, key "
    "variables and models (docs/service.md); the same file for `extract serve` and every worker [env "
    "EXTRACT_ENDPOINTS; default: OPENAI_BASE_URL and OPENAI_API_KEY]")]
ExpiresOption = Annotated[str, typer.Option(
    "--expires", metavar="AGE", help="how long the token works: 90d, 12w, 36h, or never (docs/service.md#tokens)")]
tokens_app = App(cls=Commands, help="Bearer tokens of `extract serve`: create (the secret is shown once), list, rotate, "
                 "revoke.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")


@dataclass(frozen=True)
class Redelivery:
    """What becomes of the documents of a worker that died: when they are delivered again, and when no more."""

    max_deliveries: Annotated[int, typer.Option(min=1, help="a document whose worker died this many times ends ERROR "
                                                "instead of being delivered again")] = DEFAULT_MAX_DELIVERIES
    visibility_timeout: Annotated[float, typer.Option(min=1, help="seconds after its delivery a document not "
                                                      "acknowledged goes back on the queue: the documents of a worker "
                                                      f"that died are back within this + {REDELIVERY_SLACK_S:.0f} s "
                                                      "(another worker takes them when it has room). Longer than any "
                                                      "document takes (a longer one is delivered again, and that copy "
                                                      "waits for it)")] = DEFAULT_VISIBILITY_TIMEOUT_S


@dataclass(frozen=True)
class Monitoring:
    """Where a worker serves its metrics and health (none by default)."""

    metrics_port: Annotated[int | None, typer.Option(help="serve Prometheus /metrics (this worker's conversion "
                                                     "metrics: docs/service.md#metrics), /healthz and /readyz on "
                                                     "this port")] = None
    metrics_host: Annotated[str, typer.Option(help="address of the metrics port")] = "127.0.0.1"


@app.command()
def worker(
    queue: QueueOption = None,
    database: DatabaseOption = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="documents, and so model calls, in flight in this "
                                             "worker (halved on each 429 or timeout, then grown back)")] = 8,
    redelivery: Redelivery = Redelivery(),
    loglevel: Annotated[str, typer.Option(help="Celery log level")] = "WARNING",
    endpoints: EndpointsOption = None,
    monitoring: Monitoring = Monitoring(),
    contracts: ContractsOption = None,
) -> None:
    """A Celery worker converting queued documents (`extract run --queue`, `extract serve --queue`).

    Start as many as the model server takes, on any machines that reach the broker and the run log
    (PostgreSQL for several machines). Ctrl-C or SIGTERM finishes the documents in flight, then stops.
    """
    from extractor.cli.run import start_readers

    start_readers()  # first: the fork server imports what the pool needs while this process imports Celery and the rest
    from extractor.queue.celery_app import broker_url, make_celery, start_worker
    from extractor.queue.endpoints import load_endpoints
    from extractor.queue.fleet import fleet_for, is_redis
    from extractor.queue.runner import Runner
    from extractor.store import open_store

    broker = broker_url(queue)
    if broker is None:
        fail("extract worker needs a broker: --queue redis://host:6379/0 or EXTRACT_BROKER_URL")
    search_contracts(contracts)  # where a batch's contract is looked for when the folder it names is not here
    servers = load_endpoints(endpoints)
    store = open_store(database)
    observer = None
    if monitoring.metrics_port is not None:
        from extractor.service.metrics import metrics, serve_health

        observer = metrics()
        serve_health(store, broker, host=monitoring.metrics_host, port=monitoring.metrics_port)
    runner = Runner(store, concurrency=concurrency, max_deliveries=redelivery.max_deliveries, fleet=fleet_for(broker),
                    endpoints=servers, observer=observer)
    runner.warm_up()  # while Celery starts and the first batch is being submitted
    presence = None
    if is_redis(broker):  # `extract serve` counts the workers online from it (docs/service.md#metrics)
        from extractor.queue.presence import Presence

        presence = Presence(broker).start()
    try:
        start_worker(make_celery(broker, visibility_timeout_s=redelivery.visibility_timeout), runner,
                     concurrency=concurrency, loglevel=loglevel)
    finally:
        if presence is not None:
            presence.stop()


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    queue: QueueOption = None,
    database: DatabaseOption = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="without a broker: documents converted at once in "
                                             "this process")] = 4,
    model: Annotated[str | None, typer.Option(help="model of submissions that name none, one of an endpoint's "
                                             "[env EXTRACT_MODEL]")] = None,
    endpoints: EndpointsOption = None,
    max_pending: Annotated[int, typer.Option(min=1, help="documents waiting for a worker (every batch together) past "
                                             "which a submission gets 429 with Retry-After")] = DEFAULT_MAX_PENDING,
) -> None:
    """The HTTP API (OpenAPI docs at /docs): submit documents, read results, review; bearer tokens required.
    Reviewers and admins review in the browser at /review/, signing in once with their token.

    With a broker (--queue or EXTRACT_BROKER_URL) submissions go to `extract worker`s; without one this
    process converts them itself, so one machine needs nothing else. A document over EXTRACT_MAX_DOCUMENT_BYTES
    (default 10,000,000, the limit ingest applies everywhere) gets 413. /metrics serves Prometheus metrics
    (docs/service.md#metrics).
    """
    import os

    import uvicorn

    from extractor.options import resolve_model
    from extractor.queue.celery_app import broker_url
    from extractor.queue.endpoints import load_endpoints
    from extractor.service.app import build_service, create_app
    from extractor.store import open_store

    servers = load_endpoints(endpoints, default_model=resolve_model(model))  # (the model matters without a file)
    default_model = model or os.environ.get("EXTRACT_MODEL") or servers.first_model() or resolve_model(None)
    store = open_store(database)
    service = build_service(store, broker=broker_url(queue), concurrency=concurrency, model=default_model,
                            endpoints=servers, max_pending=max_pending)
    shown = f"[{host}]" if ":" in host else host
    where = "extract worker processes take them from the broker" if service.broker else "this process converts them"
    typer.echo(f"serving the API on http://{shown}:{port}/v1 (OpenAPI docs /docs, review pages /review/, metrics "
               f"/metrics); submissions use {default_model}, {where}; Ctrl-C stops", err=True)
    try:
        uvicorn.run(create_app(service), host=host, port=port, log_level="warning")
    finally:
        service.close()


def lifetime(value: str) -> timedelta | None:
    """``--expires``: ``90d``, ``12w``, ``36h`` or ``never`` (None)."""
    import re

    if value.strip().lower() == "never":
        return None
    match = re.fullmatch(r"\s*([1-9][0-9]{0,4})\s*([hdw])\s*", value.lower())
    if match is None:
        fail(f"--expires {value!r}: give an age such as 90d, 12w or 36h, or never")
    number, unit = int(match.group(1)), match.group(2)
    return timedelta(hours=number) if unit == "h" else timedelta(days=number * (7 if unit == "w" else 1))


@tokens_app.command("create")
def tokens_create(
    name: Annotated[str, typer.Argument(help="who holds the token (recorded as the reviewer of its decisions)")],
    role: Annotated[Role, typer.Option(help="submitter: submit and read its owner's work; reviewer: also approve and "
                                       "reject it; admin: every owner's work, and settings")] = Role.submitter,
    owner: Annotated[str | None, typer.Option(help="the team whose work the token submits, reads and (a reviewer) "
                                              "decides; tokens with the same owner share it [default: the token's "
                                              "name; a reviewer needs --owner or --all-owners]")] = None,
    all_owners: Annotated[bool, typer.Option("--all-owners", help="a reviewer that reads and decides every owner's "
                                             "work (department-wide)")] = False,
    expires: ExpiresOption = f"{DEFAULT_TOKEN_DAYS}d",
    database: DatabaseOption = None,
) -> None:
    """Create a token and print its secret once (only a hash is stored).

    Every token belongs to an owner (a team) or is explicitly department-wide (--all-owners, or an admin).
    """
    from extractor.store import open_store
    from extractor.store.tokens import create_token

    expires_in = lifetime(expires)
    with open_store(database) as store:
        typer.echo(create_token(store.engine, name, role, owner, all_owners=all_owners, expires_in=expires_in))


@tokens_app.command("list")
def tokens_list(database: DatabaseOption = None, format: FormatOption = Format.text) -> None:
    """Every token's name, role, owner, status and dates: created, last used, expires (never the secret)."""
    from extractor.cli.review import open_run_log
    from extractor.store.tokens import list_tokens

    with open_run_log(database) as store:
        found = list_tokens(store.engine)
    if format is Format.json:
        emit_json([token.to_json() for token in found])
        return
    from extractor.ui.service import print_tokens

    print_tokens(found)


@tokens_app.command("rotate")
def tokens_rotate(name: Annotated[str, typer.Argument(help="the token's name")],
                  expires: ExpiresOption = f"{DEFAULT_TOKEN_DAYS}d", database: DatabaseOption = None) -> None:
    """Give a token a new secret and a new expiry (printed once): the old secret stops working at once, its browser
    sessions end; name, role and owner stay. An expired token is renewed this way."""
    from extractor.cli.review import open_run_log
    from extractor.store.tokens import rotate_token

    expires_in = lifetime(expires)
    with open_run_log(database) as store:
        typer.echo(rotate_token(store.engine, name, expires_in))


@tokens_app.command("revoke")
def tokens_revoke(name: Annotated[str, typer.Argument(help="the token's name")], database: DatabaseOption = None) -> None:
    """Revoke a token: requests with it get 401 from then on."""
    from extractor.cli.review import open_run_log
    from extractor.store.tokens import revoke_token

    with open_run_log(database, reads_only=False) as store:
        if not revoke_token(store.engine, name):
            fail(f"no live token named {name!r}")
    typer.echo(f"revoked {name}")
