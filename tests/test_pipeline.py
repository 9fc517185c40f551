"""``extract run`` end to end: real HTTP to a scripted model server, a real database, real files."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from extractor.contracts import get_contract
from extractor.engine import AdaptiveLimit, Engine, RunSettings, RunSummary
from extractor.options import RunOptions
from extractor.providers import ProviderSettings, from_string
from extractor.store import Store, open_store
from extractor.vocab import ExitCode
from tests.support.batch import answer_for, write_batch
from tests.support.extras import needs_local_extra
from tests.support.llm_server import Hang, Reply, ScriptedLLMServer, Status

ROOT = Path(__file__).resolve().parents[1]
GOOD_EN = (ROOT / "samples/expected/en_purchase_approval.candidate.json").read_text(encoding="utf-8")
FAST = ProviderSettings(timeout_s=20.0, max_transport_retries=3, retry_budget_s=20, backoff_base_s=0.05,
                        backoff_max_s=0.2)


@pytest.fixture
def en_doc(tmp_path: Path) -> Path:
    target = tmp_path / "docs" / "purchase.md"
    target.parent.mkdir()
    shutil.copy(ROOT / "samples/en_purchase_approval.md", target)
    return target


def run(paths: list[Path | str], server: ScriptedLLMServer, db_url: str, *, force: bool = False,
        settings: ProviderSettings = FAST, concurrency: int = 2, retry_errors: bool = True) -> tuple[RunSummary, Store]:
    store = open_store(db_url)
    limit = AdaptiveLimit(concurrency)
    provider = from_string("openai:scripted", base_url=server.base_url, settings=settings,
                           on_rate_limit=limit.on_rate_limit)
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"), concurrency=concurrency,
                                                 options=RunOptions(force=force, retry_errors=retry_errors)), limit=limit)
    return asyncio.run(engine.run([str(p) for p in paths])), store


def only(summary: RunSummary) -> Any:
    assert len(summary.outcomes) == 1, summary.to_json()
    return summary.outcomes[0]


def attempts(store: Store, summary: RunSummary) -> list[Any]:
    return store.attempts_for(only(summary).document_run_id)


def test_pass_on_first_try(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    server = llm_server([Reply(GOOD_EN, usage=(900, 400))])
    summary, store = run([en_doc], server, db_url)
    outcome = only(summary)
    assert outcome.state == "READY_FOR_REVIEW" and outcome.cause is None and outcome.tokens == 1300
    [attempt] = attempts(store, summary)
    assert attempt.kind == "generate" and attempt.outcome == "passed" and attempt.raw_response == GOOD_EN
    assert attempt.parsed == json.loads(GOOD_EN) and attempt.mode == "json_schema"
    assert attempt.prompt_tokens == 900 and attempt.completion_tokens == 400 and attempt.latency_ms > 0
    assert attempt.request["messages"][0]["role"] == "system" and attempt.request_hash
    assert {s["state"] for s in attempt.sentences} <= {"MAPPED", "UNMAPPED", "EXCLUDED"}
    run_info = store.get_run(summary.run_id)
    assert run_info.status == "finished" and run_info.counts == {"READY_FOR_REVIEW": 1}
    assert run_info.validator_version and run_info.segmenter.startswith("extractor-seg/")
    assert run_info.prompt_version == "v1" and run_info.model == "scripted" and run_info.provider == "openai"
    assert store.integrity_check() == []


def test_fail_then_repaired_and_repair_request_carries_the_findings(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    broken = json.loads(GOOD_EN)
    broken["evidence"][5]["sourceExcerpt"] = "The budget owner approves every request."  # paraphrase
    broken["processSteps"][2]["actorId"] = "approver"
    broken["sentenceCoverage"] = [c for c in broken["sentenceCoverage"] if c["sentenceId"] != "s18"]
    first = json.dumps(broken)
    server = llm_server([Reply(first), Reply(GOOD_EN)])
    summary, store = run([en_doc], server, db_url)
    assert only(summary).state == "READY_FOR_REVIEW"
    first_attempt, repair = attempts(store, summary)
    assert (first_attempt.kind, first_attempt.outcome, repair.kind, repair.outcome) == (
        "generate", "failed", "repair", "passed")
    assert {f["rule_id"] for f in first_attempt.findings} >= {"EVIDENCE_NOT_IN_SOURCE", "ACTOR_UNKNOWN",
                                                              "SENTENCE_NOT_ACCOUNTED"}
    messages = server.chat_requests[1].json["messages"]
    assert messages[:2] == server.chat_requests[0].json["messages"]  # the original request, unchanged
    assert messages[2] == {"role": "assistant", "content": first}  # the first raw answer
    repair_text = messages[3]["content"]
    assert "ACTOR_UNKNOWN at $.processSteps[2].actorId" in repair_text
    assert "EVIDENCE_NOT_IN_SOURCE at $.evidence[5].sourceExcerpt" in repair_text
    assert "nearest source sentence [s10]" in repair_text
    assert "The budget owner approves or rejects the request within three business days." in repair_text
    assert "[s18] Questions go to the finance team." in repair_text  # the unaccounted sentence


def test_fail_twice_goes_to_manual_review_with_both_attempts(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    bad = json.loads(GOOD_EN)
    bad["rules"].append("Every purchase needs the CFO's signature.")  # invented, no evidence
    server = llm_server([Reply(json.dumps(bad)), Reply(json.dumps(bad))])
    summary, store = run([en_doc], server, db_url)
    outcome = only(summary)
    assert outcome.state == "MANUAL_REVIEW" and "after repair" in outcome.cause
    assert "VALUE_WITHOUT_EVIDENCE" in outcome.rule_ids
    assert [a.outcome for a in attempts(store, summary)] == ["failed", "failed"]
    assert len(server.chat_requests) == 2


def test_unparseable_twice_is_kept_raw_and_routed_to_a_person(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    server = llm_server([Reply("Sure! Here is the JSON you asked for:"), Reply('{"documentPurpose": "Make every')])
    summary, store = run([en_doc], server, db_url)
    outcome = only(summary)
    assert outcome.state == "MANUAL_REVIEW" and outcome.cause == "unparseable twice"
    first, second = attempts(store, summary)
    assert first.raw_response == "Sure! Here is the JSON you asked for:" and first.parsed is None
    assert second.raw_response == '{"documentPurpose": "Make every' and second.outcome == "unparseable"
    assert [f["rule_id"] for f in second.findings] == ["OUTPUT_NOT_JSON"]


def test_timeout_then_success_is_retried_and_recorded(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    server = llm_server([Hang(60), Reply(GOOD_EN)])
    summary, store = run([en_doc], server, db_url, settings=replace(FAST, timeout_s=5.0))
    assert only(summary).state == "READY_FOR_REVIEW"
    [attempt] = attempts(store, summary)
    assert [t["outcome"] for t in attempt.transport] == ["timeout", "ok"]


def test_429_with_retry_after_is_honoured(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path,
                                          db_url: str) -> None:
    server = llm_server([Status(429, headers={"Retry-After": "1"}), Reply(GOOD_EN)])
    summary, store = run([en_doc], server, db_url)
    assert only(summary).state == "READY_FOR_REVIEW"
    [attempt] = attempts(store, summary)
    assert [t["outcome"] for t in attempt.transport] == ["http_429", "ok"]
    assert attempt.transport[0]["wait_s"] >= 1.0


def test_500s_until_error_with_cause(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    server = llm_server([Status(500)] * 4)
    summary, store = run([en_doc], server, db_url)
    outcome = only(summary)
    assert outcome.state == "ERROR" and "HTTP 500" in outcome.cause and "4 attempts" in outcome.cause
    [attempt] = attempts(store, summary)
    assert attempt.outcome == "transport_error" and attempt.raw_response is None
    assert [t["outcome"] for t in attempt.transport] == ["http_500"] * 4
    assert store.document_runs_for(summary.run_id)[0].cause == outcome.cause


def test_warning_marked_by_the_contract_needs_a_person(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    swapped = json.loads(GOOD_EN)
    swapped["processSteps"][0]["order"], swapped["processSteps"][1]["order"] = 2, 1
    server = llm_server([Reply(json.dumps(swapped))])
    summary, store = run([en_doc], server, db_url)
    outcome = only(summary)
    assert outcome.state == "MANUAL_REVIEW" and "STEP_ORDER_INVERTED" in outcome.cause
    assert store.document_runs_for(summary.run_id)[0].needs_person == ["STEP_ORDER_INVERTED"]
    assert len(server.chat_requests) == 1  # a warning is not an error: no repair call


def test_never_more_than_two_generation_calls(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path,
                                              db_url: str) -> None:
    server = llm_server(lambda request, number: Reply('{"not": "the contract"}'))
    summary, store = run([en_doc], server, db_url)
    assert only(summary).state == "MANUAL_REVIEW"
    assert len(server.chat_requests) == 2 and len(attempts(store, summary)) == 2


def test_rerun_skips_finished_documents_and_force_redoes_them(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    server = llm_server(lambda request, number: Reply(GOOD_EN))
    first, _ = run([en_doc], server, db_url)
    again, _ = run([en_doc], server, db_url)
    assert only(first).state == "READY_FOR_REVIEW" and only(again).state == "SKIPPED"
    assert len(server.chat_requests) == 1
    forced, store = run([en_doc], server, db_url, force=True)
    assert only(forced).state == "READY_FOR_REVIEW" and len(server.chat_requests) == 2
    en_doc.write_text(en_doc.read_text(encoding="utf-8") + "\nA new closing sentence.\n", encoding="utf-8")
    changed, _ = run([en_doc], server, db_url)  # new content hash: not skipped, and the old answer misses s19
    assert only(changed).state == "MANUAL_REVIEW" and only(changed).rule_ids == ("SENTENCE_NOT_ACCOUNTED",)
    assert len(server.chat_requests) == 4
    assert store.integrity_check() == []


def test_a_rerun_retries_documents_that_ended_error_and_says_so(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    down = llm_server([Status(500)] * 4)
    failed, store = run([en_doc], down, db_url)
    assert only(failed).state == "ERROR"

    kept, _ = run([en_doc], down, db_url, retry_errors=False)  # --no-retry-errors: skipped, and why
    assert only(kept).state == "SKIPPED" and only(kept).skip == "done" and only(kept).other_run == failed.run_id
    assert only(kept).cause == (f"ended ERROR in run {failed.run_id} (document run {only(failed).document_run_id}); "
                                "--retry-errors tries it again")

    up = llm_server(lambda request, number: Reply(GOOD_EN))
    retried, _ = run([en_doc], up, db_url)  # the default: the model was never heard, so try again
    assert only(retried).state == "READY_FOR_REVIEW" and only(retried).retried and retried.retried_errors == 1
    assert retried.to_json()["retried_errors"] == 1 and len(up.chat_requests) == 1
    history = sorted((r.run_id, r.state) for r in store.find_document_runs() if r.path == str(en_doc))
    assert sorted(state for _, state in history) == ["ERROR", "READY_FOR_REVIEW"]  # the ERROR run stays on record
    again, _ = run([en_doc], up, db_url)
    assert only(again).state == "SKIPPED" and only(again).other_run == retried.run_id and not only(again).retried
    assert again.skipped_because() == [("done", retried.run_id, 1)]
    assert store.integrity_check() == []


def test_one_bad_file_never_stops_the_batch(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path,
                                            db_url: str) -> None:
    (en_doc.parent / "broken.txt").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    (en_doc.parent / "empty.md").write_text("  \n", encoding="utf-8")
    server = llm_server(lambda request, number: Reply(GOOD_EN))
    summary, _ = run([en_doc.parent, en_doc.parent / "missing.txt"], server, db_url)
    states = {Path(o.path).name: (o.state, o.cause) for o in summary.outcomes}
    assert states["purchase.md"][0] == "READY_FOR_REVIEW"
    assert states["broken.txt"][0] == "INPUT_ERROR" and "binary" in states["broken.txt"][1]
    assert states["empty.md"][0] == "INPUT_ERROR" and "empty" in states["empty.md"][1]
    assert states["missing.txt"][0] == "INPUT_ERROR"
    assert summary.counts["INPUT_ERROR"] == 3


# ---------------------------------------------------------------- through the command line


def extract(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


def test_cli_run_json_summary_and_exit_codes(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path,
                                             tmp_path: Path, db_url: str) -> None:
    server = llm_server(lambda request, number: Reply(GOOD_EN))
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "EXTRACT_DATABASE_URL": db_url}
    env.pop("OPENAI_API_KEY", None)
    result = extract("run", str(en_doc), "--model", "openai:scripted", "--format", "json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["counts"] == {"READY_FOR_REVIEW": 1} and summary["tokens"] == 15
    (en_doc.parent / "junk.pdf").write_bytes(b"%PDF-1.4 broken")
    result = extract("run", str(en_doc.parent), "--model", "openai:scripted", "--format", "json", env=env,
                     cwd=tmp_path)
    summary = json.loads(result.stdout)
    assert result.returncode == 2 and summary["counts"] == {"INPUT_ERROR": 1, "SKIPPED": 1}


def test_cli_refuses_a_database_from_the_future(tmp_path: Path, en_doc: Path) -> None:
    url = f"sqlite:///{tmp_path}/future.db"
    open_store(url).close()
    import sqlite3

    with sqlite3.connect(tmp_path / "future.db") as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0999'")
    env = {**os.environ, "EXTRACT_DATABASE_URL": url, "OPENAI_BASE_URL": "http://127.0.0.1:9"}
    result = extract("run", str(en_doc), "--model", "openai:x", env=env, cwd=tmp_path)
    assert result.returncode == 2 and "0999" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.slow
@needs_local_extra
def test_local_bundled_model_end_to_end(tmp_path: Path) -> None:
    """The real in-process model: slow (tens of seconds on 2 cores) and its answers mostly fail validation."""
    document = tmp_path / "tiny.txt"
    document.write_text("Leave requests\n\nThe employee submits a leave request.\nThe manager approves it.\n",
                        encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "EXTRACT_MODEL")}
    env["EXTRACT_DATABASE_URL"] = f"sqlite:///{tmp_path}/local.db"
    result = extract("run", str(document), "--max-tokens", "256", env=env, cwd=tmp_path)
    assert "tiny demonstration model" in result.stderr
    # a model running in process costs no API money: said so, not "no price for gemma...gguf (EXTRACT_PRICES)"
    assert "cost: local model, no API price" in result.stdout and "no price for" not in result.stdout, result.stdout
    [summary] = json.loads(extract("runs", "--format", "json", env=env, cwd=tmp_path).stdout)
    [(state, count)] = summary["counts"].items()
    assert state in ("READY_FOR_REVIEW", "MANUAL_REVIEW") and count == 1
    assert result.returncode == (0 if state == "READY_FOR_REVIEW" else 3)
    assert summary["cost"]["cost_usd"] == 0.0 and summary["cost"]["calls_in_process"] == summary["cost"]["calls"] >= 1
    store = open_store(env["EXTRACT_DATABASE_URL"])
    [document_run] = store.document_runs_for(summary["id"])
    recorded = store.attempts_for(document_run.id)
    assert 1 <= len(recorded) <= 2 and all(a.mode == "grammar" and a.raw_response for a in recorded)
    assert store.get_run(summary["id"]).provider == "local"


def test_a_folder_without_documents_says_what_it_skipped_and_records_no_run(tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    folder.mkdir()
    for name in ("a.zip", "b.ZIP", "notes.odt"):
        (folder / name).write_bytes(b"PK not a document")
    database = tmp_path / "never.db"
    env = {**os.environ, "EXTRACT_DATABASE_URL": f"sqlite:///{database}", "OPENAI_BASE_URL": "http://127.0.0.1:9"}
    result = extract("run", str(folder), "--model", "openai:x", env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (f"error: no supported document in {folder}/: skipped 3 files (.zip 2, .odt 1); "
                                     "supported: .txt .md .markdown .text .docx .html .htm .pdf .png .jpg .jpeg .tif "
                                     ".tiff .hwp .hwpx .xlsx .eml")
    typo = extract("run", str(tmp_path / "archvie"), "--model", "openai:x", "--format", "json", env=env, cwd=tmp_path)
    assert typo.returncode == 2 and f"{tmp_path / 'archvie'}: no such file, folder or glob match" in typo.stderr
    assert json.loads(typo.stdout)["run_id"] is None
    assert not database.exists()  # nothing to do: no run recorded, not even a database created


def test_the_text_summary_says_why_documents_were_skipped(llm_server: Callable[..., ScriptedLLMServer],
                                                          en_doc: Path, tmp_path: Path, db_url: str) -> None:
    server = llm_server(lambda request, number: Reply(GOOD_EN))
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "EXTRACT_DATABASE_URL": db_url}
    (en_doc.parent / "photos.zip").write_bytes(b"PK not a document")
    first = extract("run", str(en_doc.parent), "--model", "openai:scripted", "--format", "json", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_id = json.loads(first.stdout)["run_id"]
    again = extract("run", str(en_doc.parent), "--model", "openai:scripted", env=env, cwd=tmp_path)
    assert again.returncode == ExitCode.NOT_EVALUABLE, again.stderr  # this run evaluated nothing: not a pass
    text = " ".join(again.stdout.split())
    assert f"skipped 1: done before by run {run_id} (--force redoes them)" in text, again.stdout
    assert "outcome NOT_EVALUABLE exit 4 (no document was evaluated in this run)" in text
    assert "not documents, skipped in folders: 1 file (.zip 1)" in text


def test_retry_after_holds_back_calls_not_yet_started(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path,
                                                      db_url: str) -> None:
    """A 429 with Retry-After pauses the whole run: a call that starts later (another document's repair)
    waits until that time has passed, not only the retry of the call that was answered 429."""
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    text = (ROOT / "samples/en_purchase_approval.md").read_text(encoding="utf-8")
    first.write_text(text, encoding="utf-8")
    second.write_text(text + "\n", encoding="utf-8")
    broken = json.loads(GOOD_EN)
    broken["rules"].append("Every purchase needs the CFO's signature.")  # no evidence: one repair
    arrivals: dict[str, float] = {}
    both_asked = threading.Event()

    def script(request: dict[str, Any] | None, number: int) -> Any:
        if len((request or {}).get("messages", [])) > 2:
            arrivals.setdefault("repair", time.monotonic())
            return Reply(GOOD_EN)
        if number == 1:  # the first document: answered once the other one was throttled, then repaired
            both_asked.wait(timeout=60)
            return Reply(json.dumps(broken))
        if number == 2:
            arrivals["throttled"] = time.monotonic()
            both_asked.set()
            return Status(429, headers={"Retry-After": "1"})
        return Reply(GOOD_EN)

    server = llm_server(script)
    summary, _ = run([first, second], server, db_url, concurrency=4)
    assert summary.counts == {"READY_FOR_REVIEW": 2} and summary.rate_limits == 1
    assert arrivals["repair"] - arrivals["throttled"] >= 1.0, arrivals


def test_the_first_wave_is_sent_before_reading_ahead(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path,
                                                     db_url: str) -> None:
    """Until every slot has a call, only the documents that will fill them are read; then the next ones are read
    and claimed while those calls are out, ready for the slots they free."""
    paths = write_batch(tmp_path / "docs", 18)[::3]  # the English ones: read in milliseconds
    server = llm_server(lambda request, number: Reply(answer_for(request), delay_s=1.0))
    summary, store = run(paths, server, db_url, concurrency=2, settings=ProviderSettings(timeout_s=30))
    assert summary.counts == {"READY_FOR_REVIEW": 6}
    claimed = {run.path: run for run in store.document_runs_for(summary.run_id)}
    began = [claimed[str(path)].started_at for path in paths]
    called = [store.attempts_for(claimed[str(path)].id)[0] for path in paths]
    second_call = max(called[0].created_at, called[1].created_at)
    first_answer = min(called[0].finished_at, called[1].finished_at)
    assert min(began[2:4]) > second_call, "the third document was read before both slots were taken"
    assert max(began[2:4]) < first_answer, "the next wave was not read while the first one was out"
