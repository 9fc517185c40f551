"""Providers against a real scripted HTTP server: raw answers, mode fallback, bounded retries, no leaked key.

No client is mocked: every test goes through aiohttp and a socket to ``tests.support.llm_server``. The slow test runs the bundled GGUF model in process.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from extractor.contracts import get_contract
from extractor.engine import AdaptiveLimit
from extractor.generate import MAX_RETRY_AFTER_S, GenerationRequest, GenerationResult, Provider, ProviderError
from extractor.providers import ACCEPTED_FORMS, ProviderSettings, ResponseFormat, from_string
from extractor.providers.local import BUNDLED_MODEL_NOTE, THREADS_VARIABLE, LocalProvider, _merge_system, _template_keeps_system
from extractor.providers.openai_compat import MAX_TOKEN_COUNT, OpenAICompatProvider, retry_after_s
from extractor.vocab import ExitCode
from tests.support.batch import cli_env, run_cli, summary_of, write_batch
from tests.support.extras import needs_local_extra
from tests.support.llm_server import (
    LLAMA_CPP_PYTHON,
    NEEDS_MAX_COMPLETION_TOKENS,
    NO_TOOLS,
    TOOLS_BUT_NO_JSON_SCHEMA,
    UNPROCESSABLE_JSON_SCHEMA,
    Hang,
    Reply,
    Reset,
    ScriptedLLMServer,
    Status,
    Truncated,
    error_body,
)

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


def test_forty_calls_in_flight_twice_on_forty_kept_alive_connections(llm_server: StartServer) -> None:
    """Forty calls really in flight at once (the server holds every answer until all forty arrived), twice:
    every one answered, the second forty on the connections the first forty opened."""
    import threading

    together = threading.Barrier(40, timeout=120)

    def script(body: dict[str, Any] | None, number: int) -> Reply:
        together.wait()
        return Reply(json.dumps({"name": "Alice", "age": number}))

    server = llm_server(script)
    provider = provider_for(server)

    async def run() -> list[GenerationResult]:
        try:
            first = await asyncio.gather(*[provider.generate(REQUEST) for _ in range(40)])
            return [*first, *await asyncio.gather(*[provider.generate(REQUEST) for _ in range(40)])]
        finally:
            await provider.aclose()

    results = asyncio.run(run())
    assert sorted(json.loads(result.text)["age"] for result in results) == list(range(1, 81))
    assert server.peak_in_flight == 40
    assert server.connections == 40


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


# --- structured-output modes ----------------------------------------------------------------------------


def sent_modes(server: ScriptedLLMServer) -> list[str]:
    """The structured-output mode of every chat request the server received, in order."""
    modes = []
    for recorded in server.chat_requests:
        body = recorded.json or {}
        if "tools" in body:
            modes.append("tools")
        elif "response_format" in body:
            modes.append(body["response_format"]["type"])
        else:
            modes.append("plain")
    return modes


def test_json_schema_rejected_falls_back_to_tools_and_is_cached(llm_server: StartServer) -> None:
    server = llm_server(
        [Reply('{"name": "A", "age": 1}'), Reply('{"name": "B", "age": 2}')], rejects=TOOLS_BUT_NO_JSON_SCHEMA
    )
    first, second = generate_all(provider_for(server), count=2)
    assert (first.mode, second.mode) == ("tools", "tools")
    assert first.text == '{"name": "A", "age": 1}'  # the tool call's arguments string, as sent
    assert [a.outcome for a in first.transport] == ["http_400", "ok"]
    assert first.transport[0].detail.startswith("json_schema rejected (response_format type json_schema is not")
    assert first.transport[0].detail.endswith("; falling back to tools")
    assert [a.outcome for a in second.transport] == ["ok"]  # the accepted mode is remembered
    assert sent_modes(server) == ["json_schema", "tools", "tools"]
    body = server.chat_requests[1].json
    assert body is not None and "response_format" not in body
    assert body["tools"] == [{"type": "function", "function": {
        "name": "person", "description": "Submit the person as this function's arguments.", "parameters": PERSON}}]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "person"}}


@pytest.mark.parametrize("profile", [LLAMA_CPP_PYTHON, UNPROCESSABLE_JSON_SCHEMA], ids=["500-llama-cpp-python", "422"])
def test_a_500_or_422_naming_the_format_is_a_rejection_not_a_retry(llm_server: StartServer,
                                                                    profile: dict[str, Status]) -> None:
    server = llm_server([Reply('{"name": "A", "age": 1}')], rejects=profile)
    result = generate(server)
    assert (result.mode, result.text) == ("tools", '{"name": "A", "age": 1}')
    [rejected, ok] = result.transport
    assert rejected.outcome == f"http_{profile['json_schema'].code}" and ok.outcome == "ok"
    assert "Input should be 'text' or 'json_object'" in rejected.detail and rejected.wait_s == 0.0
    assert sent_modes(server) == ["json_schema", "tools"]


def test_a_500_that_does_not_name_the_format_is_retried_in_the_same_mode(llm_server: StartServer) -> None:
    server = llm_server([Status(500, error_body("CUDA out of memory", type_="server_error")), Reply("ok")])
    result = generate(server)
    assert (result.mode, [a.outcome for a in result.transport]) == ("json_schema", ["http_500", "ok"])
    assert sent_modes(server) == ["json_schema", "json_schema"]


def test_server_without_json_schema_or_tools_gets_json_object(llm_server: StartServer) -> None:
    server = llm_server([Reply('{"name": "A", "age": 1}')], rejects={**TOOLS_BUT_NO_JSON_SCHEMA, **NO_TOOLS})
    result = generate(server)
    assert (result.mode, [a.outcome for a in result.transport]) == ("json_object", ["http_400", "http_400", "ok"])
    assert "tools rejected (this model does not support tools)" in result.transport[1].detail
    assert sent_modes(server) == ["json_schema", "tools", "json_object"]
    assert server.chat_requests[-1].json == {"model": "test-model", "messages": REQUEST.messages, "temperature": 0.0,
                                             "max_tokens": 64, "response_format": {"type": "json_object"}}


def test_server_without_any_structured_output_gets_plain_requests(llm_server: StartServer) -> None:
    server = llm_server([Reply("plain answer")], reject_response_format={"json_schema", "json_object"},
                        rejects=NO_TOOLS)
    result = generate(server)
    assert (result.mode, result.text) == ("plain", "plain answer")
    assert [a.outcome for a in result.transport] == ["http_400", "http_400", "http_400", "ok"]
    assert sent_modes(server) == ["json_schema", "tools", "json_object", "plain"]


def test_a_server_that_ignores_tool_choice_has_its_prose_returned_as_the_answer(llm_server: StartServer) -> None:
    """tools mode, but the server answered in content: that text is returned for the validator to route."""
    server = llm_server([Reply("I think Alice is 30.", ignore_tools=True)])
    result = generate(server, settings=replace(FAST, response_format=ResponseFormat.tools))
    assert (result.mode, result.text, result.finish_reason) == ("tools", "I think Alice is 30.", "stop")


def test_explicit_modes_send_only_their_own_shape(llm_server: StartServer) -> None:
    server = llm_server([Reply("{}")] * 4)
    for mode in ("json_schema", "tools", "json_object", "plain"):
        [result] = generate_all(provider_for(server, settings=replace(FAST, response_format=ResponseFormat(mode))))
        assert result.mode == mode
    assert sent_modes(server) == ["json_schema", "tools", "json_object", "plain"]
    plain = server.chat_requests[-1].json
    assert plain is not None and not {"response_format", "tools", "tool_choice"} & set(plain)


@pytest.mark.parametrize(("mode", "profile", "status"), [
    ("json_schema", LLAMA_CPP_PYTHON, 500),
    ("json_schema", UNPROCESSABLE_JSON_SCHEMA, 422),
    ("tools", NO_TOOLS, 400),
])
def test_an_explicit_mode_the_server_rejects_never_falls_back(llm_server: StartServer, mode: str,
                                                             profile: dict[str, Status], status: int) -> None:
    server = llm_server([Reply("{}")], rejects=profile)
    error = failure(server, settings=replace(FAST, response_format=ResponseFormat(mode)))
    assert error.cause.startswith(f"{server.base_url} does not support --response-format {mode} (HTTP {status}: ")
    assert error.cause.endswith("); use --response-format auto to fall back to a mode it accepts")
    assert "\n" not in error.cause
    assert len(server.chat_requests) == 1 and server.remaining == 1  # not retried, no other mode tried
    assert [a.outcome for a in error.transport] == [f"http_{status}"]


def test_max_tokens_refused_switches_to_max_completion_tokens_for_the_run(llm_server: StartServer) -> None:
    server = llm_server([Reply("one"), Reply("two")], rejects=NEEDS_MAX_COMPLETION_TOKENS)
    first, second = generate_all(provider_for(server), count=2)
    assert (first.text, second.text, first.mode) == ("one", "two", "json_schema")
    assert [a.outcome for a in first.transport] == ["http_400", "ok"]
    assert first.transport[0].detail.endswith("; sending max_completion_tokens")
    assert [a.outcome for a in second.transport] == ["ok"]
    bodies = [r.json or {} for r in server.chat_requests]
    assert [("max_tokens" in b, b.get("max_completion_tokens")) for b in bodies] == [(True, None), (False, 64),
                                                                                     (False, 64)]


def test_max_tokens_too_large_is_not_mistaken_for_the_parameter_being_refused(llm_server: StartServer) -> None:
    too_large = error_body("max_tokens is too large: 100000. This model supports at most 4096 completion tokens.",
                           param="max_tokens")
    server = llm_server([Status(400, too_large)])
    error = failure(server)
    assert error.cause == f"HTTP 400 from {server.base_url}: {too_large['error']['message']}"
    assert len(server.chat_requests) == 1


def test_other_400_is_not_retried_and_names_the_server_message(llm_server: StartServer) -> None:
    body = error_body("messages[0].content must be a string", param="messages")
    server = llm_server([Status(400, body)])
    error = failure(server)
    assert error.cause == f"HTTP 400 from {server.base_url}: messages[0].content must be a string"
    assert len(server.chat_requests) == 1
    assert [a.outcome for a in error.transport] == ["http_400"]


# --- transport retries -----------------------------------------------------------------------------------


def test_timeout_then_success(llm_server: StartServer) -> None:
    server = llm_server([Hang(60.0), Reply("ok")])
    began = time.monotonic()
    result = generate(server, settings=ProviderSettings(timeout_s=0.5, backoff_base_s=0.05, backoff_max_s=0.2))
    elapsed = time.monotonic() - began
    assert result.text == "ok"
    assert [a.outcome for a in result.transport] == ["timeout", "ok"]
    assert 450 <= result.transport[0].latency_ms < 30_000
    assert 0.5 <= elapsed < 30  # did not wait for the hang to end (a minute)


def test_timeouts_throughout_raise_with_the_attempt_count_and_lower_the_concurrency(llm_server: StartServer) -> None:
    server = llm_server([Hang(1.0), Hang(1.0)])
    settings = ProviderSettings(timeout_s=0.3, max_transport_retries=1, backoff_base_s=0.05, backoff_max_s=0.1)
    limit = AdaptiveLimit(8)
    error = failure(server, settings=settings, on_timeout=limit.on_timeout, on_rate_limit=limit.on_rate_limit)
    assert error.cause == (f"timeout after 0.3 s (2 attempts) waiting for {server.base_url}: a slow server needs a "
                           "longer --timeout or a lower --concurrency")
    assert [a.outcome for a in error.transport] == ["timeout", "timeout"]
    assert (limit.timeouts, limit.rate_limits, limit.limit, limit.lowest) == (2, 0, 2, 2)  # halved per timeout


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


@pytest.mark.parametrize(("usage", "cached", "counts"), [
    ((-5, 10**30), None, (None, MAX_TOKEN_COUNT, None)),  # negative: not a count; huge: the limit
    ((10, 5), 50, (10, 5, 10)),  # cached tokens are part of the prompt's
    ((2**63, 0), 2**63, (MAX_TOKEN_COUNT, 0, MAX_TOKEN_COUNT)),
])
def test_token_counts_a_server_reports_are_kept_within_their_limit(
        llm_server: StartServer, usage: tuple[int, int], cached: int | None,
        counts: tuple[int | None, int | None, int | None]) -> None:
    result = generate(llm_server([Reply("ok", usage=usage, cached_tokens=cached)]))
    assert (result.prompt_tokens, result.completion_tokens, result.cached_tokens) == counts


def test_retry_after_as_http_date() -> None:
    in_five_seconds = email.utils.formatdate(time.time() + 5, usegmt=True)
    wait = retry_after_s(in_five_seconds)
    assert wait is not None and 3.5 <= wait <= 5.0
    assert retry_after_s(email.utils.formatdate(time.time() - 3600, usegmt=True)) == 0.0  # passed: no wait
    assert retry_after_s(None) is None and retry_after_s(" ") is None


@pytest.mark.parametrize("value", ["86400", "-5", "inf", "-inf", "nan", "1e400", "99999999999999999999999", "soon",
                                   "0x10", email.utils.formatdate(time.time() + 2 * 86400, usegmt=True),
                                   "Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 99 Foo 2024 99:99:99 GMT"])
def test_a_retry_after_that_is_negative_not_finite_huge_or_unreadable_counts_as_the_ceiling(value: str) -> None:
    assert retry_after_s(value) == MAX_RETRY_AFTER_S


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("1", 1.0), ("2.5", 2.5), (" 7 ", 7.0), ("60", 60.0)])
def test_a_retry_after_within_the_ceiling_is_used_as_sent(value: str, seconds: float) -> None:
    assert retry_after_s(value) == seconds


def test_retry_after_beyond_the_budget_gives_up_at_once(llm_server: StartServer) -> None:
    server = llm_server([Status(503, headers={"Retry-After": "60"})])
    began = time.monotonic()
    error = failure(server, settings=ProviderSettings(retry_budget_s=10.0))
    assert time.monotonic() - began < 10.0  # waiting any of it would have spent the budget
    assert error.cause == (f"HTTP 503 from {server.base_url} after 1 attempt: scripted HTTP 503 (Retry-After: 60 is "
                           "more than the 10 s left: retry budget of 10 s exhausted)")


def test_a_day_long_retry_after_is_the_ceiling_and_a_call_that_cannot_wait_it_ends_at_once_naming_it(
        llm_server: StartServer) -> None:
    """The gateway asks for a day: the call may wait the ceiling at most, its budget has less, so it ends at once
    with the server's value in the cause; the run is asked to pause no longer than a call may wait."""
    server = llm_server([Status(429, headers={"Retry-After": "86400"})])
    paused: list[float | None] = []
    began = time.monotonic()
    error = failure(server, settings=replace(FAST, retry_budget_s=20.0), on_rate_limit=paused.append)
    assert time.monotonic() - began < 20.0  # waiting any of it would have spent the budget
    assert error.cause == (f"HTTP 429 from {server.base_url} after 1 attempt: scripted HTTP 429 (Retry-After: 86400, "
                           f"counted as the {MAX_RETRY_AFTER_S:g} s ceiling, is more than the 20 s left: retry budget "
                           "of 20 s exhausted)")
    assert paused == [20.0] and len(server.chat_requests) == 1


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
    cause = caught.value.cause
    port = base_url.split(":")[2].split("/")[0]
    assert cause == (f"connection error to {base_url} after 4 attempts: ConnectError: cannot connect to "
                     f"127.0.0.1:{port}: connection refused (is a server running at that address?)")


def test_an_unreachable_default_address_says_neither_base_url_was_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --base-url and OPENAI_BASE_URL the address is OpenAI's own: the cause says so, not where to change a
    setting nobody made. (Reached through a proxy on a closed local port, as no test may reach the internet.)"""
    with ScriptedLLMServer() as server:
        closed = server.base_url.removesuffix("/v1")
    for name in ("OPENAI_BASE_URL", "NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", closed)
    provider = from_string("openai:m", api_key=KEY, settings=ProviderSettings(max_transport_retries=0))
    assert provider.base_url.startswith("https://api.openai.com/")
    with pytest.raises(ProviderError) as caught:
        generate_all(provider)
    cause = caught.value.cause
    assert "ssl:" not in cause and "connection refused" in cause, cause
    assert cause.endswith("(the OpenAI API's own address, as neither --base-url nor OPENAI_BASE_URL was set: is "
                          "this machine online, or does it need HTTPS_PROXY?)"), cause


# --- the run's options, through the CLI -------------------------------------------------------------------


def test_run_timeouts_lower_the_concurrency_and_the_error_says_what_to_change(llm_server: StartServer,
                                                                             tmp_path: Any) -> None:
    write_batch(tmp_path / "docs", 1)
    hanging = llm_server(lambda request, number: Hang(30))
    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:slow", "--timeout", "0.5", "--retries", "1",
                     "--concurrency", "4", "--format", "json",
                     env=cli_env(hanging.base_url, f"sqlite:///{tmp_path}/a.db"), cwd=tmp_path)
    summary = summary_of(result)
    [outcome] = summary["outcomes"]
    assert result.returncode == ExitCode.NOT_EVALUABLE and outcome["state"] == "ERROR"  # never answered
    assert outcome["cause"] == (f"timeout after 0.5 s (2 attempts) waiting for {hanging.base_url}: a slow server "
                                "needs a longer --timeout or a lower --concurrency (no --max-tokens was set: a model "
                                "that never stops needs one)")
    assert summary["lowest_concurrency"] == 1 and summary["rate_limits"] == 0  # 4 -> 2 -> 1, one per timeout
    assert len(hanging.chat_requests) == 2


def test_run_against_a_closed_port_names_the_url_and_openai_base_url(tmp_path: Any) -> None:
    write_batch(tmp_path / "docs", 1)
    with ScriptedLLMServer() as server:
        base_url = server.base_url  # the port is free again once the server stopped
    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:gone", "--retries", "0", "--format", "json",
                     env=cli_env(base_url, f"sqlite:///{tmp_path}/a.db"), cwd=tmp_path)
    [outcome] = summary_of(result)["outcomes"]
    assert result.returncode == ExitCode.NOT_EVALUABLE and outcome["state"] == "ERROR"  # never answered
    assert outcome["cause"].startswith(f"connection error to {base_url} after 1 attempt: ConnectError")
    assert "OPENAI_BASE_URL" in outcome["cause"] and "\n" not in outcome["cause"]


def test_run_response_format_option_and_environment(llm_server: StartServer, tmp_path: Any) -> None:
    write_batch(tmp_path / "docs", 1)
    server = llm_server([Status(500, LLAMA_CPP_PYTHON["json_schema"].body)])
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/a.db", EXTRACT_RESPONSE_FORMAT="json_object")
    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:m", "--response-format", "json_schema",
                     "--retries", "0", "--format", "json", env=env, cwd=tmp_path)
    [outcome] = summary_of(result)["outcomes"]  # the option wins over the environment
    assert result.returncode == ExitCode.NOT_EVALUABLE and outcome["state"] == "ERROR"  # never answered
    assert outcome["cause"].startswith(f"{server.base_url} does not support --response-format json_schema (HTTP 500")
    assert sent_modes(server) == ["json_schema"]

    answering = llm_server(lambda request, number: Status(400, error_body("stop here", param="messages")))
    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:m", "--format", "json",
                     env=env | {"OPENAI_BASE_URL": answering.base_url, "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/b.db"},
                     cwd=tmp_path)
    assert summary_of(result)["counts"] == {"ERROR": 1} and sent_modes(answering) == ["json_object"]

    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:m", env=env | {"EXTRACT_RESPONSE_FORMAT": "xml"},
                     cwd=tmp_path)
    assert result.returncode == 2 and "'xml' is not one of" in result.stderr


def test_judge_calibrate_takes_the_response_format_too(llm_server: StartServer, tmp_path: Any) -> None:
    server = llm_server([Reply("{}")], rejects=NO_TOOLS)
    labels = tmp_path / "labels.csv"
    labels.write_text("case_id,value,excerpt,human_label_1,human_label_2\nc1,30 days,within 30 days,1,1\n",
                      encoding="utf-8")
    result = run_cli("judge", "calibrate", str(labels), "--judge", "openai:judge", "--response-format", "tools",
                     "--no-store", env=cli_env(server.base_url, f"sqlite:///{tmp_path}/a.db"), cwd=tmp_path)
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2
    assert line.startswith(f"error: judge call failed, nothing stored: case c1: {server.base_url} does not support "
                           "--response-format tools (HTTP 400")
    assert sent_modes(server) == ["tools"] and server.remaining == 1


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


@needs_local_extra
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


@needs_local_extra
def test_local_threads_follow_the_setting_or_the_idle_cores(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp's threads wait for each other: more threads than idle cores makes a busy machine far slower."""
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert 1 <= from_string("local").threads <= (os.cpu_count() or 1)
    monkeypatch.setenv(THREADS_VARIABLE, "3")
    assert from_string("local").threads == 3
    for wrong in ("0", "two", "-1", "1000"):
        monkeypatch.setenv(THREADS_VARIABLE, wrong)
        with pytest.raises(ValueError, match=f"^{THREADS_VARIABLE}='{wrong}': expected a whole number of threads"):
            from_string("local")
    document = tmp_path / "a.txt"
    document.write_text("The employee submits a request.\n", encoding="utf-8")
    result = run_cli("run", str(document), "--model", "local", cwd=tmp_path,
                     env={**os.environ, THREADS_VARIABLE: "two", "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"})
    assert result.returncode == 2 and f"{THREADS_VARIABLE}='two'" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


@needs_local_extra
def test_local_model_that_cannot_load_is_a_provider_error(tmp_path: Any) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF not really a model")
    with pytest.raises(ProviderError) as caught:
        generate_all(from_string(f"local:{broken}"))
    assert caught.value.cause.startswith("local model broken.gguf failed: ")
    assert [a.outcome for a in caught.value.transport] == ["local_error"]


@needs_local_extra
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
    """32 calls at once are answered side by side: each reply waits until all 32 are being answered (a barrier),
    which a client or server taking them one after another never reaches (it breaks after 60 s: an error)."""
    together = threading.Barrier(32, timeout=60)

    def reply(body: Any, number: int) -> Reply:
        together.wait()
        return Reply(f"answer {number}")

    server = llm_server(reply)
    provider = provider_for(server, settings=replace(FAST, timeout_s=90.0))

    async def run() -> list[GenerationResult]:
        try:
            return await asyncio.gather(*(provider.generate(REQUEST) for _ in range(32)))
        finally:
            await provider.aclose()

    results = asyncio.run(run())
    assert server.peak_in_flight == 32
    assert sorted(r.text for r in results) == sorted(f"answer {n}" for n in range(1, 33))
    with urllib.request.urlopen(f"{server.base_url}/models") as response:
        assert [m["id"] for m in json.load(response)["data"]] == ["scripted-model"]


# --- the real local model --------------------------------------------------------------------------------


@pytest.mark.slow
@needs_local_extra
def test_bundled_local_model_answers_under_a_grammar() -> None:
    provider = from_string("local")
    assert isinstance(provider, LocalProvider)
    [result] = generate_all(provider)
    assert isinstance(result.text, str)
    assert result.mode == "grammar"
    assert result.model == "gemma-3-270m-q4_k_m.gguf"
    assert result.completion_tokens is not None and 0 < result.completion_tokens <= 64
    assert [a.outcome for a in result.transport] == ["ok"]
