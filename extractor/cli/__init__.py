"""``extract``: a thin command line over the stages; one module per group of commands.

Importing a command module registers its commands on ``app``; none of them imports a stage at module
level, so ``extract --help`` stays cheap. The command modules do not use ``from __future__ import
annotations``: typer reads every command's parameters on every start, and string annotations cost it a
``compile`` and an ``eval`` each (70 ms of each command's start for the whole command tree); a name imported
only for type checking is written as a string instead.
"""

from __future__ import annotations

import sys

import typer

from extractor.cli import (  # noqa: F401  (registers the commands)
    doctor,
    documents,
    evaluation,
    judge,
    review,
    rules,
    run,
    runs,
    service,
)
from extractor.cli.app import app
from extractor.vocab import ExitCode

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
