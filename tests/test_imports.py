"""What the package imports: no import circle anywhere; the commands that only read the run log stay light.

Imports go one way (docs/design.md#data-flow): no module of ``extractor`` imports, directly or through others,
a module that imports it, counting imports inside functions and under ``TYPE_CHECKING`` (a circle that only
works because one side imports late is still a circle: neither module can be read or moved alone).

``runs``, ``review``, ``show``, ``stats`` and ``doctor`` start in a fraction of a second only if they import no
document parser, no sentence splitter and no Alembic (``bench/bench_commands.py`` times them against a bare
SQLAlchemy script). Each runs here as ``extract`` runs it, in a fresh interpreter, on a run log made by the
real pipeline; then the test reads that interpreter's ``sys.modules``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from extractor.ingest import _MODULES as FORMAT_MODULES
from tests.support.corpus import run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]


# --- import circles ------------------------------------------------------------------------------------


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The package's modules ``name`` imports anywhere in its file, with the line: ``from a import b`` is
    module ``a.b`` when that is a module, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    """Module -> the modules it imports -> the line of the first such import."""
    known = modules(package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges = graph.setdefault(name, {})
        for target, line in imported(name, path, known):
            edges.setdefault(target, line)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One shortest circle through each group of modules that import each other (Tarjan's strongly connected
    components, then a breadth-first path back to the group's first module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(start: str) -> None:  # iterative: the package is deep enough for Python's recursion limit
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[node] = min(low[node], index[target])

    for name in sorted(graph):
        if name not in index:
            visit(name)
    found = []
    for group in groups:
        first = min(group)
        paths = {first: [first]}
        queue = [first]
        while queue:
            node = queue.pop(0)
            for target in sorted(graph[node]):
                if target == first:
                    found.append(paths[node] + [first])
                    queue = []
                    break
                if target in group and target not in paths:
                    paths[target] = paths[node] + [target]
                    queue.append(target)
    return found


def described(circle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(circle, circle[1:])) + f" -> {circle[-1]}"


def test_no_module_imports_a_module_that_imports_it() -> None:
    graph = import_graph(ROOT / "extractor")
    assert len(graph) > 100 and "extractor.rules.guards" in graph["extractor.rules.catalogue"]
    found = [described(circle, graph) for circle in circles(graph)]
    assert not found, "import circles (docs/design.md#data-flow):\n" + "\n".join(found)


def test_the_circle_check_finds_and_names_a_circle(tmp_path: Path) -> None:
    """The check above can fail: a package whose modules import each other, one of them late."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.b import B\n")
    (package / "a.py").write_text("from pkg.sub import B\n")
    (package / "sub" / "b.py").write_text("B = 1\n\n\ndef late():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import x\n")
    graph = import_graph(package)
    assert circles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
    assert described(circles(graph)[0], graph).startswith("pkg.a (line 1) -> pkg.sub (line 1) -> pkg.sub.b (line 5)")


# --- read-only commands -----------------------------------------------------------------------------

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
