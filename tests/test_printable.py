"""Nothing prints raw control characters (``extractor.printable``): a file name or a document cannot drive the
terminal or forge a line of output; ``--format json`` keeps every value exact."""

from __future__ import annotations

import json
from pathlib import Path

from extractor.printable import printable
from tests.support.batch import cli_env, run_cli

FORGING = "report\x1b[2J\r\nINPUT_ERROR forged.md"


def test_controls_are_shown_escaped_and_everything_else_is_kept() -> None:
    assert printable("a\x1b[31mred\x07\x00\x7f\x9b\u202eevil\u2028") == "a\\x1b[31mred\\x07\\x00\\x7f\\x9b\\u202eevil\\u2028"
    assert printable("line\r\nnext\tcell") == "line\\r\\nnext\\tcell"
    assert printable("line\r\nnext\tcell", lines=True) == "line\\r\nnext\tcell"
    assert printable("작업 요청 · Заявление № 7 — “ok”") == "작업 요청 · Заявление № 7 — “ok”"


def test_a_file_name_cannot_forge_a_line_of_the_run(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / f"{FORGING}.md").write_text("", encoding="utf-8")  # empty: it ends INPUT_ERROR
    env = cli_env("http://127.0.0.1:9", f"sqlite:///{tmp_path}/runs.db")
    shown = run_cli("run", str(folder), "--model", "openai:scripted", env=env, cwd=tmp_path, timeout=300)
    output = shown.stdout + shown.stderr
    assert shown.returncode == 2, output[-2000:]
    assert "\x1b[2J" not in output and "\r" not in output
    lines = [line for line in output.splitlines() if "forged" in line]  # its stderr line, the summary's list
    assert lines and all("report\\x1b[2J\\r\\nINPUT_ERROR forged.md" in line for line in lines), lines
    assert not any(line.lstrip().startswith("INPUT_ERROR forged") for line in lines), lines
    assert any(line.startswith(f"INPUT_ERROR {folder}") for line in lines), lines
    exact = run_cli("run", str(folder), "--model", "openai:scripted", "--format", "json", env=env, cwd=tmp_path,
                    timeout=300)
    outcomes = json.loads(exact.stdout[exact.stdout.index("{"):])["outcomes"]
    assert [outcome["path"] for outcome in outcomes] == [str(folder / f"{FORGING}.md")]
