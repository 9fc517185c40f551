"""Commands on one document and the catalogue: ``split``, ``validate``, ``rules``, ``contracts``."""


import json
from pathlib import Path
from typing import Annotated

import typer

from extractor.cli.app import (
    App,
    Commands,
    ContractOption,
    ContractsOption,
    Format,
    FormatOption,
    app,
    contract_named,
    emit_json,
    fail,
    load_document,
)
from extractor.vocab import DEFAULT_CONTRACT, ExitCode


@app.command()
def split(file: Annotated[Path, typer.Argument(help="the document to segment")],
          format: FormatOption = Format.text) -> None:
    """Ingest and segment FILE; print its sentence units with ids and offsets."""
    document = load_document(file)
    if format is Format.json:
        emit_json([s.to_json() for s in document.sentences])
        return
    from extractor.ui.documents import print_sentences

    print_sentences(document, str(file))


@app.command()
def validate(
    candidate: Annotated[Path, typer.Argument(help="candidate JSON from any LLM")],
    source: Annotated[Path, typer.Option("--source", "-s", help="the source document")],
    contract: ContractOption = DEFAULT_CONTRACT,
    contracts: ContractsOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Check CANDIDATE against SOURCE. Exit 0 when no error finding, 1 when any, 2 for unusable input."""
    from extractor.rules.structure import read_candidate
    from extractor.validate import validate as run_validation

    chosen = contract_named(contract, contracts)
    document = load_document(source)
    report = run_validation(read_candidate(candidate), document, chosen)
    if format is Format.json:
        emit_json(report.to_json())
    else:
        from extractor.ui.run import print_report

        print_report(report, document)
    raise typer.Exit(0 if report.passed else 1)


contracts_app = App(cls=Commands, help="Contracts: the built-ins and those written as files (--contracts DIR, "
                             "EXTRACT_CONTRACTS_PATH).", no_args_is_help=False)
app.add_typer(contracts_app, name="contracts")


@contracts_app.callback(invoke_without_command=True)
def contracts(
    ctx: typer.Context,
    write: Annotated[bool, typer.Option(help="regenerate the built-in contracts' schema.json from their models")] = False,
    contracts: ContractsOption = None,
    format: FormatOption = Format.text,
) -> None:
    """List every contract with its version, folder and content hash; a broken one shows its first problem."""
    if ctx.invoked_subcommand is not None:
        return
    from extractor.contracts import contract_listing, use_dirs

    use_dirs(contracts or ())
    rows = contract_listing()
    if write:
        from extractor.contracts import get_contract

        for row in rows:
            found = get_contract(row.name, row.version) if row.problems == () else None
            if found is not None and found.pydantic is not None:
                (found.folder / "schema.json").write_text(
                    json.dumps(found.generated_schema(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if format is Format.json:
        emit_json([row.to_json() for row in rows])
        return
    for row in rows:
        state = f"BROKEN ({len(row.problems)} problem(s); extract contracts check {row.name})" if row.problems \
            else row.content_hash[:12]
        typer.echo(f"{row.name} v{row.version}  {row.kind}  {row.folder}  {state}")


@contracts_app.command("check")
def check_contract(
    name: Annotated[str, typer.Argument(help="contract name")],
    contracts: ContractsOption = None,
) -> None:
    """Lint a contract: one line per problem (paths, references, catalogues and columns, schema). Exit 1 if any."""
    from extractor.contracts import contract_listing, use_dirs

    use_dirs(contracts or ())
    rows = [row for row in contract_listing() if row.name == name]
    if not rows:
        fail(f"no contract {name!r} (`extract contracts` lists them; add --contracts DIR for yours)")
    broken = False
    for row in rows:
        for problem in row.problems:
            typer.echo(problem)
        if not row.problems:
            typer.echo(f"{row.name} v{row.version}: ok ({row.kind}, {row.rules} rules, content {row.content_hash[:12]}) "
                       f"{row.folder}")
        broken = broken or bool(row.problems)
    raise typer.Exit(ExitCode.FAILED if broken else ExitCode.OK)
