"""Prometheus metrics of ``extract serve`` and ``extract worker``, and their health answers.

Each series comes from exactly one kind of process, so a sum over every scraped process counts nothing twice
(docs/service.md#metrics lists them):

- **conversion** (``Metrics``), exported by the processes that convert documents: each ``extract worker``, or
  ``extract serve`` without a broker. Counted where the run log is written (``extractor.engine.recorder.Observer``),
  so they are the run log's: documents by final state, model calls by endpoint name, model and outcome (ok, 429,
  timeout, error: one per HTTP try, as each attempt's ``transport`` records them), each try's latency, tokens in
  and out, queued documents by the outcome their task ended with, how long each ran and how long it waited;
- **the department's view** (``Department``), exported by ``extract serve`` alone, read when scraped: documents
  waiting for a worker (whether the broker holds their messages or they wait for the broker to come back) and how
  many of them wait for the broker, the review queue by state and owner, people's decisions, workers online (from
  the broker: ``extractor.queue.presence``);
- **HTTP** per route (requests, latency, sizes, in flight), exported by ``extract serve`` alone, measured by
  prometheus-fastapi-instrumentator on a registry of the app's own.

prometheus-client's ``process_*`` and ``python_*`` series are each process's own. With ``PROMETHEUS_MULTIPROC_DIR``
set (several processes of one kind behind one port, e.g. a process manager running several ``extract serve``),
prometheus-client's multiprocess mode adds them up.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from extractor.vocab import DocumentState, Outcome, TaskState

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from extractor.store import AttemptRecord, Store

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
TASK_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds a queued document ran (start to finish) or waited (enqueued to first start)."""


def call_outcome(transport_outcome: str) -> str:
    """One HTTP try as the metrics name it: ok, 429, timeout or error."""
    if transport_outcome == "ok":
        return "ok"
    if transport_outcome == "http_429":
        return "429"
    return "timeout" if transport_outcome == "timeout" else "error"


class Metrics:
    """The conversion metrics of this process, on a registry of their own (one instance: ``metrics()``), exported
    only by a process that converts."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.documents = Counter("extract_documents", "Document runs ended, by final state", ["state"], registry=r)
        self.calls = Counter("extract_model_calls", "Model calls (HTTP tries), by endpoint name, model and outcome",
                             ["endpoint", "model", "outcome"], registry=r)
        self.latency = Histogram("extract_model_call_seconds", "Model call (HTTP try) latency, by endpoint and model",
                                 ["endpoint", "model"], buckets=LATENCY_BUCKETS, registry=r)
        self.tokens = Counter("extract_tokens", "Tokens sent to (in) and received from (out) models",
                              ["direction", "endpoint", "model"], registry=r)
        self.tasks = Counter("extract_task_outcomes", "Queued documents finished, by outcome", ["outcome"], registry=r)
        self.task_seconds = Histogram("extract_task_seconds", "Queued documents converted: start to finish",
                                      buckets=TASK_BUCKETS, registry=r)
        self.queue_wait = Histogram("extract_task_queue_wait_seconds", "Queued documents: enqueued to first start",
                                    buckets=TASK_BUCKETS, registry=r)

    def for_endpoint(self, endpoint: str) -> EndpointMetrics:
        """What an engine calling the model server of ``endpoint`` (its name; "" for a URL no endpoint names)
        reports to."""
        return EndpointMetrics(self, endpoint)

    def task_started(self, waited_s: float) -> None:
        self.queue_wait.observe(max(0.0, waited_s))

    def task_finished(self, outcome: Outcome, ran_s: float | None) -> None:
        """A queued document ended with ``outcome``; ``ran_s`` None: no worker started it (refused settings, a spent
        budget), so it has no run time."""
        self.tasks.labels(str(outcome)).inc()
        if ran_s is not None:
            self.task_seconds.observe(ran_s)


class EndpointMetrics:
    """The run's observer (``extractor.engine.recorder.Observer``) for an engine of one endpoint."""

    def __init__(self, metrics: Metrics, endpoint: str) -> None:
        self.metrics = metrics
        self.endpoint = endpoint

    def attempt(self, record: AttemptRecord) -> None:
        m, model = self.metrics, record.model or ""
        for attempt in record.transport:
            m.calls.labels(self.endpoint, model, call_outcome(str(attempt.get("outcome")))).inc()
            m.latency.labels(self.endpoint, model).observe(float(attempt.get("latency_ms") or 0.0) / 1000)
        m.tokens.labels("in", self.endpoint, model).inc(record.prompt_tokens or 0)
        m.tokens.labels("out", self.endpoint, model).inc(record.completion_tokens or 0)

    def document_finished(self, state: DocumentState) -> None:
        self.metrics.documents.labels(str(state)).inc()


_metrics: Metrics | None = None


def metrics() -> Metrics:
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics


class Department:
    """The department's view, read from the run log (and the broker) at each scrape: exported by ``extract serve``
    alone."""

    def __init__(self, store: Store, records: Store, broker: str | None) -> None:
        self.store = store
        self.records = records
        self.broker = broker

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from extractor.review.queue import backlog
        from extractor.store import tasks
        from extractor.store.approved import decision_counts

        queued = tasks.waiting_counts(self.store.engine)
        yield GaugeMetricFamily("extract_queue_depth", "Documents waiting for a worker (queued, or unsent while the "
                                "broker is away)", value=sum(queued.values()))
        yield GaugeMetricFamily("extract_queue_unsent", "Documents saved and not yet taken by the broker (sent when it "
                                "is back)", value=queued[TaskState.unsent])
        waiting = GaugeMetricFamily("extract_review_backlog", "Documents waiting for a person (the review queue of "
                                    "every owner), by state and owner (\"\": no API owner)", labels=["state", "owner"])
        for (state, owner), count in sorted(backlog(self.store, self.records).items()):
            waiting.add_metric([state, owner], count)
        yield waiting
        decisions = CounterMetricFamily("extract_review_decisions", "People's decisions: approved, rejected, and "
                                        "signed_off (one person's approval of a record that needs several)",
                                        labels=["decision"])
        for decision, count in decision_counts(self.store).items():
            decisions.add_metric([decision], count)
        yield decisions
        workers = self._workers()
        if workers is not None:
            yield GaugeMetricFamily("extract_workers_online", "extract worker processes heard from in the last "
                                    "15 s (through the broker)", value=workers)

    def _workers(self) -> int | None:
        """Workers online; None (the series is left out) without a Redis broker, or while it does not answer."""
        from extractor.queue.fleet import is_redis

        if self.broker is None or not is_redis(self.broker):
            return None
        import redis

        from extractor.queue.presence import online

        try:
            return online(self.broker)
        except redis.RedisError:
            return None


def exposition(counted: list[CollectorRegistry], scraped: list[CollectorRegistry]) -> tuple[bytes, str]:
    """The metrics text and its content type: this process's ``process_*``/``python_*`` series and the ``counted``
    registries (in multiprocess mode instead, what every process of the directory counted), then the ``scraped``
    ones (collectors that read the run log or the broker when scraped)."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    parts = [REGISTRY, *counted]
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        parts = [merged]
    return b"".join(generate_latest(registry) for registry in [*parts, *scraped]), CONTENT_TYPE_LATEST


def collected(collector: Any) -> CollectorRegistry:
    """A registry holding one collector that is read when scraped."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def readiness(store: Store, broker: str | None) -> dict[str, str]:
    """What ``/readyz`` checks: the run log answers a query, and the broker (if any) answers PING."""
    from sqlalchemy import text

    found: dict[str, str] = {}
    try:
        with store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        found["run_log"] = "ok"
    except Exception as error:  # noqa: BLE001 - reported as the reason it is not ready
        found["run_log"] = f"unreachable: {type(error).__name__}"
    if broker is not None:
        found["broker"] = _ping(broker)
    return found


def _ping(broker: str) -> str:
    if not broker.startswith(("redis://", "rediss://", "unix://")):
        return "not checked (not Redis)"
    import redis

    client = redis.Redis.from_url(broker, socket_timeout=2, socket_connect_timeout=2)
    try:
        return "ok" if client.ping() else "no answer"
    except redis.RedisError as error:
        return f"unreachable: {type(error).__name__}"
    finally:
        client.close()


def health_routes(app: Any, store: Store, broker: Callable[[], str | None], counted: list[CollectorRegistry],
                  scraped: list[CollectorRegistry]) -> None:
    """``/metrics`` (``exposition`` of ``counted`` and ``scraped``), ``/healthz`` (alive) and ``/readyz`` (run log and
    broker reachable: 200, else 503) on a FastAPI or Starlette app, without a token (what a scraper and a load
    balancer call)."""
    from starlette.responses import JSONResponse, Response

    @app.get("/metrics", include_in_schema=False)
    def scrape() -> Response:
        body, content_type = exposition(counted, scraped)
        return Response(body, media_type=content_type)

    @app.get("/healthz", include_in_schema=False)
    def alive() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def ready() -> JSONResponse:
        found = readiness(store, broker())
        ok = all(value == "ok" or value.startswith("not checked") for value in found.values())
        return JSONResponse(found | {"status": "ok" if ok else "not ready"}, status_code=200 if ok else 503)


def instrument(app: Any) -> CollectorRegistry:
    """Per-route HTTP metrics of ``app`` on a registry of the app's own, which it returns (several apps in one
    process, as in the tests, each count their own): requests by route, method and status class, latency, request
    and response sizes (prometheus-fastapi-instrumentator), and requests in flight by route and method (``InFlight``:
    the library's own gauge registers on the process's default registry, once per process)."""
    from prometheus_client import CollectorRegistry, Gauge
    from prometheus_fastapi_instrumentator import Instrumentator, metrics

    registry = CollectorRegistry(auto_describe=True)
    instrumentator = Instrumentator(should_group_status_codes=True, should_ignore_untemplated=True,
                                    excluded_handlers=list(UNCOUNTED), registry=registry)
    instrumentator.add(metrics.default(metric_namespace="extract", registry=registry))
    instrumentator.instrument(app)
    in_flight = Gauge("extract_http_requests_inprogress", "HTTP requests being answered, by route and method",
                      ["handler", "method"], registry=registry, multiprocess_mode="livesum")
    app.add_middleware(InFlight, gauge=in_flight)
    return registry


UNCOUNTED = ("/metrics", "/healthz", "/readyz", "/health")
"""What scrapers and load balancers call: not counted as the service's traffic."""


class InFlight:
    """Pure ASGI middleware: a request counts in ``gauge`` (by route template and method) while it is answered."""

    def __init__(self, app: Any, gauge: Any) -> None:
        self.app = app
        self.gauge = gauge

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        handler = self._route(scope) if scope["type"] == "http" else None
        if handler is None:
            await self.app(scope, receive, send)
            return
        counted = self.gauge.labels(handler, scope["method"])
        counted.inc()
        try:
            await self.app(scope, receive, send)
        finally:
            counted.dec()

    @staticmethod
    def _route(scope: dict[str, Any]) -> str | None:
        """The template of the route ``scope`` goes to (``/v1/review/{document_run_id}``); None for none, or one not
        counted."""
        from starlette.routing import Match

        for route in scope["app"].routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                path = str(getattr(route, "path", ""))
                return None if path in UNCOUNTED else path
        return None


def serve_health(store: Store, broker: str | None, *, host: str, port: int) -> None:
    """``/metrics`` (the conversion metrics: a worker's), ``/healthz`` and ``/readyz`` of an ``extract worker`` on
    ``host:port``, from a daemon thread."""
    import threading

    import uvicorn
    from fastapi import FastAPI

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    health_routes(app, store, lambda: broker, [metrics().registry], [])
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, name="extract-metrics", daemon=True).start()
