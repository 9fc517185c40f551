"""A run's options (``extractor.options.RunOptions``) reach the engine the same way wherever the run is made: here,
through the queue to real ``extract worker`` processes (real redis-server, PostgreSQL, scripted model servers over
HTTP), and through the API; a batch's ``--max-cost`` is one budget for every worker; a worker's engines are those of
what it is converting, not of every batch it has seen.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
          "metered-model": {"input": 2.0, "cached_input": 0.5, "output": 8.0}}
JUDGE_KEY = "judge-secret-key-1234"


def priced_env(tmp_path: Path, server: ScriptedLLMServer, db: str, broker: str, **extra: str) -> dict[str, str]:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), "utf-8")
    return cli_env(server.base_url, db, EXTRACT_BROKER_URL=broker, EXTRACT_PRICES=str(prices),
                   EXTRACT_WORKER_PROCESSES="0", OPENAI_API_KEY="test-key", **extra)


def test_every_option_of_extract_run_reaches_the_engine_of_a_real_worker(
        llm_server: Callable[..., ScriptedLLMServer], redis_url: str, pg_url: str, tmp_path: Path,
        processes: Callable[[dict[str, str]], Processes]) -> None:
    """Each option of ``extract run`` is walked: given with ``--queue`` (a value other than its default where the
    model allows one), it is found where the worker's engine uses it (the worker run's recorded options, the
    requests the model servers received, the document runs, the batch's budget in Redis), or it is refused in
    one line. An option added to ``extract run`` without a row here fails this test."""
    server = llm_server(lambda request, number: Reply(answer_for(request), usage=(1000, 200)))
    judge = llm_server(lambda request, number: Reply(verdict(request), usage=(500, 20)))
    endpoints = tmp_path / "endpoints.toml"  # the operator's: the judge's server and the name of its key's variable
    endpoints.write_text(f'[endpoints.judges]\nurl = "{judge.base_url}"\nkey_env = "JUDGE_KEY"\n'
                         'models = ["judge-model"]\n', "utf-8")
    env = priced_env(tmp_path, server, pg_url, redis_url)
    processes(env).start("worker", "--concurrency", "2", "--endpoints", str(endpoints), JUDGE_KEY=JUDGE_KEY)
    docs = write_batch(tmp_path / "docs", 3)
    contracts = ROOT / "samples" / "contracts"  # looked in; the built-in contract of the name is the one used

    given: dict[str, tuple[str, ...]] = {  # the option -> what is given on the command line
        "contract": ("--contract", "work_procedure"), "prompt_version": ("--prompt-version", "v1"),
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

    (config,) = [json.loads(c) if isinstance(c, str) else c for (c,) in rows(
        pg_url, "SELECT config FROM runs WHERE command = 'extract worker'")]
    options = config["options"]  # what the worker's engine was given and used
    expected = RunOptions(model="openai:scripted-model", base_url=server.base_url, response_format="json_object",
                          timeout=45, retries=1, retry_budget=100, max_tokens=3000, max_input_tokens=50000,
                          max_output_tokens=20000, overlap=3, ocr_lang="rus+eng", judge="openai:judge-model",
                          judge_mode="observe", judge_threshold=0.7, judge_base_url=judge.base_url, judge_concurrency=3,
                          judge_queue=6, judge_timeout=30)  # the per-batch options come with each task, below
    assert options == expected.to_json()
    assert config["ocr_lang"] == "rus+eng" and config["base_url"] == normal_url(server.base_url)
    assert config["max_input_tokens"] == 50000 and config["max_output_tokens"] == 20000 and config["overlap"] == 3
    assert config["judge"]["mode"] == "observe" and config["judge"]["threshold"] == 0.7
    assert config["judge"]["concurrency"] == 3 and config["judge"]["queue"] == 6 and config["judge"]["timeout_s"] == 30
    bodies = [request.json for request in server.chat_requests]
    assert len(bodies) == 3 and all(b["max_tokens"] == 3000 and b["response_format"] == {"type": "json_object"}
                                    for b in bodies)
    assert {request.json["model"] for request in judge.chat_requests} == {"judge-model"}
    assert {request.headers["authorization"] for request in judge.chat_requests} == {f"Bearer {JUDGE_KEY}"}
    assert {tuple(json.loads(t) if isinstance(t, str) else t) for (t,) in rows(
        pg_url, "SELECT tags FROM document_runs")} == {("alpha", "beta")}
    (batch,) = [b for (b,) in rows(pg_url, "SELECT id FROM batches")]
    budget = redis.Redis.from_url(redis_url).hgetall(f"extract:budget:{batch}")
    spent = (3 * (1000 * 0.5 + 200 * 1.0) + 3 * (500 * 0.5 + 20 * 1.0)) / 1e6
    assert float(budget[b"limit"]) == 5.0 and float(budget[b"charged"]) == pytest.approx(spent)
    assert abs(float(budget[b"reserved"])) < 1e-9

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
OVER_THE_LIMIT = {
    "extractor/cli/evaluation.py:evaluate", "extractor/cli/evaluation.py:export_gold", "extractor/cli/judge.py:calibrate",
    "extractor/cli/judge.py:run_afterwards", "extractor/cli/review.py:review", "extractor/cli/review.py:approve",
    "extractor/cli/review.py:export", "extractor/cli/rules.py:calibrate", "extractor/cli/runs.py:runs",
    "extractor/cli/runs.py:stats", "extractor/cli/runs.py:compare", "extractor/cli/service.py:worker",
    "extractor/compare.py:compare", "extractor/engine/calls.py:__init__", "extractor/evaluation/evaluate.py:score_document",
    "extractor/providers/openai_compat.py:__init__", "extractor/review/decide.py:approve_document",
    "extractor/review/queue.py:waiting", "extractor/rules/__init__.py:rule", "extractor/rules/declared.py:card",
    "extractor/rules/generic.py:generic_rule", "extractor/store/approved.py:approve",
    "extractor/store/claims.py:claim_document", "extractor/store/claims.py:claim", "extractor/store/claims.py:_decide_existing",
    "extractor/store/claims.py:_take_over",
    "extractor/store/evaluations.py:save_evaluation", "extractor/store/queries.py:find_runs",
    "extractor/store/runlog.py:find_runs", "extractor/web/router.py:_edit_page",
}
"""Functions that took more when the limit came (each to be given an options object); the list only shrinks."""


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
    new = sorted(set(found) - OVER_THE_LIMIT)
    assert not new, f"more than {MAX_PARAMETERS} parameters (group them in an options object): {new}"
    fixed = sorted(OVER_THE_LIMIT - set(found))
    assert not fixed, f"no longer over the limit, take them off OVER_THE_LIMIT: {fixed}"
    assert "extractor/cli/run.py:run" not in found and "extractor/cli/run.py:_run" not in found
    package = tmp_path / "extractor"  # the check can fail: nine parameters, and nine beside an options object
    package.mkdir()
    (package / "m.py").write_text("def f(a, b, c, d, e, f, g, h, i): ...\n"
                                  "def g(options: RunOptions, a, b, c, d, e, f, g, h): ...\n", encoding="utf-8")
    assert over_the_limit(tmp_path) == {"extractor/m.py:f": 9}
