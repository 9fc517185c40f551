"""Long-running CLI processes of a test (workers, a server): started with their output in files, always stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.support.batch import ROOT, extract_command

PEAK = ROOT / "tests" / "support" / "peak.py"
"""``python peak.py OUT -- COMMAND...``: the largest peak resident size of the command's processes, in KiB, to OUT."""


class Processes:
    """``extract`` processes started by one test; ``stop_all`` ends the ones still running (SIGTERM, then SIGKILL)."""

    def __init__(self, env: Mapping[str, str], folder: Path) -> None:
        self.env = dict(env)
        self.folder = folder
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, peak: Path | None = None, **extra_env: str) -> subprocess.Popen[bytes]:
        """``extract ARGS``; with ``peak``, under ``peak.py``, which writes the largest peak of its processes there
        when it has ended (a signal to the launcher is passed on to it)."""
        log = self.folder / f"process-{len(self.started)}.log"
        command = extract_command(*args)
        if peak is not None:
            command = [sys.executable, str(PEAK), str(peak), "--", *command]
        with log.open("wb") as output:
            process = subprocess.Popen(command, env=self.env | extra_env, cwd=self.folder, stdout=output,
                                       stderr=subprocess.STDOUT)
        self.started.append(process)
        return process

    def log_of(self, process: subprocess.Popen[bytes]) -> str:
        return (self.folder / f"process-{self.started.index(process)}.log").read_text(errors="replace")

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL, and reap it: a zombie would still look alive to the run log's pid check."""
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.terminate()
        for process in self.started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 180,
             watch: tuple[subprocess.Popen[bytes] | subprocess.Popen[str], ...] = ()) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` s, or as soon as a watched
    process ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        for process in watch:
            if process.poll() is not None:
                pytest.fail(f"a process ended ({process.returncode}) while waiting for {what}")
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` now (children, theirs, ...): a worker process is forked by a fork server, so it is
    a grandchild of the run or worker that uses it."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, stack = [], list(children.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, []))
    return found


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and every process below it, now (0 once it is gone)."""
    table = _process_table()
    return sum(table[member][1] for member in [pid, *descendants(pid)] if member in table)


class TreePeak:
    """The largest resident size of the process trees of ``pids`` together (``tree_rss``, summed), sampled every
    20 ms by a thread from ``start`` to ``stop`` or the processes' end: a sum over processes at one moment, which
    the kernel's per-process peak (``peak.py``) cannot give. A sample can miss a peak between two, never report one
    that was not."""

    SAMPLE_S = 0.02

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> TreePeak:
        self._thread.start()
        return self

    def stop(self) -> int:
        """The peak in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak

    def _sample(self) -> None:
        while not self._stop.is_set() and any(alive(pid) for pid in self.pids):
            self.peak = max(self.peak, sum(tree_rss(pid) for pid in self.pids))
            self._stop.wait(self.SAMPLE_S)


def _process_table() -> dict[int, tuple[int, int]]:
    """Every process now: its parent and its resident bytes (``/proc/PID/stat``)."""
    page = os.sysconf("SC_PAGE_SIZE")
    table: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            table[int(entry.name)] = int(fields[1]), int(fields[21]) * page
    return table


def alive(pid: int) -> bool:
    """Running (a zombie, dead and not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def on_terminal(command: list[str], *, env: Mapping[str, str] | None = None, timeout: float = 120) -> tuple[int, str, str]:
    """Run ``command`` with its stderr on a terminal (a pseudo-terminal of 100 columns) and its stdout on a pipe:
    ``(exit code, stdout, what the terminal received)``, escape sequences included."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    try:
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=secondary)
    finally:
        os.close(secondary)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the process closed the terminal (EIO)
                break
            if not chunk:
                break
            received += chunk
        stdout, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(primary)
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, stdout.decode("utf-8", "replace"), received.decode("utf-8", "replace")
