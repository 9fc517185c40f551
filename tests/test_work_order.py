"""A contract of a shape no built-in has, written as files (``tests/corpus/work_orders``: a maintenance work
order with a header, participants, a task table with assignees and hours, parts in a 5,000-row catalogue),
tried as a user would: the order check on a table quoted cell by cell (.md and .docx)."""

from __future__ import annotations

import copy
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from extractor.contracts.files import load
from extractor.document import Document
from extractor.ingest import load as ingest
from extractor.segment import segment
from extractor.validate import validate

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus" / "work_orders"
CONTRACTS = CORPUS / "contracts"
SOURCE = CORPUS / "en_work_order.md"
GOLD: dict[str, Any] = json.loads((CORPUS / "expected" / "en_work_order.candidate.json").read_text(encoding="utf-8"))


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


def extract(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


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
