"""Accuracy against gold records: ``extract eval`` and ``extract gold export``.

``eval`` exits 0 when it scored (the score is a measurement, not a gate: ``extract compare --gold`` gates),
4 NOT_EVALUABLE when the model answered none of the documents gold has (nothing to score, nothing kept), 2 for
bad usage or a gold folder it cannot use (one line naming the file).
"""


from pathlib import Path
from typing import Annotated

import typer

from extractor.cli.app import App, Commands, ContractsOption, Format, FormatOption, app, emit_json, fail, search_contracts
from extractor.cli.review import ApprovedDatabaseOption, DatabaseOption, open_run_log, open_stores
from extractor.vocab import MIN_ID_PREFIX, ExitCode

GoldOption = Annotated[list[Path], typer.Option(
    "--gold", help="a gold folder (gold.toml + one JSON record per document); repeat it for runs of several "
    "contracts")]
ResamplesOption = Annotated[int, typer.Option(min=100, max=100_000, help="bootstrap resamples of the documents")]
SeedOption = Annotated[int, typer.Option(help="bootstrap seed (same runs, gold and seed: same intervals)")]


@app.command("eval")
def evaluate(
    selection: Annotated[str, typer.Argument(metavar="RUN_OR_FILTER", help=f"a run id (or its first {MIN_ID_PREFIX}+ "
                                             "characters), latest (latest~1 the run before it), or key=value filters "
                                             "as `extract runs` shows them: model=gpt-4o-mini,prompt=v2 (every "
                                             "matching run's newest result per document)")],
    gold: GoldOption,
    resamples: ResamplesOption = 1_000,
    seed: SeedOption = 42,
    plot: Annotated[Path | None, typer.Option(help="also write a PNG of per-field F1 with intervals")] = None,
    save: Annotated[bool, typer.Option(help="keep the score in the run log (`extract runs` shows it)")] = True,
    contracts: ContractsOption = None,
    database: DatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Score the runs' final candidates against gold records: precision, recall and F1 per field, language and
    contract, exact and normalised, with 95% bootstrap intervals over documents.

    Lists are aligned by the contract's identity keys, else by value similarity; a reference is right when it
    points at the right item. A value where gold has none is a false value (the costly error); a null with a
    question where gold has a value is a miss. An answer that could not be read counts every gold value as a miss;
    a document the model never answered (ERROR) is not evaluable and left out, listed apart. Exit 0 scored,
    4 NOT_EVALUABLE (the model answered none of them: nothing scored, nothing kept), 2 bad usage.
    """
    from extractor.evaluation.evaluate import evaluate as run_evaluation

    search_contracts(contracts)  # where each run's contract is looked for after the folder it recorded
    store = open_run_log(database)
    result = run_evaluation(store, selection, gold, resamples=resamples, seed=seed)
    data = result.to_json()
    if save and store.read_only is not None:
        typer.echo("note: the score is not kept: the run log is read-only (--no-save leaves it out without this note)",
                   err=True)
    elif save and result.documents and result.outcome is None:
        data["evaluation_id"] = store.save_evaluation(
            selection=selection, gold=" ".join(str(g.folder) for g in result.gold),
            gold_sha256=_combined(g.digest() for g in result.gold), resamples=resamples, seed=seed,
            summary=result.summary(), report=data, run_ids=[r.id for r in result.runs])
    if plot is not None and result.outcome is None:
        from extractor.ui.evaluation import plot_fields

        try:
            data["plot"] = str(plot_fields(result, plot))
        except OSError as error:
            fail(f"cannot write {plot}: {error.strerror or error}")
    if format is Format.json:
        emit_json(data)
    else:
        from extractor.ui.evaluation import print_evaluation

        print_evaluation(result)
        if "plot" in data:
            typer.echo(f"plot: {plot}")
    if result.outcome is not None:  # nothing the model answered: no measurement, as compare's NOT_EVALUABLE
        raise typer.Exit(ExitCode.NOT_EVALUABLE)


def _combined(digests: object) -> str:
    from extractor.canonical import text_sha256

    return text_sha256(" ".join(digests))  # type: ignore[arg-type]


gold_app = App(cls=Commands, help="Gold sets: the records runs are scored against (`extract eval --gold`).",
               no_args_is_help=True)
app.add_typer(gold_app, name="gold")


@gold_app.command("export")
def export_gold(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="the gold folder to write")],
    contract: Annotated[str | None, typer.Option(help="only records of this contract")] = None,
    version: Annotated[int | None, typer.Option("--version", help="only this contract version")] = None,
    since: Annotated[str | None, typer.Option(help="approved at or after: 2026-05-01, 7d, 12h")] = None,
    reviewer: Annotated[str | None, typer.Option(help="only records this person approved")] = None,
    replace: Annotated[bool, typer.Option(help="write over an existing gold folder")] = False,
    database: DatabaseOption = None,
    approved_database: ApprovedDatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Write a gold set from approved records: each record as the reviewer approved it (with its evidence), and in
    gold.toml who approved it, when, and whether it was edited."""
    from extractor.evaluation.gold import export_gold as write_gold
    from extractor.runfilter import parse_when
    from extractor.store.approved import approved_records

    _, records = open_stores(database, approved_database)
    chosen = approved_records(records, contract=contract, contract_version=version,
                              since=parse_when(since) if since else None)
    if reviewer is not None:
        chosen = [r for r in chosen if r.reviewer == reviewer]
    written = write_gold(chosen, folder, replace=replace)
    if format is Format.json:
        emit_json({"folder": str(folder), "contract": chosen[0].contract, "version": chosen[0].contract_version,
                   "records": len(written), "edited": sum(r.edited for r in chosen),
                   "files": [p.name for p in written]})
        return
    typer.echo(f"wrote {len(written)} gold record(s) of {chosen[0].contract}@v{chosen[0].contract_version} to {folder} "
               f"({sum(r.edited for r in chosen)} edited by their reviewer)")
