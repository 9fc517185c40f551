"""Processes a bench starts run extractor as an installed copy does: from bytecode.

A shell with ``PYTHONDONTWRITEBYTECODE`` set (this sandbox sets it) makes every new ``extract`` process compile
the package's modules from source again, while the libraries it is compared with were compiled when pip
installed them: about 55 ms of each read-only command's start and far more of a worker's went on compiling our
own code. ``as_installed`` compiles the package once and lets the processes the bench starts read the bytecode.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "extractor"


def as_installed() -> None:
    """Compile ``extractor`` and let child processes use (and write) bytecode; call before any clock starts."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if not compileall.compile_dir(PACKAGE, quiet=1):
        raise SystemExit(f"cannot compile {PACKAGE}")
