"""What people read: tables that stay whole when piped or narrow, ``--format json`` on every listing, help
without placeholders, id prefixes of one minimum length, and run filters that take ``--model`` as given.

The run log is made once through the real engine (real HTTP to a scripted server, a real SQLite file) and
the commands run as subprocesses with stdout a pipe, as ``extract review | less`` runs them.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from rich.console import Console

from extractor.cli import app
from extractor.vocab import MIN_ID_PREFIX
from tests.support.corpus import run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_LABELS = ROOT / "samples/judge/labels.csv"
BEHAVIOUR = {"model-a": ["pass", "fail", "warn", "repaired"], "model-b": ["pass", "pass", "fail", "uncovered"]}


@dataclass
class RunLog:
    folder: Path
    url: str
    run_ids: dict[str, str]

    def extract(self, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
        """``extract ARGS`` with stdout a pipe and ``COLUMNS`` set, as a user's shell would have it."""
        env = {**os.environ, "EXTRACT_DATABASE_URL": self.url, "COLUMNS": str(columns)}
        return subprocess.run([sys.executable, "-m", "extractor", *args], capture_output=True, text=True, env=env,
                              cwd=self.folder, timeout=300)

    def json(self, *args: str) -> object:
        result = self.extract(*args, "--format", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def runlog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunLog]:
    folder = tmp_path_factory.mktemp("output")
    url = f"sqlite:///{folder}/extract.db"
    paths = write_documents(folder / "documents_with_a_long_folder_name", range(1, 5))
    plan = {model: (lambda n, steps=steps: steps[n - 1]) for model, steps in BEHAVIOUR.items()}
    with ScriptedLLMServer(script(plan)) as server:
        ids = {model: run(url, server, paths, model, tags=["domain:finance"]).run_id for model in BEHAVIOUR}
    log = RunLog(folder, url, ids)
    calibrated = log.extract("judge", "calibrate", str(SAMPLE_LABELS), "--scores-column", "judge_score", "--model-id",
                             "openai:sample-judge", "--plot", str(folder / "sweep.png"))
    assert calibrated.returncode == 0, calibrated.stderr
    yield log


def assert_whole(output: str, *tokens: str) -> None:
    """Each token appears unbroken: a table folded letter by letter splits them over lines."""
    missing = [token for token in tokens if token not in output]
    assert not missing, f"broken or missing {missing} in:\n{output}"


# ---------------------------------------------------------------- piped at 80 columns


def test_review_piped_at_80_columns_keeps_every_cell_whole(runlog: RunLog) -> None:
    result = runlog.extract("review", "--every-result")
    assert result.returncode == 0, result.stderr
    assert_whole(result.stdout, "READY_FOR_REVIEW", "MANUAL_REVIEW", "VALUE_WITHOUT_EVIDENCE",
                 "STEP_ORDER_INVERTED", "documents_with_a_long_folder_name/purchase_02.md", "model-a / v1",
                 "failed validation after repair: 1 error(s)")
    assert max(len(line) for line in result.stdout.splitlines()) > 80  # natural width, not cut to COLUMNS


def test_runs_piped_at_80_columns_keeps_every_cell_whole(runlog: RunLog) -> None:
    result = runlog.extract("runs")
    assert result.returncode == 0, result.stderr
    assert_whole(result.stdout, *(run_id[:12] for run_id in runlog.run_ids.values()), "work_procedure v1",
                 "model-a", "model-b", "finished", "started (UTC)")


def test_judge_reports_piped_at_80_columns_keep_every_cell_whole(runlog: RunLog) -> None:
    result = runlog.extract("judge", "reports")
    assert result.returncode == 0, result.stderr
    assert_whole(result.stdout, "openai:sample-judge", "admit-review", "AUROC [95% CI]", "labels sha256")


def test_rules_piped_at_80_columns_keep_every_cell_whole(runlog: RunLog) -> None:
    result = runlog.extract("rules")
    assert result.returncode == 0, result.stderr
    cards = runlog.json("rules")  # the same process's catalogue: this one may have registered other contracts
    assert isinstance(cards, list) and {"OUTPUT_NOT_JSON", "VALUE_WITHOUT_EVIDENCE"} <= {c["rule_id"] for c in cards}
    assert_whole(result.stdout, *(card["rule_id"] for card in cards), *(card["fires_when"] for card in cards))


def test_stats_show_and_compare_piped_keep_rule_ids_and_paths_whole(runlog: RunLog) -> None:
    a, b = runlog.run_ids["model-a"], runlog.run_ids["model-b"]
    assert_whole(runlog.extract("stats").stdout, "VALUE_WITHOUT_EVIDENCE", "SENTENCE_NOT_ACCOUNTED")
    shown = runlog.extract("show", a[:12])
    assert_whole(shown.stdout, "documents_with_a_long_folder_name/purchase_02.md", "VALUE_WITHOUT_EVIDENCE")
    compared = runlog.extract("compare", a, b)
    assert compared.returncode in (0, 1, 3), compared.stderr
    assert_whole(compared.stdout, "SENTENCE_NOT_ACCOUNTED", "decision: ")


def test_a_terminal_too_narrow_for_a_table_gets_one_record_per_row() -> None:
    from rich.table import Table

    from extractor.ui.console import add_columns, print_table

    table = Table(title="waiting", caption="states: READY_FOR_REVIEW, MANUAL_REVIEW")
    add_columns(table, ("doc run", "state", "rule ids", "cause"), wrap=("rule ids", "cause"))
    table.add_row("7", "READY_FOR_REVIEW", "VALUE_WITHOUT_EVIDENCE, STEP_ORDER_INVERTED", "")
    table.add_row("8", "MANUAL_REVIEW", "", "failed validation after repair: 1 error(s) " * 3)
    narrow, wide = io.StringIO(), io.StringIO()
    print_table(Console(file=narrow, width=40, force_terminal=True, color_system=None), table)
    print_table(Console(file=wide, width=200, force_terminal=True, color_system=None), table)
    lines = narrow.getvalue().splitlines()
    assert lines[:3] == ["waiting", "doc run 7", "  state: READY_FOR_REVIEW"], lines
    assert "  state: MANUAL_REVIEW" in lines and "┃" not in narrow.getvalue()
    assert lines[-1] == "states: READY_FOR_REVIEW, MANUAL_REVIEW"  # the caption (a legend) is kept
    assert_whole(narrow.getvalue(), "VALUE_WITHOUT_EVIDENCE", "STEP_ORDER_INVERTED")
    assert "┃ doc run ┃" in wide.getvalue()  # a table where it fits, cause wrapped at words


# ---------------------------------------------------------------- --format json


@pytest.mark.parametrize("command", [
    ("review",), ("runs",), ("stats",), ("rules",), ("contracts",), ("judge", "reports"), ("doctor",),
    ("split", str(ROOT / "samples/en_purchase_approval.md")),
])
def test_every_listing_command_has_json_output(runlog: RunLog, command: tuple[str, ...]) -> None:
    listed = runlog.json(*command)
    assert listed, command
    if isinstance(listed, list):
        assert all(isinstance(entry, dict) for entry in listed)


def test_validate_prints_text_unless_asked_for_json(runlog: RunLog) -> None:
    args = ("validate", str(ROOT / "samples/expected/en_purchase_approval.candidate.json"), "--source",
            str(ROOT / "samples/en_purchase_approval.md"))
    text = runlog.extract(*args)
    assert text.returncode == 0 and text.stdout.startswith("PASSED"), text.stdout
    report = json.loads(runlog.extract(*args, "--format", "json").stdout)
    assert report["passed"] is True and report["findings"] == []


# ---------------------------------------------------------------- run filters and id prefixes


def test_a_model_filter_takes_the_model_as_given_to_run(runlog: RunLog) -> None:
    a = runlog.run_ids["model-a"]
    for spelled in ("model-a", "openai:model-a"):
        assert [r["id"] for r in runlog.json("runs", "--model", spelled)] == [a], spelled
        assert [s["run_id"] for s in runlog.json("stats", f"model={spelled}")] == [a], spelled
    assert runlog.json("runs", "--model", "local:model-a") == []
    compared = runlog.json("compare", "model=openai:model-a", "model=openai:model-b")
    assert [r["id"] for r in compared["baseline"]["runs"]] == [a]  # type: ignore[index]
    waiting = runlog.json("review", "--model", "openai:model-b")
    assert waiting and {item["run_id"] for item in waiting} == {runlog.run_ids["model-b"]}  # type: ignore[union-attr]


def test_id_prefixes_have_one_minimum_length(runlog: RunLog) -> None:
    run_id = runlog.run_ids["model-a"]
    short, enough = run_id[:MIN_ID_PREFIX - 1], run_id[:MIN_ID_PREFIX]
    for args in (("stats", short), ("compare", short, enough), ("review", "--run", short)):
        result = runlog.extract(*args)
        assert result.returncode == 2 and f"{MIN_ID_PREFIX}" in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1
    assert [s["run_id"] for s in runlog.json("stats", enough)] == [run_id]
    assert runlog.json("show", enough)["kind"] == "run"  # type: ignore[index]
    shown = runlog.extract("show", short)
    assert shown.returncode == 2 and f"first {MIN_ID_PREFIX} or more characters" in shown.stderr


def test_show_run_lists_its_first_documents_and_says_how_many_it_has(runlog: RunLog) -> None:
    """A run of a hundred thousand documents is not printed whole: the first --limit, how many in all, how to see
    the rest; --all lists every one."""
    run_id = runlog.run_ids["model-a"]
    everything = runlog.json("show", run_id, "--all")
    assert everything["documents_total"] == 4 and len(everything["documents"]) == 4  # type: ignore[index,arg-type]
    first = runlog.extract("show", run_id, "--limit", "2", "--format", "json")
    shown = json.loads(first.stdout)
    assert shown["documents"] == everything["documents"][:2] and shown["documents_total"] == 4  # type: ignore[index]
    assert first.stderr == "note: listed 2 of 4 documents; --limit N or --all for more\n"
    table = runlog.extract("show", run_id, "--limit", "3", columns=200)
    paths = [Path(d["path"]).name for d in everything["documents"]]  # type: ignore[index]
    assert table.returncode == 0 and [name in table.stdout for name in paths] == [True, True, True, False]
    assert f"listed the first 3 of 4 documents: --limit N or --all to list more, `extract review --run {run_id[:12]}`" \
        in table.stdout
    assert "listed the first" not in runlog.extract("show", run_id, columns=200).stdout  # 4 fit in the default 50


# ---------------------------------------------------------------- help


def commands() -> Iterator[tuple[list[str], typer.core.TyperCommand]]:
    """Every leaf command with the words that call it."""
    root = typer.main.get_command(app)
    stack: list[tuple[list[str], object]] = [([], root)]
    while stack:
        words, command = stack.pop()
        children = getattr(command, "commands", None)
        if children:
            stack.extend(([*words, name], child) for name, child in children.items())
        else:
            yield words, command  # type: ignore[misc]


def test_help_has_no_placeholders_and_every_argument_and_option_says_what_it_is() -> None:
    from typer.testing import CliRunner

    found = list(commands())
    assert len(found) >= 15
    for words, command in found:
        undocumented = [param.name for param in command.params if not getattr(param, "help", None)]
        assert not undocumented, (words, undocumented)
        result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (words, result.output)
        usage = next(line for line in result.output.splitlines() if "Usage:" in line)
        assert "<bool>" not in result.output and "{" not in usage, (words, result.output)
    top = subprocess.run([sys.executable, "-m", "extractor", "split", "--help"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert "Usage: python -m extractor split [OPTIONS] FILE" in top.stdout and "<bool>" not in top.stdout


# ---------------------------------------------------------------- at a terminal


TINY_MODEL = {"documentPurpose": "purchase_request_approval_procedure", "participants": [], "processSteps": [],
              "rules": [], "assignmentRule": "no", "missingFields": [], "evidence": [], "sentenceCoverage": []}
"""What the bundled demonstration model answers: values without evidence, no sentence accounted for."""


def test_show_at_an_80_column_terminal_groups_identical_findings_and_indents_wrapped_lines(tmp_path: Path) -> None:
    from tests.support.llm_server import Reply
    from tests.support.terminal import at_terminal, plain

    url = f"sqlite:///{tmp_path}/extract.db"
    [path] = write_documents(tmp_path / "docs", [1])
    with ScriptedLLMServer(lambda _request, _number: Reply(json.dumps(TINY_MODEL))) as server:
        [outcome] = run(url, server, [path], "tiny").outcomes
    assert outcome.state == "MANUAL_REVIEW"
    env = {**os.environ, "EXTRACT_DATABASE_URL": url}
    code, drawn, _ = at_terminal([sys.executable, "-m", "extractor", "show", str(path)], env=env, cwd=tmp_path)
    assert code == 0
    lines = [line.rstrip() for line in plain(drawn).splitlines()]
    assert max(len(line) for line in lines) <= 80 and len(lines) < 110, len(lines)  # it was 281 lines
    text = "\n".join(lines)
    for attempt in ("attempt 1 (generate)", "attempt 2 (repair, final)"):
        block = text.split(attempt, 1)[1]
        assert "\n  error SENTENCE_NOT_ACCOUNTED x18 at $.sentenceCoverage\n" in block
        assert "\n      s1 is not accounted for: map it to a field, or mark it" in block
        assert " ".join(block.split("the same for s2", 1)[1].split()).startswith(
            ", ".join(f"s{n}" for n in range(2, 19))[2:])
        assert "\n  error VALUE_WITHOUT_EVIDENCE x2\n      $.documentPurpose: documentPurpose has no evidence" in block
        assert "the same for assignmentRule" in block
    findings = text.split("attempt 1 (generate)", 1)[1].splitlines()[1:]
    # a wrapped line stands in under its entry: only an attempt's first line starts at the margin, and a finding's
    # message and its wrapped lines stand in under its head
    assert all(line.startswith(("attempt ", " ")) for line in findings if line.strip()), findings
    inside = False
    for line in findings:
        if line.startswith(("  error ", "attempt ")):
            inside = line.startswith("  error ")
        elif inside and line.strip():
            assert line.startswith("      "), line  # a message and its wrapped lines, under the finding's head
    assert text.count("s7 is not accounted for") == 0  # said once for all 18, as `extract review` counts them


def test_serve_says_where_it_listens_and_how_it_stops(tmp_path: Path) -> None:
    import threading

    from tests.support.redis_server import free_port

    port = free_port()
    env = {**os.environ, "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/runs.db", "EXTRACT_BROKER_URL": ""}
    serve = subprocess.Popen([sys.executable, "-m", "extractor", "serve", "--port", str(port)], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, serve.kill)  # a line that never comes ends the read with the process
    watchdog.start()
    try:
        line = serve.stderr.readline() if serve.stderr else ""
    finally:
        watchdog.cancel()
        serve.terminate()
        serve.wait(timeout=60)
    assert line.startswith(f"serving the API on http://127.0.0.1:{port}/v1 ") and "this process converts them" in line
    assert line.rstrip().endswith("Ctrl-C stops"), line
