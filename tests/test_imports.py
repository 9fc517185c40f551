"""What the package imports: the commands that only read the run log stay light.

``runs``, ``review``, ``show``, ``stats`` and ``doctor`` start in a fraction of a second only if they import no
document parser, no sentence splitter and no Alembic (``bench/bench_commands.py`` times them against a bare
SQLAlchemy script). Each runs here as ``extract`` runs it, in a fresh interpreter, on a run log made by the
real pipeline; then the test reads that interpreter's ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from extractor.ingest import _MODULES as FORMAT_MODULES
from tests.support.corpus import run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]

LIBRARIES = ("docx", "pypdf", "bs4", "lxml", "PIL", "openpyxl", "hwpx", "numpy", "pysbd", "razdel", "kss", "alembic")
"""Parsers, splitters and the migration tool: none of them is needed to read the run log."""
PARSERS = tuple(f"extractor.ingest.{module}" for module in sorted(set(FORMAT_MODULES.values())))
"""Our modules for the formats that need a library (a plain-text source is read without one)."""
STAGES = ("extractor.ingest", "extractor.segment", "extractor.engine")

PROBE = """if True:
    import json, sys
    from extractor.cli import app
    try:
        app(sys.argv[2:], prog_name="extract", standalone_mode=False)
        code = 0
    except SystemExit as stop:
        code = stop.code
    wanted = tuple(json.loads(sys.argv[1]))
    loaded = sorted(name for name in sys.modules if name in wanted or name.startswith(tuple(w + "." for w in wanted)))
    print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def probe(command: list[str], forbidden: tuple[str, ...], cwd: Path) -> tuple[int, list[str], str]:
    """Run ``extract COMMAND`` in a fresh interpreter: its exit code, the ``forbidden`` modules (and submodules
    of them) it imported, and its output."""
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(forbidden), *command], capture_output=True,
                            text=True, cwd=cwd, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert result.stderr.strip(), result
    report = json.loads(result.stderr.strip().splitlines()[-1])
    return report["code"], report["loaded"], result.stdout


@pytest.fixture
def run_log(tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer]) -> tuple[str, int]:
    """A run log with one run of three Markdown documents (passed, failed, warned) and a document run id."""
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    server = llm_server(script({"m": {0: "pass", 1: "fail", 2: "warn"}.__getitem__}))
    paths = write_documents(tmp_path / "docs", [0, 1, 2])
    summary = run(database, server, paths, "m")
    return database, next(o.document_run_id for o in summary.outcomes if o.path == str(paths[1]))


@pytest.mark.parametrize("command", [["runs"], ["review"], ["stats"], ["doctor"], ["show"]])
def test_read_only_commands_import_no_parser_splitter_or_alembic(command: list[str], run_log: tuple[str, int],
                                                                 tmp_path: Path) -> None:
    database, document_run = run_log
    if command == ["show"]:  # reads the Markdown source again to mark its sentences: plain text, no library
        command, forbidden = ["show", str(document_run)], LIBRARIES + PARSERS
    else:
        forbidden = LIBRARIES + PARSERS + STAGES
    code, loaded, output = probe([*command, "--database", database], forbidden, tmp_path)
    assert code == 0, output
    assert output.strip(), "the command printed nothing: it did not read the run log"
    assert loaded == [], f"extract {' '.join(command)} imported {loaded}"


def test_the_probe_sees_what_a_command_imports(tmp_path: Path) -> None:
    """The check above can fail: ``split`` reads and segments a file, which takes the splitter."""
    source = tmp_path / "a.md"
    source.write_text("# Title\n\nThe clerk records the order. The manager approves it.\n", encoding="utf-8")
    code, loaded, output = probe(["split", str(source)], ("pysbd", "extractor.segment", "extractor.ingest"), tmp_path)
    assert code == 0, output
    assert {"pysbd", "extractor.segment", "extractor.ingest"} <= set(loaded)
