"""Prometheus metrics of ``extract serve`` and ``extract worker``, and their health answers.

Counted where the run log is written (``extractor.engine.recorder.Observer``), so the counts are the run
log's: documents by final state, model calls by outcome (ok, 429, timeout, error: one per HTTP try, as
each attempt's ``transport`` records them), each try's latency, tokens in and out, queued documents by the
outcome their task ended with; the queue depth (documents waiting for a worker, whether the broker holds
their messages or they wait for the broker to come back) and how many of them wait for the broker are read from
the run log when scraped. With ``PROMETHEUS_MULTIPROC_DIR`` set (several processes behind one port, e.g. a process
manager running several ``extract serve``), prometheus-client's multiprocess mode adds them up.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from extractor.vocab import DocumentState, Outcome, TaskState

if TYPE_CHECKING:
    from extractor.store import AttemptRecord, Store

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


def call_outcome(transport_outcome: str) -> str:
    """One HTTP try as the metrics name it: ok, 429, timeout or error."""
    if transport_outcome == "ok":
        return "ok"
    if transport_outcome == "http_429":
        return "429"
    return "timeout" if transport_outcome == "timeout" else "error"


class Metrics:
    """The process's metrics (one instance: prometheus-client registers each name once per registry)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.documents = Counter("extract_documents", "Document runs ended, by final state", ["state"])
        self.calls = Counter("extract_model_calls", "Model calls (HTTP tries), by outcome", ["outcome"])
        self.latency = Histogram("extract_model_call_seconds", "Model call (HTTP try) latency",
                                 buckets=LATENCY_BUCKETS)
        self.tokens = Counter("extract_tokens", "Tokens sent to (in) and received from (out) models", ["direction"])
        self.tasks = Counter("extract_task_outcomes", "Queued documents finished, by outcome", ["outcome"])

    def attempt(self, record: AttemptRecord) -> None:
        for attempt in record.transport:
            self.calls.labels(call_outcome(str(attempt.get("outcome")))).inc()
            self.latency.observe(float(attempt.get("latency_ms") or 0.0) / 1000)
        self.tokens.labels("in").inc(record.prompt_tokens or 0)
        self.tokens.labels("out").inc(record.completion_tokens or 0)

    def document_finished(self, state: DocumentState) -> None:
        self.documents.labels(str(state)).inc()

    def task_finished(self, outcome: Outcome) -> None:
        self.tasks.labels(str(outcome)).inc()


_metrics: Metrics | None = None


def metrics() -> Metrics:
    global _metrics
    if _metrics is None:
        _metrics = Metrics()
    return _metrics


class QueueDepth:
    """A collector reading the documents waiting for a worker from the run log at each scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from extractor.store import tasks

        waiting = tasks.waiting_counts(self.store.engine)
        yield GaugeMetricFamily("extract_queue_depth", "Documents waiting for a worker (queued, or unsent while the "
                                "broker is away)", value=sum(waiting.values()))
        yield GaugeMetricFamily("extract_queue_unsent", "Documents saved and not yet taken by the broker (sent when it "
                                "is back)", value=waiting[TaskState.unsent])


def exposition(store: Store) -> tuple[bytes, str]:
    """The metrics text (this process's, or every process's in multiprocess mode) and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    metrics()
    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    depth = CollectorRegistry()
    depth.register(QueueDepth(store))
    return generate_latest(registry) + generate_latest(depth), CONTENT_TYPE_LATEST


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


def health_routes(app: Any, store: Store, broker: Callable[[], str | None]) -> None:
    """``/metrics``, ``/healthz`` (alive) and ``/readyz`` (run log and broker reachable: 200, else 503) on a
    FastAPI or Starlette app, without a token (what a scraper and a load balancer call)."""
    from starlette.responses import JSONResponse, Response

    @app.get("/metrics", include_in_schema=False)
    def scrape() -> Response:
        body, content_type = exposition(store)
        return Response(body, media_type=content_type)

    @app.get("/healthz", include_in_schema=False)
    def alive() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def ready() -> JSONResponse:
        found = readiness(store, broker())
        ok = all(value == "ok" or value.startswith("not checked") for value in found.values())
        return JSONResponse(found | {"status": "ok" if ok else "not ready"}, status_code=200 if ok else 503)


def serve_health(store: Store, broker: str | None, *, host: str, port: int) -> None:
    """``/metrics``, ``/healthz`` and ``/readyz`` of an ``extract worker`` on ``host:port``, from a daemon thread."""
    import threading

    import uvicorn
    from fastapi import FastAPI

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    health_routes(app, store, lambda: broker)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, name="extract-metrics", daemon=True).start()
