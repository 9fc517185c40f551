"""Usage errors are one line on stderr with exit 2, and a typo never passes silently.

Each command runs as a subprocess, as a shell runs it: a missing option or argument, an unknown option or
command, a value out of range; ``export --explode`` of a field no record has; ``--contracts DIR`` pointing
at a folder that holds no ``<name>/v<N>/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.corpus import run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]


def extract(*args: str, cwd: Path, database: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EXTRACT_", "OPENAI_"))}
    if database:
        env["EXTRACT_DATABASE_URL"] = database
    return subprocess.run([sys.executable, "-m", "extractor", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def assert_one_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "╭" not in result.stderr and "Usage:" not in result.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.fixture(scope="module")
def approved(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A run log with one approved work procedure record."""
    folder = tmp_path_factory.mktemp("usage")
    url = f"sqlite:///{folder}/extract.db"
    [path] = write_documents(folder / "docs", [1])
    with ScriptedLLMServer(script({"m": lambda number: "pass"})) as server:
        run(url, server, [path], "m")
    approval = extract("approve", str(path), "--reviewer", "kim", cwd=folder, database=url)
    assert approval.returncode == 0, approval.stderr
    yield folder, url


@pytest.mark.parametrize(("args", "words"), [
    (["approve", "1"], ["--reviewer", "approve --help"]),
    (["reject", "1", "--reviewer", "kim"], ["--reason", "reject --help"]),
    (["export"], ["--out", "export --help"]),
    (["show"], ["RUN_OR_DOC", "show --help"]),
    (["runs", "--limt", "3"], ["--limt", "--limit"]),
    (["run", "--concurrency", "0", "x.md"], ["--concurrency"]),
    (["review", "--state", "nope"], ["'nope'", "ready"]),
    (["nosuch"], ["nosuch"]),
    (["rules", "calibrate"], ["RULE_ID"]),
], ids=lambda value: " ".join(value) if isinstance(value, list) and value and value[0][0] != "-" else None)
def test_a_usage_error_is_one_line(args: list[str], words: list[str], approved: tuple[Path, str]) -> None:
    folder, url = approved
    assert_one_line(extract(*args, cwd=folder, database=url), *words)


def test_explode_of_a_field_no_record_has_is_refused_and_writes_nothing(approved: tuple[Path, str]) -> None:
    folder, url = approved
    out = folder / "rows.csv"
    result = extract("export", "--format", "csv", "--out", str(out), "--explode", "nosuch", cwd=folder, database=url)
    assert_one_line(result, "--explode nosuch", "processSteps", "participants")
    assert not out.exists()
    good = extract("export", "--format", "csv", "--out", str(out), "--explode", "processSteps", cwd=folder,
                   database=url)
    assert good.returncode == 0, good.stderr
    assert "processSteps.index" in out.read_text(encoding="utf-8").splitlines()[0]


@pytest.mark.parametrize("command", [
    ["contracts"],
    ["rules"],
    ["contracts", "check", "purchase_order"],
    ["validate", "samples/expected/purchase_orders/en_sku_transposed.candidate.json", "--source",
     "samples/purchase_orders/en_purchase_order.md", "--contract", "purchase_order"],
    ["run", "samples/purchase_orders", "--contract", "purchase_order"],
], ids=lambda command: command[0] + (f" {command[1]}" if command[1:2] == ["check"] else ""))
def test_contracts_folder_without_contracts_is_refused(command: list[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = extract(*command, "--contracts", str(empty), cwd=ROOT)
    assert_one_line(result, str(empty), "no contract inside")
    deep = extract(*command, "--contracts", "samples/contracts/purchase_order", cwd=ROOT)
    assert_one_line(deep, "did you mean --contracts", str(ROOT / "samples/contracts"))
