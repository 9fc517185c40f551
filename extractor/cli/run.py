"""``extract run``: the batch conversion."""


import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from extractor.cli.app import (
    BATCH,
    CONTRACT,
    JUDGE,
    MODEL,
    OUTPUT,
    QUEUE,
    ContractOption,
    ContractsOption,
    Format,
    FormatOption,
    app,
    contract_named,
    emit_json,
    fail,
)
from extractor.cli.judge import ResponseFormatOption
from extractor.providers.settings import ResponseFormat
from extractor.vocab import (
    DEFAULT_CONCURRENCY,
    DEFAULT_CONTRACT,
    DEFAULT_JUDGE_CONCURRENCY,
    DEFAULT_JUDGE_QUEUE,
    DEFAULT_JUDGE_THRESHOLD,
    DEFAULT_JUDGE_TIMEOUT,
    DEFAULT_MAX_PENDING,
    DEFAULT_PROMPT_VERSION,
    DEFAULT_RUBRIC,
    ExitCode,
    JudgeMode,
)

if TYPE_CHECKING:
    from extractor.engine.discover import Discovery
    from extractor.judge.modes import JudgeOptions


def resolve_model(model: str | None) -> str:
    """--model, else EXTRACT_MODEL, else OpenAI when a key is set, else the bundled local demo model."""
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
    paths: Annotated[list[str], typer.Argument(help="files, folders (searched recursively) and globs")],
    contract: ContractOption = DEFAULT_CONTRACT,
    contracts: ContractsOption = None,
    prompt_version: Annotated[str, typer.Option(metavar="VERSION", rich_help_panel=CONTRACT,
                                                help="prompts/<contract>/<version>")] = DEFAULT_PROMPT_VERSION,
    model: Annotated[str | None, typer.Option(metavar="MODEL", rich_help_panel=MODEL, help="openai:<model>, "
                                              "local:<path.gguf> or local [env EXTRACT_MODEL; default: "
                                              "openai:gpt-4o-mini if OPENAI_API_KEY is set, else local]")] = None,
    base_url: Annotated[str | None, typer.Option(metavar="URL", rich_help_panel=MODEL,
                                                 help="OpenAI-compatible base URL [env OPENAI_BASE_URL]")] = None,
    response_format: ResponseFormatOption = ResponseFormat.auto,
    timeout: Annotated[float, typer.Option(metavar="SECONDS", rich_help_panel=MODEL,
                                           help="seconds per model call")] = 120.0,
    retries: Annotated[int, typer.Option(rich_help_panel=MODEL,
                                         help="transport retries per call (timeouts, 429, 5xx)")] = 3,
    retry_budget: Annotated[float, typer.Option(metavar="SECONDS", rich_help_panel=MODEL,
                                                help="total seconds of retrying per call")] = 300.0,
    max_tokens: Annotated[int | None, typer.Option(rich_help_panel=MODEL, help="cap on generated tokens per call")] = None,
    max_input_tokens: Annotated[int | None, typer.Option(min=1, rich_help_panel=MODEL, help="tokens a prompt may hold; "
                                                         "a longer document is read in windows [default: the model's "
                                                         "limit, see docs/model-servers.md]")] = None,
    max_output_tokens: Annotated[int | None, typer.Option(min=1, rich_help_panel=MODEL, help="tokens an answer may "
                                                          "take; a document whose expected answer is longer is read "
                                                          "in windows [default: as for --max-input-tokens]")] = None,
    overlap: Annotated[int, typer.Option(min=0, rich_help_panel=MODEL,
                                         help="sentences before each window shown to it as context")] = 2,
    max_cost: Annotated[float | None, typer.Option(min=0.0, metavar="USD", rich_help_panel=MODEL,
                                                   help="US dollars this run may spend on model calls: it stops "
                                                   "cleanly before a call would exceed it (INTERRUPTED, rerun to "
                                                   "resume); needs the model's price [env EXTRACT_PRICES]")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, rich_help_panel=BATCH, help="model calls in flight at "
                                             "once (halved on each 429 or timeout, then grown back)")] = DEFAULT_CONCURRENCY,
    force: Annotated[bool, typer.Option("--force", rich_help_panel=BATCH,
                                        help="redo documents this configuration already finished")] = False,
    retry_errors: Annotated[bool, typer.Option(rich_help_panel=BATCH, help="retry documents that ended ERROR in an "
                                               "earlier run (the model was never heard)")] = True,
    tag: Annotated[list[str] | None, typer.Option(rich_help_panel=BATCH, help="tag the documents of this run "
                                                  "(categories for `extract compare --by-tag`)")] = None,
    judge: Annotated[str | None, typer.Option("--judge", metavar="MODEL", rich_help_panel=JUDGE, help="judge "
                                              "candidates that passed every rule with this model (as --model); off "
                                              "by default (docs/judge.md)")] = None,
    judge_mode: Annotated[JudgeMode | None, typer.Option(rich_help_panel=JUDGE, help="observe: report only; review: "
                                                         "a failure goes to MANUAL_REVIEW; block: also marks it BLOCK "
                                                         "(needs an admit-block calibration) [default: review]")] = None,
    judge_threshold: Annotated[float, typer.Option(rich_help_panel=JUDGE, help="a link scoring below this is "
                                                   "unsupported")] = DEFAULT_JUDGE_THRESHOLD,
    judge_rubric: Annotated[str, typer.Option(metavar="VERSION", rich_help_panel=JUDGE,
                                              help="judge rubric version (prompts/judge/<version>)")] = DEFAULT_RUBRIC,
    judge_base_url: Annotated[str | None, typer.Option(metavar="URL", rich_help_panel=JUDGE, help="base URL of the "
                                                       "judge's server [default: --base-url]")] = None,
    judge_concurrency: Annotated[int, typer.Option(min=1, max=256, rich_help_panel=JUDGE, help="judge calls in "
                                                   "flight (its own slots, never generation's)")] = DEFAULT_JUDGE_CONCURRENCY,
    judge_queue: Annotated[int, typer.Option(min=1, max=4096, rich_help_panel=JUDGE, help="documents that may "
                                             "wait for the judge; when full, the batch slows to the judge's "
                                             "pace")] = DEFAULT_JUDGE_QUEUE,
    judge_timeout: Annotated[float, typer.Option(metavar="SECONDS", rich_help_panel=JUDGE,
                                                 help="seconds per judge call")] = DEFAULT_JUDGE_TIMEOUT,
    queue: Annotated[str | None, typer.Option("--queue", metavar="URL", rich_help_panel=QUEUE, help="hand each "
                                              "document to `extract worker`s through this broker (redis://host:6379/0) "
                                              "and follow the batch; --concurrency is then the workers' [env "
                                              "EXTRACT_BROKER_URL; default: run here] (docs/queue-and-api.md)")] = None,
    max_pending: Annotated[int, typer.Option(min=1, rich_help_panel=QUEUE, help="documents waiting for a worker past "
                                             "which submitting waits")] = DEFAULT_MAX_PENDING,
    wait: Annotated[bool, typer.Option(rich_help_panel=QUEUE, help="when the queue is full, wait for room "
                                       "(--no-wait: refuse the batch)")] = True,
    database: Annotated[str | None, typer.Option(metavar="URL", rich_help_panel=OUTPUT, help="the run log "
                                                 "[env EXTRACT_DATABASE_URL; default sqlite:///extract.db]")] = None,
    ocr_lang: Annotated[str | None, typer.Option("--ocr-lang", metavar="LANGS", rich_help_panel=BATCH,
                                                 help="Tesseract languages for scans and images, e.g. kor or rus+eng "
                                                 "[env EXTRACT_OCR_LANG; default: from the document]")] = None,
    format: FormatOption = Format.text,
) -> None:
    """Convert documents: generate, validate, repair once, route; every attempt goes to the run log.

    A rerun skips what this configuration finished and retries what ended ERROR; after Ctrl-C the same
    command finishes the run. The run ends with an outcome and exits with its code: 0 PROMOTE, 1 BLOCK,
    3 MANUAL_REVIEW, 4 NOT_EVALUABLE, 2 unusable input or nothing to read, 130 interrupted (docs/runs.md).
    """
    import signal

    from extractor.queue.celery_app import broker_url

    signal.signal(signal.SIGTERM, _interrupt)  # until the run installs its own handler: stop like Ctrl-C
    if ocr_lang:
        os.environ["EXTRACT_OCR_LANG"] = ocr_lang  # the readers read it (extractor.offload)
    broker = broker_url(queue)
    if broker is not None:
        if judge is not None:
            fail("--judge does not run on the queue yet; run without --queue to judge")
        if max_cost is not None:
            fail("--max-cost does not run on the queue: workers on several machines spend at once and a call's cost "
                 "is known only when it ends, so none of them can stop the batch before it passes the budget; run "
                 "without --queue to cap the cost (docs/evaluation.md#cost)")
        _run_queued(paths, broker, contract=contract, contracts=contracts, model=model, prompt_version=prompt_version,
                    force=force, retry_errors=retry_errors, base_url=base_url, timeout=timeout, retries=retries,
                    retry_budget=retry_budget, max_tokens=max_tokens, tag=tag, database=database,
                    response_format=response_format, max_pending=max_pending, wait=wait, format=format)
    judge_options = None
    if judge is not None:
        from extractor.judge.modes import JudgeOptions  # the judge's modules load only for a judged run

        judge_options = JudgeOptions(judge, judge_mode, judge_threshold, judge_rubric, judge_base_url or base_url,
                                     judge_concurrency, judge_queue, judge_timeout)
    try:
        _run(paths, contract=contract, contracts=contracts, model=model, prompt_version=prompt_version, concurrency=concurrency,
             force=force, retry_errors=retry_errors, base_url=base_url, timeout=timeout, retries=retries,
             retry_budget=retry_budget, max_tokens=max_tokens, max_input_tokens=max_input_tokens,
             max_output_tokens=max_output_tokens, overlap=overlap, tag=tag, database=database,
             judge_options=judge_options, max_cost=max_cost,
             judge_flags_given=judge_mode is not None or judge_base_url is not None
             or judge_threshold != DEFAULT_JUDGE_THRESHOLD, response_format=response_format, format=format)
    except KeyboardInterrupt:  # before the run started (or after it ended): nothing is half done
        typer.echo("interrupted before any document was started", err=True)
        raise typer.Exit(ExitCode.INTERRUPTED) from None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _run_queued(paths: list[str], broker: str, *, contract: str, contracts: list[Path] | None, model: str | None,
                prompt_version: str, force: bool,
                retry_errors: bool, base_url: str | None, timeout: float, retries: int, retry_budget: float,
                max_tokens: int | None, tag: list[str] | None, database: str | None, response_format: ResponseFormat,
                max_pending: int, wait: bool, format: Format) -> None:
    """``extract run --queue``: submit the batch to the workers and follow it (``extractor.queue.submit``)."""
    import getpass

    from extractor.engine import discover
    from extractor.queue.celery_app import make_celery
    from extractor.queue.news import wakeup_for
    from extractor.queue.settings import BatchSettings
    from extractor.queue.submit import Submission, celery_publisher, worker_runs
    from extractor.store import open_store
    from extractor.ui.run import RunProgress, print_nothing_found, print_summary

    chosen = contract_named(contract, contracts)  # the workers get this very contract (BatchSettings.contract_spec)
    discovery = discover(paths)
    note_discovery(discovery)
    if not discovery.files:
        print_nothing_found(discovery, as_json=format is Format.json)
        raise typer.Exit(ExitCode.USAGE)
    settings = BatchSettings(model=resolve_model(model), prompt_version=prompt_version, base_url=base_url,
                             max_tokens=max_tokens, force=force, retry_errors=retry_errors, tags=tuple(tag or ()),
                             timeout=timeout, retries=retries, retry_budget=retry_budget,
                             response_format=response_format.value).with_contract(chosen)
    store = open_store(database)
    progress = RunProgress(enabled=format is Format.text)
    submission = Submission(store, settings, celery_publisher(make_celery(broker)), submitted_by=getpass.getuser(),
                            max_pending=max_pending, wait=wait, progress=progress, wakeup=wakeup_for(broker))
    try:
        with progress:
            summary = submission.run(discovery)
    except KeyboardInterrupt:
        typer.echo(f"stopped following batch {submission.batch_id}: its {len(submission.unfinished)} unfinished "
                   "documents stay queued and workers finish them", err=True)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    runs = worker_runs(store, summary.run_id) if summary.run_id else []
    if format is Format.json:
        emit_json(summary.to_json() | {"batch": summary.run_id, "worker_runs": runs})
    else:
        print_summary(summary, title=f"batch {summary.run_id} (worker runs: {', '.join(runs) or 'none'})")
    raise typer.Exit(summary.exit_code)  # the batch's outcome, as a run here exits


def start_readers() -> None:
    """Start the CPU pool's processes now, in the background: the fork server imports what they need while this
    process sets the run up (``extractor.offload``). A reading limit that is not one ends the command here."""
    from extractor import offload

    try:
        offload.POOL.start()
    except ValueError as error:
        fail(str(error))


def note_discovery(discovery: "Discovery") -> None:
    """What discovery passed over that a user should know of (links pointing outside a folder), on stderr."""
    from extractor.printable import printable

    for note in discovery.notes():
        typer.echo(f"note: {printable(note)}", err=True)


def _run(paths: list[str], *, contract: str, contracts: list[Path] | None, model: str | None, prompt_version: str,
         concurrency: int, force: bool, retry_errors: bool, base_url: str | None, timeout: float, retries: int,
         retry_budget: float,
         max_tokens: int | None, max_input_tokens: int | None, max_output_tokens: int | None, overlap: int,
         tag: list[str] | None, database: str | None, judge_options: "JudgeOptions | None",
         judge_flags_given: bool, response_format: ResponseFormat, format: Format, max_cost: float | None = None) -> None:
    import asyncio

    from extractor.engine import AdaptiveLimit, Engine, RunSettings, discover
    from extractor.providers import ProviderSettings, from_string
    from extractor.store import open_store
    from extractor.ui.run import RunProgress, print_nothing_found, print_summary

    chosen = contract_named(contract, contracts)  # a broken contract is refused here, before any model call
    discovery = discover(paths)
    note_discovery(discovery)
    if not discovery.files:  # a typo or a folder of other files: no model, no database, no run recorded
        print_nothing_found(discovery, as_json=format is Format.json)
        raise typer.Exit(ExitCode.USAGE)
    start_readers()
    spec = resolve_model(model)
    limit = AdaptiveLimit(concurrency)
    call_settings = ProviderSettings(timeout_s=timeout, max_transport_retries=retries, retry_budget_s=retry_budget,
                                     response_format=response_format, connections=concurrency)
    try:
        provider = from_string(spec, base_url=base_url, settings=call_settings, on_rate_limit=limit.on_rate_limit,
                               on_timeout=limit.on_timeout)
    except (ValueError, ImportError) as error:
        fail(str(error))
    if getattr(provider, "is_bundled", False):
        from extractor.providers.local import BUNDLED_MODEL_NOTE

        typer.echo(f"note: {BUNDLED_MODEL_NOTE}", err=True)
    store = open_store(database)
    settings = RunSettings(contract=chosen, prompt_version=prompt_version, concurrency=concurrency, force=force,
                           retry_errors=retry_errors, max_tokens=max_tokens, max_input_tokens=max_input_tokens,
                           max_output_tokens=max_output_tokens, overlap=overlap, tags=tuple(tag or ()),
                           command=" ".join(["extract", *sys.argv[1:]]), base_url=base_url, max_cost=max_cost)
    run_judge = None
    if judge_options is not None:
        from extractor.cli.judge import build_run_judge

        run_judge = build_run_judge(judge_options, generator=provider, store=store, contract=chosen,
                                    settings=call_settings)
    elif judge_flags_given:
        fail("--judge-mode, --judge-threshold and --judge-base-url need --judge MODEL")
    progress = RunProgress(enabled=format is Format.text)
    try:
        engine = Engine(store, provider, settings, limit=limit, progress=progress, judge=run_judge)
    except (FileNotFoundError, ValueError) as error:  # a missing prompt version, an unreadable EXTRACT_MODEL_LIMITS
        fail(str(error))
    with progress:
        summary = asyncio.run(engine.run(discovery))
    if format is Format.json:
        emit_json(summary.to_json() | ({"judge": run_judge.summary()} if run_judge else {}))
    else:
        print_summary(summary)
        if run_judge is not None:
            from extractor.ui.judge import print_judge_summary

            print_judge_summary(run_judge)
    raise typer.Exit(summary.exit_code)
