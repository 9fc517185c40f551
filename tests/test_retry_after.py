"""A server's Retry-After is kept within the run's own limits: the ceiling, the call's retry budget, and a shared
pause in Redis that expires by itself. Real HTTP to the scripted server, a real ``extract run``, a real redis-server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from extractor.generate import MAX_RETRY_AFTER_S
from extractor.queue.limiter import SharedLimit
from tests.support.batch import answer_for, cli_env, run_cli, summary_of, write_batch
from tests.support.llm_server import Action, Reply, ScriptedLLMServer, Status
from tests.support.redis_server import redis_server

SLACK_S = 20.0
"""What a busy shared machine may add to a batch of four between one run and the next."""


def four_documents(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    write_batch(folder, 4)
    return folder


def timed_run(folder: Path, server: ScriptedLLMServer, db: Path, *extra: str) -> tuple[float, dict[str, Any]]:
    began = time.monotonic()
    result = run_cli("run", str(folder), "--model", "openai:scripted", "--concurrency", "1", "--format", "json", *extra,
                     env=cli_env(server.base_url, f"sqlite:///{db}"), cwd=db.parent, timeout=300)
    return time.monotonic() - began, summary_of(result) | {"exit": result.returncode, "stderr": result.stderr[-2000:]}


def throttled_first(arrivals: list[float]) -> Callable[[dict[str, Any] | None, int], Action]:
    lock = threading.Lock()

    def script(request: dict[str, Any] | None, number: int) -> Action:
        with lock:
            arrivals.append(time.monotonic())
        if number == 1:
            return Status(429, headers={"Retry-After": "86400"})  # a gateway's daily quota
        return Reply(answer_for(request))

    return script


def test_a_day_long_retry_after_costs_the_batch_the_ceiling_at_most(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    """Four documents at --concurrency 1, the first answer a 429 asking for a day: the call waits the ceiling (the
    retry budget has room for it) and the batch ends within its time without the 429 plus the ceiling."""
    folder = four_documents(tmp_path)
    plain = llm_server(lambda request, number: Reply(answer_for(request)))
    baseline, summary = timed_run(folder, plain, tmp_path / "plain.db")
    assert summary["counts"] == {"READY_FOR_REVIEW": 4}, summary

    arrivals: list[float] = []
    throttling = llm_server(throttled_first(arrivals))
    took, summary = timed_run(folder, throttling, tmp_path / "throttled.db")
    assert summary["counts"] == {"READY_FOR_REVIEW": 4}, summary
    assert summary["rate_limits"] == 1
    assert took <= baseline + MAX_RETRY_AFTER_S + SLACK_S, (took, baseline)
    assert len(arrivals) == 5  # the 429, then one call per document
    assert MAX_RETRY_AFTER_S - 0.5 <= arrivals[1] - arrivals[0] <= MAX_RETRY_AFTER_S + SLACK_S  # waited the ceiling


def test_a_call_whose_budget_cannot_wait_ends_error_at_once_and_the_batch_goes_on(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    """With --retry-budget 5 the first document cannot wait the ceiling: it ends ERROR at once naming the server's
    value, the run pauses no longer than a call may wait, and the 3 others are converted."""
    folder = four_documents(tmp_path)
    arrivals: list[float] = []
    server = llm_server(throttled_first(arrivals))
    took, summary = timed_run(folder, server, tmp_path / "a.db", "--retry-budget", "5")
    assert summary["counts"] == {"ERROR": 1, "READY_FOR_REVIEW": 3}, summary
    [error] = [o for o in summary["outcomes"] if o["state"] == "ERROR"]
    assert (f"HTTP 429 from {server.base_url} after 1 attempt" in error["cause"]
            and f"(Retry-After: 86400, counted as the {MAX_RETRY_AFTER_S:g} s ceiling, is more than the 5 s left: "
            "retry budget of 5 s exhausted)" in error["cause"]), error["cause"]
    assert len(arrivals) == 4
    assert 4.5 <= arrivals[1] - arrivals[0] <= 5.0 + SLACK_S  # the run's pause: the budget, not the ceiling
    assert took < 5.0 + 3 * SLACK_S


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path) as url:
        yield url


def test_the_shared_pause_obeys_the_ceiling_and_expires_by_itself(redis_url: str) -> None:
    """A 429 asking for a day is shared as a pause of the ceiling, in a key that expires; a deadline some other
    writer left in Redis (a day away, without an expiry, or not a number) holds a worker back no longer."""
    import redis
    from redis.asyncio import Redis

    sync = redis.Redis.from_url(redis_url)

    async def scenario() -> tuple[float, float, list[float]]:
        client = Redis.from_url(redis_url)
        publisher = SharedLimit(4, client, "test:limit")
        publisher.on_rate_limit(86400.0)  # what a provider that did not clamp would pass
        await asyncio.gather(*publisher._publishing)
        ttl_s = sync.pttl("test:limit:resume_at") / 1000
        deadline = float(sync.get("test:limit:resume_at") or 0) - time.time()
        holds = []
        for stored in (f"{time.time() + 86400:.3f}", "not a number", "inf"):
            sync.set("test:limit:resume_at", stored)  # no expiry
            follower = SharedLimit(4, client, "test:limit")
            await follower._follow_others()
            holds.append(follower._resume_at - asyncio.get_running_loop().time())
        await client.aclose()
        return ttl_s, deadline, holds

    ttl_s, deadline, holds = asyncio.run(scenario())
    assert 0 < ttl_s <= MAX_RETRY_AFTER_S + 1
    assert MAX_RETRY_AFTER_S - 2 <= deadline <= MAX_RETRY_AFTER_S
    assert all(0 < hold <= MAX_RETRY_AFTER_S for hold in holds), holds

    async def republish() -> None:  # a 429 over a key left without an expiry replaces it with one that expires
        client = Redis.from_url(redis_url)
        limit = SharedLimit(4, client, "test:limit")
        limit.on_rate_limit(1.0)
        await asyncio.gather(*limit._publishing)
        await client.aclose()

    asyncio.run(republish())
    assert 0 < sync.pttl("test:limit:resume_at") <= 2000
    sync.close()
