"""``extract run``: the batch conversion.

The run's own options are ``extractor.options.RunOptions``' fields (made into options by ``extractor.cli.options``
when the command shows its help or parses its arguments); the function declares only what is this process's:
the files, where contracts are looked for, how many documents it converts at once, the queue, the run log and the
output format. Every option works the same with ``--queue`` (the workers get the options with the batch) or is
refused in one line saying why.
"""


import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from extractor.cli.app import (
    BATCH,
    MORE_OPTIONS,
    OUTPUT,
    QUEUE,
    ContractsOption,
    Format,
    FormatOption,
    OptionsCommand,
    app,
    contract_named,
    emit_json,
    fail,
)
from extractor.vocab import DEFAULT_CONCURRENCY, DEFAULT_MAX_PENDING, ExitCode

if TYPE_CHECKING:
    from extractor.engine import Discovery
    from extractor.options import RunOptions
class RunCommand(OptionsCommand):
    """``extract run``: the options of ``RunOptions`` beside the ones its function declares."""

    def more_params(self) -> list[Any]:
        from extractor.cli.options import option_params
        from extractor.options import RunOptions

        return option_params(RunOptions)

    def more_declarations(self) -> dict[str, Any]:
        from extractor.cli.options import option_declarations
        from extractor.options import RunOptions

        return option_declarations(RunOptions)


class Here(NamedTuple):
    """What this process brings to a run: not options of the run, so they never travel with a batch."""

    contracts: list[Path] | None
    concurrency: int | None
    queue: str | None
    max_pending: int
    wait: bool
    database: str | None
    format: Format


@app.command(cls=RunCommand)
def run(
    paths: Annotated[list[str], typer.Argument(help="files, folders (searched recursively) and globs")],
    contracts: ContractsOption = None,
    concurrency: Annotated[int | None, typer.Option(min=1, max=256, rich_help_panel=BATCH, help="model calls in "
                                                    "flight at once (halved on each 429 or timeout, then grown back) "
                                                    f"[default: {DEFAULT_CONCURRENCY}; with --queue each worker's "
                                                    "own: extract worker --concurrency]")] = None,
    queue: Annotated[str | None, typer.Option("--queue", metavar="URL", rich_help_panel=QUEUE, help="hand each "
                                              "document to `extract worker`s through this broker (redis://host:6379/0) "
                                              "and follow the batch; every option travels with it [env "
                                              "EXTRACT_BROKER_URL; default: run here] (docs/queue-and-api.md)")] = None,
    max_pending: Annotated[int, typer.Option(min=1, rich_help_panel=QUEUE, help="documents waiting for a worker past "
                                             "which submitting waits")] = DEFAULT_MAX_PENDING,
    wait: Annotated[bool, typer.Option(rich_help_panel=QUEUE, help="when the queue is full, wait for room "
                                       "(--no-wait: refuse the batch)")] = True,
    database: Annotated[str | None, typer.Option(metavar="URL", rich_help_panel=OUTPUT, help="the run log "
                                                 "[env EXTRACT_DATABASE_URL; default sqlite:///extract.db]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """Convert documents: generate, validate, repair once, route; every attempt goes to the run log.

    A rerun skips what this configuration finished and retries what ended ERROR; after Ctrl-C the same
    command finishes the run. The run ends with an outcome and exits with its code: 0 PROMOTE, 1 BLOCK,
    3 MANUAL_REVIEW, 4 NOT_EVALUABLE, 2 unusable input or nothing to read, 130 interrupted (docs/runs.md).
    """
    import signal

    from extractor.cli.options import run_options
    from extractor.queue.celery_app import broker_url

    signal.signal(signal.SIGTERM, _interrupt)  # until the run installs its own handler: stop like Ctrl-C
    here = Here(contracts, concurrency, broker_url(queue), max_pending, wait, database, format)
    options = run_options(MORE_OPTIONS.get())  # RunCommand's options
    try:
        if here.queue is not None:
            _run_queued(paths, options, here)
        _run(paths, options, here)
    except KeyboardInterrupt:  # before the run started (or after it ended): nothing is half done
        typer.echo("interrupted before any document was started", err=True)
        raise typer.Exit(ExitCode.INTERRUPTED) from None




def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _discovered(paths: list[str], here: Here) -> "Discovery":
    """The files to convert; nothing found is a one-line failure before anything is recorded."""
    from extractor.engine import discover
    from extractor.ui.run import print_nothing_found

    discovery = discover(paths)
    note_discovery(discovery)
    if not discovery.files:  # a typo or a folder of other files: no model, no database, no run recorded
        print_nothing_found(discovery, as_json=here.format is Format.json)
        raise typer.Exit(ExitCode.USAGE)
    return discovery


def note_discovery(discovery: "Discovery") -> None:
    """What discovery passed over that a user should know of (links pointing outside a folder), on stderr."""
    from extractor.printable import printable

    for note in discovery.notes():
        typer.echo(f"note: {printable(note)}", err=True)


def _run_queued(paths: list[str], options: "RunOptions", here: Here) -> None:
    """``extract run --queue``: submit the batch to the workers and follow it (``extractor.queue.submit``)."""
    import getpass

    assert here.queue is not None
    if here.concurrency is not None:
        fail("--concurrency is each worker's own with --queue: start the workers with extract worker --concurrency N")
    from extractor.queue.fleet import is_redis
    from extractor.queue.news import wakeup_for
    from extractor.queue.outbox import Outbox
    from extractor.queue.settings import BatchSettings
    from extractor.queue.submit import Submission, worker_runs
    from extractor.store import open_store
    from extractor.ui.run import RunProgress, print_summary

    if options.max_cost is not None:
        if not is_redis(here.queue):
            fail(f"--max-cost with --queue keeps the batch's budget in the broker, which must be Redis, not "
                 f"{here.queue.split(':', 1)[0]}")
        _check_prices(options)
    chosen = contract_named(options.contract, here.contracts)  # the workers get this very contract
    discovery = _discovered(paths, here)
    settings = BatchSettings.model_validate(options.to_json()).with_contract(chosen)
    store = open_store(here.database)
    progress = RunProgress(enabled=here.format is Format.text)
    submission = Submission(store, settings, Outbox(store, here.queue),
                            submitted_by=getpass.getuser(), max_pending=here.max_pending, wait=here.wait,
                            progress=progress, wakeup=wakeup_for(here.queue))
    try:
        with progress:
            summary = submission.run(discovery)
    except KeyboardInterrupt:
        typer.echo(f"stopped following batch {submission.batch_id}: its {len(submission.unfinished)} unfinished "
                   f"documents stay queued and workers finish them{submission.unsent_note()}", err=True)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    runs = worker_runs(store, summary.run_id) if summary.run_id else []
    if here.format is Format.json:
        emit_json(summary.to_json() | {"batch": summary.run_id, "worker_runs": runs})
    else:
        print_summary(summary, title=f"batch {summary.run_id} (worker runs: {', '.join(runs) or 'none'})")
    raise typer.Exit(summary.exit_code)  # the batch's outcome, as a run here exits


def _check_prices(options: "RunOptions") -> None:
    """A budget needs the price of every model that spends from it: refused here, before anything is queued."""
    from extractor.prices import IN_PROCESS_PROVIDER, price_for

    for model, whose in ((options.model, ""), (options.judge, "the judge's model ")):
        if model is None or model.partition(":")[0] == IN_PROCESS_PROVIDER:
            continue
        if price_for(model) is None:
            fail(f"--max-cost needs the price of {whose}{model}: no built-in entry, none in EXTRACT_PRICES")


def _run(paths: list[str], options: "RunOptions", here: Here) -> None:
    import asyncio

    from extractor.engine import AdaptiveLimit, Engine, RunSettings
    from extractor.providers import ProviderSettings, from_string
    from extractor.store import open_store
    from extractor.ui.run import RunProgress, print_summary

    chosen = contract_named(options.contract, here.contracts)  # a broken contract is refused before any model call
    discovery = _discovered(paths, here)
    concurrency = here.concurrency or DEFAULT_CONCURRENCY
    limit = AdaptiveLimit(concurrency)
    if options.endpoint is not None or options.judge_endpoint is not None:
        fail("an endpoint names a model server of `extract serve` and its workers; give --base-url here")
    try:
        provider = from_string(options.model or "local", base_url=options.base_url,
                               settings=ProviderSettings.of(options, connections=concurrency),
                               on_rate_limit=limit.on_rate_limit, on_timeout=limit.on_timeout)
    except (ValueError, ImportError) as error:
        fail(str(error))
    if getattr(provider, "is_bundled", False):
        from extractor.providers.local import BUNDLED_MODEL_NOTE

        typer.echo(f"note: {BUNDLED_MODEL_NOTE}", err=True)
    store = open_store(here.database)
    settings = RunSettings(contract=chosen, options=options, concurrency=concurrency,
                           command=" ".join(["extract", *sys.argv[1:]]), base_url=options.base_url)
    run_judge = None
    if options.judge is not None:
        from extractor.cli.judge import build_run_judge

        run_judge = build_run_judge(options, generator=provider, store=store, contract=chosen)
    progress = RunProgress(enabled=here.format is Format.text)
    try:
        engine = Engine(store, provider, settings, limit=limit, progress=progress, judge=run_judge)
    except (FileNotFoundError, ValueError) as error:  # a missing prompt version, an unknown price, a bad limits file
        fail(str(error))
    with progress:
        summary = asyncio.run(engine.run(discovery))
    if here.format is Format.json:
        emit_json(summary.to_json() | ({"judge": run_judge.summary()} if run_judge else {}))
    else:
        print_summary(summary)
        if run_judge is not None:
            from extractor.ui.judge import print_judge_summary

            print_judge_summary(run_judge)
    raise typer.Exit(summary.exit_code)
