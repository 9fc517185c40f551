"""A run's outcome tells a dead model server from work for a person.

Documents the model never answered (ERROR) make the run NOT_EVALUABLE (exit 4) with how many and why, and
never send the reader to an empty review queue; documents that need a person and documents never answered
are counted apart in the summary, ``extract runs`` and ``extract compare``. Real HTTP to scripted servers (and
to a port nothing listens on), real SQLite files, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from extractor.engine.summary import run_outcome
from extractor.vocab import ExitCode, GateDecision
from tests.support.batch import cli_env, run_cli, summary_of
from tests.support.corpus import script, write_documents
from tests.support.llm_server import ScriptedLLMServer


@pytest.mark.parametrize(("states", "decision"), [
    (["READY_FOR_REVIEW"], GateDecision.PROMOTE),
    (["READY_FOR_REVIEW", "MANUAL_REVIEW"], GateDecision.MANUAL_REVIEW),
    (["ERROR", "ERROR"], GateDecision.NOT_EVALUABLE),
    (["MANUAL_REVIEW", "ERROR"], GateDecision.NOT_EVALUABLE),
    (["READY_FOR_REVIEW", "ERROR"], GateDecision.NOT_EVALUABLE),
    (["BLOCKED", "ERROR"], GateDecision.BLOCK),
    (["SKIPPED"], GateDecision.NOT_EVALUABLE),
    (["READY_FOR_REVIEW", "INPUT_ERROR"], GateDecision.MANUAL_REVIEW),
])
def test_the_outcome_of_a_run_from_its_documents(states: list[str], decision: GateDecision) -> None:
    assert run_outcome(states) is decision


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_dead_server_is_not_evaluable_and_sends_nobody_to_an_empty_queue(tmp_path: Path) -> None:
    paths = write_documents(tmp_path / "docs", [1, 2])
    env = cli_env(f"http://127.0.0.1:{closed_port()}/v1", f"sqlite:///{tmp_path}/extract.db")
    result = run_cli("run", *map(str, paths), "--model", "openai:m", "--retries", "0", env=env, cwd=tmp_path)
    assert result.returncode == ExitCode.NOT_EVALUABLE, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert "outcome NOT_EVALUABLE" in last and "exit 4" in last and "never answered 2 of 2" in last, last
    assert "extract review" not in result.stdout, result.stdout
    assert "not answered by the model: 2 document(s): connection error" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR ")]
    assert sorted(line.split(":")[0] for line in errors) == [f"ERROR {path}" for path in map(str, paths)], errors
    queue = run_cli("review", env=env, cwd=tmp_path)
    assert queue.returncode == 0 and "nothing waits" in queue.stdout, queue.stdout


def test_people_and_a_dead_model_are_counted_apart(tmp_path: Path,
                                                   llm_server: Callable[..., ScriptedLLMServer]) -> None:
    """Document 1 fails validation twice (a person must look), document 2 gets HTTP 403 (never answered)."""
    server = llm_server(script({"m": lambda number: "fail" if number == 1 else "error",
                                "n": lambda number: "fail"}))
    paths = write_documents(tmp_path / "docs", [1, 2])
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/extract.db")
    result = run_cli("run", *map(str, paths), "--model", "openai:m", "--retries", "0", env=env, cwd=tmp_path)
    assert result.returncode == ExitCode.NOT_EVALUABLE, result.stderr
    assert "need a person: 1 document(s) (extract review)" in result.stdout
    assert "not answered by the model: 1 document(s): HTTP 403" in result.stdout, result.stdout
    summary = summary_of(run_cli("run", *map(str, paths), "--model", "openai:m", "--retries", "0", "--force",
                                 "--format", "json", env=env, cwd=tmp_path))
    assert (summary["needs_person"], summary["not_answered"]) == (1, 1), summary
    assert summary["not_answered_causes"][0]["documents"] == 1 and "403" in summary["not_answered_causes"][0]["cause"]
    [newest, *_] = json.loads(run_cli("runs", "--format", "json", env=env, cwd=tmp_path).stdout)
    assert (newest["outcome"], newest["counts"]) == ("NOT_EVALUABLE", {"ERROR": 1, "MANUAL_REVIEW": 1})
    assert run_cli("run", *map(str, paths), "--model", "openai:n", env=env, cwd=tmp_path).returncode == 3
    compared = run_cli("compare", "model=n", "model=m", env=env, cwd=tmp_path)
    assert "(need a person 2)" in compared.stdout and "(need a person 1, never answered 1)" in compared.stdout, \
        compared.stdout


def test_runs_of_unusable_inputs_alone_do_not_crowd_out_real_runs(tmp_path: Path,
                                                                  llm_server: Callable[..., ScriptedLLMServer]) -> None:
    """One real run, then five invocations whose only input is an empty file: ``stats`` (5 runs by default) and
    ``compare`` still take the real run; ``runs`` lists every invocation; a named run id is taken as given."""
    server = llm_server(script({"m": lambda number: "pass"}))
    paths = write_documents(tmp_path / "docs", [1])
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/extract.db")
    real = summary_of(run_cli("run", *map(str, paths), "--model", "openai:m", "--format", "json", env=env, cwd=tmp_path))
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    failed = []
    for _ in range(5):
        result = run_cli("run", str(empty), "--model", "openai:m", "--format", "json", env=env, cwd=tmp_path)
        assert result.returncode == ExitCode.USAGE, result.stderr
        failed.append(summary_of(result)["run_id"])
    assert all(failed)  # each invocation is recorded as a run
    listed = json.loads(run_cli("runs", "--format", "json", env=env, cwd=tmp_path).stdout)
    assert [r["id"] for r in listed] == [*reversed(failed), real["run_id"]]
    stats = json.loads(run_cli("stats", "--format", "json", env=env, cwd=tmp_path).stdout)
    assert [s["run_id"] for s in stats] == [real["run_id"]], stats
    again = summary_of(run_cli("run", *map(str, paths), "--model", "openai:m", "--force", "--format", "json", env=env,
                               cwd=tmp_path))
    compared = run_cli("compare", real["run_id"], "model=m", "--format", "json", env=env, cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert [r["id"] for r in json.loads(compared.stdout)["candidate"]["runs"]] == [again["run_id"], real["run_id"]]
    named = json.loads(run_cli("stats", failed[0], "--format", "json", env=env, cwd=tmp_path).stdout)
    assert [s["run_id"] for s in named] == [failed[0]]


def test_unreadable_inputs_are_named_in_the_summary_and_explain_exit_2(tmp_path: Path,
                                                                      llm_server: Callable[..., ScriptedLLMServer]) -> None:
    """The summary names up to 20 unreadable inputs with their causes and says how to list the rest; the last line
    says why the exit is 2 although the outcome alone would exit 3."""
    folder = tmp_path / "docs"
    paths = write_documents(folder, [1])
    broken = [folder / f"broken{number:02d}.docx" for number in range(22)]
    for path in broken:
        path.write_bytes(b"PK\x03\x04 this is not a zip archive")
    server = llm_server(script({"m": lambda number: "fail"}))
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/extract.db")
    result = run_cli("run", str(folder), "--model", "openai:m", env=env, cwd=tmp_path)
    assert result.returncode == ExitCode.USAGE, result.stderr
    lines = result.stdout.splitlines()
    assert "could not be read: 22 input(s)" in lines, result.stdout
    named = [line for line in lines if line.startswith(f"  {folder}/broken")]
    assert len(named) == 20 and all(": " in line.removeprefix(f"  {folder}/") for line in named), named
    assert len(set(named)) == 20
    assert ("  ... and 2 more: each was named on stderr as it failed, and --format json lists every input with its "
            "cause") in lines, result.stdout
    assert lines[-1].startswith("outcome MANUAL_REVIEW   exit 2   (exit 2, not MANUAL_REVIEW's 3: 22 input(s) could "
                                "not be read (named above); 1 document(s) need a person: extract review)"), lines[-1]
    assert len(paths) == 1


def test_the_gate_says_what_its_decision_rests_on_and_latest_names_runs(tmp_path: Path,
                                                                      llm_server: Callable[..., ScriptedLLMServer]) -> None:
    """Two runs that pass none of their three documents: the gate promotes (the candidate is not worse) and says
    so, with the counts, rather than a bare PROMOTE; ``latest`` and ``latest~1`` name the two newest runs."""
    server = llm_server(script({"m": lambda number: "fail", "n": lambda number: "fail"}))
    paths = write_documents(tmp_path / "docs", [1, 2, 3])
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/extract.db")
    for model in ("m", "n"):
        assert run_cli("run", *map(str, paths), "--model", f"openai:{model}", env=env, cwd=tmp_path).returncode == 3
    compared = run_cli("compare", "latest~1", "latest", "--format", "json", env=env, cwd=tmp_path)
    assert compared.returncode == ExitCode.OK, compared.stderr
    data = json.loads(compared.stdout)
    assert [side["runs"][0]["model"] for side in (data["baseline"], data["candidate"])] == ["m", "n"]
    assert data["decision"] == "PROMOTE"
    assert ("no sign the candidate passes fewer documents than the baseline (the candidate passes 0 of 3 document(s), "
            "the baseline 0 of 3); PROMOTE says it is not worse, not that it is good: it passes none") in data["reason"]
    text = run_cli("compare", "latest~1", "latest", env=env, cwd=tmp_path).stdout.splitlines()[-1]
    assert text.startswith("decision: PROMOTE  (rho ") and "passes 0 of 3" in text, text
    missing = run_cli("compare", "latest~2", "latest", env=env, cwd=tmp_path)
    assert missing.returncode == ExitCode.USAGE and "'latest~2' selects no run" in missing.stderr
    narrowed = run_cli("stats", "model=m,run=latest", "--format", "json", env=env, cwd=tmp_path)
    assert [entry["model"] for entry in json.loads(narrowed.stdout)] == ["m"], narrowed.stdout
