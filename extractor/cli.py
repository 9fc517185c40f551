"""``extract``: a thin command line over the stages.

Only typer and the standard library are imported at module level: ``extract --help`` must not pay for
kss, the LLM clients or the database. Every command imports what it needs when it runs.
Exit codes: 0 ok, 1 findings of severity error (or a gate decision), 2 bad usage or unreadable input.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

app = typer.Typer(
    help="Turn business documents into evidence-checked structured records. The LLM proposes, "
    "deterministic rules check, a person approves.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Format(str, Enum):
    text = "text"
    json = "json"


class ContractName(str, Enum):
    work_procedure = "work_procedure"
    rag_answer = "rag_answer"


FormatOption = Annotated[Format, typer.Option("--format", "-f", help="text for people, json for machines")]


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, then a non-zero exit: the shape of every user-facing error."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _load_document(path: Path) -> Any:
    from extractor.errors import InputError
    from extractor.ingest import load
    from extractor.segment import segment

    try:
        return segment(load(path))
    except InputError as error:
        fail(str(error))


def _read_candidate(path: Path) -> str:
    from extractor.rules.structure import MAX_CANDIDATE_CHARS

    try:
        size = path.stat().st_size
        if size > MAX_CANDIDATE_CHARS * 4:
            fail(f"{path}: candidate is {size / 1e6:.1f} MB, over the {MAX_CANDIDATE_CHARS * 4 / 1e6:.0f} MB limit")
        data = path.read_bytes()
    except OSError as error:
        fail(f"{path}: cannot read candidate ({error.strerror or error})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        fail(f"{path}: candidate is not UTF-8 text (byte {error.start})")


@app.command()
def split(file: Path, format: FormatOption = Format.text) -> None:
    """Ingest and segment FILE; print its sentence units with ids and offsets."""
    document = _load_document(file)
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
    contract: Annotated[ContractName, typer.Option(help="output contract")] = ContractName.work_procedure,
    format: FormatOption = Format.json,
) -> None:
    """Check CANDIDATE against SOURCE. Exit 0 when no error finding, 1 when any, 2 for unusable input."""
    from extractor.contracts import get_contract
    from extractor.validate import validate as run_validation

    document = _load_document(source)
    report = run_validation(_read_candidate(candidate), document, get_contract(contract.value))
    if format is Format.json:
        emit_json(report.to_json())
    else:
        from extractor.render import print_report

        print_report(report, document)
    raise typer.Exit(0 if report.passed else 1)


@app.command()
def rules(
    rule_id: Annotated[str | None, typer.Argument(help="print this rule's card")] = None,
    contract: Annotated[ContractName | None, typer.Option(help="only rules of this contract")] = None,
    format: FormatOption = Format.text,
) -> None:
    """The rule catalogue, or the card of one rule."""
    from extractor.rules import catalogue

    cards = catalogue(contract.value if contract else None)
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


@app.command()
def contracts(
    write: Annotated[bool, typer.Option(help="regenerate contracts/*/v*/schema.json from the pydantic models")] = False,
) -> None:
    """List contracts; with --write, regenerate their schema files from the models."""
    from extractor.contracts import LATEST, contract_dir, generate_schema

    for name, version in LATEST.items():
        path = contract_dir(name, version) / "schema.json"
        if write:
            path.write_text(json.dumps(generate_schema(name, version), ensure_ascii=False, indent=2) + "\n",
                            encoding="utf-8")
        typer.echo(f"{name} v{version}: {path}")


def resolve_model(model: str | None) -> str:
    """--model, else EXTRACT_MODEL, else OpenAI when a key is set, else the bundled local demo model."""
    import os

    if model:
        return model
    if os.environ.get("EXTRACT_MODEL"):
        return os.environ["EXTRACT_MODEL"]
    if os.environ.get("OPENAI_API_KEY"):
        return f"openai:{DEFAULT_OPENAI_MODEL}"
    return "local"


DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


@app.command()
def run(
    paths: Annotated[list[str], typer.Argument(help="files, folders (recursive) and globs")],
    contract: Annotated[ContractName, typer.Option(help="output contract")] = ContractName.work_procedure,
    model: Annotated[str | None, typer.Option(help="openai:<model>, local:<path.gguf> or local "
                                              "[env EXTRACT_MODEL; default: OpenAI if OPENAI_API_KEY, else local]")] = None,
    prompt_version: Annotated[str, typer.Option(help="prompts/<contract>/<version>")] = "v1",
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="documents in flight at once")] = 4,
    force: Annotated[bool, typer.Option(help="redo documents this configuration already finished")] = False,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL [env OPENAI_BASE_URL]")] = None,
    timeout: Annotated[float, typer.Option(help="seconds per model call")] = 120.0,
    retries: Annotated[int, typer.Option(help="transport retries per call (timeouts, 429, 5xx)")] = 3,
    retry_budget: Annotated[float, typer.Option(help="total seconds of retrying per call")] = 300.0,
    max_tokens: Annotated[int | None, typer.Option(help="cap on generated tokens per call")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="tag the documents of this run (categories for compare)")] = None,
    database: Annotated[str | None, typer.Option(help="database URL [env EXTRACT_DATABASE_URL; "
                                                 "default sqlite:///extract.db]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """Convert documents: generate, validate, repair once, route; every attempt goes to the run log.

    Exit 0 when every document reached a state, 1 when any ended in ERROR, 2 for unusable input files,
    130 when interrupted (rerun the same command to finish).
    """
    import asyncio

    from extractor.contracts import get_contract
    from extractor.pipeline import AdaptiveLimit, Pipeline, RunSettings
    from extractor.providers import ProviderSettings, from_string
    from extractor.render import RunProgress, print_summary
    from extractor.store import StoreError, open_store

    spec = resolve_model(model)
    limit = AdaptiveLimit(concurrency)
    try:
        provider = from_string(spec, base_url=base_url, settings=ProviderSettings(
            timeout_s=timeout, max_transport_retries=retries, retry_budget_s=retry_budget), on_rate_limit=limit.on_rate_limit)
    except (ValueError, ImportError) as error:
        fail(str(error))
    if getattr(provider, "is_bundled", False):
        from extractor.providers.local import BUNDLED_MODEL_NOTE

        typer.echo(f"note: {BUNDLED_MODEL_NOTE}", err=True)
    try:
        store = open_store(database)
    except StoreError as error:
        fail(str(error))
    settings = RunSettings(contract=get_contract(contract.value), prompt_version=prompt_version,
                           concurrency=concurrency, force=force, max_tokens=max_tokens, tags=tuple(tag or ()),
                           command=" ".join(["extract", *sys.argv[1:]]), base_url=base_url)
    progress = RunProgress(enabled=format is Format.text)
    try:
        pipeline = Pipeline(store, provider, settings, limit=limit, progress=progress)
    except FileNotFoundError as error:
        fail(str(error))
    with progress:
        summary = asyncio.run(pipeline.run(paths))
    if format is Format.json:
        emit_json(summary.to_json())
    else:
        print_summary(summary)
    counts = summary.counts
    raise typer.Exit(130 if summary.interrupted else 2 if counts["INPUT_ERROR"] else 1 if counts["ERROR"] else 0)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
