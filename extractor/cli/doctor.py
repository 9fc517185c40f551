"""``extract doctor``: check a run log and say what is wrong with it, one line per problem.

Exit 0 healthy, 1 problems found, 2 the database cannot be used at all (missing, unreachable, newer than
this extractor, too damaged to query).
"""


import typer

from extractor.cli.app import Format, FormatOption, app, emit_json
from extractor.cli.review import DatabaseOption, open_run_log
from extractor.vocab import ExitCode


@app.command()
def doctor(database: DatabaseOption = None, format: FormatOption = Format.text) -> None:
    """Check the run log's invariants: claims, document runs, attempts, references, dead runs, the file itself.

    Prints one line per problem (the check that found it, then the rows it names). Exit 0 healthy,
    1 problems found, 2 unusable database.
    """
    from extractor.store.integrity import checks

    store = open_run_log(database)
    with store:
        found = store.problems()
    names = [check.name for check in checks()]
    if format is Format.json:
        emit_json({"database": store.url, "healthy": not found, "checks": names,
                   "problems": [problem.to_json() for problem in found]})
    else:
        for problem in found:
            typer.echo(f"{problem.check}: {problem.message}")
        verdict = f"{len(found)} problem(s)" if found else "healthy"
        typer.echo(f"{store.url}: {verdict} ({len(names)} checks)", err=bool(found))
    raise typer.Exit(ExitCode.FAILED if found else ExitCode.OK)
