"""A scripted OpenAI-compatible HTTP server, so provider and pipeline tests exercise real sockets.

Each ``POST /v1/chat/completions`` consumes one action of the script (a list, or a callable
``(request_json, call_number) -> Action``): a reply with arbitrary content, an HTTP status, a hang, a
connection reset or a truncated body. Every request is recorded (parsed JSON body and headers) so tests
can assert on what the client really sent. A thread per connection serves many concurrent clients.

    with ScriptedLLMServer([Status(429, headers={"Retry-After": "1"}), Reply('{"a": 1}')]) as server:
        provider = from_string("openai:test", base_url=server.base_url)

``rejects`` makes the server refuse request features the way a real server lacking them does; the
profiles below (``LLAMA_CPP_PYTHON``, ``NEEDS_MAX_COMPLETION_TOKENS``, ...) copy real servers' answers.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

HOST = "127.0.0.1"
CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
MODELS_PATHS = frozenset({"/v1/models", "/models"})


@dataclass(frozen=True)
class Reply:
    """HTTP 200 with ``content`` returned as-is (may be empty, truncated or not JSON at all)."""

    content: str
    delay_s: float = 0.0
    usage: tuple[int, int] = (10, 5)  # (prompt_tokens, completion_tokens)
    finish_reason: str = "stop"
    ignore_tools: bool = False  # answer in content even when the request forced a tool (as some servers do)
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens (OpenAI's prompt cache)


@dataclass(frozen=True)
class Status:
    """Any status with an OpenAI error body (default), a custom dict (JSON) or a raw string body."""

    code: int
    body: dict[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Answer nothing for ``seconds`` (longer than the client timeout), then close the connection."""

    seconds: float


@dataclass(frozen=True)
class Reset:
    """Close the socket abruptly (TCP RST) without any response."""


@dataclass(frozen=True)
class Truncated:
    """Send a 200 whose Content-Length promises more bytes than the body has, then close."""

    content: str


Action = Reply | Status | Hang | Reset | Truncated
Script = Iterable[Action] | Callable[[dict[str, Any] | None, int], Action]
# Request features a server can refuse (``ScriptedLLMServer(rejects=...)``): a response_format type,
# "tools" (tools or tool_choice present) or a request field such as "max_tokens".
Feature = str


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received; header names are lower-cased, ``json`` is None when the body was not JSON."""

    method: str
    path: str
    headers: dict[str, str]
    json: dict[str, Any] | None


def error_body(message: str, *, type_: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """The error envelope OpenAI-compatible servers use."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# How real servers refuse what they lack, copied from their answers (docs/model-servers.md says which
# mode each ends up with). llama-cpp-python's server (0.3.36, measured) validates response_format inside
# its request handler, so the pydantic error reaches the client as a 500 with a traceback line.
LLAMA_CPP_PYTHON: dict[Feature, Status] = {
    "json_schema": Status(500, error_body(
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "
        "\"Input should be 'text' or 'json_object'\", 'input': 'json_schema', 'ctx': {'expected': \"'text' or "
        "'json_object'\"}}\n\n  File \"/srv/.venv/lib/python3.11/site-packages/llama_cpp/server/app.py\", line 376, "
        "in create_chat_completion\n    POST /v1/chat/completions", type_="internal_server_error")),
}
# OpenAI's reasoning models (o1, o3, gpt-5) refuse max_tokens.
NEEDS_MAX_COMPLETION_TOKENS: dict[Feature, Status] = {
    "max_tokens": Status(400, error_body(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
        param="max_tokens", code="unsupported_parameter")),
}
# A server with function calling but no structured output.
TOOLS_BUT_NO_JSON_SCHEMA: dict[Feature, Status] = {
    "json_schema": Status(400, error_body("response_format type json_schema is not supported", param="response_format")),
}
# A FastAPI server that validates the request body: 422 with pydantic's error list, no OpenAI envelope.
UNPROCESSABLE_JSON_SCHEMA: dict[Feature, Status] = {
    "json_schema": Status(422, {"detail": [{"type": "literal_error", "loc": ["body", "response_format", "type"],
                                            "msg": "Input should be 'text' or 'json_object'", "input": "json_schema"}]}),
}
# A server without function calling.
NO_TOOLS: dict[Feature, Status] = {
    "tools": Status(400, error_body("this model does not support tools", param="tools")),
}


class ScriptedLLMServer:
    """Serves the script on 127.0.0.1 (random free port) from a background thread; use as a context manager.

    ``reject_response_format``: True answers 400 to any request whose ``response_format`` has type
    ``json_schema`` (a server without structured output); an iterable names the rejected types, e.g.
    ``{"json_schema", "json_object"}``. ``rejects`` maps request features to the answer they get
    (see ``Feature`` and the profiles above); it wins over ``reject_response_format``. Rejections do not
    consume script actions. When the script runs out, the server answers 500 "script exhausted" so tests
    fail loudly.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        reject_response_format: bool | Iterable[str] = False,
        rejects: Mapping[Feature, Status] | None = None,
        model: str = "scripted-model",
    ) -> None:
        self._script_fn = script if callable(script) else None
        self._actions: deque[Action] = deque() if callable(script) else deque(script)
        if isinstance(reject_response_format, bool):
            formats = frozenset({"json_schema"} if reject_response_format else ())
        else:
            formats = frozenset(reject_response_format)
        self._rejects: dict[Feature, Status] = {
            kind: Status(400, error_body(f"response_format type '{kind}' is not supported by this server",
                                         param="response_format"))
            for kind in formats
        }
        self._rejects.update(rejects or {})
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._calls = 0
        self.in_flight = 0  # chat calls being answered right now (read it from a script to see concurrency)
        self.peak_in_flight = 0
        self.connections = 0  # TCP connections accepted (kept-alive ones count once)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _HTTPServer(self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.url}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path in CHAT_PATHS]

    @property
    def remaining(self) -> int:
        """Actions of a list script not consumed yet (tests assert the whole script was used)."""
        with self._lock:
            return len(self._actions)

    def start(self) -> ScriptedLLMServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops accepting, wakes hanging handlers and closes the listening socket."""
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _rejection(self, body: dict[str, Any] | None) -> Status | None:
        """The answer to a request using a feature this server refuses, if it uses one."""
        request = body or {}
        response_format = request.get("response_format")
        features = [name for name in request if name not in ("response_format", "tools", "tool_choice")]
        if isinstance(response_format, dict):
            features.append(str(response_format.get("type")))
        if "tools" in request or "tool_choice" in request:
            features.append("tools")
        return next((self._rejects[name] for name in features if name in self._rejects), None)

    def _next_action(self, body: dict[str, Any] | None) -> tuple[Action, int]:
        with self._lock:
            self._calls += 1
            number = self._calls
            if self._script_fn is None:
                action = self._actions.popleft() if self._actions else None
        if self._script_fn is not None:
            return self._script_fn(body, number), number
        if action is None:
            return Status(500, error_body("script exhausted", type_="server_error")), number
        return action, number

    def _completion(self, reply: Reply | Truncated, body: dict[str, Any] | None, number: int) -> dict[str, Any]:
        """An OpenAI chat.completion; content goes into a tool call when the request offered tools."""
        request = body or {}
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        tools = request.get("tools")
        if tools and not (isinstance(reply, Reply) and reply.ignore_tools):
            name = tools[0].get("function", {}).get("name", "tool")
            call = {"id": f"call_{number}", "type": "function", "function": {"name": name, "arguments": reply.content}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        prompt, completion = reply.usage if isinstance(reply, Reply) else (10, 5)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        if isinstance(reply, Reply) and reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason if isinstance(reply, Reply) else "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage,
        }


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 drops SYNs under 64 concurrent connects

    def __init__(self, owner: ScriptedLLMServer) -> None:
        super().__init__((HOST, 0), _Handler)
        self.owner = owner

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that time out or get reset are expected here; anything else is still reported."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        owner = self.server.owner
        with owner._lock:
            owner.connections += 1
    wbufsize = 64 * 1024  # headers and body leave in one write (flushed per request by the base class)
    disable_nagle_algorithm = True  # no Nagle/delayed-ACK stalls on kept-alive connections
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``server.requests`` instead."""

    def do_GET(self) -> None:
        owner = self.server.owner
        owner._record(RecordedRequest("GET", self.path, _lower(self.headers.items()), None))
        if self.path.rstrip("/") in MODELS_PATHS:
            model = {"id": owner.model, "object": "model", "created": 0, "owned_by": "scripted"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_json(404, error_body(f"no route {self.path}"))

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        body = body if isinstance(body, dict) else None
        owner._record(RecordedRequest("POST", self.path, _lower(self.headers.items()), body))
        if self.path.rstrip("/") not in CHAT_PATHS:
            self._send_json(404, error_body(f"no route {self.path}"))
            return
        rejection = owner._rejection(body)
        if rejection is not None:
            self._perform(rejection, body, 0)
            return
        with owner._lock:
            owner.in_flight += 1
            owner.peak_in_flight = max(owner.peak_in_flight, owner.in_flight)
        try:
            action, number = owner._next_action(body)
            self._perform(action, body, number)
        finally:
            with owner._lock:
                owner.in_flight -= 1

    def _perform(self, action: Action, body: dict[str, Any] | None, number: int) -> None:
        owner = self.server.owner
        match action:
            case Reply():
                owner._stopping.wait(action.delay_s)
                self._send_json(200, owner._completion(action, body, number))
            case Status():
                payload = action.body if action.body is not None else _default_error(action.code)
                if isinstance(payload, dict):
                    self._send(action.code, json.dumps(payload).encode(), "application/json", action.headers)
                else:
                    self._send(action.code, payload.encode(), "text/plain; charset=utf-8", action.headers)
            case Hang():
                owner._stopping.wait(action.seconds)
                self.close_connection = True
            case Reset():
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
            case Truncated():
                data = json.dumps(owner._completion(action, body, number)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data) + 64))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                self.close_connection = True

    def _send_json(self, code: int, payload: dict[str, Any]) -> None:
        self._send(code, json.dumps(payload, ensure_ascii=False).encode(), "application/json", {})

    def _send(self, code: int, data: bytes, content_type: str, headers: Mapping[str, str]) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _lower(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in items}


def _default_error(code: int) -> dict[str, Any]:
    return error_body(f"scripted HTTP {code}", type_="server_error" if code >= 500 else "invalid_request_error")
