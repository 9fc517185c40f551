"""Any server, any answer, the run goes on: ``extract run`` against raw-socket servers that answer the way a
broken gateway, a user's proxy or a hostile endpoint might.

One run of the real CLI in a subprocess (``--timeout 5 --retries 0``) converts one document per behaviour,
every call in flight at once against a raw-socket server started here that answers each document's call
with its behaviour. Each behaviour is one test: its document must end ERROR with a one-line cause naming
what the server sent wrong (or, for a complete answer, go through validation). The process must end by
itself within timeout x tries + 30 s of the first call, and its peak memory (``os.wait4``'s, which counts the
workers it reaped, taken by a small launcher) must stay under 600 MB with all of them at once. One process
rather than one per behaviour: the start-up (imports, worker processes) is paid once, and the bounds hold for
the sum.

Then Ctrl-C and SIGTERM while a call hangs (no answer; an answer stalled mid-body): the run ends within 10 s,
marked interrupted, and the same command run again finishes the document.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from extractor.vocab import ExitCode
from tests.support.batch import ROOT, answer_for, cli_env, extract_command, rows, run_cli, summary_of
from tests.support.llm_server import Reply, ScriptedLLMServer
from tests.support.raw_server import RawServer, Request, reset

TIMEOUT_S = 5
MAX_SECONDS = TIMEOUT_S * 1 + 30  # timeout x tries (--retries 0: one try) + 30 s
MAX_PEAK_MB = 600
SAMPLES_DIR = ROOT / "samples"
BLAMES_THE_USER = ("is a server running", "needs a longer --timeout")  # wrong when the server answered broken HTTP


def completion(content: str, padding: int = 0) -> bytes:
    """A chat completion whose message is ``content``, with ``padding`` spaces of JSON whitespace in it."""
    body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}], "model": "m",
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    return b"{" + b" " * padding + body[1:].encode()


def gzip_bomb(inflated: int = 1 << 30) -> bytes:
    """About 1 MB of gzip that inflates to ``inflated`` zero bytes: one fully flushed deflate block of 1 MiB of
    zeros (each such block is the same bytes), repeated. The trailer's checksum is left 0: nothing may read
    that far (the client must stop at its cap)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = deflate.compress(bytes(1 << 20)) + deflate.flush(zlib.Z_FULL_FLUSH)
    stream = block * (inflated >> 20) + deflate.flush()
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + stream + struct.pack("<II", 0, inflated & 0xFFFFFFFF)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# -------------------------------------------------------------------------------- the behaviours
# Each takes the server, the connection and the request; it returns whether to read another request.

Behaviour = Callable[[RawServer, Any, Request], bool]


def sends(data: bytes, then: str = "hold") -> Behaviour:
    """Send ``data``; then keep the connection open and silent ("hold"), read the next request on it ("next":
    after a whole, well-framed answer, which leaves the connection fit for the next call), or close it."""
    def behave(server: RawServer, connection: Any, request: Request) -> bool:
        connection.sendall(data)
        return server.hold() if then == "hold" else then == "next"
    return behave


def unframed(total: int) -> Behaviour:
    """A 200 with neither Content-Length nor chunking: the body runs until the close, ``total`` bytes of it."""
    def behave(server: RawServer, connection: Any, request: Request) -> bool:
        connection.sendall(head("HTTP/1.1 200 OK", "Content-Type: application/json"))
        piece = b" " * (1 << 20)
        for _ in range(total // len(piece)):
            connection.sendall(piece)
        return False
    return behave


def one_byte_chunks(body: bytes) -> Behaviour:
    def behave(server: RawServer, connection: Any, request: Request) -> bool:
        chunks = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body)))
        connection.sendall(head("HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Content-Type: application/json")
                           + chunks + b"0\r\n\r\n")
        return True
    return behave


def byte_per_second(server: RawServer, connection: Any, request: Request) -> bool:
    body = completion(answer_for(None))
    connection.sendall(head("HTTP/1.1 200 OK", f"Content-Length: {len(body)}"))
    for byte in body:
        connection.sendall(bytes([byte]))
        if server.closing.wait(1.0):  # one byte a second, until the test ends
            return False
    return False


def never_answers(server: RawServer, connection: Any, request: Request) -> bool:
    return server.hold()


def resets_mid_answer(server: RawServer, connection: Any, request: Request) -> bool:
    body = completion(answer_for(None))
    connection.sendall(head("HTTP/1.1 200 OK", f"Content-Length: {len(body)}") + body[:40])
    reset(connection)
    return False


def chunked(size_line: bytes) -> bytes:
    return head("HTTP/1.1 200 OK", "Transfer-Encoding: chunked") + size_line + b"\r\n"


def length(value: str) -> bytes:
    return head("HTTP/1.1 200 OK", f"Content-Length: {value}") + b'{"choices": []}'


BOMB = gzip_bomb()


@dataclass(frozen=True)
class Case:
    behaviour: Behaviour
    cause: tuple[str, ...]  # words the cause must contain (case-insensitive)
    state: str = "ERROR"
    slow: tuple[str, ...] = ()  # an answer that may take most of the timeout to read: the cause if it did not make it


CASES: dict[str, Case] = {
    "chunk size -6": Case(sends(chunked(b"-6")), ("malformed HTTP answer", "chunk size", "-6")),
    "chunk size zz": Case(sends(chunked(b"zz")), ("malformed HTTP answer", "chunk size", "zz")),
    "chunk size 2^64": Case(sends(chunked(b"10000000000000000")), ("malformed HTTP answer", "chunk size overflow")),
    "gzip bomb 1 MB -> 1 GiB": Case(
        sends(head("HTTP/1.1 200 OK", "Content-Encoding: gzip", f"Content-Length: {len(BOMB)}") + BOMB),
        ("malformed HTTP answer", "body over 64 MB after gzip")),
    "256 MB without framing": Case(unframed(256 << 20), ("malformed HTTP answer", "body over 64 MB")),
    "70 KB header line": Case(sends(head("HTTP/1.1 200 OK", "X-Big: " + "a" * 70_000, "Content-Length: 2") + b"{}"),
                              ("malformed HTTP answer", "header line over 8190 bytes")),
    "70 KB header block": Case(
        sends(head("HTTP/1.1 200 OK", *(f"X-Big-{i}: {'a' * 7000}" for i in range(10)), "Content-Length: 2") + b"{}",
              then="next"),
        ("malformed HTTP answer", "response head of", "over 64 KB")),
    "200 header lines": Case(sends(head("HTTP/1.1 200 OK", *(f"X-H{i}: v" for i in range(200)), "Content-Length: 2")
                                   + b"{}"), ("malformed HTTP answer", "too many headers")),
    "Content-Length -1": Case(sends(length("-1")), ("malformed HTTP answer", "invalid character in content-length", "-1")),
    "Content-Length +5": Case(sends(length("+5")), ("malformed HTTP answer", "invalid character in content-length", "+5")),
    "Content-Length 0x5": Case(sends(length("0x5")), ("malformed HTTP answer", "invalid character in content-length")),
    "Content-Length longer than the body, then close": Case(
        sends(head("HTTP/1.1 200 OK", "Content-Length: 1000") + completion("{}")[:50], then="close"),
        ("broken answer", "the connection ended after 50 of the 1000 body bytes")),
    "204 without Content-Length, kept open": Case(sends(head("HTTP/1.1 204 No Content"), then="next"),
                                                  ("unusable response body", "HTTP 204 with an empty body")),
    "304 without Content-Length, kept open": Case(sends(head("HTTP/1.1 304 Not Modified"), then="next"),
                                                  ("HTTP 304 from", "Error code: 304")),
    # read whole and validated: the candidate passes. Reading it costs about a second of CPU (2 us a chunk in
    # llhttp and aiohttp's stream: linear, the event loop free between reads), so on a loaded machine the 5 s
    # timeout may come first: then the cause must say how much of the answer had come
    "512 KB in 1-byte chunks": Case(one_byte_chunks(completion(answer_for(None), padding=512 << 10)), (),
                                    state="READY_FOR_REVIEW",
                                    slow=("timeout after 5 s", "reading the answer", "HTTP 200 arrived but only")),
    "one byte per second": Case(byte_per_second, ("timeout after 5 s", "reading the answer", "HTTP 200 arrived",
                                                  "body bytes followed within 5 s")),
    "accept and never answer": Case(never_answers, ("timeout after 5 s", "waiting for")),
    "reset mid-answer": Case(resets_mid_answer, ("broken answer", "the connection ended after 40 of the")),
    "not HTTP at all": Case(sends(b"SSH-2.0-OpenSSH_9.2\r\n\r\n"), ("malformed HTTP answer", "bad status line", "SSH-2.0")),
    "closed without answering": Case(sends(b"", then="close"),
                                     ("broken answer", "the server closed the connection without answering")),
}


@dataclass(frozen=True)
class Measured:
    returncode: int
    summary: dict[str, Any]
    stderr: str
    seconds: float  # from the first request's arrival to the process's end
    peak_mb: float


def run_measured(args: list[str], env: dict[str, str], cwd: Path, started: threading.Event) -> Measured:
    """Run the CLI; its exit status and peak RSS (the largest of it and the children it reaped, taken by a small
    launcher, ``tests/support/peak.py``, so that this test process's own size is not counted), and the seconds
    from ``started`` (set by the server on the first request) to its end.

    A process still running ``MAX_SECONDS`` after the first request is killed and the test fails: it did not
    end by itself.
    """
    out, err, peak = cwd / "stdout.txt", cwd / "stderr.txt", cwd / "peak.txt"
    launcher = [sys.executable, str(ROOT / "tests" / "support" / "peak.py"), str(peak), "--"]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen([*launcher, *extract_command(*args)], env=env, cwd=cwd, stdout=stdout,
                                   stderr=stderr, start_new_session=True)
    while not started.wait(1.0):  # start-up (imports, reading the documents) is the machine's load, not the server's
        if process.poll() is not None:
            pytest.fail(f"ended before any model call: {err.read_text(errors='replace')[-2000:]}")
    began = time.monotonic()
    try:
        process.wait(MAX_SECONDS + 30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"still running {time.monotonic() - began:.0f} s after the first model call: {' '.join(args)}")
    seconds = time.monotonic() - began
    text = out.read_text(errors="replace")
    return Measured(process.returncode, json.loads(text[text.index("{"):]) if "{" in text else {},
                    err.read_text(errors="replace"), seconds, int(peak.read_text()) / 1024)


TITLE = re.compile(r"Purchase Request Approval Procedure (\d+)")


def write_documents(folder: Path, count: int) -> None:
    """``count`` copies of the English sample, numbered in the title line (which its candidate leaves EXCLUDED)."""
    lines = (SAMPLES_DIR / "en_purchase_approval.md").read_text(encoding="utf-8").split("\n")
    folder.mkdir(parents=True)
    for number in range(count):
        (folder / f"{number:02d}.md").write_text("\n".join([f"{lines[0]} {number}", *lines[1:]]), encoding="utf-8")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    """One ``extract run`` of one document per behaviour, all calls in flight at once against one server that
    answers each document's call with that document's behaviour. One process for all of them: its time and
    memory bound every behaviour at once (a gzip bomb, 256 MB unframed and the rest in the same seconds)."""
    folder = tmp_path_factory.mktemp("hostile")
    names = list(CASES)
    write_documents(folder / "docs", len(names))

    calls: list[tuple[str, bool]] = []  # each call's document, and whether its connection had served one before
    served: set[Any] = set()

    def answer(connection: Any, request: Request) -> bool:
        found = TITLE.search(request.body.decode("utf-8", "replace"))
        assert found, request.body[:200]
        name = names[int(found[1])]
        calls.append((name, connection in served))
        served.add(connection)
        return CASES[name].behaviour(server, connection, request)

    with RawServer(answer) as server:
        run = run_measured(["run", str(folder / "docs"), "--model", "openai:m", "--base-url", server.base_url,
                            "--timeout", str(TIMEOUT_S), "--retries", "0", "--concurrency", str(len(names)),
                            "--format", "json"],
                           cli_env(server.base_url, f"sqlite:///{folder}/runs.db"), folder, server.received)
    # one call per document, no retry with --retries 0; but a call sent on a kept-alive connection (one a 204 or 304
    # left fit for the next call) that the server then closes without answering is sent once more, on a new
    # connection (extractor.providers.transport): the race every keep-alive client has, not a retry
    counted = Counter(name for name, _ in calls)
    resent = {name for name, reused in calls if reused and name == "closed without answering"}
    assert len(server.requests) == len(calls) and set(counted) == set(names), counted
    assert all(counted[name] == (2 if name in resent else 1) for name in names), (counted, calls)
    return run


def test_the_run_with_every_hostile_server_ends_by_itself_in_bounded_time_and_memory(hostile_run: Measured) -> None:
    assert hostile_run.seconds < MAX_SECONDS, f"{hostile_run.seconds:.1f} s after the first call"
    assert hostile_run.peak_mb < MAX_PEAK_MB, f"peak RSS {hostile_run.peak_mb:.0f} MB"
    assert hostile_run.returncode == ExitCode.NOT_EVALUABLE  # documents the model never answered
    assert "Traceback" not in hostile_run.stderr


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_server_ends_the_document_with_a_cause_naming_what_it_sent(hostile_run: Measured, name: str) -> None:
    number = list(CASES).index(name)
    [outcome] = [o for o in hostile_run.summary["outcomes"] if o["path"].endswith(f"{number:02d}.md")]
    case = CASES[name]
    cause = outcome["cause"] or ""
    expected = case.cause
    if case.slow and outcome["state"] == "ERROR":
        expected = case.slow
    else:
        assert outcome["state"] == case.state, outcome
    if outcome["state"] == "ERROR":
        assert "\n" not in cause and len(cause) < 600, cause
        for words in expected:
            assert words.lower() in cause.lower(), cause
        if not expected[0].startswith("timeout"):
            assert not any(blame in cause for blame in BLAMES_THE_USER), cause


def stalls_mid_body(server: RawServer, connection: Any, request: Request) -> bool:
    body = completion(answer_for(None))
    connection.sendall(head("HTTP/1.1 200 OK", f"Content-Length: {len(body)}") + body[:100])
    return server.hold()


@pytest.mark.parametrize("number, hang", [(signal.SIGTERM, never_answers), (signal.SIGINT, stalls_mid_body)],
                         ids=["SIGTERM, no answer", "Ctrl-C, answer stalled mid-body"])
def test_a_signal_during_a_hung_call_ends_the_run_within_10_s_and_a_rerun_finishes(
        tmp_path: Path, number: signal.Signals, hang: Behaviour) -> None:
    write_documents(tmp_path / "docs", 1)
    db_url = f"sqlite:///{tmp_path}/runs.db"
    command = ("run", str(tmp_path / "docs"), "--model", "openai:m", "--retries", "0", "--format", "json")
    with RawServer(lambda connection, request: hang(server, connection, request)) as server:
        running = subprocess.Popen(extract_command(*command, "--timeout", "120"), env=cli_env(server.base_url, db_url),
                                   cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not server.received.wait(1.0):
            assert running.poll() is None, running.communicate()
        signalled = time.monotonic()
        running.send_signal(number)
        out, err = running.communicate(timeout=60)
        seconds = time.monotonic() - signalled
    assert seconds < 10, f"{seconds:.1f} s from the signal to the end"
    assert running.returncode == ExitCode.INTERRUPTED, err
    assert "Traceback" not in err
    assert rows(db_url, "SELECT status FROM runs") == [("interrupted",)]
    assert rows(db_url, "SELECT state FROM document_runs") == [("INTERRUPTED",)]

    with ScriptedLLMServer(lambda request, number: Reply(answer_for(request))) as answering:
        rerun = run_cli(*command, env=cli_env(answering.base_url, db_url), cwd=tmp_path)
    assert rerun.returncode == ExitCode.OK, rerun.stderr
    assert summary_of(rerun)["counts"] == {"READY_FOR_REVIEW": 1}
