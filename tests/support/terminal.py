"""Running a command at a real terminal (a pseudo-terminal of a given size), as a person at a shell would, and
reading the screen it drew: rich draws differently at a terminal than into a pipe."""

from __future__ import annotations

import codecs
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping
from pathlib import Path

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
"""Colours, cursor moves and carriage returns: what a terminal obeys and a test reads past."""


def plain(drawn: str) -> str:
    """What was drawn without its escapes."""
    return ESCAPES.sub("", drawn)


def at_terminal(command: list[str], *, env: Mapping[str, str], cwd: Path, columns: int = 80, rows: int = 24,
                stdout_too: bool = True, timeout: float = 120,
                watch: Callable[[str], None] | None = None) -> tuple[int, str, str]:
    """Run ``command`` with stderr (and stdout, unless ``stdout_too`` is False) on a terminal ``columns`` wide;
    ``watch`` sees the screen (escapes removed) each time more of it is drawn. Returns the exit code, what was
    drawn on the terminal (escapes kept) and stdout when it went to a pipe."""
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full = {key: value for key, value in env.items() if key not in ("COLUMNS", "LINES")} | {"TERM": "xterm-256color"}
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=terminal if stdout_too else subprocess.PIPE,
                               stderr=terminal, env=full, cwd=cwd, text=True)
    os.close(terminal)
    drawn = ""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character may be split between two reads
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1)[0]:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the command ended: its side of the terminal is closed
                break
            if not chunk:
                break
            drawn += decoder.decode(chunk)
            if watch is not None:
                watch(plain(drawn))
        out = process.stdout.read() if process.stdout is not None else ""
        return process.wait(timeout=timeout), drawn, out
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
