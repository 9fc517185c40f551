"""``extract judge ...``: calibrate a judge against human labels, list stored reports; the run's judge options.

Only typer, the standard library and ``extractor.providers`` (the provider vocabulary, standard library only)
at module level (``extract --help`` stays cheap); numpy, matplotlib, the provider implementations and the
database are imported by the command that needs them.
Exit codes of ``calibrate``: 0 admit-block / admit-review, 1 reject, 2 bad input (one line naming the file).
"""


from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from extractor.cli.app import MODEL, App, Commands, ContractsOption, Format, FormatOption, app, emit_json, fail, search_contracts
from extractor.providers.settings import ResponseFormat
from extractor.vocab import (
    DEFAULT_JUDGE_CONCURRENCY,
    DEFAULT_JUDGE_QUEUE,
    DEFAULT_JUDGE_THRESHOLD,
    DEFAULT_JUDGE_TIMEOUT,
    DEFAULT_RUBRIC,
    CalibrationVerdict,
    ExitCode,
    JudgeMode,
)

if TYPE_CHECKING:
    from extractor.calibration_report import CalibrationReport
    from extractor.contracts import Contract
    from extractor.generate import Provider
    from extractor.judge.modes import Judge
    from extractor.options import RunOptions
    from extractor.store import Store

judge_app = App(cls=Commands, help="The optional judge stage: calibrate a judge against human labels, list reports.",
                        no_args_is_help=True)
app.add_typer(judge_app, name="judge")

ResponseFormatOption = Annotated[ResponseFormat, typer.Option(
    envvar="EXTRACT_RESPONSE_FORMAT", rich_help_panel=MODEL,
    help="how an OpenAI-compatible server is asked for JSON: auto tries json_schema, tools, json_object, plain "
         "and keeps the first the server accepts; any other value is used alone")]


# ---------------------------------------------------------------- used by ``extract run``


def build_run_judge(options: "RunOptions", *, generator: "Provider | None", store: "Store",
                    contract: "Contract") -> "Judge":
    """The judge of ``extract run --judge`` / ``extract judge run`` (``extractor.judge.modes.build_judge``), on
    ``--judge-base-url``, else ``--base-url``; its notes (why block was downgraded, judge and generator one model)
    go to stderr."""
    from extractor.judge.modes import build_judge

    judge, notes = build_judge(options, generator=generator, store=store, contract=contract,
                               base_url=options.judge_base_url or options.base_url)
    for note in notes:
        typer.echo(note, err=True)
    return judge


# ---------------------------------------------------------------- extract judge calibrate


@judge_app.command()
def calibrate(
    labels: Annotated[Path, typer.Argument(help="CSV: case_id, human_label_1, human_label_2 (1 = supported), and a "
                                           "score column or value + excerpt columns")],
    judge: Annotated[str | None, typer.Option("--judge", help="run this judge on the value/excerpt columns "
                                              "(openai:<model>, local:<path.gguf>, local)")] = None,
    scores_column: Annotated[str | None, typer.Option(help="take the judge's scores (0..1) from this column")] = None,
    model_id: Annotated[str | None, typer.Option(help="with --scores-column: the judge model that produced the scores, "
                                                 "e.g. openai:gpt-4o-mini [default: the CSV's judge_model column]")] = None,
    rubric: Annotated[str, typer.Option(help="rubric version (prompts/judge/<version>) the scores come from")] = DEFAULT_RUBRIC,
    threshold: Annotated[float, typer.Option(help="operating threshold the report is tied to")] = DEFAULT_JUDGE_THRESHOLD,
    plot: Annotated[Path | None, typer.Option(help="sweep plot PNG [default: <labels>.sweep.png next to the CSV]")] = None,
    resamples: Annotated[int, typer.Option(min=100, max=100_000, help="bootstrap resamples")] = 1000,
    seed: Annotated[int, typer.Option(help="bootstrap seed (numpy PCG64)")] = 42,
    reject_below: Annotated[float, typer.Option(help="reject when the AUROC CI lower bound is below this")] = 0.6,
    block_auroc: Annotated[float, typer.Option(help="admit-block needs the AUROC CI lower bound >= this")] = 0.75,
    block_mcc: Annotated[float, typer.Option(help="admit-block needs the MCC CI lower bound >= this")] = 0.4,
    block_min_cases: Annotated[int, typer.Option(help="admit-block needs at least this many usable cases")] = 100,
    base_url: Annotated[str | None, typer.Option(help="with --judge: OpenAI-compatible base URL [env OPENAI_BASE_URL]")] = None,
    timeout: Annotated[float, typer.Option(help="with --judge: seconds per call")] = 120.0,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="with --judge: calls in flight")] = 4,
    response_format: ResponseFormatOption = ResponseFormat.auto,
    store: Annotated[bool, typer.Option("--store/--no-store", help="store the report in the database")] = True,
    database: Annotated[str | None, typer.Option(help="database URL [env EXTRACT_DATABASE_URL; "
                                                 "default sqlite:///extract.db]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """Measure a judge against two human annotators: agreement, kappa, balance, AUROC, MCC, sweep, bootstrap CIs.

    The verdict (admit-block / admit-review / reject) is stored for the judge model + rubric version +
    threshold; only an admit-block report lets `extract run --judge-mode block` block. Exit 0 admitted,
    1 rejected, 2 bad input.
    """
    if (judge is None) == (scores_column is None):
        fail("give exactly one of --judge MODEL (run the judge) or --scores-column NAME (scores in the CSV)")
    if not 0.0 < threshold < 1.0:
        fail(f"--threshold must be between 0 and 1 (exclusive), not {threshold:g}")

    from extractor.judge.calibration import CalibrationInput, VerdictPolicy, sha256_of
    from extractor.judge.calibration import calibrate as compute
    from extractor.judge.labels import read_labels

    cases, csv_model = read_labels(labels, scores_column, need_texts=judge is not None)
    notes: list[str] = []
    if judge is not None:
        cases, judge_model = _score_with_judge(cases, judge, rubric, base_url, timeout, concurrency, format,
                                               response_format)
        source = f"judge run ({judge_model}, rubric {rubric})"
    else:
        judge_model = (model_id or csv_model or "unspecified").strip()
        source = f"column {scores_column}"
        if judge_model == "unspecified":
            notes.append("the scores' model is unspecified (--model-id or a judge_model column): this report can "
                         "admit no model into block mode")
        elif ":" not in judge_model:
            notes.append(f"model id {judge_model!r} has no provider prefix; runs look judges up as "
                         "<provider>:<model> (e.g. openai:gpt-4o-mini)")
    policy = VerdictPolicy(threshold=threshold, resamples=resamples, seed=seed, reject_auroc_lower=reject_below,
                           block_auroc_lower=block_auroc, block_mcc_lower=block_mcc, block_min_cases=block_min_cases)
    report = compute(CalibrationInput(cases, judge_model, rubric, str(labels), sha256_of(str(labels)), source, notes),
                     policy)

    from extractor.ui.judge import print_calibration, write_sweep_plot

    wanted = plot or labels.with_name(f"{labels.stem}.sweep.png")
    plot_path: Path | None = wanted
    try:
        write_sweep_plot(report, wanted)
    except ImportError:
        typer.echo("warning: sweep plot skipped: matplotlib is not installed (pip install matplotlib)", err=True)
        plot_path = None
    except OSError as error:
        fail(f"{plot_path}: cannot write the sweep plot ({error.strerror or error})")
    calibration_id = None
    if store:
        calibration_id = _store_report(report, database)
    if format is Format.json:
        emit_json({"id": calibration_id, "plot": str(plot_path) if plot_path else None, **report.to_json()})
    else:
        print_calibration(report, calibration_id=calibration_id, plot=plot_path)
    raise typer.Exit(1 if report.verdict is CalibrationVerdict.reject else 0)


def _score_with_judge(cases: list[Any], spec: str, rubric_version: str, base_url: str | None, timeout: float,
                      concurrency: int, format: Format, response_format: ResponseFormat) -> tuple[list[Any], str]:
    import asyncio

    from extractor.judge.labels import score_cases
    from extractor.judge.stage import load_rubric, model_id
    from extractor.providers import ProviderSettings, from_string
    from extractor.ui.judge import judging_progress

    try:
        rubric = load_rubric(rubric_version)
    except FileNotFoundError as error:
        fail(str(error))
    try:
        provider = from_string(spec, base_url=base_url,
                               settings=ProviderSettings(timeout_s=timeout, response_format=response_format,
                                                         connections=concurrency))
    except (ValueError, ImportError) as error:
        fail(f"--judge: {error}")

    async def scored() -> list[Any]:
        try:
            with judging_progress(model_id(provider), len(cases), enabled=format is Format.text) as advance:
                return await score_cases(cases, provider, rubric, concurrency=concurrency,
                                         on_case=lambda _case: advance())
        finally:
            await provider.aclose()

    return asyncio.run(scored()), model_id(provider)


def _store_report(report: "CalibrationReport", database: str | None) -> int:
    from extractor.store import open_store

    with open_store(database) as opened:
        return opened.save_calibration(report)


# ---------------------------------------------------------------- extract judge run


@judge_app.command("run")
def run_afterwards(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="run id (or a unique prefix of 6+ characters)")],
    judge: Annotated[str, typer.Option("--judge", help="the judge model (openai:<model>, local:<path.gguf>, local)")],
    judge_mode: Annotated[JudgeMode | None, typer.Option(help="every judge metric in this mode [default: the "
                                                             "contract settings, else review]")] = None,
    judge_threshold: Annotated[float, typer.Option(help="a link scoring below this is unsupported")] = DEFAULT_JUDGE_THRESHOLD,
    judge_rubric: Annotated[str, typer.Option(help="rubric version (prompts/judge/<version>)")] = DEFAULT_RUBRIC,
    judge_base_url: Annotated[str | None, typer.Option(help="base URL of the judge's server [env OPENAI_BASE_URL]")] = None,
    judge_concurrency: Annotated[int, typer.Option(min=1, max=256, help="judge calls in flight")] = DEFAULT_JUDGE_CONCURRENCY,
    judge_timeout: Annotated[float, typer.Option(help="seconds per judge call")] = DEFAULT_JUDGE_TIMEOUT,
    response_format: ResponseFormatOption = ResponseFormat.auto,
    force: Annotated[bool, typer.Option(help="judge again documents a judge has seen")] = False,
    contracts: ContractsOption = None,
    database: Annotated[str | None, typer.Option(help="database URL [env EXTRACT_DATABASE_URL]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """Judge a finished run afterwards: every waiting document whose candidate passes the rules, in place.

    Each call is a judge attempt of its document run; documents are routed again as a judged run routes
    them (warn: ready for review, shown first; fail or no answer: a person). No regeneration (no generator
    here). Exit 0 when nothing judged needs a person, 3 when some document now does.
    """
    from extractor.cli.options import run_options
    from extractor.engine.judge_afterwards import judge_finished_run
    from extractor.review import resolve_run
    from extractor.store import open_store

    store = open_store(database)
    found = resolve_run(store, run_ref)
    if found is None:
        fail(f"no run {run_ref!r} (see `extract runs`)")
    from extractor.contracts.recorded import contract_of_run

    search_contracts(contracts)
    contract = contract_of_run(found)  # as the run used it, or one line on why it cannot be
    options = run_options(dict(judge=judge, judge_mode=judge_mode, judge_threshold=judge_threshold,
                               judge_rubric=judge_rubric, judge_base_url=judge_base_url,
                               judge_concurrency=judge_concurrency, judge_queue=max(judge_concurrency, DEFAULT_JUDGE_QUEUE),
                               judge_timeout=judge_timeout, response_format=response_format))
    built = build_run_judge(options, generator=None, store=store, contract=contract)

    results = judge_finished_run(store, found, built, force=force)
    if format is Format.json:
        emit_json({"run_id": found.id, "judge": built.summary(), "documents": [r.to_json() for r in results]})
    else:
        from extractor.ui.judge import print_afterwards

        print_afterwards(results, built)
    raise typer.Exit(ExitCode.MANUAL_REVIEW if any(r.to_person for r in results) else ExitCode.OK)


# ---------------------------------------------------------------- extract judge reports / show


@judge_app.command()
def reports(
    model: Annotated[str | None, typer.Option(help="only this judge model (e.g. openai:gpt-4o-mini)")] = None,
    limit: Annotated[int, typer.Option(min=1, help="newest N")] = 20,
    database: Annotated[str | None, typer.Option(help="database URL [env EXTRACT_DATABASE_URL]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """Stored calibration reports, newest first: which judge, rubric and threshold may review or block."""
    from extractor.store import open_store

    with open_store(database) as opened:
        found = opened.calibrations(judge_model=model, limit=limit)
    if format is Format.json:
        emit_json([info.to_json() for info in found])
        return
    from extractor.ui.judge import print_reports

    print_reports(found, model)


@judge_app.command()
def show(
    calibration_id: Annotated[int, typer.Argument(help="report id from `extract judge reports`")],
    database: Annotated[str | None, typer.Option(help="database URL [env EXTRACT_DATABASE_URL]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """One stored calibration report in full."""
    from extractor.store import open_store

    with open_store(database) as opened:
        info = opened.get_calibration(calibration_id)
    if info is None:
        fail(f"no calibration report #{calibration_id}")
    if format is Format.json:
        emit_json({**info.to_json(), "report": info.report.to_json()})
        return
    from extractor.ui.judge import print_calibration

    print_calibration(info.report, calibration_id=info.id)
