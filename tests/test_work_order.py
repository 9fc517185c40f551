"""A contract of a shape no built-in has, written as files (``tests/corpus/work_orders``: a maintenance work
order with a header, participants, a task table with assignees and hours, parts in a 5,000-row catalogue),
tried as a user would: the order check on a table quoted cell by cell (.md and .docx), and every command that
reads stored results finding the contract the run used, through the CLI, real HTTP and the run log."""

from __future__ import annotations

import copy
import csv
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from extractor.contracts.files import load
from extractor.document import Document
from extractor.ingest import load as ingest
from extractor.segment import segment
from extractor.validate import validate
from tests.support.llm_server import Reply, ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "work_orders"
CONTRACTS = CORPUS / "contracts"
SOURCE = CORPUS / "en_work_order.md"
GOLD: dict[str, Any] = json.loads((CORPUS / "expected" / "en_work_order.candidate.json").read_text(encoding="utf-8"))
SAMPLES = ROOT / "samples"


@pytest.fixture(scope="module")
def work_order() -> Any:
    return load(CONTRACTS / "work_order" / "v1")


def docx_twin(markdown: Path, out: Path) -> Path:
    """The same work order as a Word file: heading, paragraphs and the task table as a real table."""
    import docx

    made = docx.Document()
    rows: list[list[str]] = []

    def flush() -> None:
        if rows:
            table = made.add_table(rows=len(rows), cols=len(rows[0]))
            for r, row in enumerate(rows):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
            rows.clear()

    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            if not re.fullmatch(r"[|\s-]+", line):
                rows.append([cell.strip() for cell in line.strip("|").split("|")])
            continue
        flush()
        if line.startswith("# "):
            made.add_heading(line[2:], 1)
        elif line.strip():
            made.add_paragraph(line)
    flush()
    made.save(out)
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Document]:
    """The work order as .md and as .docx: the same sentences, each table cell its own."""
    md = segment(ingest(str(SOURCE)))
    word = segment(ingest(str(docx_twin(SOURCE, tmp_path_factory.mktemp("docx") / "en_work_order.docx"))))
    assert [s.text for s in word.sentences] == [s.text for s in md.sentences]
    assert sum(block.kind == "table_cell" for block in word.blocks) == 20
    return {"md": md, "docx": word}


def swapped(candidate: dict[str, Any], first: int, second: int) -> dict[str, Any]:
    """The tasks at ``first`` and ``second`` exchanged and numbered by their new places; every task still
    quotes the cells of its own table row (as a model that read the rows out of order does)."""
    out = copy.deepcopy(candidate)
    tasks = out["tasks"]
    tasks[first], tasks[second] = tasks[second], tasks[first]
    tasks[first]["step"], tasks[second]["step"] = first + 1, second + 1
    names = {f"tasks[{first}]": f"tasks[{second}]", f"tasks[{second}]": f"tasks[{first}]"}

    def moved(path: str) -> str:
        head, dot, rest = path.partition(".")
        return names.get(head, head) + dot + rest

    for entry in out["evidence"]:
        entry["fieldPath"] = moved(entry["fieldPath"])
    for entry in out["sentenceCoverage"]:
        if "fieldPaths" in entry:
            entry["fieldPaths"] = [moved(path) for path in entry["fieldPaths"]]
    return out


def findings(contract: Any, candidate: dict[str, Any], document: Document) -> list[tuple[str, str]]:
    return [(f.rule_id, f.location) for f in validate(json.dumps(candidate), document, contract).findings]


# ---------------------------------------------------------------- the order check on a table quoted cell by cell


@pytest.mark.parametrize("fmt", ["md", "docx"])
def test_gold_quoted_cell_by_cell_passes(work_order: Any, sources: dict[str, Document], fmt: str) -> None:
    # each task quotes its four cells; "1", "0.5", "2" and the names occur in other rows and lines too
    assert findings(work_order, GOLD, sources[fmt]) == []


@pytest.mark.parametrize("fmt", ["md", "docx"])
@pytest.mark.parametrize(("first", "second", "flagged"), [
    (0, 1, ["$.tasks[1]"]), (1, 2, ["$.tasks[2]"]), (2, 3, ["$.tasks[3]"]), (0, 3, ["$.tasks[1]", "$.tasks[3]"]),
])
def test_swapped_tasks_are_found(work_order: Any, sources: dict[str, Document], fmt: str, first: int, second: int,
                                 flagged: list[str]) -> None:
    found = findings(work_order, swapped(GOLD, first, second), sources[fmt])
    assert found == [("TASK_STEP_INVERTED", location) for location in flagged]


def test_renumbered_swap_quoting_its_new_numbers_is_found(work_order: Any, sources: dict[str, Document]) -> None:
    # the swapped tasks quote the numbers they were given ("1" for the task of row 2): where a "1" is written
    # says nothing about where the task is, so the number's own excerpt does not place the task
    candidate = swapped(GOLD, 0, 1)
    for entry in candidate["evidence"]:
        if entry["fieldPath"] in ("tasks[0].step", "tasks[1].step"):
            entry["sourceExcerpt"] = str(int(entry["fieldPath"][6]) + 1)
    assert ("TASK_STEP_INVERTED", "$.tasks[1]") in findings(work_order, candidate, sources["md"])


def test_swapped_tasks_through_the_cli(tmp_path: Path) -> None:
    candidate = CORPUS / "expected" / "en_work_order.candidate.json"
    result = extract("validate", candidate, "--source", SOURCE, "--contract", "work_order", "--contracts", CONTRACTS,
                     "--format", "json")
    assert result.returncode == 0 and json.loads(result.stdout)["findings"] == [], result.stderr
    twisted = tmp_path / "swapped.json"
    twisted.write_text(json.dumps(swapped(GOLD, 1, 2)), encoding="utf-8")
    result = extract("validate", twisted, "--source", SOURCE, "--contract", "work_order", "--contracts", CONTRACTS,
                     "--format", "json")
    report = json.loads(result.stdout)
    assert [(f["rule_id"], f["location"], f["severity"]) for f in report["findings"]] == [
        ("TASK_STEP_INVERTED", "$.tasks[2]", "warning")]
    assert "wholly before the text of the item before it (tasks[1]" in report["findings"][0]["message"]


TASKS = ["Isolate and lock out the pump", "Replace the mechanical seal", "Check the motor insulation resistance",
         "Restart the pump and check for leaks", "Drain the casing", "Inspect the impeller", "Replace the bearings",
         "Align the coupling", "Clean the suction strainer", "Tighten the terminal screws", "Record the vibration",
         "Refill the lubricant", "Test the pressure switch", "Remove the lockout"]
CREW = [("mina", "Mina Park", "lead technician"), ("ivan", "Ivan Petrov", "electrician"),
        ("olga", "Olga Sidorova", "fitter"), ("jun", "Jun Lee", "mechanic")]


def _random_order(rng: random.Random, folder: Path, word: bool) -> tuple[Document, list[Any], list[Any]]:
    """A work order of 2-11 tasks with repeated assignees and hours, and sometimes a note naming cells again."""
    crew = rng.sample(CREW, rng.choice([2, 3]))
    rows = [(n + 1, task, rng.choice(crew), rng.choice([0.5, 1, 1.5, 2, 3]))
            for n, task in enumerate(rng.sample(TASKS, rng.randrange(2, 12)))]
    lines = ["# Maintenance Work Order WO-2026-0311", "", "Site: Riverside pumping station.",
             "The crew is " + " and ".join(f"{p[1]} ({p[2]})" for p in crew) + ".", "",
             "| Step | Task | Assignee | Hours |", "| --- | --- | --- | --- |",
             *(f"| {n} | {task} | {who[1]} | {hours} |" for n, task, who, hours in rows), ""]
    if rng.random() < 0.5:
        lines.append(f"Note: {rows[-1][1].lower()} only after {rows[0][2][1]} signs step 1, within {rows[0][3]} hours.")
    markdown = folder / "order.md"
    markdown.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = docx_twin(markdown, folder / "order.docx") if word else markdown
    return segment(ingest(str(path))), crew, rows


def _quoted(document: Document, crew: list[Any], rows: list[Any], order: list[int]) -> dict[str, Any]:
    tasks, evidence = [], []
    for place, row in enumerate(order):
        number, task, who, hours = rows[row]
        tasks.append({"step": place + 1, "task": task, "assigneeId": who[0], "hours": hours})
        evidence += [{"fieldPath": f"tasks[{place}].{field}", "sourceExcerpt": str(excerpt)}
                     for field, excerpt in (("step", number), ("task", task), ("assigneeId", who[1]), ("hours", hours))]
    return {"orderNumber": "WO-2026-0311", "site": "Riverside pumping station", "equipment": "pump", "dueDate": None,
            "participants": [{"id": p[0], "name": p[1], "role": p[2]} for p in crew], "tasks": tasks, "parts": [],
            "missingFields": [], "evidence": evidence,
            "sentenceCoverage": [{"sentenceId": s.id, "status": "UNMAPPED", "reason": "order test"}
                                 for s in document.sentences]}


def test_random_task_tables_gold_passes_and_every_adjacent_swap_is_found(work_order: Any, tmp_path: Path) -> None:
    rng = random.Random(26)
    alarms, caught, trials = [], 0, 40
    for trial in range(trials):
        document, crew, rows = _random_order(rng, tmp_path, word=trial % 2 == 0)
        order = list(range(len(rows)))
        gold = [f for f in findings(work_order, _quoted(document, crew, rows, order), document)
                if f[0].startswith("TASK_STEP")]
        alarms += gold
        at = rng.randrange(len(rows) - 1)
        order[at], order[at + 1] = order[at + 1], order[at]
        found = findings(work_order, _quoted(document, crew, rows, order), document)
        caught += ("TASK_STEP_INVERTED", f"$.tasks[{at + 1}]") in found
    assert alarms == [] and caught == trials


# ---------------------------------------------------------------- stored results find the contract the run used


def extract(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def _environment(tmp_path: Path, server: ScriptedLLMServer) -> dict[str, str]:
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/runs.db",
           "COLUMNS": "200"}
    for name in ("EXTRACT_CONTRACTS_PATH", "OPENAI_API_KEY", "EXTRACT_APPROVED_DATABASE_URL", "EXTRACT_REVIEWER"):
        env.pop(name, None)
    return env


def _purchase_answer(request: dict[str, Any] | None, number: int) -> Reply:
    text = json.dumps(request or {}, ensure_ascii=False)
    name = "ko_pass" if "PO-2026-0416" in text else "en_pass"
    return Reply((SAMPLES / "expected" / "purchase_orders" / f"{name}.candidate.json").read_text(encoding="utf-8"))


def _judged(request: dict[str, Any] | None, number: int) -> Reply:
    links = [int(i) for i in re.findall(r"^\[(\d+)\] field: ", (request or {})["messages"][1]["content"], re.MULTILINE)]
    return Reply(json.dumps({"status": "ok", "grounded": True, "invented_facts": [], "contradicts_context": False,
                             "links": [{"index": i, "supported": 1.0} for i in links], "verdict": "pass",
                             "comment": ""}))


def test_a_purchase_order_run_with_contract_files_is_reviewed_exported_and_judged_later(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server, judge = llm_server(_purchase_answer), llm_server(_judged)
    env = _environment(tmp_path, server)
    contracts = tmp_path / "contracts"
    shutil.copytree(SAMPLES / "contracts", contracts)
    documents = [SAMPLES / "purchase_orders" / "en_purchase_order.md", SAMPLES / "purchase_orders" / "ko_purchase_order.txt"]
    ran = extract("run", *documents, "--contract", "purchase_order", "--contracts", contracts, "--model",
                  "openai:scripted", "--format", "json", env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    run_id = summary["run_id"]
    ids = {Path(o["path"]).name: str(o["document_run_id"]) for o in summary["outcomes"]}
    en, ko = ids["en_purchase_order.md"], ids["ko_purchase_order.txt"]

    # the issue's own steps: approve, then export as CSV, with no --contracts anywhere
    assert extract("approve", en, "--reviewer", "lee", env=env, cwd=tmp_path).returncode == 0
    out = tmp_path / "records.csv"
    exported = extract("export", "--format", "csv", "--out", out, env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [(r["contract"], r["supplier.name"], r["reviewer"]) for r in rows] == [
        ("purchase_order", "Hanbit Fasteners Co., Ltd.", "lee")]
    assert extract("show", en, env=env, cwd=tmp_path).returncode == 0
    gold = tmp_path / "gold"
    assert extract("gold", "export", gold, env=env, cwd=tmp_path).returncode == 0
    evaluation = ("eval", run_id[:10], "--gold", gold, "--format", "json")
    scored = extract(*evaluation, env=env, cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr

    # a catalogue edited since the run: what checks again says so in one line, and what to do
    catalogue = contracts / "purchase_order" / "v1" / "skus.csv"
    original = catalogue.read_bytes()
    catalogue.write_bytes(original + b"999999,spring washer M8,piece\n")
    fixed = tmp_path / "ko_fixed.json"
    fixed.write_text((SAMPLES / "expected" / "purchase_orders" / "ko_pass.candidate.json").read_text(encoding="utf-8"),
                     encoding="utf-8")
    changed = (f"error: contract purchase_order v1 changed since run {run_id[:12]} used it: skus.csv changed (in "
               f"{catalogue.parent}); put the files back as they were, or give --contracts a folder holding "
               "purchase_order/v1 as the run had it; to use the contract as it is now, run the documents again\n")
    refused = extract("approve", ko, "--reviewer", "kim", "--edited", fixed, env=env, cwd=tmp_path)
    assert (refused.returncode, refused.stderr) == (2, changed)
    judge_command = ("judge", "run", run_id[:10], "--judge", "openai:judge", "--judge-base-url", judge.base_url,
                     "--format", "json")
    refused = extract(*judge_command, env=env, cwd=tmp_path)
    assert (refused.returncode, refused.stderr) == (2, changed) and judge.chat_requests == []
    refused = extract(*evaluation, env=env, cwd=tmp_path)
    assert (refused.returncode, refused.stderr) == (2, changed)
    assert extract("export", "--out", tmp_path / "again.jsonl", env=env, cwd=tmp_path).returncode == 0  # as approved
    for reading in (("show", ko), ("review", "--format", "json")):  # what only reads the run log needs no contract
        read = extract(*reading, env=env, cwd=tmp_path)
        assert read.returncode == 0 and "SKU_UNKNOWN" not in read.stdout, read.stderr

    # put back: the judge runs on the contract the run used, found in the folder the run recorded
    catalogue.write_bytes(original)
    judged = extract(*judge_command, env=env, cwd=tmp_path)
    assert judged.returncode == 0, judged.stderr
    assert {d["result"] for d in json.loads(judged.stdout)["documents"]} == {"pass", None} and judge.chat_requests

    # the folder moved: named, and found through --contracts or EXTRACT_CONTRACTS_PATH
    moved = tmp_path / "elsewhere"
    contracts.rename(moved)
    refused = extract("approve", ko, "--reviewer", "kim", "--edited", fixed, env=env, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: contract purchase_order v1 of run {run_id[:12]} is not found: its folder {catalogue.parent} no longer "
        "exists and no contracts folder (--contracts, EXTRACT_CONTRACTS_PATH) holds purchase_order/v1; give "
        "--contracts the folder that holds it\n")
    rejudged = extract(*judge_command, "--force", env={**env, "EXTRACT_CONTRACTS_PATH": str(moved)}, cwd=tmp_path)
    assert rejudged.returncode == 0, rejudged.stderr
    assert extract(*evaluation, "--contracts", moved, env=env, cwd=tmp_path).returncode == 0
    approved = extract("approve", ko, "--reviewer", "kim", "--edited", fixed, "--contracts", moved, env=env,
                       cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    exported = extract("export", "--out", tmp_path / "all.jsonl", env=env, cwd=tmp_path)
    lines = (tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()
    assert exported.returncode == 0 and sorted(json.loads(line)["provenance"]["reviewer"] for line in lines) == ["kim", "lee"]


def test_a_record_whose_run_is_not_in_the_run_log_takes_the_contract_from_the_search_path(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server = llm_server(_purchase_answer)
    env = _environment(tmp_path, server)
    approved_url = f"sqlite:///{tmp_path}/approved.db"
    ran = extract("run", SAMPLES / "purchase_orders" / "en_purchase_order.md", "--contract", "purchase_order",
                  "--contracts", SAMPLES / "contracts", "--model", "openai:scripted", "--format", "json", env=env,
                  cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"][:12]
    assert extract("approve", "1", "--reviewer", "lee", "--approved-database", approved_url, env=env,
                   cwd=tmp_path).returncode == 0
    (tmp_path / "runs.db").rename(tmp_path / "gone.db")  # the run log is lost; the approved records are not
    other = {**env, "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/other.db"}
    assert extract("run", SAMPLES / "purchase_orders" / "ko_purchase_order.txt", "--contract", "purchase_order",
                   "--contracts", SAMPLES / "contracts", "--model", "openai:scripted", env=other,
                   cwd=tmp_path).returncode == 0
    out = tmp_path / "records.jsonl"
    lost = extract("export", "--out", out, "--approved-database", approved_url, env=other, cwd=tmp_path)
    assert lost.returncode == 2 and lost.stderr == (
        f"error: cannot export record 1 (its run {run_id} is not in this run log): contract purchase_order v1 of "
        f"run {run_id} is not found: no contracts folder (--contracts, EXTRACT_CONTRACTS_PATH) holds "
        "purchase_order/v1; give --contracts the folder that holds it\n")
    assert not out.exists()
    found = extract("export", "--out", out, "--approved-database", approved_url, "--contracts", SAMPLES / "contracts",
                    env=other, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["record"]["currency"] == "USD"


def test_the_web_review_checks_an_edit_by_the_contract_the_run_used(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from extractor.store import open_store
    from extractor.store.approved import open_approved
    from extractor.web.router import review_router

    server = llm_server(lambda request, number: Reply(json.dumps(GOLD)))
    env = _environment(tmp_path, server)
    contracts = tmp_path / "contracts"
    shutil.copytree(CONTRACTS, contracts)
    ran = extract("run", SOURCE, "--contract", "work_order", "--contracts", contracts, "--model", "openai:scripted",
                  "--format", "json", env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    (outcome,) = summary["outcomes"]
    assert outcome["state"] == "READY_FOR_REVIEW"
    document_run = outcome["document_run_id"]

    class Reviewer:
        name, role, scope = "lee", "reviewer", None

    with open_store(env["EXTRACT_DATABASE_URL"]) as store:
        app = FastAPI()
        app.include_router(review_router(lambda: (store, open_approved(store)), lambda: Reviewer()))
        client = TestClient(app)
        page = client.get(f"/review/doc/{document_run}/edit")
        assert page.status_code == 200 and 'name="raw_json"' not in page.text  # the contract's form, not raw JSON
        assert "tasks" in page.text and "assigneeId" in page.text
        token = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert token is not None
        form = {"csrf": token.group(1), "action": "check", "raw_json": json.dumps(GOLD)}
        checked = client.post(f"/review/doc/{document_run}/edit", data=form)
        assert checked.status_code == 200 and 'id="passed"' in checked.text

        parts = contracts / "work_order" / "v1" / "parts.csv"
        parts.write_text(parts.read_text(encoding="utf-8").replace("720131,O-ring set", "720132,O-ring set"),
                         encoding="utf-8")
        refused = client.post(f"/review/doc/{document_run}/edit", data=form)
        assert refused.status_code == 409
        assert f"contract work_order v1 changed since run {summary['run_id'][:12]} used it: parts.csv changed" \
            in refused.text.replace("&#39;", "'")


def test_a_contract_edited_while_its_run_is_in_progress_ends_the_documents_with_one_line_naming_it(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    contracts = tmp_path / "contracts"
    shutil.copytree(SAMPLES / "contracts", contracts)
    catalogue = contracts / "purchase_order" / "v1" / "skus.csv"

    def edit_then_answer(request: dict[str, Any] | None, number: int) -> Reply:
        if number == 1:  # the run has loaded the contract and asked the model: now someone edits the catalogue
            catalogue.write_bytes(catalogue.read_bytes() + b"999999,spring washer M8,piece\n")
        return _purchase_answer(request, number)

    env = _environment(tmp_path, llm_server(edit_then_answer))
    ran = extract("run", SAMPLES / "purchase_orders" / "en_purchase_order.md", "--contract", "purchase_order",
                  "--contracts", contracts, "--model", "openai:scripted", "--format", "json", env=env, cwd=tmp_path)
    (outcome,) = json.loads(ran.stdout)["outcomes"]
    assert ran.returncode == 4 and outcome["state"] == "ERROR", ran.stderr
    assert outcome["cause"] == (
        f"{SAMPLES / 'purchase_orders' / 'en_purchase_order.md'}: contract purchase_order v1 changed since this run "
        f"started: skus.csv changed (in {catalogue.parent}); put the files back as they were, or give --contracts a "
        "folder holding purchase_order/v1 as the run had it; to use the contract as it is now, run the documents again")
    shown = extract("show", str(outcome["document_run_id"]), env=env, cwd=tmp_path)
    assert shown.returncode == 0 and "internal error" not in shown.stdout + shown.stderr
    assert "contract purchase_order v1 changed since this run started: skus.csv changed" in shown.stdout
