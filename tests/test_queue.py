"""Documents on Celery workers over a real redis-server and PostgreSQL, every worker a real process.

The scripted model server answers at once (faults injected: 500s, resets, hangs, 429s), so these tests spend
their time where the queue does: delivering, claiming, taking over after a SIGKILL. They run on PostgreSQL
(workers on several machines share PostgreSQL, not SQLite): the session's throwaway cluster or the server of
``EXTRACT_TEST_POSTGRES_URL`` (``tests.support.databases``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from extractor.service.app import build_service
from extractor.store import open_store
from extractor.store.tokens import create_token
from tests.support.api import bearer, finished, serving
from tests.support.batch import (
    ROOT,
    answer_for,
    cli_env,
    extract_command,
    final_runs_per_document,
    request_text,
    rows,
    scalar,
    write_batch,
)
from tests.support.databases import fresh_database
from tests.support.llm_server import Action, Hang, Reply, Reset, ScriptedLLMServer, Status
from tests.support.processes import Processes, alive, descendants, wait_for
from tests.support.redis_server import RedisServer, free_port, redis_server

pytestmark = pytest.mark.postgres


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path) as url:
        yield url


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Processes]]:
    made: list[Processes] = []

    def make(env: dict[str, str]) -> Processes:
        made.append(Processes(env, tmp_path))
        return made[-1]

    yield make
    for group in made:
        group.stop_all()


def queue_env(server: ScriptedLLMServer, db: str, broker: str, **extra: str) -> dict[str, str]:
    return cli_env(server.base_url, db, EXTRACT_BROKER_URL=broker, EXTRACT_MODEL="openai:scripted-model",
                   OPENAI_API_KEY="test-key", **extra)


def task_count(db: str, condition: str = "TRUE", **params: Any) -> int:
    try:
        return int(scalar(db, f"SELECT COUNT(*) FROM tasks WHERE {condition}", **params) or 0)
    except Exception:  # noqa: BLE001 - the submitter has not created the tables yet
        return 0


def started_by(db: str, pid: int) -> int:
    return int(scalar(db, "SELECT COUNT(*) FROM tasks JOIN runs ON runs.id = tasks.run_id "
                          "WHERE tasks.state = 'started' AND runs.pid = :pid", pid=pid) or 0)


def submit(env: dict[str, str], *args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(extract_command("run", *args, "--format", "json"), env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_two_workers_convert_500_documents_and_one_sigkilled_mid_batch_loses_or_doubles_none(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    write_batch(tmp_path / "docs", 500)
    hold, killed = threading.Event(), threading.Event()

    def script(request: dict[str, Any] | None, number: int) -> Action:
        if number % 97 == 0:
            return Status(500)
        if number % 89 == 0:
            return Reset()
        if hold.is_set() and not killed.is_set():  # freeze the workers mid-document until one is killed
            return Hang(30)
        return Reply(answer_for(request))

    server = llm_server(script)
    workers = processes(queue_env(server, pg_url, redis_url))
    options = ("worker", "--concurrency", "8", "--visibility-timeout", "10")
    doomed, survivor = workers.start(*options), workers.start(*options)
    run = submit(workers.env, str(tmp_path / "docs"), "--timeout", "3", cwd=tmp_path)

    wait_for(lambda: task_count(pg_url, "state = 'finished'") >= 150, "150 documents finished", watch=(doomed, survivor))
    hold.set()
    wait_for(lambda: started_by(pg_url, doomed.pid) >= 4, "the doomed worker holding documents mid-conversion",
             watch=(doomed, survivor))
    below = descendants(doomed.pid)  # its fork server, the worker processes forked from it, the resource tracker
    assert len(below) >= 4, below
    workers.kill(doomed)
    held = started_by(pg_url, doomed.pid)  # what it held when it died (a document past its model call may have ended
    killed.set()                           # between the wait and the kill); the broker gives them back only later
    wait_for(lambda: not any(alive(pid) for pid in below), "every process below the killed worker gone", timeout=30)
    out, err = run.communicate(timeout=600)

    assert run.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["documents"] == 500
    assert summary["counts"] == {"READY_FOR_REVIEW": 500}  # a redelivered task reports what was done, never SKIPPED
    assert all(outcome["document_run_id"] is not None for outcome in summary["outcomes"])
    assert len(summary["worker_runs"]) == 2
    finals = final_runs_per_document(pg_url)
    assert len(finals) == 500 and set(finals.values()) == {1}, "a document finished twice or never"
    assert dict(rows(pg_url, "SELECT state, COUNT(*) FROM claims GROUP BY state")) == {"READY_FOR_REVIEW": 500}
    assert scalar(pg_url, "SELECT COUNT(*) FROM document_runs WHERE state = 'PROCESSING'") == 0
    assert dict(rows(pg_url, "SELECT state, COUNT(*) FROM tasks GROUP BY state")) == {"finished": 500}
    redelivered = task_count(pg_url, "deliveries >= 2")
    assert redelivered >= max(held, 1)  # what the killed worker held was delivered again and finished by the other
    taken_over = rows(pg_url, "SELECT COUNT(*) FROM document_runs dr JOIN runs r ON r.id = dr.run_id "
                              "WHERE r.pid = :pid AND dr.state = 'INTERRUPTED'", pid=doomed.pid)[0][0]
    assert taken_over >= 1
    assert scalar(pg_url, "SELECT status FROM runs WHERE pid = :pid", pid=doomed.pid) == "crashed"
    with open_store(pg_url) as store:
        assert store.integrity_check() == []


def test_a_message_taken_by_a_worker_killed_before_it_recorded_the_message_is_sent_again(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """kombu takes a message off the Redis list (BRPOP), then records it as unacknowledged: a worker SIGKILLed in
    between lost it, its task stayed queued with no message, and its batch's submitter waited forever (seen once in
    the SIGKILL test above). Here the message is taken off the list as that worker's BRPOP did."""
    import redis

    write_batch(tmp_path / "docs", 6)
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    run = submit(env, str(tmp_path / "docs"), cwd=tmp_path)
    wait_for(lambda: task_count(pg_url, "state = 'queued'") == 6, "the batch queued", watch=(run,))
    client = redis.Redis.from_url(redis_url)
    taken = json.loads(client.rpop("extract"))["headers"]["id"]
    assert client.hlen("unacked") == 0 and client.llen("extract") == 5  # no worker holds it: it is nowhere
    client.close()

    processes(env).start("worker", "--concurrency", "2")
    out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err[-3000:]
    assert json.loads(out)["counts"] == {"READY_FOR_REVIEW": 6}
    assert "sent again 1 queued documents whose message the broker no longer held" in err
    assert rows(pg_url, "SELECT state, deliveries FROM tasks WHERE id = :id", id=taken) == [("finished", 1)]
    assert len(server.chat_requests) == 6  # sent again once, converted once


def test_a_document_that_kills_its_worker_every_time_ends_error_after_n_deliveries(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    docs = tmp_path / "docs"
    write_batch(docs, 3)
    (docs / "poison.md").write_text("# Poison\n\nThis document kills its worker.\n", encoding="utf-8")

    def is_poison(request: dict[str, Any] | None) -> bool:
        return "kills its worker" in request_text(request)

    server = llm_server(lambda request, number: Hang(60) if is_poison(request) else Reply(answer_for(request)))
    workers = processes(queue_env(server, pg_url, redis_url, EXTRACT_READERS="1"))
    # One document at a time per worker: a killed worker holds only the poison document. (With more, the documents
    # beside it die with it and count deliveries too: an innocent one can be blamed after max-deliveries deaths.)
    options = ("worker", "--concurrency", "1", "--visibility-timeout", "2", "--max-deliveries", "2")
    alive = [workers.start(*options), workers.start(*options)]
    run = submit(workers.env, str(docs), cwd=tmp_path)

    def poison_calls() -> int:
        return sum(is_poison(request.json) for request in server.chat_requests)

    for death in (1, 2):  # each time a worker is converting it, the worker dies (here: SIGKILL from the test)
        wait_for(lambda death=death: poison_calls() == death and task_count(
            pg_url, "deliveries = :n AND state = 'started' AND upload_id IN "
                    "(SELECT id FROM uploads WHERE name LIKE '%poison.md')", n=death) == 1,
                 f"delivery {death} of the poison document calling the model", watch=(run,))
        holder = int(scalar(pg_url, "SELECT runs.pid FROM tasks JOIN runs ON runs.id = tasks.run_id "
                                    "JOIN uploads ON uploads.id = tasks.upload_id WHERE uploads.name LIKE '%poison.md'"))
        victim = next(process for process in alive if process.pid == holder)
        workers.kill(victim)
        alive.remove(victim)
        alive.append(workers.start(*options))
    out, err = run.communicate(timeout=300)

    assert run.returncode == 4, err[-3000:]  # a document ended ERROR: the batch outcome is NOT_EVALUABLE
    outcomes = {Path(o["path"]).name: o for o in json.loads(out)["outcomes"]}
    assert outcomes["poison.md"]["state"] == "ERROR"
    assert "died 2 times" in outcomes["poison.md"]["cause"] and "not delivered again" in outcomes["poison.md"]["cause"]
    assert [o["state"] for name, o in sorted(outcomes.items()) if name != "poison.md"] == ["READY_FOR_REVIEW"] * 3, outcomes
    assert poison_calls() == 2  # the third delivery never converted it again
    poison_runs = rows(pg_url, "SELECT state FROM document_runs WHERE path LIKE '%poison.md' ORDER BY id")
    assert [state for (state,) in poison_runs] == ["INTERRUPTED", "INTERRUPTED", "ERROR"]
    assert scalar(pg_url, "SELECT deliveries FROM tasks JOIN uploads ON uploads.id = tasks.upload_id "
                          "WHERE uploads.name LIKE '%poison.md'") == 3
    with open_store(pg_url) as store:
        assert store.integrity_check() == []


def test_a_full_queue_makes_the_submitter_wait_or_refuse(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    write_batch(tmp_path / "docs", 8)
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")

    refused = subprocess.run(extract_command("run", str(tmp_path / "docs"), "--max-pending", "5", "--no-wait"),
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert "queue full: 0 documents wait for a worker and this batch adds 8, over --max-pending 5" in refused.stderr
    assert task_count(pg_url) == 0  # nothing was queued

    run = submit(env, str(tmp_path / "docs"), "--max-pending", "3", cwd=tmp_path)
    wait_for(lambda: task_count(pg_url) == 3, "the first 3 documents queued", watch=(run,))
    with pytest.raises(subprocess.TimeoutExpired):  # no worker: it waits for room, queueing nothing more
        run.wait(timeout=2)
    assert task_count(pg_url) == 3
    processes(env).start("worker", "--concurrency", "2")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    assert json.loads(out)["counts"] == {"READY_FOR_REVIEW": 8}


def test_the_submitter_follows_its_batch_on_a_channel_each_finished_document_is_announced_on(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """``extract run --queue`` listens on its batch's channel before any document is sent, and the worker publishes
    there each task it finished, once, after its outcome is in the run log (so looking then finds it)."""
    import redis

    write_batch(tmp_path / "docs", 6)
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    client = redis.Redis.from_url(redis_url)
    listener = client.pubsub()
    listener.psubscribe("extractor:batch:*:finished")

    run = submit(env, str(tmp_path / "docs"), cwd=tmp_path)
    wait_for(lambda: task_count(pg_url) == 6, "the batch queued", watch=(run,))
    (batch_id,) = [row[0] for row in rows(pg_url, "SELECT id FROM batches")]
    channel = f"extractor:batch:{batch_id}:finished"
    assert client.pubsub_numsub(channel) == [(channel.encode(), 1)]  # the submitter, before any worker ran
    processes(env).start("worker", "--concurrency", "2")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    assert json.loads(out)["counts"] == {"READY_FOR_REVIEW": 6}

    announced: list[str] = []
    while (message := listener.get_message(timeout=1)) is not None:
        if message["type"] == "psubscribe":
            continue
        assert message["channel"] == channel.encode()
        announced.append(message["data"].decode())
        outcome = scalar(pg_url, "SELECT outcome FROM tasks WHERE id = :id", id=announced[-1])
        assert outcome == "READY_FOR_REVIEW"  # recorded before it was announced
    assert sorted(announced) == sorted(row[0] for row in rows(pg_url, "SELECT id FROM tasks"))
    listener.close()
    client.close()


def test_a_429_seen_by_one_worker_pauses_every_worker(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    write_batch(tmp_path / "docs", 120)
    arrivals: list[float] = []
    limited: list[float] = []
    lock = threading.Lock()

    def script(request: dict[str, Any] | None, number: int) -> Action:
        with lock:
            arrivals.append(time.monotonic())
            if number == 40:
                limited.append(arrivals[-1])
                return Status(429, headers={"Retry-After": "4"})
        return Reply(answer_for(request))

    server = llm_server(script)
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    workers = processes(env)
    first, second = (workers.start("worker", "--concurrency", "4") for _ in range(2))
    run = submit(env, str(tmp_path / "docs"), cwd=tmp_path)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]

    assert len(limited) == 1
    during = [t for t in arrivals if limited[0] + 1.0 <= t <= limited[0] + 3.6]
    after = [t for t in arrivals if t > limited[0] + 3.6]
    assert during == [], f"{len(during)} calls started while the server had asked every worker to wait"
    assert after  # the batch went on afterwards
    worker_runs = {run_id for (run_id,) in rows(pg_url, "SELECT DISTINCT run_id FROM tasks")}
    assert len(worker_runs) == 2  # both workers converted documents, so both were paused


def test_the_api_with_a_broker_hands_submissions_to_the_workers(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    metrics_port = free_port()
    worker = processes(env).start("worker", "--concurrency", "2", "--metrics-port", str(metrics_port))
    service = build_service(open_store(pg_url), broker=redis_url, concurrency=1,
                            model="openai:scripted-model")
    assert service.runner is None  # nothing converts in the API's own process
    token = create_token(service.store.engine, "sam", "submitter")
    sample = ROOT / "samples" / "en_purchase_approval.md"
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=30) as client:
            sent = client.post("/v1/documents/text", headers=bearer(token),
                               json={"name": "purchase.md", "text": sample.read_text(encoding="utf-8")})
            assert sent.status_code == 202, sent.text
            task = finished(client, token, sent.json()["documents"][0]["id"])
            assert client.get("/readyz").json() == {"run_log": "ok", "broker": "ok", "status": "ok"}
    finally:
        service.close()
    assert task["outcome"] == "READY_FOR_REVIEW", task
    with httpx.Client(base_url=f"http://127.0.0.1:{metrics_port}", timeout=30) as scraper:  # the worker's own
        assert scraper.get("/readyz").json() == {"run_log": "ok", "broker": "ok", "status": "ok"}
        lines = scraper.get("/metrics").text.splitlines()
    assert 'extract_task_outcomes_total{outcome="READY_FOR_REVIEW"} 1.0' in lines
    assert 'extract_documents_total{state="READY_FOR_REVIEW"} 1.0' in lines
    assert 'extract_model_calls_total{endpoint="default",model="scripted-model",outcome="ok"} 1.0' in lines
    assert not any(line.startswith("extract_queue_depth") for line in lines)  # the service's (tests/test_operator.py)
    assert rows(pg_url, "SELECT command, pid FROM runs WHERE id = :run", run=task["run"]) == [("extract worker", worker.pid)]


def test_a_task_whose_worker_died_after_the_final_state_reports_that_state_and_document_run(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """The worker wrote the document's final state and was SIGKILLed before marking its task finished: the
    redelivered task reports that state, document run and tokens (it was SKIPPED "done before" with no document
    run). A second upload of the same content reports them too, in the batch summary."""
    from extractor.queue.celery_app import enqueue, make_celery

    docs = tmp_path / "docs"
    (only,) = write_batch(docs, 1)
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    workers = processes(queue_env(server, pg_url, redis_url, EXTRACT_READERS="1"))
    first = workers.start("worker", "--concurrency", "1")
    done = subprocess.run(extract_command("run", str(docs), "--format", "json"), env=workers.env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (converted,) = json.loads(done.stdout)["outcomes"]
    assert converted["state"] == "READY_FOR_REVIEW" and converted["tokens"] > 0
    workers.kill(first)
    task_id = scalar(pg_url, "SELECT id FROM tasks")
    with open_store(pg_url) as store:  # as the SIGKILL a moment earlier left it: the run log has the final state
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE tasks SET state = 'started', outcome = NULL, cause = NULL, tokens = 0, "
                                    "document_run_id = NULL, finished_at = NULL WHERE id = :id"), {"id": task_id})
    enqueue(make_celery(redis_url), [task_id])  # the message the broker hands out again
    workers.start("worker", "--concurrency", "1")
    wait_for(lambda: task_count(pg_url, "state = 'finished'") == 1, "the redelivered task")

    task = rows(pg_url, "SELECT outcome, cause, document_run_id, tokens, deliveries FROM tasks")[0]
    assert tuple(task) == ("READY_FOR_REVIEW", None, converted["document_run_id"], converted["tokens"], 2), task
    assert final_runs_per_document(pg_url) == {1: 1}  # not converted again

    again = subprocess.run(extract_command("run", str(only), "--format", "json"), env=workers.env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert summary["counts"] == {"READY_FOR_REVIEW": 1}, summary  # not "SKIPPED 1"
    (repeated,) = summary["outcomes"]
    assert repeated["document_run_id"] == converted["document_run_id"] and repeated["tokens"] == 0
    assert repeated["cause"].startswith(f"converted before: document run {converted['document_run_id']}")
    assert len(server.chat_requests) == 1  # one model call in all


def test_a_dead_workers_documents_come_back_within_the_visibility_timeout_plus_15_s(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """kombu's own sweep of unacknowledged messages runs about every 100 s: without the workers' sweep the
    documents of a SIGKILLed worker came back 84-91 s later even with a 15 s visibility timeout."""
    visibility = 5
    write_batch(tmp_path / "docs", 4)
    killed = threading.Event()

    def script(request: dict[str, Any] | None, number: int) -> Action:
        killed.wait(240)  # every call waits for the SIGKILL, so each worker holds its two documents until then
        return Reply(answer_for(request))

    server = llm_server(script)
    workers = processes(queue_env(server, pg_url, redis_url, EXTRACT_READERS="1"))
    options = ("worker", "--concurrency", "2", "--visibility-timeout", str(visibility))
    doomed, survivor = workers.start(*options), workers.start(*options)
    run = submit(workers.env, str(tmp_path / "docs"), "--timeout", "300", cwd=tmp_path)
    wait_for(lambda: len(server.chat_requests) == 4 and started_by(pg_url, doomed.pid) == 2,
             "both workers calling the model for two documents each", watch=(doomed, survivor, run))
    held = [task_id for (task_id,) in rows(pg_url, "SELECT tasks.id FROM tasks JOIN runs ON runs.id = tasks.run_id "
                                                   "WHERE runs.pid = :pid", pid=doomed.pid)]
    workers.kill(doomed)
    killed_at = datetime.now(UTC)
    killed.set()
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    assert json.loads(out)["counts"] == {"READY_FOR_REVIEW": 4}

    again = [row for row in rows(pg_url, "SELECT id, started_at, deliveries FROM tasks") if row[0] in held]
    assert [deliveries for _, _, deliveries in again] == [2, 2]
    waits = [(started - killed_at).total_seconds() for _, started, _ in again]
    assert max(waits) <= visibility + 15, f"redelivered {waits} s after the SIGKILL"


def test_workers_convert_with_the_contract_files_the_submitter_named_and_refuse_them_edited(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    po = ROOT / "samples" / "purchase_orders"
    answer = (ROOT / "samples/expected/purchase_orders/ko_pass.candidate.json").read_text(encoding="utf-8")
    server = llm_server(lambda request, number: Reply(answer))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    env.pop("EXTRACT_CONTRACTS_PATH", None)
    submitted = tmp_path / "contracts"
    shutil.copytree(ROOT / "samples" / "contracts", submitted)
    workers = processes(env)

    # the folder the batch recorded is gone by the time a worker runs it: the worker's --contracts holds a copy
    run = submit(env, str(po / "ko_purchase_order.txt"), "--contract", "purchase_order", "--contracts",
                 str(submitted), cwd=tmp_path)
    wait_for(lambda: task_count(pg_url) == 1, "the document queued", watch=(run,))
    moved = submitted.rename(tmp_path / "elsewhere")
    worker = workers.start("worker", "--concurrency", "1", "--contracts", str(moved))
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:] + workers.log_of(worker)
    assert json.loads(out)["counts"] == {"READY_FOR_REVIEW": 1}
    config = scalar(pg_url, "SELECT config FROM runs WHERE command = 'extract worker'")
    settings = scalar(pg_url, "SELECT settings FROM batches")
    assert settings["contract_folder"] == str(submitted / "purchase_order" / "v1")  # what the submitter had
    assert config["contract_folder"] == str(moved / "purchase_order" / "v1")  # where this worker found it
    assert config["contract_hash"] == settings["contract_hash"]
    workers.stop_all()

    # a catalogue edited after the batch was submitted: the worker (no --contracts: the recorded folder) refuses it
    catalogue = moved / "purchase_order" / "v1" / "skus.csv"
    run = submit(env, str(po / "en_purchase_order.md"), "--contract", "purchase_order", "--contracts", str(moved),
                 cwd=tmp_path)
    wait_for(lambda: task_count(pg_url) == 2, "the second document queued", watch=(run,))
    batch = scalar(pg_url, "SELECT batch_id FROM tasks JOIN uploads ON uploads.id = tasks.upload_id "
                           "WHERE uploads.name LIKE '%en_purchase_order.md'")
    catalogue.write_bytes(catalogue.read_bytes() + b"999999,spring washer M8,piece\n")
    workers.start("worker", "--concurrency", "1")
    out, err = run.communicate(timeout=300)
    (outcome,) = json.loads(out)["outcomes"]
    assert run.returncode == 4 and outcome["state"] == "ERROR", err[-3000:]
    assert outcome["cause"] == (
        f"{po / 'en_purchase_order.md'}: this worker cannot run the batch's settings: contract purchase_order v1 "
        f"changed since batch {batch[:12]} was submitted: skus.csv changed (in {catalogue.parent}); put the files "
        "back as they were, or give --contracts a folder holding purchase_order/v1 as the run had it; to use the "
        "contract as it is now, run the documents again")
    assert len(server.chat_requests) == 1  # only the first document reached the model


def test_an_emails_attachment_is_a_document_of_its_own_through_the_queue_and_the_api(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    from tests.test_format_samples import candidate_for

    mail = ROOT / "samples" / "formats" / "ko_purchase_request.eml"
    attached = f"{mail}#attachment1/ko_purchase_order.xlsx"
    workbook = (ROOT / "samples" / "formats" / "ko_purchase_order.xlsx").read_bytes()  # the file that was attached
    server = llm_server(lambda request, number: Reply(candidate_for(request)))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    processes(env).start("worker", "--concurrency", "2")

    run = submit(env, str(mail), cwd=tmp_path)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err[-3000:]
    outcomes = {o["path"]: o for o in json.loads(out)["outcomes"]}
    assert sorted(outcomes) == [str(mail), attached]
    assert {o["state"] for o in outcomes.values()} == {"READY_FOR_REVIEW"}

    service = build_service(open_store(pg_url), broker=redis_url, concurrency=1, model="openai:scripted-model")
    token = create_token(service.store.engine, "sam", "submitter")
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=30) as client:
            sent = client.post("/v1/documents", headers=bearer(token),
                               files=[("files", ("request.eml", mail.read_bytes(), "message/rfc822"))])
            assert sent.status_code == 202, sent.text
            documents = sent.json()["documents"]
            assert [d["name"] for d in documents] == ["request.eml", "request.eml#attachment1/ko_purchase_order.xlsx"]
            tasks = [finished(client, token, d["id"]) for d in documents]
    finally:
        service.close()
    assert [task["outcome"] for task in tasks] == ["READY_FOR_REVIEW", "READY_FOR_REVIEW"], tasks
    digest = hashlib.sha256(workbook).hexdigest()  # the attachment is the workbook, read by its own reader
    paths = rows(pg_url, "SELECT dr.path FROM document_runs dr JOIN documents d ON d.id = dr.document_id "
                         "WHERE d.sha256 = :digest", digest=digest)
    assert (attached,) in paths and {path for (path,) in paths} <= {attached, documents[1]["name"]}
    assert scalar(pg_url, "SELECT COUNT(*) FROM uploads WHERE name = 'request.eml#attachment1/ko_purchase_order.xlsx' "
                          "AND sha256 = :digest", digest=digest) == 1


def test_a_queued_document_that_ends_blocked_is_recorded_and_reported_blocked(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    # the English order's answer for the Russian order: a tax id the source does not hold (a critical finding)
    answer = (ROOT / "samples/expected/purchase_orders/en_pass.candidate.json").read_text(encoding="utf-8")
    server = llm_server(lambda request, number: Reply(answer))
    env = queue_env(server, pg_url, redis_url, EXTRACT_READERS="1")
    workers = processes(env)
    workers.start("worker", "--concurrency", "1")
    run = submit(env, str(ROOT / "samples/purchase_orders/ru_purchase_order.txt"), "--contract", "purchase_order",
                 "--contracts", str(ROOT / "samples/contracts"), cwd=tmp_path)
    out, err = run.communicate(timeout=300)
    (outcome,) = json.loads(out)["outcomes"]
    assert run.returncode == 1 and outcome["state"] == "BLOCKED", (outcome, err[-3000:])  # exit 1: BLOCK
    assert "PERSONAL_DATA_INVENTED" in outcome["rule_ids"]
    assert rows(pg_url, "SELECT state, outcome FROM tasks") == [("finished", "BLOCKED")]
    workers.stop_all()  # the worker run ends with its documents' outcome
    assert rows(pg_url, "SELECT status, outcome FROM runs WHERE command = 'extract worker'") == [("finished", "BLOCK")]


def test_a_broker_stopped_and_started_again_mid_batch_loses_and_doubles_no_document(
        llm_server: Callable[..., ScriptedLLMServer], pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """Redis (no persistence) stopped mid-batch and started again: the messages it held are gone with it. Every
    document of the batch under way, and of a batch submitted while it was away (saved, not sent), ends final,
    each converted once: the outbox of `extract run --queue` sends what was lost or never sent."""
    paths = write_batch(tmp_path / "all", 80)
    (tmp_path / "second").mkdir()
    for path in paths[60:]:  # content of its own: a repeat of the first batch's would be "converted before"
        path.rename(tmp_path / "second" / path.name)
    server = llm_server(lambda request, number: Reply(answer_for(request), delay_s=0.2))
    with RedisServer(tmp_path) as broker:
        env = queue_env(server, pg_url, broker.url, EXTRACT_WORKER_PROCESSES="0")
        processes(env).start("worker", "--concurrency", "2")
        first = submit(env, str(tmp_path / "all"), cwd=tmp_path)
        wait_for(lambda: task_count(pg_url, "state = 'finished'") >= 8, "the first documents", watch=(first,))
        broker.stop()
        lost = task_count(pg_url, "state = 'queued'")  # their messages went with the broker
        second = submit(env, str(tmp_path / "second"), cwd=tmp_path)
        wait_for(lambda: task_count(pg_url, "state = 'unsent'") == 20, "the second batch saved, not sent",
                 watch=(second, first))
        broker.start()
        out_first, err_first = first.communicate(timeout=300)
        out_second, err_second = second.communicate(timeout=300)
    assert first.returncode == 0, err_first[-3000:]
    assert second.returncode == 0, err_second[-3000:]
    assert json.loads(out_first)["counts"] == {"READY_FOR_REVIEW": 60}
    assert json.loads(out_second)["counts"] == {"READY_FOR_REVIEW": 20}
    assert lost > 0
    assert "did not take the documents" in err_second and "they are saved and sent when it is back" in err_second
    assert "the broker is back" in err_second
    assert task_count(pg_url, "state = 'finished'") == 80
    runs = final_runs_per_document(pg_url)
    assert len(runs) == 80 and set(runs.values()) == {1}  # every document final, none twice
    assert len(server.chat_requests) == 80  # one model call per document


def test_the_api_answers_503_while_the_broker_is_away_and_sends_the_documents_when_it_is_back(
        llm_server: Callable[..., ScriptedLLMServer], pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    sample = (ROOT / "samples" / "en_purchase_approval.md").read_text(encoding="utf-8")
    with RedisServer(tmp_path) as broker:
        processes(queue_env(server, pg_url, broker.url, EXTRACT_WORKER_PROCESSES="0")).start("worker")
        service = build_service(open_store(pg_url), broker=broker.url, concurrency=1, model="openai:scripted-model")
        token = create_token(service.store.engine, "sam", "submitter")
        try:
            with serving(service) as url, httpx.Client(base_url=url, timeout=30) as client:
                sent = client.post("/v1/documents/text", headers=bearer(token), json={"name": "one.md", "text": sample})
                assert sent.status_code == 202, sent.text
                assert finished(client, token, sent.json()["documents"][0]["id"])["outcome"] == "READY_FOR_REVIEW"

                broker.stop()
                began = time.monotonic()
                away = client.post("/v1/documents/text", headers=bearer(token),
                                   json={"name": "two.md", "text": sample.replace("\n", " 2\n", 1)})
                assert time.monotonic() - began < 10  # the broker's client does not retry while the request waits
                assert away.status_code == 503 and away.headers["Retry-After"] == "5", away.text
                body = away.json()
                assert body["detail"].startswith("saved, not yet queued: the broker did not take the documents")
                [document] = body["documents"]
                assert document["name"] == "two.md"
                waiting = client.get(f"/v1/submissions/{document['id']}", headers=bearer(token)).json()
                assert waiting["state"] == "unsent"
                assert "extract_queue_unsent 1.0" in client.get("/metrics").text.splitlines()
                assert "extract_queue_depth 1.0" in client.get("/metrics").text.splitlines()
                assert client.get("/readyz").status_code == 503

                broker.start()  # the sweep of `extract serve` sends it once the broker answers
                task = finished(client, token, document["id"])
                lines = client.get("/metrics").text.splitlines()
                schema = client.get("/openapi.json").json()
        finally:
            service.close()
    assert task["outcome"] == "READY_FOR_REVIEW" and task["deliveries"] == 1
    assert "extract_queue_unsent 0.0" in lines and "extract_queue_depth 0.0" in lines
    documented = schema["paths"]["/v1/documents/text"]["post"]["responses"]["503"]
    assert documented["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/NotSent"}
    assert "Retry-After" in documented["headers"]
    assert {"detail", "batch", "documents"} <= set(schema["components"]["schemas"]["NotSent"]["required"])
