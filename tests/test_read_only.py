"""A run log in a folder the user may not write: commands that only read open it read-only and work, saying so
in one line; commands that write (a run, a decision) refuse at once with one line naming the folder.

The folder is made read-only for real: a read-only bind mount in a mount namespace of its own when the tests run
as root (root writes through any permission bits), else its permission bits. Real SQLite files, the CLI as a
subprocess, a scripted model server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from extractor.vocab import ExitCode
from tests.support.batch import cli_env, extract_command
from tests.support.corpus import script, write_documents
from tests.support.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]


def read_only(folder: Path, command: list[str]) -> list[str]:
    """``command`` run with ``folder`` read-only (see the module's docstring)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare(1): cannot make a folder read-only for root")
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", mount, str(folder), *command]


@pytest.fixture
def folder(tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer]) -> Path:
    """A folder holding a run log (extract.db, the default) of one run of two documents that need a person."""
    work = tmp_path / "work"
    paths = write_documents(work / "docs", [1, 2])
    server = llm_server(script({"m": lambda number: "fail"}))
    env = cli_env(server.base_url, "") | {"EXTRACT_DATABASE_URL": ""}
    done = subprocess.run(extract_command("run", *map(str, paths), "--model", "openai:m"), capture_output=True,
                          text=True, env=env, cwd=work, timeout=600)
    assert done.returncode == ExitCode.MANUAL_REVIEW, done.stderr
    assert (work / "extract.db").exists() and not (work / "extract.db-wal").exists()
    if os.geteuid() != 0:
        work.chmod(0o555)
    yield work
    work.chmod(0o755)


def extract(folder: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EXTRACT_", "OPENAI_"))} | extra
    return subprocess.run(read_only(folder, extract_command(*args)), capture_output=True, text=True, env=env,
                          cwd=folder, timeout=600)


NOTE = "is read-only: the run log is opened read-only"


def test_commands_that_only_read_work_in_a_read_only_folder(folder: Path, tmp_path: Path) -> None:
    listed = extract(folder, "runs", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.strip() == f"note: {folder} {NOTE}"
    [run] = json.loads(listed.stdout)
    assert run["counts"] == {"MANUAL_REVIEW": 2}
    for args in (["review"], ["show", "docs/purchase_01.md"], ["stats"], ["show", run["id"][:6]],
                 ["export", "--format", "csv", "--out", str(tmp_path / "approved.csv")]):
        result = extract(folder, *args)
        assert result.returncode == 0 and f"{NOTE}" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and "OperationalError" not in result.stderr, (args, result.stderr)
    assert "2 document(s) waiting for review" in extract(folder, "review").stdout
    scored = extract(folder, "eval", run["id"][:6], "--gold", str(tmp_path / "gold"))
    assert scored.returncode == ExitCode.USAGE and "gold" in scored.stderr  # (no such gold folder: its own error)


def test_commands_that_write_refuse_in_a_read_only_folder_with_one_line(folder: Path) -> None:
    expected = (f"error: {folder} is read-only: the run log extract.db cannot be written there; run in a folder you "
                "can write to, or point --database / EXTRACT_DATABASE_URL at one elsewhere")
    for args in (["approve", "docs/purchase_01.md", "--reviewer", "me"],
                 ["reject", "docs/purchase_01.md", "--reviewer", "me", "--reason", "wrong"],
                 ["run", "docs", "--model", "openai:m"]):
        result = extract(folder, *args, OPENAI_BASE_URL="http://127.0.0.1:9/v1")  # (never called)
        assert result.returncode == ExitCode.USAGE, (args, result.stdout, result.stderr)
        assert result.stderr.strip().splitlines()[-1] == expected, (args, result.stderr)


def test_a_read_only_run_log_reads_what_a_killed_writer_left_in_its_wal(folder: Path) -> None:
    """A -wal file left beside the run log holds committed transactions: the read-only open reads them too."""
    if os.geteuid() != 0:
        folder.chmod(0o755)
    writer = ("import os, sqlite3, sys\n"
              "c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_autocheckpoint = 0')\n"
              "c.execute(\"UPDATE runs SET command = 'written to the WAL only'\"); c.commit()\n"
              "os._exit(0)  # killed: the WAL is not checkpointed, the -wal file stays\n")
    subprocess.run([sys.executable, "-c", writer, str(folder / "extract.db")], check=True, timeout=60)
    assert (folder / "extract.db-wal").stat().st_size > 0
    if os.geteuid() != 0:
        folder.chmod(0o555)
    listed = extract(folder, "runs", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert [run["command"] for run in json.loads(listed.stdout)] == ["written to the WAL only"]
