"""Every library extractor imports is one pyproject.toml declares, with its floor (docs/development.md): a library
that arrives only because another dependency brings it can leave, or arrive older than the code needs, with any
release of that other one."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = {"tiktoken": "counts an OpenAI model's tokens when it is installed (extractor/windows/tokens.py)"}
"""Imported only when present; the code works without them."""


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]).lower()


def test_every_library_extractor_imports_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    declared = {_name(requirement) for requirement in project["dependencies"]}
    declared |= {_name(requirement) for extra in ("local", "postgres") for requirement in
                 project["optional-dependencies"][extra]}
    modules: dict[str, str] = {}
    for path in sorted((ROOT / "extractor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top != "extractor" and top not in sys.stdlib_module_names:
                    modules.setdefault(top, str(path.relative_to(ROOT)))
    distributions = packages_distributions()
    undeclared = {module: where for module, where in modules.items()  # an extra not installed here is not read
                  if module not in OPTIONAL and module in distributions
                  and not {_name(dist) for dist in distributions[module]} & declared}
    assert undeclared == {}, "imported but not declared in pyproject.toml (module: first file importing it)"
    assert len(modules) > 40, sorted(modules)  # the walk found the imports
