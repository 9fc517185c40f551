"""Hostile files in a batch through the CLI: each costs its own document, in one INPUT_ERROR line naming the file
and the limit, while the good files of the same batch finish; no process of the run passes the reading limit.

The files are built here, at run time, with the real writers (openpyxl, python-hwpx) or as raw bytes, and read with
a reading limit of 512 MiB (``EXTRACT_READ_MEMORY``; docs/formats.md#reading-limits). What a reader's own checks
refuse first (a zip member's size, a PDF's object count) is as good an ending as the sandbox's: the line must still
be one line naming the file, never a traceback or "internal error".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.batch import ROOT, answer_for, cli_env, extract_command, run_cli, summary_of
from tests.support.hostile import long_hwpx, reference_loop_pdf, shared_string_bomb, sparse_text
from tests.support.llm_server import Reply, ScriptedLLMServer

PEAK = ROOT / "tests" / "support" / "peak.py"
LIMIT = 512 << 20
GOOD = ["en_purchase_approval.md", "ko_work_request_review.txt", "ru_vacation_approval.txt"]


def peak_of(out: Path) -> int:
    """Bytes: the largest peak resident size of any process of the command (``tests/support/peak.py``)."""
    return int(out.read_text()) * 1024


def test_a_batch_with_hostile_files_finishes_its_good_files(llm_server: Callable[..., ScriptedLLMServer],
                                                             tmp_path: Path) -> None:
    folder = tmp_path / "batch"
    folder.mkdir()
    for name in GOOD:
        shutil.copy(ROOT / "samples" / name, folder / name)
    loop = reference_loop_pdf(folder / "loop.pdf")  # PDFium reads it (no reference loop to follow): a document
    hostile = {
        shared_string_bomb(folder / "shared_strings.xlsx"): None,  # the memory limit, or a reader's own refusal
        long_hwpx(folder / "long.hwpx"): "text over 2,000,000 characters (the reading limit EXTRACT_READ_TEXT); refused",
        sparse_text(folder / "huge.txt"): "over the 512 MiB reading limit (EXTRACT_READ_MEMORY)",
    }
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_READ_TIMEOUT="20", EXTRACT_MAX_DOCUMENT_BYTES=str(700 << 20), EXTRACT_READERS="2")
    peak = tmp_path / "peak"
    result = run_cli_measured(peak, "run", str(folder), "--model", "openai:scripted", "--format", "json", env=env,
                              cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stdout
    outcomes = {Path(o["path"]).name: o for o in summary_of(result)["outcomes"]}
    assert {name: outcomes[name]["state"] for name in GOOD} == dict.fromkeys(GOOD, "READY_FOR_REVIEW")
    assert outcomes[loop.name]["state"] not in ("INPUT_ERROR", "ERROR"), outcomes[loop.name]
    for path, says in hostile.items():
        outcome = outcomes[path.name]
        cause = outcome["cause"]
        assert outcome["state"] == "INPUT_ERROR" and cause.startswith(f"{path}: ") and "\n" not in cause, outcome
        assert "internal error" not in cause and "MemoryError" not in cause, cause
        if says is not None:
            assert cause == f"{path}: {says}"
    assert peak_of(peak) < LIMIT + (64 << 20), f"a process of the run peaked at {peak_of(peak) >> 20} MiB"


def run_cli_measured(out: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``extract ARGS`` under ``tests/support/peak.py``, which writes the largest peak of its processes to ``out``."""
    return subprocess.run([sys.executable, str(PEAK), str(out), "--", *extract_command(*args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=600)


def test_split_of_a_hostile_file_is_one_line(tmp_path: Path) -> None:
    """``extract split`` reads its file in a reader of its own, with the same limits: exit 2 and one line."""
    path = sparse_text(tmp_path / "huge.txt")
    env = cli_env("http://127.0.0.1:9", f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_MAX_DOCUMENT_BYTES=str(700 << 20))
    result = run_cli("split", str(path), env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    assert result.stderr == f"error: {path}: over the 512 MiB reading limit (EXTRACT_READ_MEMORY)\n"
