"""The FastAPI application of ``extract serve``: built by ``create_app`` around one run log.

Every route but ``/health`` needs a bearer token; what a token may do is its role (``extractor.service.auth``).
OpenAPI docs are at ``/docs``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI

from extractor.queue.runner import Runner
from extractor.queue.settings import BatchSettings
from extractor.service.auth import Principal, current_principal
from extractor.store import Store
from extractor.vocab import DEFAULT_MAX_PENDING

DEFAULT_MAX_UPLOAD_BYTES = 10 << 20
"""Largest document a submission may carry (413 beyond it): the same order as ingest's own limit."""


@dataclass
class Service:
    """What the routes share: the run log, where submissions go, the default settings and the limits.

    ``publish`` hands committed task ids to the workers (Celery messages), or to ``runner`` in this process.
    """

    store: Store
    publish: Callable[[list[str]], None]
    defaults: BatchSettings
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_pending: int = DEFAULT_MAX_PENDING
    runner: Runner | None = None

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.store.close()


def build_service(store: Store, *, broker: str | None, concurrency: int, max_upload_bytes: int, model: str,
                  max_pending: int = DEFAULT_MAX_PENDING) -> Service:
    """Submissions go to Celery workers on ``broker``, or without one to a runner in this process."""
    defaults = BatchSettings(model=model)
    if broker is not None:
        from extractor.queue.celery_app import make_celery
        from extractor.queue.submit import celery_publisher

        return Service(store, celery_publisher(make_celery(broker)), defaults, max_upload_bytes, max_pending)
    runner = Runner(store, concurrency=concurrency, command="extract serve")

    def publish(task_ids: list[str]) -> None:
        for task_id in task_ids:
            runner.submit(task_id)

    return Service(store, publish, defaults, max_upload_bytes, max_pending, runner)


def create_app(service: Service) -> FastAPI:
    """The API over ``service``; mount further routers with ``app.include_router``."""
    app = FastAPI(title="extractor", summary="Submit documents, read candidates and findings, review them.",
                  version="1")
    app.state.service = service

    @app.get("/health")
    def health() -> dict[str, str]:
        """Liveness, without a token (for load balancers)."""
        return {"status": "ok"}

    @app.get("/v1/me")
    def me(principal: Annotated[Principal, Depends(current_principal)]) -> dict[str, str]:
        """The caller's token name and role."""
        return {"name": principal.name, "role": principal.role}

    return app
