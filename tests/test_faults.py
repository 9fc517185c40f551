"""A batch of 1,000 documents against a model server that misbehaves in every way it can.

The scripted server answers each call, chosen by a seeded random draw per call: slow answers (up to 5 s,
past the 2 s per-call timeout), hangs, 429 with Retry-After, 500, connection resets, HTTP bodies cut
short, truncated JSON content, empty content, JSON of the wrong shape, JSON nested 100,000 levels deep,
or the right answer. Whatever happens, every document ends in exactly one state with its cause, and
every attempt is in the run log with the model's raw answer (or, when none came, the transport tries).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from extractor.contracts import get_contract
from extractor.engine import AdaptiveLimit, Engine, RunSettings, RunSummary
from extractor.offload import read
from extractor.providers import ProviderSettings, from_string
from extractor.store import Store, open_store
from extractor.vocab import ExitCode
from tests.support.batch import ROOT, answer_for, cli_env, request_text, run_cli, summary_of, write_batch
from tests.support.llm_server import Action, Hang, Reply, Reset, ScriptedLLMServer, Status, Truncated

DEEP = "[" * 100_000 + "]" * 100_000
FAULTS: list[tuple[float, Callable[[random.Random, dict[str, Any] | None], Action]]] = [
    (0.03, lambda rng, request: Reply(answer_for(request), delay_s=rng.uniform(0.5, 5.0))),  # slow; > 2 s times out
    (0.02, lambda rng, request: Hang(3.0)),
    (0.05, lambda rng, request: Status(429, headers={"Retry-After": "0.2"})),
    (0.05, lambda rng, request: Status(500)),
    (0.03, lambda rng, request: Reset()),
    (0.03, lambda rng, request: Truncated(answer_for(request))),  # the HTTP body ends early
    (0.03, lambda rng, request: Reply(answer_for(request)[:200])),  # the model's JSON ends early
    (0.03, lambda rng, request: Reply("")),
    (0.03, lambda rng, request: Reply('{"title": "Purchase approval", "steps": ["request", "approve"]}')),
    (0.005, lambda rng, request: Reply(DEEP)),
]
SETTINGS = ProviderSettings(timeout_s=2.0, max_transport_retries=2, retry_budget_s=6.0, backoff_base_s=0.05,
                            backoff_max_s=0.3)


def faulty(seed: int) -> Callable[[dict[str, Any] | None, int], Action]:
    def script(request: dict[str, Any] | None, number: int) -> Action:
        rng = random.Random(seed * 1_000_003 + number)
        draw = rng.random()
        for share, make in FAULTS:
            if draw < share:
                return make(rng, request)
            draw -= share
        return Reply(answer_for(request), delay_s=rng.uniform(0.0, 0.1))

    return script


def run_batch(folder: Path, server: ScriptedLLMServer, db_url: str, concurrency: int) -> tuple[RunSummary, Store,
                                                                                                AdaptiveLimit]:
    store = open_store(db_url)
    limit = AdaptiveLimit(concurrency)
    provider = from_string("openai:scripted", base_url=server.base_url, settings=SETTINGS,
                           on_rate_limit=limit.on_rate_limit)
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"), concurrency=concurrency),
                        limit=limit)
    return asyncio.run(engine.run([str(folder)])), store, limit


def test_a_thousand_documents_against_a_faulty_server_are_all_accounted_for(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    write_batch(tmp_path / "docs", 1000)
    server = llm_server(faulty(seed=6))
    summary, store, limit = run_batch(tmp_path / "docs", server, db_url, concurrency=64)

    counts = summary.counts
    assert sum(counts.values()) == 1000 and set(counts) <= {"READY_FOR_REVIEW", "MANUAL_REVIEW", "ERROR"}, counts
    assert counts["ERROR"] > 0 and counts["MANUAL_REVIEW"] > 0 and counts["READY_FOR_REVIEW"] > 800, counts
    runs = {run.id: run for run in store.document_runs_for(summary.run_id)}
    assert len(runs) == 1000 and Counter(run.state for run in runs.values()) == counts
    for outcome in summary.outcomes:
        run = runs[outcome.document_run_id]
        assert run.state == outcome.state and run.cause == outcome.cause
        if outcome.state == "ERROR":  # each error names its cause: timeout, HTTP status, connection, body
            assert outcome.cause and any(word in outcome.cause for word in ("timeout", "HTTP", "connection", "body"))

    attempts = [attempt for run_id in runs for attempt in store.attempts_for(run_id)]
    per_run = Counter(attempt.document_run_id for attempt in attempts)
    assert set(per_run) == set(runs) and set(per_run.values()) <= {1, 2}
    for attempt in attempts:
        assert attempt.transport, attempt  # every HTTP try is recorded, with what happened
        if attempt.outcome == "transport_error":
            assert attempt.error and attempt.raw_response is None
            assert attempt.transport[-1]["outcome"] != "ok"
        else:  # the model answered: its answer is stored exactly as it came, even empty or broken
            assert attempt.outcome in ("passed", "failed", "unparseable") and attempt.raw_response is not None
            assert attempt.transport[-1]["outcome"] == "ok"
    raw = Counter("deep" if a.raw_response == DEEP else "empty" if a.raw_response == "" else
                  "truncated" if a.outcome == "unparseable" else a.outcome for a in attempts if a.raw_response is not None)
    assert raw["deep"] and raw["empty"] and raw["truncated"] and raw["failed"], raw
    tries = Counter(t["outcome"] for a in attempts for t in a.transport)
    assert {"timeout", "http_429", "http_500", "connection_error", "ok"} <= set(tries), tries  # resets, cut bodies
    assert limit.rate_limits == tries["http_429"] > 0 and summary.rate_limits == limit.rate_limits
    assert limit.lowest < 64 and summary.lowest_concurrency == limit.lowest  # concurrency went down on 429s
    assert store.integrity_check() == []


def test_concurrency_drops_on_429_and_recovers(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path,
                                               db_url: str) -> None:
    """Sixteen calls at once all get 429: the limit halves on each (to 1), the sixteen retries finish, and
    the next documents start far fewer at a time while the limit grows back by one per run of successes."""
    write_batch(tmp_path / "docs", 64)
    asyncio.run(read(ROOT / "samples/ko_work_request_review.txt"))  # a reader is up: the burst is one
    seen: dict[int, int] = {}
    throttled: set[str] = set()
    lock, burst = threading.Lock(), threading.Barrier(16)

    def script(request: dict[str, Any] | None, number: int) -> Action:
        seen[number] = server.in_flight
        document = request_text(request).partition("[s2]")[0]  # the numbered title: which document this is
        with lock:
            throttle = len(throttled) < 16 and document not in throttled
            throttled.add(document)
        if throttle:
            burst.wait(timeout=60)  # the sixteen are answered together, as a server at capacity would
            return Status(429, headers={"Retry-After": "0.3"})
        return Reply(answer_for(request), delay_s=0.3)

    server = llm_server(script)
    summary, store, limit = run_batch(tmp_path / "docs", server, db_url, concurrency=16)
    assert summary.counts == {"READY_FOR_REVIEW": 64}, [o.cause for o in summary.outcomes if o.cause]
    assert (limit.rate_limits, limit.lowest, summary.lowest_concurrency) == (16, 1, 1)
    calls = [seen[n] for n in sorted(seen)]  # calls being answered when each call arrived
    assert max(calls[16:32]) == 16, calls  # the sixteen throttled documents retry together in their slots
    assert max(calls[32:48]) <= 8 and max(calls[32:]) < 16, calls  # new documents start under the lower limit
    assert 1 < limit.limit <= 16  # grew back
    assert store.integrity_check() == []


def test_timeout_retries_and_retry_budget_are_run_options(llm_server: Callable[..., ScriptedLLMServer],
                                                          tmp_path: Path) -> None:
    """``extract run --timeout --retries --retry-budget``: a hanging server costs one short try per call; a
    server asking to wait longer than the budget is given up on at once, with the budget named."""
    write_batch(tmp_path / "docs", 1)
    hanging = llm_server(lambda request, number: Hang(30))
    started = time.monotonic()
    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:scripted", "--timeout", "1", "--retries", "0",
                     "--format", "json", env=cli_env(hanging.base_url, f"sqlite:///{tmp_path}/a.db"), cwd=tmp_path)
    assert result.returncode == ExitCode.NOT_EVALUABLE and time.monotonic() - started < 25  # never answered
    [outcome] = summary_of(result)["outcomes"]
    assert outcome["state"] == "ERROR" and outcome["cause"].startswith("timeout after 1 s (1 attempt) waiting for ")
    assert len(hanging.chat_requests) == 1

    throttling = llm_server(lambda request, number: Status(429, headers={"Retry-After": "60"}))
    result = run_cli("run", str(tmp_path / "docs"), "--model", "openai:scripted", "--retries", "5",
                     "--retry-budget", "5", "--format", "json",
                     env=cli_env(throttling.base_url, f"sqlite:///{tmp_path}/b.db"), cwd=tmp_path)
    [outcome] = summary_of(result)["outcomes"]
    assert outcome["state"] == "ERROR" and "HTTP 429" in outcome["cause"]
    assert "retry budget of 5 s exhausted" in outcome["cause"] and len(throttling.chat_requests) == 1
    assert summary_of(result)["rate_limits"] == 1 and summary_of(result)["lowest_concurrency"] == 2


def test_a_timeout_lowers_the_concurrency_the_way_a_429_does() -> None:
    """Timeouts and 429s halve the limit alike; it grows back by one after as many successes as it allows."""
    limit = AdaptiveLimit(16)
    limit.on_timeout()
    assert (limit.limit, limit.lowest, limit.timeouts, limit.rate_limits, limit.lowered) == (8, 8, 1, 0, True)
    limit.on_rate_limit(None)
    limit.on_timeout()
    assert (limit.limit, limit.lowest, limit.timeouts, limit.rate_limits) == (2, 2, 2, 1)

    async def succeed(times: int) -> None:
        for _ in range(times):
            async with limit:
                pass

    asyncio.run(succeed(2))
    assert limit.limit == 3 and limit.lowest == 2
    asyncio.run(succeed(3))
    assert limit.limit == 4


def test_retry_after_pauses_new_calls_until_it_has_passed() -> None:
    limit = AdaptiveLimit(4)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        async with limit:
            limit.on_rate_limit(0.5)  # answered 429 "Retry-After: 0.5" while this call held its slot
            asked = loop.time()
        async with limit:  # a call starting now waits out the pause
            return loop.time() - asked

    assert asyncio.run(scenario()) >= 0.5
    assert limit.lowest == 2 and limit.rate_limits == 1
