"""Commands on one document and the catalogue: ``split``, ``validate``, ``rules``, ``contracts``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from extractor.cli.app import (
    ContractOption,
    ContractsOption,
    Format,
    FormatOption,
    app,
    contract_named,
    emit_json,
    fail,
    load_document,
    read_candidate,
)
from extractor.vocab import DEFAULT_CONTRACT, ExitCode


@app.command()
def split(file: Path, format: FormatOption = Format.text) -> None:
    """Ingest and segment FILE; print its sentence units with ids and offsets."""
    document = load_document(file)
    if format is Format.json:
        emit_json([s.to_json() for s in document.sentences])
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{file} ({len(document.sentences)} sentences; {document.segmenter})", show_lines=False)
    for column in ("id", "block", "start", "end", "text"):
        table.add_column(column, overflow="fold")
    kinds = {block.index: block.kind.value for block in document.blocks}
    for s in document.sentences:
        table.add_row(s.id, f"{s.block}:{kinds.get(s.block, '?')}", str(s.start), str(s.end), s.text)
    Console().print(table)


@app.command()
def validate(
    candidate: Annotated[Path, typer.Argument(help="candidate JSON from any LLM")],
    source: Annotated[Path, typer.Option("--source", "-s", help="the source document")],
    contract: ContractOption = DEFAULT_CONTRACT,
    contracts: ContractsOption = None,
    format: FormatOption = Format.json,
) -> None:
    """Check CANDIDATE against SOURCE. Exit 0 when no error finding, 1 when any, 2 for unusable input."""
    from extractor.validate import validate as run_validation

    chosen = contract_named(contract, contracts)
    document = load_document(source)
    report = run_validation(read_candidate(candidate), document, chosen)
    if format is Format.json:
        emit_json(report.to_json())
    else:
        from extractor.render import print_report

        print_report(report, document)
    raise typer.Exit(0 if report.passed else 1)


@app.command()
def rules(
    rule_id: Annotated[str | None, typer.Argument(help="print this rule's card")] = None,
    contract: Annotated[str | None, typer.Option(help="only rules of this contract")] = None,
    contracts: ContractsOption = None,
    format: FormatOption = Format.text,
) -> None:
    """The rule catalogue, or the card of one rule (a contract's declared checks have cards too)."""
    from extractor.contracts import use_dirs
    from extractor.rules import catalogue

    use_dirs(contracts or ())
    if contract is None and contracts:  # every contract of the folders given, refused if broken
        from extractor.contracts.files import discover

        for found in discover(Path(folder).resolve() for folder in contracts):
            contract_named(found.name)
    cards = catalogue(contract_named(contract).name if contract else None)
    if rule_id is not None:
        match = [card for card in cards if card.rule_id == rule_id.upper()]
        if not match:
            fail(f"unknown rule id {rule_id!r}; `extract rules` lists them")
        card = match[0]
        if format is Format.json:
            emit_json(card.to_json())
            return
        for key, value in card.to_json().items():
            typer.echo(f"{key.replace('_', ' '):>27}: {value}")
        return
    if format is Format.json:
        emit_json([card.to_json() for card in cards])
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="rule catalogue (extract rules RULE_ID for a card)")
    for column in ("rule_id", "contract", "stage", "severity", "fires when"):
        table.add_column(column, overflow="fold")
    for card in cards:
        table.add_row(card.rule_id, card.contract, card.stage, card.severity.value, card.fires_when)
    Console().print(table)


contracts_app = typer.Typer(help="Contracts: the built-ins and those written as files (--contracts DIR, "
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
