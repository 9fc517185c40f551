"""What the package imports: its packages in layers, no import circle anywhere, light read-only commands.

Imports go one way (docs/design.md#data-flow). Between extractor's packages and top-level modules, the layers
in pyproject.toml (``[tool.importlinter]``) say which may import which; ``lint-imports`` checks them, imports
through other modules included. Within a package, no module imports, directly or through others, a module that
imports it. Both count imports inside functions and under ``TYPE_CHECKING`` (a circle that only works because
one side imports late is still a circle: neither module can be read or moved alone); grimp reads the imports.

``runs``, ``review``, ``show``, ``stats`` and ``doctor`` start in a fraction of a second only if they import no
document parser, no sentence splitter, no Alembic, no stage that makes records, no schema validator, no model
or queue client, no configuration-file models (pydantic), no SQLAlchemy ORM and, on SQLite, no other database's SQLAlchemy dialect
(``bench/bench_commands.py`` times them against a bare SQLAlchemy script). Each runs here as ``extract`` runs it,
in a fresh interpreter, on a run log made by the real pipeline; then the test reads that interpreter's
``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grimp
import pytest

from extractor.ingest import _MODULES as FORMAT_MODULES
from tests.support.corpus import run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


# --- layers and import circles ----------------------------------------------------------------------------


def lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the contracts in ``cwd``'s pyproject.toml, reading the package from ``pythonpath``."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(pythonpath)})


def test_packages_import_only_the_layers_below_them() -> None:
    result = lint_imports(ROOT, ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_the_layer_check_names_an_import_going_up(tmp_path: Path) -> None:
    """The check above can fail: the lowest layer importing the highest, inside a function."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("from pkg import middle\n")
    (package / "middle.py").write_text("from pkg import low\n")
    (package / "low.py").write_text("def late():\n    from pkg.high import x\n")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_package = "pkg"\n\n[[tool.importlinter.contracts]]\nname = "layers"\n'
        'type = "layers"\ncontainers = ["pkg"]\nexhaustive = true\nlayers = ["high", "middle", "low"]\n')
    result = lint_imports(tmp_path, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "pkg.low -> pkg.high (l.2)" in result.stdout


def circles(package: str) -> list[str]:
    """One line per circle of imports among ``package``'s modules (a package is its ``__init__``), each import
    with its line: an import ``a -> b`` and the shortest way from ``b`` back to ``a``."""
    graph = grimp.build_graph(package, cache_dir=None)
    found: dict[frozenset[str], str] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is None or frozenset(back) in found:
                continue
            circle = (importer, *back)
            found[frozenset(back)] = " -> ".join(
                f"{a} (line {graph.get_import_details(importer=a, imported=b)[0]['line_number']})"
                for a, b in zip(circle, circle[1:])) + f" -> {importer}"
    return list(found.values())


def test_no_module_imports_a_module_that_imports_it() -> None:
    graph = grimp.build_graph("extractor", cache_dir=None)
    assert len(graph.modules) > 100 and graph.direct_import_exists(importer="extractor.rules.catalogue",
                                                                   imported="extractor.rules.guards")
    found = circles("extractor")
    assert not found, "import circles (docs/design.md#data-flow):\n" + "\n".join(found)


def test_the_circle_check_finds_and_names_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a package whose modules import each other, one of them late."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.b import B\n")
    (package / "a.py").write_text("from pkg.sub import B\n")
    (package / "sub" / "b.py").write_text("B = 1\n\n\ndef late():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles("pkg") == ["pkg.a (line 1) -> pkg.sub (line 1) -> pkg.sub.b (line 5) -> pkg.sub.c (line 3) -> pkg.a"]


# --- read-only commands -----------------------------------------------------------------------------

LIBRARIES = ("docx", "pypdf", "bs4", "lxml", "PIL", "openpyxl", "hwpx", "numpy", "scipy", "pysbd", "razdel",
             "alembic", "jsonschema", "jsonschema_rs", "httpx", "celery", "llama_cpp", "pydantic")
"""Parsers, splitters, the migration tool, the maths of calibration, schema validators, the model and queue
clients, pydantic (``extract run``'s options are made from ``extractor.options.RunOptions`` only when that command
runs or shows its help): none of them is needed to read the run log."""
SQLALCHEMY_UNUSED = ("sqlalchemy.orm", "sqlalchemy.dialects.postgresql")
"""SQLAlchemy's ORM (the store reads and writes Core tables; with declarative classes it cost about 0.1 s) and its
PostgreSQL dialect (about 40 ms: a run log in SQLite needs only SQLite's)."""
PARSERS = tuple(f"extractor.ingest.{module}" for module in sorted(set(FORMAT_MODULES.values())))
"""Our modules for the formats that need a library (a plain-text source is read without one)."""
STAGES = ("extractor.ingest", "extractor.segment", "extractor.engine", "extractor.windows", "extractor.judge",
          "extractor.contracts", "extractor.rules")
"""The stages that make records: reading what they recorded needs none of them (``show`` reads the Markdown source
again, through ``ingest`` and ``segment``, to mark its sentences)."""
WRITERS = ("extractor.generate", "extractor.providers.openai_compat", "extractor.calibration_report")
"""What builds and sends requests and the calibration report's types: the store imports them only where it writes a
request or reads a report back (about 25 ms of every command's start when imported at the top)."""
CONFIGURATION = ("pydantic", "extractor.configfile")
"""The models of the operator's configuration files: a price file is read into them only when it changed since it
was last validated (tests/test_cost.py), and no other configuration file is read to show the run log."""

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
        command, forbidden = ["show", str(document_run)], LIBRARIES + PARSERS + ("extractor.judge", "extractor.rules")
        forbidden += WRITERS
    else:
        forbidden = LIBRARIES + PARSERS + STAGES + WRITERS
    forbidden += SQLALCHEMY_UNUSED + CONFIGURATION
    code, loaded, output = probe([*command, "--database", database], forbidden, tmp_path)
    assert code == 0, output
    assert output.strip(), "the command printed nothing: it did not read the run log"
    assert loaded == [], f"extract {' '.join(command)} imported {loaded}"


def test_the_probe_sees_what_a_command_imports(tmp_path: Path) -> None:
    """The check above can fail: ``validate`` checks a candidate with the rules in its own process (the source is
    read in a reader, a process of its own)."""
    source = tmp_path / "a.md"
    source.write_text("# Title\n\nThe clerk records the order. The manager approves it.\n", encoding="utf-8")
    candidate = tmp_path / "candidate.json"
    candidate.write_text("{}", encoding="utf-8")
    code, loaded, output = probe(["validate", str(candidate), "--source", str(source)],
                                 ("extractor.rules", "extractor.validate"), tmp_path)
    assert "FAILED" in output, output  # (the probe reports the exit of its own wrapper)
    assert {"extractor.rules", "extractor.validate"} <= set(loaded)
