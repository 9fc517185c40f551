"""``extract doctor``: check a run log and say what is wrong with it, one line per problem.

By default it checks what changed since its last clean check (the whole log the first time); ``--full`` checks
everything, SQLite's own check of the file included, with a progress bar on a terminal. Exit 0 healthy, 1 problems
found, 2 the database cannot be used at all (missing, unreachable, newer than this extractor, too damaged to query).
"""


from typing import Annotated, Any

import typer

from extractor.cli.app import Format, FormatOption, app, emit_json
from extractor.cli.review import DatabaseOption, open_run_log
from extractor.vocab import ExitCode


@app.command()
def doctor(
    full: Annotated[bool, typer.Option("--full", help="check the whole log and the file itself, not only what "
                                       "changed since the last clean check")] = False,
    database: DatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Check the run log's invariants: claims, document runs, attempts, decisions, references, dead runs, the file.

    By default only what changed since the last clean check is read (the whole log the first time, or after a
    full check found problems); --full reads everything. Prints one line per problem (the check that found it,
    then the rows it names). Exit 0 healthy, 1 problems found, 2 unusable database.
    """
    from extractor.store.integrity import checks
    from extractor.ui.console import progress_bar
    from extractor.ui.review import DoctorProgress

    store = open_run_log(database)
    with store, progress_bar("extract doctor") as bar:
        result = store.doctor(full=full, progress=DoctorProgress(bar) if format is Format.text else None)
    names = [check.name for check in checks()]
    found = result.problems
    if format is Format.json:
        emit_json({"database": store.url, "healthy": not found, "checks": names,
                   "problems": [problem.to_json() for problem in found], "full": result.scope is None,
                   "since": None if result.scope is None else result.scope.since.isoformat(timespec="seconds"),
                   "scope": result.counts, "last_full": _iso(result.last_full), "recorded": result.recorded is None})
    else:
        for problem in found:
            typer.echo(f"{problem.check}: {problem.message}")
        verdict = f"{len(found)} problem(s)" if found else "healthy"
        typer.echo(f"{store.url}: {verdict} ({len(names)} checks {_read(result)})", err=bool(found))
    if result.recorded is not None:
        typer.echo(f"note: this check was not recorded ({result.recorded}); the next `extract doctor` reads the same "
                   "again", err=True)
    raise typer.Exit(ExitCode.FAILED if found else ExitCode.OK)


def _iso(when: Any) -> str | None:
    return None if when is None else str(when.isoformat(timespec="seconds"))


def _read(result: Any) -> str:
    """What the check read, as the verdict line says it."""
    if result.scope is None:
        return "of the whole log"
    counts = result.counts
    last = f"last {result.last_full:%Y-%m-%d %H:%M} UTC" if result.last_full is not None else "never run"
    return (f"of what changed since the clean check of {result.scope.since:%Y-%m-%d %H:%M:%S} UTC: {counts['runs']} "
            f"run(s), {counts['reviews']} decision(s), {counts['evaluations']} evaluation(s); --full checks the whole "
            f"log and the file, {last}")
