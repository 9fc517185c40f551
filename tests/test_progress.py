"""Progress without a terminal: ``extract run`` piped into a log prints a progress line every
``EXTRACT_PROGRESS_SECONDS`` (documents done, their states, calls in flight, tokens so far, elapsed, time left).

The scripted model server holds every answer until the test lets it go, so the lines are read while calls
are known to be in flight; the test waits on the lines themselves, never on a sleep.
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.batch import answer_for, cli_env, extract_command
from tests.support.llm_server import Action, Reply, ScriptedLLMServer
from tests.support.terminal import ESCAPES, at_terminal, plain

LINE = re.compile(r"^progress: (\d+)/(\d+) documents(?: \(([^)]*)\))?, (\d+) calls? in flight, ([\d,]+) tokens so far, "
                  r"(\d+:\d\d) elapsed(?:, (\d+:\d\d) left)?$")


def lines_of(stream: Any) -> Iterator[str]:
    for raw in iter(stream.readline, ""):
        yield raw.rstrip("\n")


def test_a_run_in_a_log_prints_progress_lines(tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer]) -> None:
    release = threading.Event()
    first_answered = threading.Event()

    def answer(request: dict[str, Any] | None, number: int) -> Action:
        if number > 1:  # the first document is answered at once; the others wait for the test
            assert release.wait(120), "the test never released the answers"
        first_answered.set()
        return Reply(answer_for(request))

    server = llm_server(answer)
    folder = tmp_path / "docs"
    folder.mkdir()
    for number in range(3):
        (folder / f"doc{number}.md").write_text(
            (Path(__file__).resolve().parents[1] / "samples/en_purchase_approval.md").read_text(encoding="utf-8")
            .replace("# Purchase Request Approval Procedure", f"# Purchase Request Approval Procedure {number}", 1),
            encoding="utf-8")
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/extract.db", EXTRACT_PROGRESS_SECONDS="0.2")
    process = subprocess.Popen(extract_command("run", str(folder), "--model", "openai:m", "--concurrency", "2"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        seen: list[re.Match[str]] = []
        held: re.Match[str] | None = None
        stderr: list[str] = []
        assert process.stderr is not None
        for line in lines_of(process.stderr):
            stderr.append(line)
            match = LINE.match(line)
            assert match or not line.startswith("progress"), line
            if match:
                seen.append(match)
                # one document done, two waiting on held answers: a line that says so
                if match.group(1) == "1" and match.group(4) == "2":
                    held = match
                    release.set()
        assert process.wait(timeout=120) == 0, process.stdout.read() if process.stdout else ""
    finally:
        release.set()
        if process.poll() is None:
            process.kill()
    assert first_answered.is_set() and held is not None, [m.group(0) for m in seen]
    assert held.group(2) == "3" and held.group(3) == "READY_FOR_REVIEW 1" and held.group(7) is not None
    assert int(held.group(5).replace(",", "")) > 0  # the first document's call was answered: its tokens count
    assert all(m.group(2) == "3" for m in seen)
    stdout = process.stdout.read() if process.stdout else ""
    assert "outcome PROMOTE" in stdout
    assert not any("extract run" in line and "━" in line for line in stderr), stderr  # no bar drawn into a log



def test_a_run_at_a_terminal_shows_calls_in_flight_tokens_and_the_time_left(
        tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer]) -> None:
    """At an 80-column terminal the bar has a status line under it: while two calls wait on the model, after the
    first document, it says so, with the tokens so far, and the bar shows the time left."""
    release = threading.Event()

    def answer(request: dict[str, Any] | None, number: int) -> Action:
        if number > 1:
            assert release.wait(120), "the test never released the answers"
        return Reply(answer_for(request))

    server = llm_server(answer)
    folder = tmp_path / "docs"
    folder.mkdir()
    sample = (Path(__file__).resolve().parents[1] / "samples/en_purchase_approval.md").read_text(encoding="utf-8")
    for number in range(3):
        (folder / f"doc{number}.md").write_text(sample.replace("# Purchase Request Approval Procedure",
                                                               f"# Purchase Request Approval Procedure {number}", 1),
                                                encoding="utf-8")
    waiting: list[re.Match[str]] = []

    def watch(screen: str) -> None:
        found = re.search(r"READY_FOR_REVIEW 1 · 2 calls in flight · ([\d,]+) tokens so far", screen)
        if found and not waiting:
            waiting.append(found)
        if waiting and re.search(r"1/3 +\d:\d\d:\d\d +\d+:\d\d left", screen):
            release.set()

    try:
        code, drawn, _ = at_terminal(extract_command("run", str(folder), "--model", "openai:m", "--concurrency", "2"),
                                     env=cli_env(server.base_url, f"sqlite:///{tmp_path}/extract.db"), cwd=tmp_path,
                                     stdout_too=False, watch=watch)
    finally:
        release.set()
    assert code == 0
    screen = plain(drawn)
    assert waiting and int(waiting[0].group(1).replace(",", "")) > 0, screen[-2000:]
    assert re.search(r"1/3 +\d:\d\d:\d\d +\d+:\d\d left", screen), screen[-2000:]
    lines = ESCAPES.sub("\n", drawn).split("\n")  # every cursor move starts a line: none may pass the 80 columns
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert re.search(r"3/3 +\d:\d\d:\d\d", screen) and "READY_FOR_REVIEW 3 · 0 calls in flight" in screen, screen[-2000:]
