"""What an operator sees, checked against the run log: ``extract serve --queue`` and two ``extract worker``s as real
processes over a real redis-server and PostgreSQL, a scripted model server that fails some tries, two teams
submitting through the API, and a real Prometheus scraping the three processes.

Every series is exported by exactly one kind of process (serve: HTTP, the queue depth, the review backlog,
decisions, workers online; workers: conversion), so a sum over the processes counts nothing twice. The batch is
scraped twice: in the middle, with four documents held in the model server and the rest finished or queued (so
nothing moves while it is read), and at the end; both times every series is compared with the run log and with
what the test itself did (its requests, the model server's own count). Then every expression of the Grafana
dashboard (``docs/grafana-dashboard.json``) is evaluated by Prometheus, and promtool checks each exposition.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from extractor.service.metrics import call_outcome
from extractor.store import open_store
from extractor.store.tokens import create_token
from tests.support.api import bearer
from tests.support.batch import ROOT, answer_for, cli_env, rows, scalar
from tests.support.databases import fresh_database
from tests.support.llm_server import Action, Reply, ScriptedLLMServer, Status
from tests.support.processes import Processes, wait_for
from tests.support.prometheus import prometheus, promtool_problems
from tests.support.redis_server import free_port, redis_server

pytestmark = pytest.mark.postgres

DASHBOARD = ROOT / "docs/grafana-dashboard.json"
DOCUMENTS = 18
SLOTS = 4  # two workers, two documents in flight each
OWN = ("process_", "python_")  # each process's own series (prometheus-client's collectors)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> tuple[str, Samples]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return text, samples


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples if not name.startswith(OWN)}


def by(samples: Samples, name: str, *labels: str) -> Counter[tuple[str, ...]]:
    """The samples of ``name`` summed by these labels (zero values left out, as the run log has no row for them)."""
    found: Counter[tuple[str, ...]] = Counter()
    for (sample, pairs), value in samples.items():
        if sample == name and value:
            found[tuple(dict(pairs)[label] for label in labels)] += value
    return found


def summed(scrapes: list[Samples], name: str, *labels: str) -> Counter[tuple[str, ...]]:
    total: Counter[tuple[str, ...]] = Counter()
    for samples in scrapes:
        total.update(by(samples, name, *labels))
    return total


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as url:
        yield url


class Hold:
    """Calls held in the model server until ``release`` (how many are held now)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.now = 0
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self.now += 1
        try:
            self.release.wait(timeout=300)
        finally:
            with self._lock:
                self.now -= 1


def test_every_series_comes_from_one_process_and_matches_the_run_log(
        llm_server: Callable[..., ScriptedLLMServer], pg_url: str, tmp_path: Path) -> None:
    hold = Hold()

    def script(request: dict[str, Any] | None, number: int) -> Action:
        if number > 10 and not hold.release.is_set():  # hold the next documents mid-call while the test scrapes
            hold()
        # after the middle (a try that failed is recorded with its call's last one, and a 429 halves every
        # worker's calls in flight): one 429, and a 500 that the client tries again
        elif number == 15:
            return Status(429, headers={"Retry-After": "1"})
        elif number == 16:
            return Status(500)
        return Reply(answer_for(request))

    server = llm_server(script)
    with redis_server(tmp_path) as broker:
        env = cli_env(server.base_url, pg_url, EXTRACT_BROKER_URL=broker, EXTRACT_MODEL="openai:scripted-model",
                      OPENAI_API_KEY="test-key", EXTRACT_READERS="1")
        with open_store(pg_url) as store:
            tokens = {"a-bot": create_token(store.engine, "a-bot", "submitter", "team-a"),
                      "b-bot": create_token(store.engine, "b-bot", "submitter", "team-b"),
                      "audit": create_token(store.engine, "audit", "reviewer", all_owners=True)}
        processes = Processes(env, tmp_path)
        try:
            worker_ports = [free_port(), free_port()]
            workers = [processes.start("worker", "--concurrency", "2", "--metrics-port", str(port)) for port in worker_ports]
            serve_port = free_port()
            serve = processes.start("serve", "--port", str(serve_port))
            everyone = (serve, *workers)
            targets = [f"127.0.0.1:{port}" for port in (serve_port, *worker_ports)]
            with prometheus(tmp_path / "prometheus", targets) as watcher:
                _operate(server, pg_url, tokens, serve_port, worker_ports, everyone, hold, watcher, workers)
        finally:
            hold.release.set()
            processes.stop_all()


def _operate(server: ScriptedLLMServer, db: str, tokens: dict[str, str], serve_port: int, worker_ports: list[int],
             everyone: tuple[Any, ...], hold: Hold, watcher: Any, workers: list[Any]) -> None:
    base = f"http://127.0.0.1:{serve_port}"

    def ready() -> bool:
        try:
            return all(httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
                       for port in (serve_port, *worker_ports))
        except httpx.TransportError:
            return False

    wait_for(ready, "serve and both workers ready", watch=everyone)
    wait_for(lambda: by(scrape(serve_port)[1], "extract_workers_online") == Counter({(): 2}), "2 workers online",
             timeout=60, watch=everyone)
    asked: Counter[tuple[str, str]] = Counter()  # the API requests this test made, by route and method
    submissions = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for number in range(DOCUMENTS):
            team = "a-bot" if number % 3 else "b-bot"
            text = (ROOT / "samples/en_purchase_approval.md").read_text(encoding="utf-8").replace(
                "Procedure", f"Procedure {number}", 1)
            sent = client.post("/v1/documents/text", headers=bearer(tokens[team]), json={"name": f"{number}.md", "text": text})
            asked["/v1/documents/text", "POST"] += 1
            assert sent.status_code == 202, sent.text
            submissions.append((team, sent.json()["documents"][0]["id"]))

        # the middle of the batch: four documents held in the model server (every slot), every answered try
        # recorded, the rest finished or waiting: nothing moves while it is read
        def frozen() -> bool:
            tries = scalar(db, "SELECT COALESCE(SUM(json_array_length(transport::json)), 0) FROM attempts")
            return (hold.now == SLOTS == scalar(db, "SELECT COUNT(*) FROM tasks WHERE state = 'started'")
                    and tries == len(server.chat_requests) - SLOTS)

        wait_for(frozen, "four documents held mid-call, the rest recorded", watch=everyone)
        wait_for(lambda: sum(summed([scrape(port)[1] for port in worker_ports], "extract_model_calls_total").values())
                 == len(server.chat_requests) - SLOTS, "the workers' counts caught up with the run log", timeout=30)
        middle = [scrape(port) for port in (serve_port, *worker_ports)]
        finished = scalar(db, "SELECT COUNT(*) FROM tasks WHERE state = 'finished'")
        assert 0 < finished < DOCUMENTS - SLOTS, finished  # some done, some still waiting for a worker
        check(db, server, [samples for _, samples in middle], workers, asked, in_flight=SLOTS)
        hold.release.set()

        def polled(team: str, task: str) -> bool:
            asked["/v1/submissions/{task_id}", "GET"] += 1
            return client.get(f"/v1/submissions/{task}", headers=bearer(tokens[team])).json()["state"] == "finished"

        for team, task in submissions:
            wait_for(lambda team=team, task=task: polled(team, task), f"submission {task}", watch=everyone)
        waiting = client.get("/v1/review/queue", headers=bearer(tokens["audit"]), params={"limit": 1000}).json()
        asked["/v1/review/queue", "GET"] += 1
        for position, item in enumerate(waiting["items"][:3]):
            verb, body = ("reject", {"reason": "not ours"}) if position == 2 else ("approve", {})
            decided = client.post(f"/v1/review/{item['document_run_id']}/{verb}", headers=bearer(tokens["audit"]), json=body)
            asked[f"/v1/review/{{document_run_id}}/{verb}", "POST"] += 1
            assert decided.status_code == 200, decided.text
    end = [scrape(port) for port in (serve_port, *worker_ports)]
    check(db, server, [samples for _, samples in end], workers, asked, in_flight=0)
    for text, _ in [*middle, *end]:
        assert promtool_problems(text) == ""

    # what Prometheus scraped agrees, and every panel of the dashboard evaluates on these series
    wait_for(lambda: watcher.value("sum(extract_task_outcomes_total)") == DOCUMENTS
             and watcher.value("sum(extract_review_decisions_total)") == 3, "Prometheus scraped the end", timeout=60)
    assert watcher.value("sum(extract_model_calls_total)") == len(server.chat_requests)
    assert watcher.value("extract_workers_online") == 2
    assert watcher.value("sum(extract_review_backlog)") == DOCUMENTS - 3
    assert watcher.value('sum(extract_documents_total{state="READY_FOR_REVIEW"})') == DOCUMENTS
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(expressions) >= 15
    scraped = set().union(*(names(samples) for _, samples in end))
    for expression in expressions:  # a rate needs two scrapes of a series: a loaded machine may not have them yet
        wait_for(lambda expression=expression: bool(watcher.query(expression)),
                 f"the dashboard's {expression!r} to give a series", timeout=60)
        used = {name for name in scraped if name in expression}
        assert used, f"{expression!r} names no series the processes export"


def check(db: str, server: ScriptedLLMServer, scrapes: list[Samples], workers: list[Any],
          asked: Counter[tuple[str, str]], *, in_flight: int) -> None:
    """Every series of the three scrapes (serve first) against the run log and what the test did."""
    serve, *per_worker = scrapes
    serve_names, worker_names = names(serve), set().union(*(names(s) for s in per_worker))
    assert not serve_names & worker_names, serve_names & worker_names  # each series from one kind of process
    assert serve_names >= {"extract_queue_depth", "extract_review_backlog", "extract_review_decisions_total",
                           "extract_workers_online", "extract_http_requests_total", "extract_http_requests_inprogress"}
    assert not {name for name in serve_names if name.startswith(("extract_documents", "extract_model", "extract_task"))}

    # the service's view, read from the run log and the broker
    assert by(serve, "extract_workers_online") == Counter({(): 2})
    assert sum(by(serve, "extract_queue_depth").values()) == scalar(
        db, "SELECT COUNT(*) FROM tasks WHERE state IN ('queued', 'unsent')")
    assert sum(by(serve, "extract_queue_unsent").values()) == scalar(db, "SELECT COUNT(*) FROM tasks WHERE state = 'unsent'")
    backlog = rows(db, "SELECT d.state, b.owner, COUNT(*) FROM document_runs d JOIN tasks t ON t.document_run_id = d.id "
                       "JOIN batches b ON b.id = t.batch_id WHERE NOT d.decided AND d.state IN "
                       "('READY_FOR_REVIEW', 'MANUAL_REVIEW', 'BLOCKED') GROUP BY d.state, b.owner")
    assert by(serve, "extract_review_backlog", "state", "owner") == Counter({(s, o): n for s, o, n in backlog})
    decisions = dict(rows(db, "SELECT decision, COUNT(*) FROM reviews GROUP BY decision"))
    assert by(serve, "extract_review_decisions_total", "decision") == Counter({(d,): n for d, n in decisions.items()})
    http = by(serve, "extract_http_requests_total", "handler", "method")
    assert http == Counter(asked), (http, asked)
    assert by(serve, "extract_http_requests_total", "status") == Counter({("2xx",): sum(asked.values())})
    assert by(serve, "extract_http_request_duration_seconds_count", "handler", "method") == Counter(asked)

    # the workers' conversion, summed over both and per worker, against their runs
    for samples, worker in [*zip(per_worker, workers, strict=True), (None, None)]:
        where = "" if worker is None else f" AND r.pid = {worker.pid}"
        counted = summed(per_worker, "extract_documents_total", "state") if samples is None \
            else by(samples, "extract_documents_total", "state")
        states = rows(db, "SELECT d.state, COUNT(*) FROM document_runs d JOIN runs r ON r.id = d.run_id WHERE "
                          f"d.state <> 'PROCESSING'{where} GROUP BY d.state")
        assert counted == Counter({(state,): n for state, n in states}), (worker, counted, states)
    attempts = rows(db, "SELECT model, transport, prompt_tokens, completion_tokens FROM attempts")
    tries: Counter[tuple[str, ...]] = Counter()
    tokens: Counter[tuple[str, ...]] = Counter()
    for model, transport, prompt, completion in attempts:
        tries.update(("default", model, call_outcome(str(entry.get("outcome")))) for entry in
                     (transport if isinstance(transport, list) else json.loads(transport)))
        tokens.update({("in", "default", model): prompt or 0, ("out", "default", model): completion or 0})
    calls = summed(per_worker, "extract_model_calls_total", "endpoint", "model", "outcome")
    assert calls == tries, (calls, tries)
    assert {outcome for _, _, outcome in calls} == ({"ok"} if in_flight else {"ok", "error", "429"}), calls
    assert sum(calls.values()) == len(server.chat_requests) - in_flight  # the model server's own count
    assert sum(summed(per_worker, "extract_model_call_seconds_count", "endpoint", "model").values()) == sum(calls.values())
    assert summed(per_worker, "extract_tokens_total", "direction", "endpoint", "model") == +tokens
    outcomes = rows(db, "SELECT outcome, COUNT(*) FROM tasks WHERE state = 'finished' GROUP BY outcome")
    assert summed(per_worker, "extract_task_outcomes_total", "outcome") == Counter({(o,): n for o, n in outcomes})
    assert sum(summed(per_worker, "extract_task_seconds_count").values()) == sum(n for _, n in outcomes)
    started = scalar(db, "SELECT COUNT(*) FROM tasks WHERE deliveries >= 1")
    assert sum(summed(per_worker, "extract_task_queue_wait_seconds_count").values()) == started
    waited = float(scalar(db, "SELECT COALESCE(SUM(EXTRACT(EPOCH FROM started_at - enqueued_at)), 0) FROM tasks "
                              "WHERE deliveries >= 1"))
    observed = sum(summed(per_worker, "extract_task_queue_wait_seconds_sum").values())
    assert abs(observed - waited) < 0.5 * started + 0.5, (observed, waited)  # each read moments apart
