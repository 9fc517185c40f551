"""Cost: tokens as servers report them (cached ones too), the price table, cost in run summaries and
``extract runs``, and ``--max-cost`` stopping a run cleanly, resumably. Runs go through the CLI against the
scripted HTTP server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from extractor.cli import app
from extractor.errors import InputError
from extractor.prices import BUILT_IN, PRICES_ENV, Price, Spend, price_for
from extractor.store import open_store
from extractor.windows.plan import MESSAGE_OVERHEAD_TOKENS
from tests.support.corpus import GOOD, write_documents
from tests.support.llm_server import Action, Reply

ROOT = Path(__file__).resolve().parents[1]
USAGE = (1_000, 200)
CACHED = 600
PRICES = {"good": {"input": 2.0, "cached_input": 0.5, "output": 8.0, "as_of": "2026-12-01", "source": "test"}}
ONE_CALL = (400 * 2.0 + 600 * 0.5 + 200 * 8.0) / 1_000_000  # uncached input, cached input, output


def test_a_call_costs_uncached_cached_and_output_tokens_at_their_prices() -> None:
    price = Price("m", input=2.0, output=8.0, cached_input=0.5)
    assert price.cost(1_000, 600, 200) == pytest.approx(ONE_CALL)
    assert Price("m", input=2.0, output=8.0).cost(1_000, 600, 200) == pytest.approx((1_000 * 2.0 + 200 * 8.0) / 1e6)
    assert price_for("gpt-4o-mini-2024-07-18") is BUILT_IN["gpt-4o-mini"]
    assert price_for("openai:gpt-4.1") is BUILT_IN["gpt-4.1"] and price_for("gpt-4o") is BUILT_IN["gpt-4o"]
    assert price_for("some-local-model") is None and all(p.as_of and p.source for p in BUILT_IN.values())
    spend = Spend()
    spend.add("gpt-4o", 1_000, None, 100)
    assert spend.known == pytest.approx((1_000 * 2.5 + 100 * 10.0) / 1e6)
    spend.add("mystery", 10, None, 10)
    assert spend.known is None and spend.unpriced == {"mystery"}  # unknown, never zero


def test_a_price_file_overrides_and_a_bad_one_is_refused_naming_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"gpt-4o": {"input": 1.0, "output": 2.0}}), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    assert price_for("gpt-4o") == Price("gpt-4o", 1.0, 2.0, None, "", str(prices))
    for entry, problem in (({"input": "cheap", "output": 2.0}, "gpt-4o.input: Input should be a valid number"),
                           ({"input": 1.0}, "gpt-4o.output: missing"),
                           ({"input": 1.0, "output": -2}, "gpt-4o.output: Input should be greater than or equal to 0"),
                           ({"input": 1.0, "output": 2, "per": "1K"}, "gpt-4o.per: unknown key"),
                           ({"input": 1.0, "ouput": 2}, "gpt-4o.ouput: unknown key (and 1 more)")):  # the typo first
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"gpt-4o": entry}), "utf-8")
        monkeypatch.setenv(PRICES_ENV, str(bad))
        with pytest.raises(InputError) as refused:
            price_for("gpt-4o")
        assert str(refused.value) == f"{bad}: {problem}"


def test_a_price_file_is_read_again_when_it_changes_and_unchanged_costs_no_validation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running service prices with the file as it is now; a fresh process reading an unchanged file
    (``extract runs``) takes the entries validated before and does not load pydantic."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"gpt-4o": {"input": 1.0, "output": 2.0}}), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    assert price_for("gpt-4o").output == 2.0  # type: ignore[union-attr]
    prices.write_text(json.dumps({"gpt-4o": {"input": 1.0, "output": 3.0, "source": "our contract"}}), "utf-8")
    changed = price_for("gpt-4o")
    assert changed is not None and (changed.output, changed.source) == (3.0, "our contract")
    code = ("import sys; from extractor.prices import price_for; price = price_for('gpt-4o'); "
            "print(price.output, 'pydantic' in sys.modules)")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                           cwd=ROOT, timeout=120)
    assert fresh.returncode == 0 and fresh.stdout.split() == ["3.0", "False"], fresh.stdout + fresh.stderr


def test_the_built_in_prices_are_those_of_genai_prices() -> None:
    """The built-in table against pydantic's maintained one (genai-prices, offline: its data ships in the
    package). A price that changed upstream fails here: update the entry, its source and its date."""
    from genai_prices import Usage, calc_price

    for name, price in BUILT_IN.items():
        found = calc_price(Usage(input_tokens=1, output_tokens=1), name, provider_id="openai").model_price
        assert (float(found.input_mtok), float(found.output_mtok)) == (price.input, price.output), name
        cached = None if found.cache_read_mtok is None else float(found.cache_read_mtok)
        assert cached == price.cached_input, name


def answer(body: dict[str, Any] | None, _call: int) -> Action:
    return Reply(json.dumps(GOOD), usage=USAGE, cached_tokens=CACHED)


def extract(db: str, server: Any, paths: list[Path], model: str, *extra: str) -> Any:
    return CliRunner().invoke(app, ["run", *map(str, paths), "--model", f"openai:{model}", "--base-url",
                                    server.base_url, "--database", db, "--concurrency", "1", "--format", "json", *extra])


def test_runs_and_summaries_show_cost_and_unknown_prices_as_unknown(tmp_path: Path, llm_server: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    db = f"sqlite:///{tmp_path / 'log.db'}"
    server = llm_server(answer)
    paths = write_documents(tmp_path / "docs", range(3))
    result = extract(db, server, paths, "good")
    summary = json.loads(result.output)
    assert summary["cost"]["cost_usd"] == pytest.approx(3 * ONE_CALL)
    assert summary["cost"]["cached_tokens"] == 3 * CACHED and summary["cost"]["per_document_usd"] == pytest.approx(ONE_CALL)
    store = open_store(db)
    attempts = store.attempts_for(store.document_runs_for(summary["run_id"])[0].id)
    store.close()
    assert [(a.prompt_tokens, a.cached_tokens, a.completion_tokens) for a in attempts] == [(1_000, CACHED, 200)]

    unknown = json.loads(extract(db, server, paths, "unpriced").output)
    assert unknown["cost"]["cost_usd"] is None and unknown["cost"]["models_without_price"] == ["unpriced"]
    text = CliRunner().invoke(app, ["run", *map(str, paths), "--model", "openai:unpriced", "--base-url", server.base_url,
                                    "--database", db, "--force"])
    assert "cost unknown (no price for unpriced (EXTRACT_PRICES))" in text.output

    listed = {run["id"]: run for run in json.loads(CliRunner().invoke(app, ["runs", "--database", db, "--format",
                                                                            "json"]).output)}
    assert listed[summary["run_id"]]["cost"]["cost_usd"] == pytest.approx(3 * ONE_CALL)
    assert listed[unknown["run_id"]]["cost"]["cost_usd"] is None
    table = CliRunner().invoke(app, ["runs", "--database", db]).output
    assert f"${3 * ONE_CALL:.4f}" in table and "unknown" in table


def test_max_cost_stops_cleanly_before_the_budget_and_a_rerun_resumes(tmp_path: Path, llm_server: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    db = f"sqlite:///{tmp_path / 'log.db'}"
    server = llm_server(answer)
    paths = write_documents(tmp_path / "docs", range(10))
    cheap_output = {"good": {"input": 2.0, "cached_input": 0.5, "output": 0.1}}
    prices.write_text(json.dumps(cheap_output), "utf-8")
    one_call = (400 * 2.0 + 600 * 0.5 + 200 * 0.1) / 1e6
    # before any answer a call is estimated at its counted prompt tokens, in and out; room for two more answers
    budget = first_estimate(paths[0], server.base_url, 2.0 + 0.1) + 2.5 * one_call
    result = extract(db, server, paths, "good", "--max-cost", str(budget))
    assert result.exit_code == 130, result.output
    summary = json.loads(result.output)
    done = summary["counts"].get("READY_FOR_REVIEW", 0)
    assert 0 < done < 10 and summary["counts"]["INTERRUPTED"] == 10 - done
    assert summary["cost"]["cost_usd"] == pytest.approx(done * one_call) and done * one_call <= budget
    assert "--max-cost" in summary["stopped"]
    assert len(server.chat_requests) == done  # no call was started and cut short
    again = extract(db, server, paths, "good")
    resumed = json.loads(again.output)
    assert again.exit_code == 0 and resumed["counts"] == {"READY_FOR_REVIEW": 10 - done, "SKIPPED": done}
    assert len(server.chat_requests) == 10
    refused = CliRunner().invoke(app, ["run", str(paths[0]), "--model", "openai:unpriced", "--base-url",
                                       server.base_url, "--database", db, "--max-cost", "1"])
    assert refused.exit_code == 2 and "--max-cost needs the price of unpriced" in refused.stderr


def first_estimate(path: Path, base_url: str, rate: float) -> float:
    """What the budget needs for the first call of ``path``: its prompt as the run counts it (with each message's chat
    markup), in and out."""
    from extractor.contracts import get_contract
    from extractor.generate.prompt import load_prompt, render_request
    from extractor.ingest import load
    from extractor.providers import from_string
    from extractor.segment import segment
    from extractor.windows.tokens import counter_for

    contract = get_contract("work_procedure")
    request = render_request(load_prompt(contract), contract, segment(load(path)))
    counter = counter_for(from_string("openai:good", base_url=base_url))
    return sum(counter.count(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in request.messages) * rate / 1e6


def test_eval_and_compare_show_cost_per_document_and_per_correct_field(tmp_path: Path, llm_server: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_evaluation import numbered_gold

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    db = f"sqlite:///{tmp_path / 'log.db'}"
    server = llm_server(answer)
    paths = write_documents(tmp_path / "docs", range(3))
    gold = numbered_gold(tmp_path, range(3))
    first = json.loads(extract(db, server, paths, "good").output)["run_id"]
    second = json.loads(extract(db, server, paths, "good", "--force").output)["run_id"]
    scored = json.loads(CliRunner().invoke(app, ["eval", first, "--gold", str(gold), "--database", db,
                                                 "--format", "json"]).output)
    right = scored["overall"]["counts"]["normalised"]
    cost = scored["summary"]["cost"]
    assert right == 54 and cost["cost_usd"] == pytest.approx(3 * ONE_CALL)
    assert cost["per_document_usd"] == pytest.approx(ONE_CALL) and cost["per_correct_field_usd"] == pytest.approx(
        3 * ONE_CALL / 54)
    compared = json.loads(CliRunner().invoke(app, ["compare", first, second, "--gold", str(gold), "--database", db,
                                                   "--format", "json"]).output)
    assert compared["accuracy"]["cost"]["candidate"]["per_correct_field_usd"] == pytest.approx(3 * ONE_CALL / 54)
    assert compared["cost"]["baseline"]["per_document_usd"] == pytest.approx(ONE_CALL)
    plain = json.loads(CliRunner().invoke(app, ["compare", first, second, "--database", db, "--format", "json"]).output)
    assert plain["cost"]["candidate"]["cost_usd"] == pytest.approx(3 * ONE_CALL) and plain["accuracy"] is None
    text = CliRunner().invoke(app, ["eval", first, "--gold", str(gold), "--database", db, "--no-save"]).output
    assert "per correct field" in text and f"${ONE_CALL:.4f} per document" in text


def test_a_model_running_in_process_costs_no_api_money_and_an_unknown_remote_one_stays_unknown(tmp_path: Path) -> None:
    """A run of the local model (provider ``local``) is 'local model, no API price', not 'no price for
    gemma...gguf (EXTRACT_PRICES)'; beside a priced remote judge, only the judge's calls are priced; a remote model
    without a price stays unknown (the slow real run: tests/test_pipeline.py::test_local_bundled_model_end_to_end)."""
    from extractor.vocab import DocumentState
    from tests.support.runlog import make_document, record, run_config

    db = f"sqlite:///{tmp_path / 'log.db'}"
    store = open_store(db)
    local_name = "gemma-3-270m-q4_k_m.gguf"
    configs = {"local": run_config(model=local_name, provider="local"),
               "judged": run_config(model=local_name, provider="local", judge_model="openai:gpt-4o"),
               "remote": run_config(model=local_name, provider="openai")}  # a server answering as a .gguf: unknown
    runs = {}
    for number, (name, config) in enumerate(configs.items()):
        run_id = runs[name] = store.start_run(config)
        document_run_id = store.claim_document(run_id, config.config_hash, make_document(number), f"{name}.txt")[1] \
            .document_run_id
        final = record(store, document_run_id, model=local_name, prompt_tokens=1_000, completion_tokens=200)
        if name == "judged":
            record(store, document_run_id, 2, kind="judge", model="gpt-4o-2024-08-06", prompt_tokens=1_000,
                   cached_tokens=600, completion_tokens=100)
        store.finish_document(document_run_id, DocumentState.READY_FOR_REVIEW, final_attempt_id=final)
    store.close()

    listed = {run["id"]: run["cost"] for run in json.loads(
        CliRunner().invoke(app, ["runs", "--database", db, "--format", "json"]).output)}
    assert listed[runs["local"]]["cost_usd"] == 0.0
    assert listed[runs["local"]]["calls_in_process"] == 1 and listed[runs["local"]]["models_without_price"] == []
    judge_cost = BUILT_IN["gpt-4o"].cost(1_000, 600, 100)
    assert listed[runs["judged"]]["cost_usd"] == pytest.approx(judge_cost)
    assert listed[runs["judged"]]["calls_in_process"] == 1 and listed[runs["judged"]]["calls"] == 2
    assert listed[runs["remote"]]["cost_usd"] is None and listed[runs["remote"]]["models_without_price"] == [local_name]

    table = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["runs", "--database", db]).output
    cost_cells = {cells[1]: cells[-3] for cells in ([c.strip() for c in line.split("│")]
                                                     for line in table.splitlines() if line.startswith("│"))}
    assert cost_cells[runs["local"][:12]] == "local" and cost_cells[runs["remote"][:12]] == "unknown"
    assert cost_cells[runs["judged"][:12]] == f"${judge_cost:.4f}"
    shown = " ".join(CliRunner(env={"COLUMNS": "200"}).invoke(app, ["show", "local.txt", "--database", db]).output.split())
    assert "1000+200 tokens, local model, no API price" in shown and "unknown" not in shown
    spend = Spend()
    spend.add(local_name, 100, None, 10, local=True)
    spend.add("gpt-4o", 1_000, 600, 100)
    from extractor.prices import spend_text

    assert spend_text(spend, 1) == f"${judge_cost:.4f} (${judge_cost:.4f} per document; 1 local-model call(s) at no API price)"


def test_judge_calls_record_their_tokens_count_in_the_cost_and_in_max_cost(tmp_path: Path, llm_server: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from extractor.providers import from_string
    from extractor.windows.tokens import counter_for
    from tests.test_judge_flow import verdict

    prices = tmp_path / "prices.json"  # generation free: whatever stops the run is the judge's spending
    prices.write_text(json.dumps({"free": {"input": 0, "output": 0},
                                  "judge": {"input": 3.0, "cached_input": 1.0, "output": 12.0}}), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    usage = {"prompt": 0}
    server = llm_server(answer)
    judge = llm_server(lambda request, number: Reply(verdict(request), usage=(usage["prompt"], 10), cached_tokens=20))
    paths = write_documents(tmp_path / "docs", range(10))
    judged = ("--judge", "openai:judge", "--judge-base-url", judge.base_url, "--judge-concurrency", "1")
    # a judge request's prompt as the run counts it: the first judge call is estimated at it, in and out
    assert extract(f"sqlite:///{tmp_path / 'probe.db'}", server, paths[:1], "free", *judged).exit_code == 0
    counter = counter_for(from_string("openai:free", base_url=server.base_url))
    prompt = sum(counter.count(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in judge.chat_requests[0].json["messages"])
    usage["prompt"], probed = prompt, len(judge.chat_requests)  # the server reports what the run counts
    judge_call = ((prompt - 20) * 3.0 + 20 * 1.0 + 10 * 12.0) / 1e6
    budget = prompt * (3.0 + 12.0) / 1e6  # the first judge call's estimate: a few calls fit, not ten

    db = f"sqlite:///{tmp_path / 'log.db'}"
    result = extract(db, server, paths, "free", *judged, "--max-cost", str(budget))
    assert result.exit_code == 130, result.output
    summary = json.loads(result.output)
    done = summary["counts"].get("READY_FOR_REVIEW", 0)
    assert 0 < done < 10 and summary["counts"]["INTERRUPTED"] == 10 - done and "--max-cost" in summary["stopped"]
    calls = len(judge.chat_requests) - probed
    assert calls == done  # a judge call refused by the budget was never sent
    assert summary["cost"]["cost_usd"] == pytest.approx(calls * judge_call) and calls * judge_call <= budget
    with open_store(db) as store:
        recorded = [(a.prompt_tokens, a.cached_tokens, a.completion_tokens)
                    for run in store.document_runs_for(summary["run_id"]) for a in store.attempts_for(run.id)
                    if a.kind == "judge" and a.raw_response is not None]
    assert recorded == [(prompt, 20, 10)] * calls
    again = extract(db, server, paths, "free", *judged)
    resumed = json.loads(again.output)
    assert again.exit_code == 0, again.output
    assert resumed["counts"] == {"READY_FOR_REVIEW": 10 - done, "SKIPPED": done}
    unpriced = CliRunner().invoke(app, ["run", str(paths[0]), "--model", "openai:free", "--base-url", server.base_url,
                                        "--judge", "openai:mystery", "--judge-base-url", judge.base_url, "--database",
                                        db, "--max-cost", "1", "--force"])
    assert unpriced.exit_code == 2 and "--max-cost needs the price of the judge's model mystery" in unpriced.stderr


NEWLINES = 40_000


def test_a_server_that_ignores_the_output_limit_stops_the_run_at_its_first_answer_naming_the_overspend(
        tmp_path: Path, llm_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call goes out with an output limit the rest of the budget pays for; a server that answers valid JSON
    followed by 40,000 newlines (as JSON mode may) and bills them all is the one way past ``--max-cost``: the run
    stops at that answer, names the overspend, and spends nothing more."""
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), "utf-8")
    monkeypatch.setenv(PRICES_ENV, str(prices))
    prompt = 1_000
    billed = 150 + NEWLINES  # the JSON, then one token per newline

    def rambling(request: dict[str, Any] | None, number: int) -> Action:
        return Reply(json.dumps(GOOD) + "\n" * NEWLINES, usage=(prompt, billed))

    server = llm_server(rambling)
    paths = write_documents(tmp_path / "docs", range(6))
    budget = 0.05
    result = extract(f"sqlite:///{tmp_path / 'log.db'}", server, paths, "good", "--max-cost", str(budget),
                     "--concurrency", "2")
    assert result.exit_code == 130, result.output
    summary = json.loads(result.output)
    sent = [request.json for request in server.chat_requests]
    # every call was sent with an output limit the budget could pay for, prompt included (as the run counts it)
    for body in sent:
        assert body["max_tokens"] * 8.0 / 1e6 <= budget, body["max_tokens"]
    first_call = (prompt * 2.0 + billed * 8.0) / 1e6
    assert first_call > budget  # the server's bill alone passes the budget: the documented case
    assert "--max-cost" in summary["stopped"] and f"billed {billed} answer tokens" in summary["stopped"]
    assert "overspend" in summary["stopped"] and f"output limit of {sent[0]['max_tokens']}" in summary["stopped"]
    # the run stopped at the first such answer: at most the calls already under way then (two slots) were sent
    assert 1 <= len(sent) <= 2 and summary["counts"]["INTERRUPTED"] >= len(paths) - 2
    overspend = len(sent) * first_call - budget
    assert summary["cost"]["cost_usd"] == pytest.approx(len(sent) * first_call)
    assert summary["cost"]["cost_usd"] <= budget + overspend
    again = extract(f"sqlite:///{tmp_path / 'log.db'}", server, paths[:1], "good", "--max-cost", "0.000001", "--force")
    refused = json.loads(again.output)
    assert again.exit_code == 130 and "the next call needs" in refused["stopped"]  # a budget too small sends nothing
    assert len(server.chat_requests) == len(sent)
