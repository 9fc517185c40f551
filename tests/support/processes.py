"""Long-running CLI processes of a test (workers, a server): started with their output in files, always stopped."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.support.batch import extract_command


class Processes:
    """``extract`` processes started by one test; ``stop_all`` ends the ones still running (SIGTERM, then SIGKILL)."""

    def __init__(self, env: Mapping[str, str], folder: Path) -> None:
        self.env = dict(env)
        self.folder = folder
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str, **extra_env: str) -> subprocess.Popen[bytes]:
        log = self.folder / f"process-{len(self.started)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(extract_command(*args), env=self.env | extra_env, cwd=self.folder,
                                       stdout=output, stderr=subprocess.STDOUT)
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
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue

    def below(parent: int) -> list[int]:
        children = [child for child, its in parents.items() if its == parent]
        return children + [grandchild for child in children for grandchild in below(child)]

    return below(pid)


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
    import os
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
