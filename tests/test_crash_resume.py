"""``extract run`` as separate processes: killed with SIGKILL, stopped with Ctrl-C, run twice at once.

Every test here uses real processes (``python -m extractor run``), a scripted model server in the test
process, and the database of ``db_url`` (SQLite, and PostgreSQL: ``tests.support.databases``).
Afterwards every document must be in exactly one final state for the configuration, no document may have
two final results, and ``Store.integrity_check`` must pass.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from extractor.store import open_store
from tests.support.batch import (
    answer_for,
    cli_env,
    extract_command,
    final_runs_per_document,
    rows,
    run_cli,
    scalar,
    summary_of,
    write_batch,
)
from tests.support.llm_server import Action, Hang, Reply, ScriptedLLMServer
from tests.support.processes import alive, descendants

FINAL_SQL = "SELECT COUNT(*) FROM document_runs WHERE state IN ('READY_FOR_REVIEW', 'MANUAL_REVIEW', 'ERROR')"


def finished_so_far(db_url: str) -> int:
    try:
        return int(scalar(db_url, FINAL_SQL) or 0)
    except Exception:  # noqa: BLE001 - the run has not created its tables yet
        return 0


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str], timeout: float = 120) -> None:
    """Poll ``condition`` (a state of the run log or the server) until it holds; fail if the run ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"run ended early ({process.returncode}):\n{out}\n{err}")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"the run did not get there in {timeout} s")


def assert_each_document_once(db_url: str, documents: int) -> None:
    """Exactly ``documents`` documents, each with one final document run, one claim (final) and one final attempt."""
    finals = final_runs_per_document(db_url)
    assert len(finals) == documents and set(finals.values()) == {1}, finals
    claims = rows(db_url, "SELECT state, COUNT(*) FROM claims GROUP BY state")
    assert dict(claims) == {"READY_FOR_REVIEW": documents}, claims
    final_attempts = rows(db_url, "SELECT final_attempt_id FROM document_runs WHERE final_attempt_id IS NOT NULL")
    assert len(final_attempts) == documents == len(set(final_attempts))
    assert scalar(db_url, "SELECT COUNT(*) FROM document_runs WHERE state = 'PROCESSING'") == 0
    with open_store(db_url) as store:
        assert store.integrity_check() == []


def test_sigkill_mid_batch_then_the_same_command_finishes_every_document_once(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    write_batch(tmp_path / "docs", 200)
    killed = threading.Event()

    def script(request: dict[str, Any] | None, number: int) -> Action:  # 30 answers, then 8 calls held
        return Reply(answer_for(request)) if number <= 30 or killed.is_set() else Hang(120)

    server = llm_server(script)
    env = cli_env(server.base_url, db_url)
    command = ("run", str(tmp_path / "docs"), "--model", "openai:scripted", "--concurrency", "8", "--format", "json")
    victim = subprocess.Popen(extract_command(*command), env=env, cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_until(lambda: finished_so_far(db_url) >= 30 and server.in_flight == 8, victim)
    killed.set()
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    killed_with = finished_so_far(db_url)
    assert killed_with == 30, "the kill lands in the middle of the batch"
    assert scalar(db_url, "SELECT COUNT(*) FROM document_runs WHERE state = 'PROCESSING'") > 0  # work was in flight

    rerun = run_cli(*command, env=env, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    counts = summary_of(rerun)["counts"]
    assert counts == {"READY_FOR_REVIEW": 200 - killed_with, "SKIPPED": killed_with}, counts
    assert_each_document_once(db_url, 200)
    killed_run, status = rows(db_url, "SELECT id, status FROM runs ORDER BY started_at")[0]
    assert status == "crashed"  # found dead by the rerun; its unfinished documents were released at once
    left = dict(rows(db_url, "SELECT state, COUNT(*) FROM document_runs WHERE run_id = :run GROUP BY state",
                     run=killed_run))
    assert left.get("PROCESSING", 0) == 0 and left["INTERRUPTED"] >= 1 and left["READY_FOR_REVIEW"] == killed_with


def _ignore_sigint() -> None:
    """What a background job of a non-interactive shell inherits: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


STOPS = {  # how the run is stopped: Ctrl-C, a container's or Celery's SIGTERM, Ctrl-C to a background job
    "sigint": (signal.SIGINT, None),
    "sigterm": (signal.SIGTERM, None),
    "sigint-inherited-ignored": (signal.SIGINT, _ignore_sigint),
}


@pytest.mark.parametrize("stop", list(STOPS))
def test_ctrl_c_stops_cleanly_says_what_is_left_and_the_rerun_completes(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str, stop: str) -> None:
    """The first 8 calls are answered; every later call is held by the server until the run is stopped, so
    the signal always lands with 4 calls in flight, however loaded the machine is."""
    write_batch(tmp_path / "docs", 48)
    stopped = threading.Event()

    def script(request: dict[str, Any] | None, number: int) -> Action:
        if number <= 8 or stopped.is_set():
            return Reply(answer_for(request))
        return Hang(120)  # released when the test's server stops

    server = llm_server(script)
    env = cli_env(server.base_url, db_url)
    command = ("run", str(tmp_path / "docs"), "--model", "openai:scripted", "--concurrency", "4")
    number, preexec = STOPS[stop]
    running = subprocess.Popen(extract_command(*command), env=env, cwd=tmp_path, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec)
    wait_until(lambda: finished_so_far(db_url) >= 8 and server.in_flight == 4, running)
    stopped_at = time.monotonic()
    stopped.set()
    running.send_signal(number)
    out, err = running.communicate(timeout=60)
    assert running.returncode == 130, err
    assert time.monotonic() - stopped_at < 15  # in-flight calls are not waited for
    assert "Traceback" not in err

    [(run_id, status)] = rows(db_url, "SELECT id, status FROM runs")
    assert status == "interrupted"
    states = dict(rows(db_url, "SELECT state, COUNT(*) FROM document_runs GROUP BY state"))
    # claimed: the 4 documents in model calls, up to 4 more read and waiting for a model slot
    assert states.get("READY_FOR_REVIEW") == 8 and 4 <= states.get("INTERRUPTED", 0) <= 8, states
    assert set(states) == {"READY_FOR_REVIEW", "INTERRUPTED"}
    attempts = rows(db_url, "SELECT a.outcome, d.state, a.error, a.raw_response FROM attempts a "
                            "JOIN document_runs d ON d.id = a.document_run_id WHERE d.state = 'INTERRUPTED'")
    assert len(attempts) == 4  # every call in flight is recorded as interrupted (with its request)
    assert all(outcome == "interrupted" and state == "INTERRUPTED" and "interrupted" in error and raw is None
               for outcome, state, error, raw in attempts)
    assert "interrupted: 40 document(s) left" in " ".join(out.split()), out
    with open_store(db_url) as store:
        assert store.integrity_check() == []

    rerun = run_cli(*command, "--format", "json", env=env, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert summary_of(rerun)["counts"] == {"READY_FOR_REVIEW": 40, "SKIPPED": 8}
    assert_each_document_once(db_url, 48)


def test_two_runs_at_once_over_overlapping_inputs_process_each_document_once(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    paths = [str(p) for p in write_batch(tmp_path / "docs", 120)]
    server = llm_server(lambda request, number: Reply(answer_for(request), delay_s=0.05))
    env = cli_env(server.base_url, db_url)
    open_store(db_url).close()  # both runs find the schema in place (racing migrations are tested in test_store)

    def start(selection: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(extract_command("run", *selection, "--model", "openai:scripted", "--concurrency", "8",
                                                "--format", "json"),
                                env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    first, second = start(paths[:80]), start(paths[40:])
    results = [process.communicate(timeout=300) for process in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), [err for _, err in results]
    counts = [summary_of(subprocess.CompletedProcess([], 0, out, err))["counts"] for out, err in results]
    ready = sum(c.get("READY_FOR_REVIEW", 0) for c in counts)
    skipped = sum(c.get("SKIPPED", 0) for c in counts)
    assert (ready, skipped) == (120, 40), counts
    assert len(server.chat_requests) == 120  # one model call per document: nothing done twice
    assert_each_document_once(db_url, 120)
    assert {status for _, status in rows(db_url, "SELECT id, status FROM runs")} == {"finished"}


def test_the_ingest_worker_does_not_outlive_a_killed_run(llm_server: Callable[..., ScriptedLLMServer],
                                                        tmp_path: Path) -> None:
    """SIGKILL gives the run no chance to stop its worker processes; they must notice and exit, and so must the
    fork server they were forked from (their parent, not the run's) and the resource tracker."""
    server = llm_server(lambda request, number: Hang(30))
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/w.db")
    write_batch(tmp_path / "docs", 3)
    victim = subprocess.Popen(extract_command("run", str(tmp_path / "docs"), "--model", "openai:x", "--timeout", "60"),
                              env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: len(server.chat_requests) == 3, victim)  # every document was read: both workers are up
    below = descendants(victim.pid)
    assert len(below) >= 2, "the run started no worker processes"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(pid) for pid in below):
        time.sleep(0.2)
    assert not [pid for pid in below if alive(pid)]
