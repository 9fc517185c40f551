"""Providers against a real scripted HTTP server: raw answers, mode fallback, bounded retries, no leaked key.

No client is mocked: every test goes through the openai client, httpx and a socket to
``tests.support.llm_server``. The slow test runs the bundled GGUF model in process.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from extractor.contracts import get_contract
from extractor.generate import GenerationRequest, GenerationResult, Provider, ProviderError
from extractor.providers import ACCEPTED_FORMS, ProviderSettings, from_string
from extractor.providers.local import BUNDLED_MODEL_NOTE, LocalProvider, _merge_system, _template_keeps_system
from extractor.providers.openai_compat import OpenAICompatProvider, _retry_after
from tests.support.llm_server import Hang, Reply, Reset, ScriptedLLMServer, Status, Truncated, error_body

KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"
FAST = ProviderSettings(
    timeout_s=5.0, max_transport_retries=3, retry_budget_s=30.0, backoff_base_s=0.05, backoff_max_s=0.2
)
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
REQUEST = GenerationRequest(
    messages=[
        {"role": "system", "content": "Extract the person as JSON."},
        {"role": "user", "content": "Alice is 30 years old."},
    ],
    schema=PERSON,
    schema_name="person",
    max_tokens=64,
)
StartServer = Callable[..., ScriptedLLMServer]


def provider_for(server: ScriptedLLMServer, **options: Any) -> OpenAICompatProvider:
    options = {"api_key": KEY, "settings": FAST, **options}
    provider = from_string("openai:test-model", base_url=server.base_url, **options)
    assert isinstance(provider, OpenAICompatProvider)
    return provider


def generate_all(provider: Provider, count: int = 1, request: GenerationRequest = REQUEST) -> list[GenerationResult]:
    """Sequential calls on one provider (mode caching is per instance), then a clean close."""

    async def run() -> list[GenerationResult]:
        try:
            return [await provider.generate(request) for _ in range(count)]
        finally:
            await provider.aclose()

    return asyncio.run(run())


def generate(server: ScriptedLLMServer, **options: Any) -> GenerationResult:
    return generate_all(provider_for(server, **options))[0]


def failure(server: ScriptedLLMServer, **options: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        generate(server, **options)
    return caught.value


# --- answers are returned raw ---------------------------------------------------------------------------


def test_success_returns_exact_raw_content_usage_and_sends_what_was_asked(llm_server: StartServer) -> None:
    content = '{"name": "Alice",   "age": 30}\n'
    server = llm_server([Reply(content, usage=(123, 45))])
    result = generate(server)
    assert result.text == content
    assert (result.prompt_tokens, result.completion_tokens) == (123, 45)
    assert (result.mode, result.model, result.finish_reason) == ("json_schema", "test-model", "stop")
    assert [a.outcome for a in result.transport] == ["ok"]
    [sent] = server.chat_requests
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json is not None
    assert sent.json["messages"] == REQUEST.messages
    assert (sent.json["model"], sent.json["temperature"], sent.json["max_tokens"]) == ("test-model", 0.0, 64)
    assert server.remaining == 0


@pytest.mark.parametrize("content", ["Sure! Here is the person you asked for.", "", '{"name": "Ali', "[1, 2"])
def test_unparseable_content_is_returned_as_text_not_raised(llm_server: StartServer, content: str) -> None:
    result = generate(llm_server([Reply(content, finish_reason="length")]))
    assert result.text == content
    assert result.finish_reason == "length"


def test_json_schema_mode_sends_the_contract_schema_unchanged(llm_server: StartServer) -> None:
    contract = get_contract("work_procedure")
    request = GenerationRequest(
        messages=[{"role": "user", "content": "s1: 요청자는 작업을 등록한다."}],
        schema=contract.schema,
        schema_name=contract.name,
    )
    server = llm_server([Reply("{}")])
    generate_all(provider_for(server), request=request)
    [sent] = server.chat_requests
    assert sent.json is not None
    assert sent.json["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "work_procedure", "schema": contract.schema, "strict": False},
    }
    assert "max_tokens" not in sent.json


# --- structured-output mode fallback ---------------------------------------------------------------------


def test_json_schema_rejected_falls_back_to_json_object_and_is_cached(llm_server: StartServer) -> None:
    server = llm_server(
        [Reply('{"name": "A", "age": 1}'), Reply('{"name": "B", "age": 2}')], reject_response_format=True
    )
    provider = provider_for(server)
    first, second = generate_all(provider, count=2)
    assert (first.mode, second.mode) == ("json_object", "json_object")
    assert first.text == '{"name": "A", "age": 1}'
    assert [a.outcome for a in first.transport] == ["http_400", "ok"]
    assert "json_schema rejected" in first.transport[0].detail
    assert "falling back to json_object" in first.transport[0].detail
    assert [a.outcome for a in second.transport] == ["ok"]  # the accepted mode is remembered
    sent = [r.json["response_format"] for r in server.chat_requests if r.json is not None]
    assert [f["type"] for f in sent] == ["json_schema", "json_object", "json_object"]
    assert sent[1] == {"type": "json_object"}


def test_server_without_any_response_format_gets_plain_requests(llm_server: StartServer) -> None:
    server = llm_server([Reply("plain answer")], reject_response_format={"json_schema", "json_object"})
    result = generate(server)
    assert (result.mode, result.text) == ("plain", "plain answer")
    assert [a.outcome for a in result.transport] == ["http_400", "http_400", "ok"]
    last = server.chat_requests[-1].json
    assert last is not None and "response_format" not in last


def test_other_400_is_not_retried_and_names_the_server_message(llm_server: StartServer) -> None:
    body = error_body("messages[0].content must be a string", param="messages")
    server = llm_server([Status(400, body)])
    error = failure(server)
    assert error.cause == f"HTTP 400 from {server.base_url}: messages[0].content must be a string"
    assert len(server.chat_requests) == 1
    assert [a.outcome for a in error.transport] == ["http_400"]


# --- transport retries -----------------------------------------------------------------------------------


def test_timeout_then_success(llm_server: StartServer) -> None:
    server = llm_server([Hang(2.0), Reply("ok")])
    began = time.monotonic()
    result = generate(server, settings=ProviderSettings(timeout_s=0.5, backoff_base_s=0.05, backoff_max_s=0.2))
    elapsed = time.monotonic() - began
    assert result.text == "ok"
    assert [a.outcome for a in result.transport] == ["timeout", "ok"]
    assert 450 <= result.transport[0].latency_ms < 1500
    assert 0.5 <= elapsed < 1.9  # did not wait for the hang to end


def test_timeouts_throughout_raise_with_the_attempt_count(llm_server: StartServer) -> None:
    server = llm_server([Hang(1.0), Hang(1.0)])
    settings = ProviderSettings(timeout_s=0.3, max_transport_retries=1, backoff_base_s=0.05, backoff_max_s=0.1)
    error = failure(server, settings=settings)
    assert error.cause == "timeout after 0.3 s (2 attempts)"
    assert [a.outcome for a in error.transport] == ["timeout", "timeout"]


def test_429_honours_retry_after_and_reports_rate_limit(llm_server: StartServer) -> None:
    seen: list[float | None] = []
    server = llm_server([Status(429, headers={"Retry-After": "1"}), Reply("ok")])
    began = time.monotonic()
    result = generate(server, on_rate_limit=seen.append)
    elapsed = time.monotonic() - began
    assert result.text == "ok"
    assert [a.outcome for a in result.transport] == ["http_429", "ok"]
    assert result.transport[0].wait_s >= 1.0
    assert elapsed >= 1.0
    assert seen == [1.0]


def test_every_429_calls_on_rate_limit(llm_server: StartServer) -> None:
    seen: list[float | None] = []
    server = llm_server([Status(429, headers={"Retry-After": "0"}), Status(429), Reply("ok")])
    result = generate(server, on_rate_limit=seen.append)
    assert [a.outcome for a in result.transport] == ["http_429", "http_429", "ok"]
    assert seen == [0.0, None]


def test_retry_after_as_http_date() -> None:
    in_five_seconds = email.utils.formatdate(time.time() + 5, usegmt=True)
    wait = _retry_after({"retry-after": in_five_seconds})
    assert wait is not None and 3.5 <= wait <= 5.0
    assert _retry_after({"retry-after": "soon"}) is None
    assert _retry_after({}) is None


def test_retry_after_beyond_the_budget_gives_up_at_once(llm_server: StartServer) -> None:
    server = llm_server([Status(503, headers={"Retry-After": "60"})])
    began = time.monotonic()
    error = failure(server, settings=ProviderSettings(retry_budget_s=2.0))
    assert time.monotonic() - began < 1.0
    assert (
        error.cause
        == f"HTTP 503 from {server.base_url} after 1 attempt: scripted HTTP 503 (retry budget of 2 s exhausted)"
    )


def test_500s_until_provider_error_with_status_and_attempt_count(llm_server: StartServer) -> None:
    server = llm_server([])  # every call: 500 "script exhausted"
    error = failure(server)
    assert error.cause == f"HTTP 500 from {server.base_url} after 4 attempts: script exhausted"
    assert [a.outcome for a in error.transport] == ["http_500"] * 4
    waits = [a.wait_s for a in error.transport]
    assert all(0.0 < w <= FAST.backoff_max_s for w in waits[:3]) and waits[3] == 0.0
    assert len(server.chat_requests) == 4


@pytest.mark.parametrize(
    ("broken", "outcome"),
    [
        (Reset(), "connection_error"),
        (Truncated('{"name": "Alice", "age": 30}'), "connection_error"),
        (Status(200, body="<html>Bad gateway</html>"), "garbled_body"),
        (Status(200, body=""), "empty_body"),
    ],
)
def test_broken_transport_then_success(llm_server: StartServer, broken: Any, outcome: str) -> None:
    result = generate(llm_server([broken, Reply("ok")]))
    assert result.text == "ok"
    assert [a.outcome for a in result.transport] == [outcome, "ok"]
    assert result.transport[0].detail


def test_unreachable_server_names_the_connection_error() -> None:
    with ScriptedLLMServer() as server:
        base_url = server.base_url  # the port is free again once the server stopped
    provider = from_string("openai:m", base_url=base_url, api_key=KEY, settings=FAST)
    with pytest.raises(ProviderError) as caught:
        generate_all(provider)
    assert caught.value.cause.startswith(f"connection error to {base_url} after 4 attempts: ")


# --- secrets ---------------------------------------------------------------------------------------------


def test_401_is_immediate_and_never_shows_the_key(llm_server: StartServer) -> None:
    server = llm_server([Status(401, error_body(f"Incorrect API key provided: {KEY}", type_="invalid_api_key"))])
    error = failure(server)
    assert error.cause == f"HTTP 401 from {server.base_url}: the API key was rejected (Incorrect API key provided: ***)"
    assert len(server.chat_requests) == 1
    assert KEY not in error.transport[0].detail


def test_api_key_never_in_causes_details_repr_or_logs(
    llm_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    echo = error_body(f"upstream said: Authorization: Bearer {KEY} is throttled")
    server = llm_server(
        [Reset(), Status(502, echo), Status(429, echo, headers={"Retry-After": "0"}), Status(500, echo)]
    )
    provider = provider_for(server)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ProviderError) as caught:
        generate_all(provider)
    error = caught.value
    assert server.chat_requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was really sent
    texts = [error.cause, str(error), repr(provider), *(a.detail for a in error.transport), caplog.text]
    assert "Bearer ***" in error.cause
    for text in texts:
        assert KEY not in text
        assert KEY[-12:] not in text


# --- construction ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", "anthropic:claude", "local:", ""])
def test_unknown_provider_strings_list_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError) as caught:
        from_string(spec)
    message = str(caught.value)
    assert ACCEPTED_FORMS in message and "\n" not in message


def test_openai_settings_come_from_the_environment(llm_server: StartServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server = llm_server([Reply("ok"), Reply("ok")])
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    generate_all(from_string("openai:env-model", settings=FAST))
    monkeypatch.delenv("OPENAI_API_KEY")
    generate_all(from_string("openai:env-model", settings=FAST))  # a local server needs no real key
    assert [r.headers["authorization"] for r in server.chat_requests] == [f"Bearer {KEY}", "Bearer not-needed"]
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        from_string("openai:env-model")


def test_local_provider_strings(tmp_path: Any) -> None:
    bundled = from_string("local")
    assert isinstance(bundled, LocalProvider) and bundled.is_bundled
    assert bundled.model == "gemma-3-270m-q4_k_m.gguf" and bundled.name == "local"
    assert "tiny demonstration model" in BUNDLED_MODEL_NOTE
    model_file = tmp_path / "my-model.Q8_0.gguf"
    model_file.write_bytes(b"GGUF")
    named = from_string(f"local:{model_file}")
    assert isinstance(named, LocalProvider) and not named.is_bundled and named.model == "my-model.Q8_0.gguf"
    with pytest.raises(ValueError, match="not found"):
        from_string(f"local:{tmp_path / 'missing.gguf'}")


def test_local_model_that_cannot_load_is_a_provider_error(tmp_path: Any) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF not really a model")
    with pytest.raises(ProviderError) as caught:
        generate_all(from_string(f"local:{broken}"))
    assert caught.value.cause.startswith("local model broken.gguf failed: ")
    assert [a.outcome for a in caught.value.transport] == ["local_error"]


def test_system_role_is_merged_only_where_the_chat_template_lacks_it() -> None:
    refuses = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    drops = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    keeps = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    assert [_template_keeps_system(t) for t in (refuses, drops, keeps)] == [False, False, True]
    assert _merge_system(REQUEST.messages) == [
        {"role": "user", "content": "Extract the person as JSON.\n\nAlice is 30 years old."}
    ]
    assert _merge_system([{"role": "system", "content": "only"}]) == [{"role": "user", "content": "only"}]


# --- the scripted server itself --------------------------------------------------------------------------


def test_server_serves_models_and_concurrent_delayed_replies(llm_server: StartServer) -> None:
    server = llm_server(lambda body, number: Reply(f"answer {number}", delay_s=0.5))
    provider = provider_for(server)

    async def run() -> list[GenerationResult]:
        try:
            return await asyncio.gather(*(provider.generate(REQUEST) for _ in range(32)))
        finally:
            await provider.aclose()

    began = time.monotonic()
    results = asyncio.run(run())
    assert time.monotonic() - began < 2.5  # 32 x 0.5 s served side by side, not one after another
    assert sorted(r.text for r in results) == sorted(f"answer {n}" for n in range(1, 33))
    with urllib.request.urlopen(f"{server.base_url}/models") as response:
        assert [m["id"] for m in json.load(response)["data"]] == ["scripted-model"]


# --- the real local model --------------------------------------------------------------------------------


@pytest.mark.slow
def test_bundled_local_model_answers_under_a_grammar() -> None:
    provider = from_string("local")
    assert isinstance(provider, LocalProvider)
    [result] = generate_all(provider)
    assert isinstance(result.text, str)
    assert result.mode == "grammar"
    assert result.model == "gemma-3-270m-q4_k_m.gguf"
    assert result.completion_tokens is not None and 0 < result.completion_tokens <= 64
    assert [a.outcome for a in result.transport] == ["ok"]
