"""A request body over the limit gets 413 as soon as the bytes that came pass it, without buffering it (pure ASGI
middleware).

A declared ``Content-Length`` over the limit is refused before any of the body is read. Otherwise the body goes
on to the app as it arrives (FastAPI reads a JSON body itself; Starlette spools a multipart upload, to disk past
1 MB), each part counted: the read that passes the limit fails with ``BodyTooLarge`` and the answer is 413, so a
hostile client cannot make the server hold or spool more than the limit.

Why not FastAPI's own ``max_body_size`` (0.164): Starlette's limiter then replaces whatever the app answers to a
declared length over the limit with a plain-text 413, and every refusal of this API is JSON (``Problem``).
"""

from __future__ import annotations

import json
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyTooLarge(Exception):
    """The body read so far passed the limit (FastAPI wraps it in a 400 when it was reading the body itself)."""


def over_limit(limit: int) -> str:
    """The 413's ``detail``."""
    return f"request body over the limit of {limit} bytes"


class BodyLimit:
    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message: Message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:  # the app answered before it read that far: nothing left to say
                raise
            await self._too_large(send)

    async def _too_large(self, send: Any) -> None:
        body = json.dumps({"detail": over_limit(self.limit)}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
