"""Commands on one document and the catalogue: ``split``, ``validate``, ``rules``, ``contracts``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from extractor.cli.app import (
    ContractOption,
    Format,
    FormatOption,
    app,
    contract_named,
    emit_json,
    load_document,
    read_candidate,
)
from extractor.vocab import DEFAULT_CONTRACT


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
    format: FormatOption = Format.text,
) -> None:
    """Check CANDIDATE against SOURCE. Exit 0 when no error finding, 1 when any, 2 for unusable input."""
    from extractor.validate import validate as run_validation

    chosen = contract_named(contract)
    document = load_document(source)
    report = run_validation(read_candidate(candidate), document, chosen)
    if format is Format.json:
        emit_json(report.to_json())
    else:
        from extractor.ui.run import print_report

        print_report(report, document)
    raise typer.Exit(0 if report.passed else 1)


@app.command()
def contracts(
    write: Annotated[bool, typer.Option(help="regenerate the built-in contracts' schema.json from their models")] = False,
    format: FormatOption = Format.text,
) -> None:
    """List the registered contracts with their folders; with --write, regenerate built-in schema files."""
    from extractor.contracts import contracts as registered

    listed = []
    for contract in registered():
        path = contract.folder / "schema.json"
        if write and contract.pydantic is not None:
            path.write_text(json.dumps(contract.generated_schema(), ensure_ascii=False, indent=2) + "\n",
                            encoding="utf-8")
        listed.append({"name": contract.name, "version": contract.version, "schema": str(path)})
    if format is Format.json:
        emit_json(listed)
        return
    for entry in listed:
        typer.echo(f"{entry['name']} v{entry['version']}: {entry['schema']}")
