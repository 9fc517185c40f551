"""The Python API (docs/python-api.md) as code uses it: real HTTP to scripted model servers, real run logs, and the CLI
reading what the API wrote (and the other way round)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import extractor
from tests.support.batch import answer_for, cli_env, run_cli, summary_of
from tests.support.llm_server import Hang, Reply, ScriptedLLMServer
from tests.support.processes import wait_for
from tests.support.purchase_order_model import CHECKS, EVIDENCE, PurchaseOrder

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
PURCHASE_ORDERS = SAMPLES / "purchase_orders"
PO_CANDIDATES = SAMPLES / "expected" / "purchase_orders"
PO_SOURCES = {"en": "en_purchase_order.md", "ko": "ko_purchase_order.txt", "ru": "ru_purchase_order.txt"}


@pytest.fixture(autouse=True)
def contract_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Contracts made from models are written under the test's own folder; the CLI's run log is the test's own."""
    cache = tmp_path / "contract-cache"
    monkeypatch.setenv("EXTRACT_CONTRACTS_CACHE", str(cache))
    monkeypatch.delenv("EXTRACT_DATABASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("EXTRACT_MODEL", raising=False)
    yield cache


def scripted(llm_server: Callable[..., ScriptedLLMServer], broken_for: str | None = None) -> ScriptedLLMServer:
    """A server answering each sample with its expected candidate; a document whose request holds ``broken_for`` gets
    one with an invented rule (no evidence), twice, so it ends MANUAL_REVIEW with findings."""
    def answer(request: dict[str, Any] | None, number: int) -> Reply:
        text = json.dumps(request or {}, ensure_ascii=False)
        candidate = json.loads(answer_for(request))
        if broken_for is not None and broken_for in text:
            candidate["rules"].append("Every purchase needs the CFO's signature.")
        return Reply(json.dumps(candidate, ensure_ascii=False), usage=(900, 400))

    return llm_server(answer)


def sample_paths() -> list[str]:
    return [str(SAMPLES / "en_purchase_approval.md"), str(SAMPLES / "ko_work_request_review.txt"),
            str(SAMPLES / "ru_vacation_approval.txt")]


# -- extract, and the CLI reading what it wrote ----------------------------------------------------------------------


def test_extract_writes_the_run_log_extract_show_and_review_read(llm_server: Callable[..., ScriptedLLMServer],
                                                                 db_url: str, tmp_path: Path) -> None:
    server = scripted(llm_server)
    result = extractor.extract(SAMPLES / "en_purchase_approval.md", model="openai:scripted", base_url=server.base_url,
                               run_log=db_url, tags=("api",))
    assert result.outcome == "READY_FOR_REVIEW" and result.state == "READY_FOR_REVIEW" and result.passed
    assert result.run_id and result.document_run_id and result.contract == "work_procedure"
    assert result.tokens.prompt == 900 and result.tokens.completion == 400 and result.tokens.total == 1300
    purpose = result.fields["documentPurpose"]
    assert purpose.presence == "PRESENT" and purpose.value.startswith("Make every purchase")
    [evidence] = purpose.evidence
    text = extractor.split(SAMPLES / "en_purchase_approval.md").text
    assert evidence.found and evidence.sentence_ids == ["s3"]
    start, end = evidence.spans[0]
    assert text[start:end] == evidence.excerpt  # offsets into the canonical text
    assert result.fields["assignmentRule"].presence == "NEEDS_INPUT" and result.fields["assignmentRule"].question
    assert [a.label for a in result.attempts] == ["generate"] and result.attempts[0].final
    assert isinstance(result.record, dict) and "evidence" not in result.record and "participants" in result.record

    shown = run_cli("show", str(result.document_run_id), "--format", "json", env=cli_env(server.base_url, db_url),
                    cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["document_run"]["state"] == result.state and view["run"]["id"] == result.run_id
    assert view["candidate"] == result.candidate and view["document_run"]["tags"] == ["api"]
    assert {path: state["state"] for path, state in view["fields"].items()} == {
        path: field.presence for path, field in result.fields.items()}
    assert [s["label"] for s in view["sentences"]] == [s.label for s in result.sentences]
    assert [a["findings"] for a in view["attempts"]] == [[f.model_dump(exclude_none=True) for f in a.findings]
                                                         for a in result.attempts]
    assert view["run"]["command"] == "extractor.extract_many (Python API)"
    queue = run_cli("review", "--format", "json", env=cli_env(server.base_url, db_url), cwd=tmp_path)
    assert [item["document_run_id"] for item in json.loads(queue.stdout)] == [result.document_run_id]

    again = extractor.extract(SAMPLES / "en_purchase_approval.md", model="openai:scripted", base_url=server.base_url,
                              run_log=db_url, tags=("api",))
    assert again.outcome == "SKIPPED" and again.state == "READY_FOR_REVIEW"  # done before: its result, no call
    assert again.document_run_id == result.document_run_id and again.candidate == result.candidate
    assert len(server.chat_requests) == 1


def test_the_api_and_extract_run_give_identical_results_on_the_samples(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server = scripted(llm_server, broken_for="작업 요청")
    cli_db = f"sqlite:///{tmp_path / 'cli.db'}"
    ran = run_cli("run", *sample_paths(), "--model", "openai:scripted", "--format", "json",
                  env=cli_env(server.base_url, cli_db), cwd=tmp_path)
    assert ran.returncode == 3, ran.stderr  # one MANUAL_REVIEW
    by_cli = {o["path"]: o for o in summary_of(ran)["outcomes"]}
    batch = extractor.extract_many(sample_paths(), model="openai:scripted", base_url=server.base_url,
                                   run_log=tmp_path / "api.db")
    assert batch.outcome == summary_of(ran)["outcome"] == "MANUAL_REVIEW"
    assert [r.path for r in batch.results] == sample_paths()
    for result in batch.results:
        cli = by_cli[result.path]
        assert (result.outcome, result.cause) == (cli["state"], cli["cause"])
        assert sorted({f.rule_id for f in result.findings}) == sorted(cli["rule_ids"])
        shown = json.loads(run_cli("show", str(cli["document_run_id"]), "--format", "json",
                                   env=cli_env(server.base_url, cli_db), cwd=tmp_path).stdout)
        assert shown["candidate"] == result.candidate
        assert [(a["kind"], a["outcome"], [f["rule_id"] for f in a["findings"]]) for a in shown["attempts"]] == [
            (a.kind, a.outcome, [f.rule_id for f in a.findings]) for a in result.attempts]
        assert {p: s["state"] for p, s in shown["fields"].items()} == {p: f.presence for p, f in result.fields.items()}
    manual = next(r for r in batch.results if r.outcome == "MANUAL_REVIEW")
    assert "VALUE_WITHOUT_EVIDENCE" in {f.rule_id for f in manual.errors} and len(manual.attempts) == 2


def test_sources_given_as_bytes_and_text_are_read_and_kept_in_the_run_log(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server = scripted(llm_server)
    data = (SAMPLES / "ru_vacation_approval.txt").read_bytes()
    db = tmp_path / "log.db"
    batch = extractor.extract_many([extractor.Source("inbox/vacation.txt", data),
                                    ("empty.txt", b""),
                                    extractor.Source.text((SAMPLES / "en_purchase_approval.md").read_text(), "memo.md")],
                                   model="openai:scripted", base_url=server.base_url, run_log=db)
    vacation, empty, memo = batch.results
    assert (vacation.path, vacation.outcome) == ("inbox/vacation.txt", "READY_FOR_REVIEW")
    assert (memo.path, memo.outcome) == ("memo.md", "READY_FOR_REVIEW")
    assert empty.outcome == "INPUT_ERROR" and empty.cause is not None and empty.cause.startswith("empty.txt: ")
    assert str(tmp_path) not in (empty.cause or "")  # named as given, not by its scratch copy
    # the CLI shows the source and a person approves it from the run log, though no such file exists here
    shown = json.loads(run_cli("show", str(vacation.document_run_id), "--format", "json",
                               env=cli_env(server.base_url, f"sqlite:///{db}"), cwd=tmp_path).stdout)
    assert shown["document"]["source_status"] == "unchanged" and shown["text"].startswith("Порядок согласования")
    approved = extractor.approve(vacation, reviewer="ana", run_log=db)
    assert approved["outcome"] == "approved" and approved["reviewer"] == "ana"


def test_a_contract_made_from_a_pydantic_model_gives_a_model_instance(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    contract = extractor.Contract.from_model(PurchaseOrder, name="purchase_order_api", checks=CHECKS, evidence=EVIDENCE)
    candidate = (PO_CANDIDATES / "en_pass.candidate.json").read_text(encoding="utf-8")
    server = llm_server([Reply(candidate)])
    result = extractor.extract(PURCHASE_ORDERS / "en_purchase_order.md", contract=contract, model="openai:scripted",
                               base_url=server.base_url, run_log=tmp_path / "log.db")
    assert result.state == "READY_FOR_REVIEW", result.findings
    assert isinstance(result.record, PurchaseOrder) and result.record.currency == json.loads(candidate)["currency"]
    assert result.record.lineItems[0].sku == json.loads(candidate)["lineItems"][0]["sku"]
    system = server.chat_requests[0].json["messages"][0]["content"] + server.chat_requests[0].json["messages"][1]["content"]
    assert "the six-digit article number exactly as written" in system or \
        "the six-digit article number exactly as written" in json.dumps(server.chat_requests[0].json)
    # a later command finds the contract in the folder the run recorded
    shown = run_cli("show", str(result.document_run_id), "--format", "json",
                    env=cli_env(server.base_url, f"sqlite:///{tmp_path / 'log.db'}"), cwd=tmp_path)
    assert json.loads(shown.stdout)["run"]["config"]["contract_hash"] == contract.content_hash


# -- contracts -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("candidate", sorted(PO_CANDIDATES.glob("*.candidate.json")), ids=lambda path: path.stem)
def test_a_file_contract_and_its_from_model_twin_give_the_same_findings(candidate: Path) -> None:
    twin = extractor.Contract.from_model(PurchaseOrder, name="purchase_order_twin", checks=CHECKS, evidence=EVIDENCE)
    files = extractor.Contract.named("purchase_order", contracts=[SAMPLES / "contracts"])
    assert files.rule_ids == twin.rule_ids
    source = PURCHASE_ORDERS / PO_SOURCES[candidate.name[:2]]
    by_files = extractor.validate(candidate, source, contract=files)
    by_model = extractor.validate(candidate, source, contract=twin)
    assert by_model.findings == by_files.findings and by_model.fields == by_files.fields
    assert by_model.sentences == by_files.sentences and by_model.evidence == by_files.evidence
    expected = {"en_sku_transposed": ["SKU_UNKNOWN"], "en_quantity_out_of_range": ["QUANTITY_OUT_OF_RANGE"],
                "en_unknown_approver": ["APPROVER_UNKNOWN"]}.get(candidate.name.removesuffix(".candidate.json"), [])
    assert [f.rule_id for f in by_model.errors] == expected  # the checks fire: the comparison is not of two nothings


def test_a_model_contract_has_a_content_hash_like_a_file_contract(contract_cache: Path) -> None:
    first = extractor.Contract.from_model(PurchaseOrder, name="po_hash", checks=CHECKS, evidence=EVIDENCE)
    same = extractor.Contract.from_model(PurchaseOrder, name="po_hash", checks=CHECKS, evidence=EVIDENCE)
    assert first.content_hash == same.content_hash and len(first.content_hash) == 64
    assert (first.folder / "skus.csv").read_bytes() == (SAMPLES / "contracts/purchase_order/v1/skus.csv").read_bytes()
    assert first.folder.is_relative_to(contract_cache) and first.model is PurchaseOrder
    assert {"evidence", "sentenceCoverage", "missingFields"} <= set(first.schema["properties"])  # the envelope
    assert "evidence" not in first.record_schema["properties"]
    changed = [dict(check, max=500) if check["id"] == "QUANTITY_OUT_OF_RANGE" else check for check in CHECKS]
    other = extractor.Contract.from_model(PurchaseOrder, name="po_hash", version=2, checks=changed, evidence=EVIDENCE)
    assert other.content_hash != first.content_hash and other.version == 2
    with pytest.raises(extractor.ContractError, match="already known with other content"):
        extractor.Contract.from_model(PurchaseOrder, name="po_hash", checks=changed, evidence=EVIDENCE)


def test_a_refused_contract_names_the_model_or_file_and_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                 ) -> None:
    bad = [*CHECKS, {"type": "lookup", "id": "SKU_UNKNOWN_2", "field": "lineItems[].sku", "catalogue": "nowhere.csv",
                     "column": "sku"}]
    model = "tests.support.purchase_order_model.PurchaseOrder (checks)"
    with pytest.raises(extractor.ContractError) as refused:
        extractor.Contract.from_model(PurchaseOrder, name="po_bad", checks=CHECKS, evidence={"normalisation": "nope"})
    lines = refused.value.problems
    assert any(line.startswith(f"{model}: evidence.normalisation: must be one of") for line in lines), lines
    with pytest.raises(extractor.ContractError) as refused:
        extractor.Contract.from_model(PurchaseOrder, name="po_bad", checks=bad)
    lines = refused.value.problems
    assert any(line.startswith(f"{model}: check[8].catalogue: nowhere.csv does not exist") for line in lines), lines
    folder = tmp_path / "contracts" / "broken" / "v1"
    folder.mkdir(parents=True)
    (folder / "schema.json").write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    (folder / "checks.toml").write_text('[[check]]\ntype = "range"\nid = "A_RANGE"\nfield = "b"\n')
    with pytest.raises(extractor.ContractError) as broken:
        extractor.Contract.named("broken", contracts=[tmp_path / "contracts"])
    cli = subprocess.run([sys.executable, "-m", "extractor", "contracts", "check", "broken", "--contracts",
                          str(tmp_path / "contracts")], capture_output=True, text=True, timeout=120)
    assert broken.value.problems == cli.stdout.splitlines() and str(folder / "checks.toml") in cli.stdout
    with pytest.raises(extractor.UsageError, match="unknown contract 'nothing_like_it'"):
        extractor.Contract.named("nothing_like_it")
    assert capsys.readouterr() == ("", "")  # nothing printed


# -- errors ------------------------------------------------------------------------------------------------------------


def test_bad_input_raises_input_error_with_the_cli_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty, unknown = tmp_path / "empty.txt", tmp_path / "notes.xyz"
    empty.write_bytes(b"")
    unknown.write_text("text in a format nobody reads")
    env = cli_env("http://127.0.0.1:9/v1", f"sqlite:///{tmp_path / 'cli.db'}")
    for path in (tmp_path / "missing.md", empty, unknown):
        with pytest.raises(extractor.InputError) as raised:
            extractor.extract(path, model="openai:never-called", base_url="http://127.0.0.1:9/v1", run_log=None)
        ran = run_cli("run", str(path), "--model", "openai:never-called", "--format", "json", env=env, cwd=tmp_path)
        said = [line.removeprefix("error: ") for line in ran.stderr.splitlines() if line.startswith("error: ")]
        said += [o["cause"] for o in summary_of(ran).get("outcomes", [])]
        assert str(raised.value) in said, (str(raised.value), ran.stdout, ran.stderr)
        assert raised.value.path == str(path)
        with pytest.raises(extractor.InputError) as split_error:
            extractor.split(path)
        cli_split = subprocess.run([sys.executable, "-m", "extractor", "split", str(path)], capture_output=True,
                                   text=True, timeout=120)
        assert cli_split.stderr.strip() == f"error: {split_error.value}"
    with pytest.raises(extractor.UsageError, match="timeout: Input should be greater than 0"):
        extractor.extract(SAMPLES / "en_purchase_approval.md", timeout=0, run_log=None)
    with pytest.raises(extractor.UsageError, match="^judge_mode needs judge MODEL$"):
        extractor.extract_many([], judge_mode="block", run_log=None)
    assert capsys.readouterr() == ("", "")


def test_validate_is_the_twin_of_extract_validate(tmp_path: Path) -> None:
    candidate = PO_CANDIDATES / "en_sku_transposed.candidate.json"
    source = PURCHASE_ORDERS / "en_purchase_order.md"
    report = extractor.validate(candidate, source, contract="purchase_order", contracts=[SAMPLES / "contracts"])
    cli = subprocess.run([sys.executable, "-m", "extractor", "validate", str(candidate), "--source", str(source),
                          "--contract", "purchase_order", "--contracts", str(SAMPLES / "contracts"), "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and not report.passed
    printed = json.loads(cli.stdout)
    assert [f.model_dump(exclude_none=True) for f in report.findings] == printed["findings"]
    assert {path: (f.presence, f.rule_id) for path, f in report.fields.items()} == {
        path: (state["state"], state["rule_id"]) for path, state in printed["fields"].items()}
    assert [e.spans for e in report.evidence] == [[tuple(s) for s in e["spans"]] for e in printed["evidence_spans"]]
    assert "nearest" in report.errors[0].message or report.errors[0].hint
    as_dict = json.loads(candidate.read_text(encoding="utf-8"))
    assert extractor.validate(as_dict, source, contract="purchase_order").findings == report.findings
    assert extractor.validate(json.dumps(as_dict), extractor.Source("po.md", source.read_bytes()),
                              contract="purchase_order").findings == report.findings
    broken = extractor.validate('{"supplier": ', source, contract="purchase_order")
    assert [f.rule_id for f in broken.findings] == ["OUTPUT_NOT_JSON"] and broken.candidate is None


def test_split_reads_through_the_sandboxed_reader_as_extract_split() -> None:
    document = extractor.split(SAMPLES / "ko_work_request_review.txt")
    cli = subprocess.run([sys.executable, "-m", "extractor", "split", str(SAMPLES / "ko_work_request_review.txt"),
                          "--format", "json"], capture_output=True, text=True, timeout=120)
    assert [s.to_json() for s in document.sentences] == json.loads(cli.stdout)
    pdf = extractor.split(SAMPLES / "formats" / "ko_purchase_order.pdf")
    assert pdf.pages >= 1 and all(s.page is not None and s.box is not None for s in pdf.sentences)
    named = extractor.split(extractor.Source.text("첫 문장입니다. 둘째 문장입니다.", name="memo.txt"))
    assert named.path == "memo.txt" and [s.id for s in named.sentences] == ["s1", "s2"]


# -- event loops, cancelling, Ctrl-C ------------------------------------------------------------------------------------


def test_sync_calls_work_inside_a_running_event_loop(llm_server: Callable[..., ScriptedLLMServer],
                                                     tmp_path: Path) -> None:
    server = scripted(llm_server)

    async def notebook_cell() -> tuple[extractor.Batch, extractor.Batch]:
        inside = extractor.extract_many(sample_paths()[:1], model="openai:scripted", base_url=server.base_url,
                                        run_log=tmp_path / "a.db")  # sync, while this loop runs (a notebook)
        awaited = await extractor.aextract_many(sample_paths()[1:], model="openai:scripted", base_url=server.base_url,
                                                run_log=tmp_path / "a.db")
        return inside, awaited

    inside, awaited = asyncio.run(notebook_cell())
    assert [r.outcome for r in inside.results] == ["READY_FOR_REVIEW"]
    assert [r.outcome for r in awaited.results] == ["READY_FOR_REVIEW", "READY_FOR_REVIEW"]
    assert inside.run_id != awaited.run_id


def run_statuses(db: Path) -> list[tuple[str, str | None]]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT status, outcome FROM runs").fetchall()


def document_states(db: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        return [state for (state,) in connection.execute("SELECT state FROM document_runs")]


def test_cancelling_the_task_stops_the_calls_and_the_run_log_records_it_interrupted(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server = llm_server([Hang(600)] * 3)
    db = tmp_path / "log.db"

    async def cancel_when_called() -> None:
        task = asyncio.create_task(extractor.aextract_many(sample_paths(), model="openai:scripted",
                                                           base_url=server.base_url, run_log=db, timeout=600))
        while len(server.chat_requests) < 3 and not task.done():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_when_called(), 300))
    assert run_statuses(db) == [("interrupted", "MANUAL_REVIEW")] or run_statuses(db)[0][0] == "interrupted"
    assert sorted(document_states(db)) == ["INTERRUPTED"] * 3


def test_ctrl_c_stops_a_sync_batch_as_it_stops_extract_run(llm_server: Callable[..., ScriptedLLMServer],
                                                           tmp_path: Path) -> None:
    server = llm_server([Hang(600)] * 3)
    db = tmp_path / "log.db"
    threading.Thread(target=lambda: (wait_for(lambda: len(server.chat_requests) == 3, "three calls", 120),
                                     os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
    with pytest.raises(extractor.Interrupted) as stopped:
        extractor.extract_many(sample_paths(), model="openai:scripted", base_url=server.base_url, run_log=db,
                               timeout=600)
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert [r.outcome for r in stopped.value.batch.results] == ["INTERRUPTED"] * 3
    assert run_statuses(db)[0][0] == "interrupted" and sorted(document_states(db)) == ["INTERRUPTED"] * 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler it replaced is back


# -- the run log, progress ----------------------------------------------------------------------------------------------


def test_run_log_none_keeps_nothing_and_progress_is_a_callback(llm_server: Callable[..., ScriptedLLMServer],
                                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    server = scripted(llm_server)
    monkeypatch.chdir(tmp_path)
    seen: list[extractor.Progress] = []
    batch = extractor.extract_many(sample_paths(), model="openai:scripted", base_url=server.base_url, run_log=None,
                                   progress=seen.append)
    assert [r.outcome for r in batch.results] == ["READY_FOR_REVIEW"] * 3 and batch.run_id
    assert batch.results[0].candidate and batch.results[0].attempts  # read back before the run log went away
    assert sorted(p.done for p in seen) == [1, 2, 3] and {p.total for p in seen} == {3}
    assert sorted(p.path for p in seen) == sorted(sample_paths())
    assert list(tmp_path.iterdir()) == [tmp_path / "contract-cache"] or not (tmp_path / "extract.db").exists()
    assert not (tmp_path / "extract.db").exists()
    assert capsys.readouterr() == ("", "")
    default = extractor.extract_many(sample_paths()[:1], model="openai:scripted", base_url=server.base_url)
    assert (tmp_path / "extract.db").exists() and default.results[0].outcome == "READY_FOR_REVIEW"  # the CLI's


def test_importing_the_package_imports_no_stage_and_validate_no_model_client(tmp_path: Path) -> None:
    code = ("import sys, extractor\n"
            "light = sorted(m for m in sys.modules if m.startswith(('extractor.', 'pydantic', 'sqlalchemy')))\n"
            "report = extractor.validate(sys.argv[1], sys.argv[2])\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'openai', 'celery', 'fastapi',\n"
            "               'llama_cpp', 'redis', 'kombu', 'uvicorn', 'starlette', 'sqlalchemy', 'alembic'))\n"
            "print(light, heavy, report.passed)")
    ran = subprocess.run([sys.executable, "-c", code.replace("sys.argv[1]", "__import__('pathlib').Path(sys.argv[1])"),
                          str(SAMPLES / "expected/en_purchase_approval.candidate.json"),
                          str(SAMPLES / "en_purchase_approval.md")], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[] [] True"


def test_ctrl_c_stops_a_sync_batch_called_inside_a_running_loop(llm_server: Callable[..., ScriptedLLMServer],
                                                                 tmp_path: Path) -> None:
    """A notebook's interrupt: the cell's thread runs a loop and waits on the batch, which runs on a loop of its own in
    another thread; KeyboardInterrupt in the waiting thread stops the batch as Ctrl-C stops extract run."""
    server = llm_server([Hang(600)] * 3)
    db = tmp_path / "log.db"

    async def cell() -> None:
        extractor.extract_many(sample_paths(), model="openai:scripted", base_url=server.base_url, run_log=db,
                               timeout=600)

    threading.Thread(target=lambda: (wait_for(lambda: len(server.chat_requests) == 3, "three calls", 120),
                                     os.kill(os.getpid(), signal.SIGINT)), daemon=True).start()
    loop = asyncio.new_event_loop()  # as a kernel's loop: no SIGINT handler of its own
    try:
        with pytest.raises(extractor.Interrupted) as stopped:
            loop.run_until_complete(cell())
    finally:
        loop.close()
    assert [r.outcome for r in stopped.value.batch.results] == ["INTERRUPTED"] * 3
    assert run_statuses(db)[0][0] == "interrupted" and sorted(document_states(db)) == ["INTERRUPTED"] * 3


def test_the_judge_and_the_budget_run_as_in_extract_run(llm_server: Callable[..., ScriptedLLMServer],
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_judge_flow import verdict

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"scripted": {"input": 1.0, "output": 2.0}, "judge": {"input": 1.0, "output": 2.0}}))
    monkeypatch.setenv("EXTRACT_PRICES", str(prices))
    server = scripted(llm_server)
    judge = llm_server(lambda request, number: Reply(verdict(request)))
    batch = extractor.extract_many(sample_paths(), model="openai:scripted", base_url=server.base_url,
                                   judge="openai:judge", judge_base_url=judge.base_url, run_log=tmp_path / "log.db")
    assert [r.outcome for r in batch.results] == ["READY_FOR_REVIEW"] * 3 and len(judge.chat_requests) == 3
    assert batch.judge is not None and all([a.label for a in r.attempts] == ["generate", "judge"] for r in batch.results)
    calls = 3 * (900 * 1.0 + 400 * 2.0) / 1e6 + sum(r.attempts[1].cost_usd or 0 for r in batch.results)
    assert batch.cost_usd == pytest.approx(calls) and all(r.cost_usd is not None for r in batch.results)

    poor = extractor.extract_many(sample_paths(), model="openai:scripted", base_url=server.base_url, force=True,
                                  max_cost=0.000001, run_log=tmp_path / "log.db")  # not even one call's prompt
    assert poor.stopped and poor.interrupted and [r.outcome for r in poor.results] == ["INTERRUPTED"] * 3
    assert len(server.chat_requests) == 3  # no call was sent: the budget stops before, and no exception is raised


def test_a_folder_with_nothing_to_read_and_a_folder_of_several_say_so(tmp_path: Path) -> None:
    empty = tmp_path / "docs"
    empty.mkdir()
    (empty / "archive.bin").write_bytes(b"\x00\x01")
    with pytest.raises(extractor.InputError) as nothing:
        extractor.extract_many(empty, run_log=None)
    ran = subprocess.run([sys.executable, "-m", "extractor", "run", str(empty)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert ran.returncode == 2 and ran.stderr.strip() == f"error: {nothing.value}"
    with pytest.raises(extractor.UsageError, match="one source named 3 documents"):
        extractor.extract(SAMPLES / "purchase_orders", model="openai:never", base_url="http://127.0.0.1:9/v1",
                          retries=0, run_log=None)
