"""A run's options (``extractor.options.RunOptions``) reach the engine the same way wherever the run is made: here,
through the queue to real ``extract worker`` processes (real redis-server, PostgreSQL, scripted model servers over
HTTP), and through the API; a batch's ``--max-cost`` is one budget for every worker; a worker's engines are those of
what it is converting, not of every batch it has seen.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
import redis
import typer

from extractor.cli import app
from extractor.options import RunOptions
from extractor.queue.endpoints import normal_url
from tests.support.batch import ROOT, answer_for, cli_env, extract_command, final_runs_per_document, rows, scalar, write_batch
from tests.support.databases import fresh_database
from tests.support.llm_server import Reply, ScriptedLLMServer
from tests.support.processes import Processes, wait_for
from tests.support.redis_server import redis_server
from tests.test_judge_flow import verdict


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


def run_params() -> dict[str, Any]:
    """``extract run``'s parameters by name, as its command line has them."""
    group = typer.main.get_command(app)
    with typer.Context(group) as ctx:
        command = group.get_command(ctx, "run")  # type: ignore[attr-defined]
        return {param.name: param for param in command.get_params(ctx) if param.name != "help"}


PRICES = {"scripted-model": {"input": 0.5, "output": 1.0}, "judge-model": {"input": 0.5, "output": 1.0},
          "other-model": {"input": 0.5, "output": 1.0}, "metered-model": {"input": 2.0, "cached_input": 0.5, "output": 8.0}}
JUDGE_KEY = "judge-secret-key-1234"
MODELS_KEY = "models-secret-key-5678"


def priced_env(tmp_path: Path, server: ScriptedLLMServer, db: str, broker: str, **extra: str) -> dict[str, str]:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), "utf-8")
    return cli_env(server.base_url, db, EXTRACT_BROKER_URL=broker, EXTRACT_PRICES=str(prices), EXTRACT_READERS="1",
                   OPENAI_API_KEY="test-key", **extra)


PURCHASE_ORDERS = ROOT / "samples" / "purchase_orders"
PROMPT_V2 = "PROMPT-V2: you are the second prompt of purchase_order."


def purchase_order_contracts(tmp_path: Path) -> Path:
    """The sample contracts written as files, purchase_order with a prompt v2 of its own (the generic prompt, its
    system part starting with ``PROMPT_V2``): a run given ``--prompt-version v2`` shows it in every request."""
    folder = tmp_path / "contracts"
    shutil.copytree(ROOT / "samples" / "contracts", folder)
    v2 = folder / "purchase_order" / "v1" / "prompts" / "v2"
    shutil.copytree(ROOT / "prompts" / "generic" / "v1", v2)
    (v2 / "system.txt").write_text(PROMPT_V2 + "\n" + (v2 / "system.txt").read_text("utf-8"), "utf-8")
    return folder


def purchase_order_answer(request: dict[str, Any] | None, number: int) -> Reply:
    """The passing candidate of the purchase order in the request (by its number)."""
    text = json.dumps(request or {}, ensure_ascii=False)
    name = "ko_pass" if "PO-2026-0416" in text else "ru_pass" if "PO-2026-0417" in text else "en_pass"
    candidate = ROOT / "samples" / "expected" / "purchase_orders" / f"{name}.candidate.json"
    return Reply(candidate.read_text(encoding="utf-8"), usage=(1000, 200))


def generation_requests(server: ScriptedLLMServer) -> list[dict[str, Any]]:
    return [request.json for request in server.chat_requests]


def converted_as_purchase_orders_with_prompt_v2(bodies: list[dict[str, Any]]) -> bool:
    """Every request was made from purchase_order's prompt v2 and asks for purchase_order's record: what
    ``--contract purchase_order --prompt-version v2`` does (a passing purchase order shows its rules ran)."""
    systems = [body["messages"][0]["content"] for body in bodies]
    return all(system.startswith(PROMPT_V2) and "purchase_order" in system and "lineItems" in json.dumps(body)
               for system, body in zip(systems, bodies))


def used_by_the_worker(pg_url: str, redis_url: str, expected: RunOptions, server: ScriptedLLMServer,
                       judge: ScriptedLLMServer, *, budget: float, tags: tuple[str, ...]) -> dict[str, Any]:
    """What the one worker run that converted three purchase orders used, checked against ``expected`` (its
    conversion options) and the per-batch ``budget`` and ``tags``: its recorded options and configuration, the
    requests both model servers received, the document runs' tags, the batch's budget in Redis. Its configuration."""
    (config,) = [json.loads(c) if isinstance(c, str) else c for (c,) in rows(
        pg_url, "SELECT config FROM runs WHERE command = 'extract worker'")]
    assert config["options"] == expected.to_json()  # what the worker's engine was given and used
    assert rows(pg_url, "SELECT contract, prompt_version FROM runs WHERE command = 'extract worker'") == [
        (expected.contract, expected.prompt_version)]
    bodies = generation_requests(server)
    assert len(bodies) == 3 and converted_as_purchase_orders_with_prompt_v2(bodies)
    assert all(b["max_tokens"] == expected.max_tokens and b["response_format"] == {"type": expected.response_format}
               and b["model"] == (expected.model or "").removeprefix("openai:") for b in bodies)
    assert config["ocr_lang"] == expected.ocr_lang
    assert (config["max_input_tokens"], config["max_output_tokens"], config["overlap"]) == (
        expected.max_input_tokens, expected.max_output_tokens, expected.overlap)
    assert (config["judge"]["mode"], config["judge"]["threshold"], config["judge"]["concurrency"],
            config["judge"]["queue"], config["judge"]["timeout_s"]) == (
        expected.judge_mode, expected.judge_threshold, expected.judge_concurrency, expected.judge_queue,
        expected.judge_timeout)
    assert len(judge.chat_requests) == 3
    assert {request.json["model"] for request in judge.chat_requests} == {(expected.judge or "").removeprefix("openai:")}
    assert {request.headers["authorization"] for request in judge.chat_requests} == {f"Bearer {JUDGE_KEY}"}
    assert {tuple(json.loads(t) if isinstance(t, str) else t) for (t,) in rows(
        pg_url, "SELECT tags FROM document_runs")} == {tags}
    (batch,) = [b for (b,) in rows(pg_url, "SELECT id FROM batches")]
    kept = redis.Redis.from_url(redis_url).hgetall(f"extract:budget:{batch}")
    spent = (3 * (1000 * 0.5 + 200 * 1.0) + 3 * (500 * 0.5 + 20 * 1.0)) / 1e6
    assert float(kept[b"limit"]) == budget and float(kept[b"charged"]) == pytest.approx(spent)
    assert abs(float(kept[b"reserved"])) < 1e-9
    return config


def test_every_option_of_extract_run_reaches_the_engine_of_a_real_worker(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """Each option of ``extract run`` is walked: given with ``--queue`` (a value other than its default where the
    model allows one), it is found where the worker's engine uses it (the worker run's recorded options, the
    requests the model servers received, the document runs, the batch's budget in Redis), or it is refused in
    one line. An option added to ``extract run`` without a row here fails this test."""
    server = llm_server(purchase_order_answer)
    judge = llm_server(lambda request, number: Reply(verdict(request), usage=(500, 20)))
    endpoints = tmp_path / "endpoints.toml"  # the operator's: the judge's server and the name of its key's variable
    endpoints.write_text(f'[endpoints.judges]\nurl = "{judge.base_url}"\nkey_env = "JUDGE_KEY"\n'
                         'models = ["judge-model"]\n', "utf-8")
    env = priced_env(tmp_path, server, pg_url, redis_url)
    processes(env).start("worker", "--concurrency", "2", "--endpoints", str(endpoints), JUDGE_KEY=JUDGE_KEY)
    docs = sorted(PURCHASE_ORDERS.iterdir())
    contracts = purchase_order_contracts(tmp_path)  # the batch records the folder; the worker reads it there

    given: dict[str, tuple[str, ...]] = {  # the option -> what is given on the command line
        "contract": ("--contract", "purchase_order"), "prompt_version": ("--prompt-version", "v2"),
        "model": ("--model", "openai:scripted-model"), "base_url": ("--base-url", server.base_url),
        "response_format": ("--response-format", "json_object"), "timeout": ("--timeout", "45"),
        "retries": ("--retries", "1"), "retry_budget": ("--retry-budget", "100"), "max_tokens": ("--max-tokens", "3000"),
        "max_input_tokens": ("--max-input-tokens", "50000"), "max_output_tokens": ("--max-output-tokens", "20000"),
        "overlap": ("--overlap", "3"), "max_cost": ("--max-cost", "5"), "force": ("--force",),
        "retry_errors": ("--no-retry-errors",), "tags": ("--tag", "alpha", "--tag", "beta"),
        "ocr_lang": ("--ocr-lang", "rus+eng"), "judge": ("--judge", "openai:judge-model"),
        "judge_mode": ("--judge-mode", "observe"), "judge_threshold": ("--judge-threshold", "0.7"),
        "judge_rubric": ("--judge-rubric", "v2"), "judge_base_url": ("--judge-base-url", judge.base_url),
        "judge_concurrency": ("--judge-concurrency", "3"), "judge_queue": ("--judge-queue", "6"),
        "judge_timeout": ("--judge-timeout", "30"),
        # this process's own: where the run happens, not how documents are converted
        "paths": tuple(map(str, docs)), "queue": ("--queue", redis_url), "max_pending": ("--max-pending", "100"),
        "wait": ("--no-wait",), "database": ("--database", pg_url), "format": ("--format", "json"),
        "contracts": ("--contracts", str(contracts)),
    }
    refused = {"concurrency": (("--concurrency", "3"), "--concurrency is each worker's own with --queue")}
    assert set(run_params()) == set(given) | set(refused), "a new option of extract run needs its row here"
    assert {name for name in RunOptions.model_fields if name in run_params()} | {"endpoint", "judge_endpoint"} == set(
        RunOptions.model_fields)  # the API's way of naming servers: tests/test_service.py

    for name, (arguments, message) in refused.items():
        answer = subprocess.run(extract_command("run", str(docs[0]), "--queue", redis_url, *arguments), env=env,
                                cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert answer.returncode == 2 and message in answer.stderr and len(answer.stderr.splitlines()) == 1, name

    arguments = [part for name, parts in given.items() if name != "paths" for part in parts]
    first = subprocess.run(extract_command("run", *given["paths"], *arguments), env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout)
    assert summary["counts"] == {"READY_FOR_REVIEW": 3}

    expected = RunOptions(contract="purchase_order", prompt_version="v2", model="openai:scripted-model",
                          base_url=server.base_url, response_format="json_object", timeout=45, retries=1,
                          retry_budget=100, max_tokens=3000, max_input_tokens=50000, max_output_tokens=20000, overlap=3,
                          ocr_lang="rus+eng", judge="openai:judge-model", judge_mode="observe", judge_threshold=0.7,
                          judge_base_url=judge.base_url, judge_concurrency=3, judge_queue=6,
                          judge_timeout=30)  # the per-batch options come with each task
    config = used_by_the_worker(pg_url, redis_url, expected, server, judge, budget=5.0, tags=("alpha", "beta"))
    assert config["base_url"] == normal_url(server.base_url)

    again = subprocess.run(extract_command("run", *given["paths"], *arguments), env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)  # --force: converted again, not skipped
    assert again.returncode == 0 and json.loads(again.stdout)["counts"] == {"READY_FOR_REVIEW": 3}, again.stderr
    assert len(server.chat_requests) == 6, again.stdout
    # a run holds one document run per document: redoing what it converted takes a worker run of its own
    assert len(rows(pg_url, "SELECT id FROM runs WHERE command = 'extract worker'")) == 2
    stored = [json.loads(s) if isinstance(s, str) else s for (s,) in rows(pg_url, "SELECT settings FROM batches")]
    assert all(s["retry_errors"] is False and s["force"] is True and s["tags"] == ["alpha", "beta"] for s in stored)

    probe = subprocess.run(extract_command("run", str(docs[0]), "--contract", "rag_answer", "--prompt-version", "v9",
                                           "--format", "json"), env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)  # the worker uses the contract and prompt the batch names
    (outcome,) = json.loads(probe.stdout)["outcomes"]
    assert outcome["state"] == "ERROR" and "rag_answer" in outcome["cause"] and "v9" in outcome["cause"], outcome


def test_every_option_reaches_the_engine_of_a_real_worker_through_the_api(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each option of ``extract run`` given as the API's settings (``PUT /v1/settings``: a value other than its
    default), documents submitted over HTTP to ``extract serve``'s app with a Redis broker, converted by a real
    ``extract worker``: found where the worker's engine used it, as through ``extract run --queue``, or refused in
    one line saying why. The servers are named by endpoint, each key the worker's own."""
    from extractor.queue.endpoints import ENDPOINTS_ENV
    from extractor.service.app import REFUSED_URL, build_service
    from extractor.store import open_store
    from extractor.store.tokens import create_token
    from tests.support.api import bearer, finished, serving

    server = llm_server(purchase_order_answer)
    judge = llm_server(lambda request, number: Reply(verdict(request), usage=(500, 20)))
    endpoints = tmp_path / "endpoints.toml"
    endpoints.write_text(f'[endpoints.models]\nurl = "{server.base_url}"\nkey_env = "MODELS_KEY"\n'
                         'models = ["scripted-model", "other-model"]\n\n'
                         f'[endpoints.judges]\nurl = "{judge.base_url}"\nkey_env = "JUDGE_KEY"\n'
                         'models = ["judge-model"]\n', "utf-8")
    contracts = purchase_order_contracts(tmp_path)
    env = priced_env(tmp_path, server, pg_url, redis_url, EXTRACT_CONTRACTS_PATH=str(contracts))
    processes(env).start("worker", "--concurrency", "2", "--endpoints", str(endpoints), JUDGE_KEY=JUDGE_KEY,
                         MODELS_KEY=MODELS_KEY)
    for name in ("EXTRACT_PRICES", "EXTRACT_CONTRACTS_PATH"):  # the service checks contracts and prices as workers do
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv(ENDPOINTS_ENV, str(endpoints))

    given: dict[str, Any] = {  # the option -> its value in the settings
        "contract": "purchase_order", "prompt_version": "v2", "model": "openai:other-model", "endpoint": "models",
        "response_format": "json_object", "timeout": 45, "retries": 1, "retry_budget": 100, "max_tokens": 3000,
        "max_input_tokens": 50000, "max_output_tokens": 20000, "overlap": 3, "max_cost": 5, "force": True,
        "retry_errors": False, "tags": ["alpha", "beta"], "ocr_lang": "rus+eng", "judge": "openai:judge-model",
        "judge_endpoint": "judges", "judge_mode": "observe", "judge_threshold": 0.7, "judge_rubric": "v2",
        "judge_concurrency": 3, "judge_queue": 6, "judge_timeout": 30,
    }
    refused = {"base_url": server.base_url, "judge_base_url": judge.base_url}  # a key goes only where it belongs
    assert set(given) | set(refused) == set(RunOptions.model_fields), "a new option needs its row here"
    assert all(given[name] != field.default for name, field in RunOptions.model_fields.items()
               if name in given and name != "judge_rubric")  # v2 is the one rubric there is

    store = open_store(pg_url)
    service = build_service(store, broker=redis_url, concurrency=2, model="openai:scripted-model")
    admin, submitter = (create_token(store.engine, f"{role}-token", role) for role in ("admin", "submitter"))
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=60) as client:
            for name, value in refused.items():  # given instead of the endpoint's name
                named = "judge_endpoint" if name == "judge_base_url" else "endpoint"
                answer = client.put("/v1/settings", headers=bearer(admin),
                                    json={key: given[key] for key in given if key != named} | {name: value})
                (problem,) = answer.json()["detail"]
                assert answer.status_code == 422 and problem["loc"] == ["body", name], answer.text
                assert problem["msg"] == REFUSED_URL and "\n" not in problem["msg"]
            changed = client.put("/v1/settings", headers=bearer(admin), json=given)
            assert changed.status_code == 200, changed.text

            def submit() -> list[dict[str, Any]]:
                sent = client.post("/v1/documents", headers=bearer(submitter), files=[
                    ("files", (path.name, path.read_bytes())) for path in sorted(PURCHASE_ORDERS.iterdir())])
                assert sent.status_code == 202, sent.text
                return [finished(client, submitter, document["id"]) for document in sent.json()["documents"]]

            assert {task["outcome"] for task in submit()} == {"READY_FOR_REVIEW"}
            expected = RunOptions.model_validate({name: value for name, value in given.items()
                                                  if name not in RunOptions.PER_BATCH})
            config = used_by_the_worker(pg_url, redis_url, expected, server, judge, budget=5.0, tags=("alpha", "beta"))
            assert config["base_url"] == normal_url(server.base_url)
            assert {request.headers["authorization"] for request in server.chat_requests} == {f"Bearer {MODELS_KEY}"}

            assert {task["outcome"] for task in submit()} == {"READY_FOR_REVIEW"}  # force: converted again
            assert len(server.chat_requests) == 6
    finally:
        service.close()
    stored = [json.loads(s) if isinstance(s, str) else s for (s,) in rows(pg_url, "SELECT settings FROM batches")]
    assert len(stored) == 2 and all(s["retry_errors"] is False and s["force"] is True for s in stored)


def test_retry_errors_decides_whether_a_batch_redoes_what_the_model_never_answered(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes], monkeypatch: pytest.MonkeyPatch) -> None:
    """A document that ended ERROR (the model never answered) is left as it ended, with no model call, by a later
    batch given ``--no-retry-errors`` (the API's ``"retry_errors": false``), and converted again by one that retries
    errors (the default): through ``extract run --queue`` and through the API, on a real worker."""
    from extractor.service.app import build_service
    from extractor.store import open_store
    from extractor.store.tokens import create_token
    from tests.support.api import bearer, finished, serving
    from tests.support.llm_server import Status

    answering = threading.Event()
    server = llm_server(lambda request, number: Reply(answer_for(request)) if answering.is_set() else Status(503))
    env = priced_env(tmp_path, server, pg_url, redis_url)
    processes(env).start("worker", "--concurrency", "2")
    queued, posted = write_batch(tmp_path / "docs", 2)  # one document for each way in

    def run(*more: str) -> dict[str, Any]:
        done = subprocess.run(extract_command("run", str(queued), "--model", "openai:scripted-model", "--retries", "0",
                                              "--format", "json", *more), env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        (outcome,) = json.loads(done.stdout)["outcomes"]
        return outcome

    assert run()["state"] == "ERROR"
    answering.set()
    calls = len(server.chat_requests)
    kept = run("--no-retry-errors")
    assert kept["state"] == "ERROR" and "converted before" in kept["cause"] and len(server.chat_requests) == calls
    assert run()["state"] == "READY_FOR_REVIEW" and len(server.chat_requests) == calls + 1

    answering.clear()
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # the service's "default" endpoint, as the worker's
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    store = open_store(pg_url)
    service = build_service(store, broker=redis_url, concurrency=2, model="openai:scripted-model")
    admin, submitter = (create_token(store.engine, f"{role}-token", role) for role in ("admin", "submitter"))
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=60) as client:
            def submit(**settings: Any) -> dict[str, Any]:
                changed = client.put("/v1/settings", headers=bearer(admin), json={
                    "model": "openai:scripted-model", "endpoint": "default", "retries": 0} | settings)
                assert changed.status_code == 200, changed.text
                sent = client.post("/v1/documents", headers=bearer(submitter),
                                   files=[("files", (posted.name, posted.read_bytes()))])
                return finished(client, submitter, sent.json()["documents"][0]["id"])

            assert submit()["outcome"] == "ERROR"
            answering.set()
            calls = len(server.chat_requests)
            kept = submit(retry_errors=False)
            assert kept["outcome"] == "ERROR" and "converted before" in kept["cause"], kept
            assert len(server.chat_requests) == calls
            assert submit(retry_errors=True)["outcome"] == "READY_FOR_REVIEW" and len(server.chat_requests) == calls + 1
    finally:
        service.close()


def test_two_workers_spend_one_budget_and_the_batch_stops_cleanly_and_resumes(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """``--max-cost`` with ``--queue``: every call of either worker reserves its most expensive case from the one
    budget in Redis; together they never pass it, the batch ends INTERRUPTED (exit 130) with the reason, and a rerun
    with a new budget converts the rest, none twice."""
    usage = (1000, 200)
    server = llm_server(lambda request, number: Reply(answer_for(request), usage=usage))
    env = priced_env(tmp_path, server, pg_url, redis_url, EXTRACT_MODEL="openai:metered-model")
    workers = processes(env)
    for _ in range(2):
        workers.start("worker", "--concurrency", "3")
    write_batch(tmp_path / "docs", 24)
    one_call = (usage[0] * 2.0 + usage[1] * 8.0) / 1e6
    budget = 12 * one_call  # the first call needs its prompt (as the run counts it, ~3,300 tokens) twice over

    stopped = subprocess.run(extract_command("run", str(tmp_path / "docs"), "--max-cost", f"{budget:.6f}",
                                             "--format", "json"), env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    summary = json.loads(stopped.stdout)
    done = summary["counts"].get("READY_FOR_REVIEW", 0)
    assert 0 < done < 24 and summary["counts"]["INTERRUPTED"] == 24 - done, summary["outcomes"][0]["cause"]
    assert "--max-cost" in summary["stopped"]
    calls = len(server.chat_requests)
    assert calls == done  # no call was refused after it was sent, none cut short
    assert calls * one_call <= budget + 1e-12  # the fleet together stayed within the budget
    (batch,) = [b for (b,) in rows(pg_url, "SELECT id FROM batches")]
    kept = redis.Redis.from_url(redis_url).hgetall(f"extract:budget:{batch}")
    assert float(kept[b"charged"]) == pytest.approx(calls * one_call) and abs(float(kept[b"reserved"])) < 1e-9
    assert kept[b"stopped"].decode().startswith("--max-cost")
    workers_used = {run_id for (run_id,) in rows(pg_url, "SELECT DISTINCT run_id FROM tasks WHERE run_id IS NOT NULL")}
    assert len(workers_used) == 2  # both workers spent from it

    resumed = subprocess.run(extract_command("run", str(tmp_path / "docs"), "--max-cost", "1", "--format", "json"),
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    outcomes = json.loads(resumed.stdout)["outcomes"]
    before = [o for o in outcomes if "before" in (o["cause"] or "")]  # done by the stopped batch: not converted again
    assert len(before) == done and {o["state"] for o in outcomes} <= {"READY_FOR_REVIEW", "SKIPPED"}, outcomes
    assert len(server.chat_requests) == 24, [(o["state"], o["cause"]) for o in outcomes]
    finals = final_runs_per_document(pg_url)
    assert len(finals) == 24 and set(finals.values()) == {1}
    assert scalar(pg_url, "SELECT COUNT(*) FROM document_runs WHERE state = 'PROCESSING'") == 0


def test_a_worker_holds_the_engines_of_what_it_converts_not_of_every_batch_it_saw(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    """1,000 batches that differ in their tags (and so their ids) share one engine; after ``idle_s`` without a
    document it is closed, and its worker run is recorded finished."""
    from extractor.queue.runner import Runner
    from extractor.queue.settings import BatchSettings
    from extractor.store import open_store, tasks

    server = llm_server(lambda request, number: Reply(answer_for(request)))
    store = open_store(f"sqlite:///{tmp_path / 'log.db'}")
    runner = Runner(store, concurrency=8, idle_s=2.0)
    settings = BatchSettings(model="openai:scripted-model", base_url=server.base_url)
    title, rest = (ROOT / "samples" / "en_purchase_approval.md").read_text(encoding="utf-8").split("\n", 1)
    try:
        futures = []
        for number in range(1000):
            batch_settings = settings.model_copy(update={"tags": (f"batch-{number}",)}).to_json()
            _, task_ids = tasks.add_batch(store.engine, batch_settings, "sam",
                                          [(f"doc-{number}.md", f"{title} {number}\n{rest}".encode())])
            futures += [runner.submit(task_id) for task_id in task_ids]
            assert runner.engines <= 1
        finished = [future.result(timeout=600) for future in futures]
        assert {task.outcome for task in finished if task is not None} == {"READY_FOR_REVIEW"}
        assert runner.engines == 1
        worker_runs = rows(store.url, "SELECT id, status FROM runs")
        assert len(worker_runs) == 1 and worker_runs[0][1] == "running"
        tags = {json.loads(t)[0] if isinstance(t, str) else t[0] for (t,) in rows(store.url,
                                                                                   "SELECT tags FROM document_runs")}
        assert len(tags) == 1000  # each batch's own tags, though one engine converted them all
        wait_for(lambda: runner.engines == 0, "the idle engine closed", timeout=60)
        assert rows(store.url, "SELECT status FROM runs") == [("finished",)]
    finally:
        runner.close()
        store.close()


MAX_PARAMETERS = 8
"""No function takes more than this many parameters besides an options object (``RunOptions`` and its kind)."""


def over_the_limit(root: Path) -> dict[str, int]:
    """``path:function`` -> its parameters, for every function of the package over ``MAX_PARAMETERS`` (``self``,
    ``cls``, ``*args``, ``**kwargs`` and one parameter annotated as an options object not counted)."""
    import ast

    found = {}
    for path in sorted((root / "extractor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            named = [a for a in arguments if a.arg not in ("self", "cls")]
            options = [a for a in named if a.annotation is not None and "Options" in ast.unparse(a.annotation)]
            count = len(named) - min(len(options), 1)
            if count > MAX_PARAMETERS:
                found[f"{path.relative_to(root)}:{node.name}"] = count
    return found


def test_no_function_takes_more_than_eight_parameters_besides_an_options_object(tmp_path: Path) -> None:
    found = over_the_limit(ROOT)
    assert not found, f"more than {MAX_PARAMETERS} parameters (group them in an options object): {found}"
    package = tmp_path / "extractor"  # the check can fail: nine parameters, and nine beside an options object
    package.mkdir()
    (package / "m.py").write_text("def f(a, b, c, d, e, f, g, h, i): ...\n"
                                  "def g(options: RunOptions, a, b, c, d, e, f, g, h): ...\n", encoding="utf-8")
    assert over_the_limit(tmp_path) == {"extractor/m.py:f": 9}



@dataclass(frozen=True)
class Window:
    first: Annotated[int, typer.Option(min=1, help="the first one")] = 1
    last: Annotated[int | None, typer.Option(help="the last one")] = None


@dataclass(frozen=True)
class Loud:
    loud: Annotated[bool, typer.Option()] = False


def test_a_command_takes_its_options_as_groups_and_its_line_and_help_show_them_one_by_one() -> None:
    """An option group (a dataclass of typer options) is spread into its options where the command declares it:
    the command line and ``--help`` show each, the function gets the group made of their values; two groups
    declaring one option are refused when the command is made."""
    from typer.testing import CliRunner

    from extractor.cli.app import App, Commands

    seen: list[Any] = []
    probe = App(cls=Commands, add_completion=False)

    @probe.command()
    def show(name: Annotated[str, typer.Argument()], window: Window = Window(), loud: bool = False) -> None:
        seen.append((name, window, loud))

    @probe.command()
    def other() -> None: ...

    runner = CliRunner()
    result = runner.invoke(probe, ["show", "x", "--last", "7", "--loud"])
    assert result.exit_code == 0, result.output
    assert seen == [("x", Window(first=1, last=7), True)]
    assert show.__name__ == "show" and "window" in show.__code__.co_varnames  # the function keeps its own signature
    refused = runner.invoke(probe, ["show", "x", "--first", "0"])
    assert refused.exit_code == 2 and "--first" in refused.output and len(seen) == 1
    shown = runner.invoke(probe, ["show", "--help"], env={"COLUMNS": "100"}).output
    assert shown.index("--first") < shown.index("--last") < shown.index("--loud") and "the last one" in shown

    with pytest.raises(TypeError, match="declared twice: loud"):
        @probe.command()
        def twice(again: Loud = Loud(), loud: bool = False) -> None: ...


def test_every_option_a_request_states_is_bounded() -> None:
    """A run's options and a batch's settings come from requests and from the broker: each number, text and
    collection has a limit, and a value past it (a megabyte of text, 10**18, 100,000 items) is refused at that field.
    A field added without a limit fails here."""
    import types
    import typing
    from enum import Enum

    from pydantic import ValidationError

    from extractor.queue.settings import BatchSettings

    huge = "a" * (1 << 20)
    past: dict[type, list[Any]] = {int: [10**18], float: [1e300], str: [huge],
                                   tuple: [("a",) * 100_000, (huge,)],
                                   dict: [{f"f{n}": "0" * 64 for n in range(100_000)}, {huge: "0" * 64}]}
    checked = []
    for model in (RunOptions, BatchSettings):
        for name, field in model.model_fields.items():
            kind = field.annotation
            if typing.get_origin(kind) in (typing.Union, types.UnionType):
                (kind,) = [k for k in typing.get_args(kind) if k is not type(None)]
            kind = typing.get_origin(kind) or kind
            if kind is bool or (isinstance(kind, type) and issubclass(kind, Enum)):
                continue  # a choice: nothing to bound
            assert kind in past, f"{model.__name__}.{name}: {field.annotation} has no case here"
            for value in past[kind]:
                with pytest.raises(ValidationError) as refused:
                    model.model_validate({"judge": "openai:judge-model", name: value})
                assert {problem["loc"][0] for problem in refused.value.errors()} == {name}, (name, str(value)[:40])
            checked.append(name)
    assert {"tags", "max_cost", "timeout", "ocr_lang", "contract_files", "contract_folder"} <= set(checked)
