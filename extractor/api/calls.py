"""The Python API's calls (docs/python-api.md): ``extract``, ``extract_many``, ``aextract_many``, ``validate``, ``split``,
and a person's ``approve``, ``reject`` and ``export_records``.

A batch runs on the engine ``extract run`` runs on, built by the same code from the same options
(``extractor.engine.build``, ``extractor.options.RunOptions``), and writes the same run log, so ``extract review``,
``show`` and ``export`` work on what code produced. Nothing here prints or exits: a problem is an exception carrying
the line the CLI would print (``InputError``, ``ContractError``, ``UsageError``); what ``extract run`` says on stderr
is kept in ``Batch.notes``. The sync calls work inside a running event loop (a notebook) too: the batch then runs on
a loop of its own in another thread while the caller waits, and Ctrl-C there stops it as it stops ``extract run``.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from extractor.api.contract import Contract, resolve_contract
from extractor.api.models import Batch, Report, Result, Tokens
from extractor.api.sources import Source, SourceLike, as_source, write_sources
from extractor.errors import ExtractorError, InputError, UsageError
from extractor.vocab import DEFAULT_CONCURRENCY, DEFAULT_CONTRACT, GateDecision, Outcome

if TYPE_CHECKING:
    from pydantic import BaseModel

    from extractor.document import Document
    from extractor.engine import Discovery, DocumentOutcome, RunSummary
    from extractor.options import RunOptions
    from extractor.store import Store

T = TypeVar("T")
PathLike = str | os.PathLike[str]
COMMAND = "extractor.extract_many (Python API)"
"""What the run log records as a run's command when the Python API started it."""


class RunLog(enum.Enum):
    """``run_log=``'s default: the run log ``extract run`` writes (``EXTRACT_DATABASE_URL``, else ``./extract.db``)."""

    CLI = "EXTRACT_DATABASE_URL, else sqlite:///extract.db"


CLI_RUN_LOG = RunLog.CLI
RunLogLike = PathLike | RunLog | None


class Interrupted(KeyboardInterrupt):
    """A batch stopped by Ctrl-C or SIGTERM, as ``extract run`` stops (exit 130): the documents under way are recorded
    INTERRUPTED and the same call again finishes them. ``batch`` holds what was done."""

    def __init__(self, batch: Batch) -> None:
        super().__init__(f"interrupted: run {batch.run_id} stopped; "
                         f"{sum(r.outcome is Outcome.INTERRUPTED for r in batch.results)} document(s) left INTERRUPTED; "
                         "call again to finish them")
        self.batch = batch


class NothingToRead(InputError):
    """Paths that hold no document to read (an empty folder, one of other files): the line ``extract run`` prints."""

    def __init__(self, paths: str, reason: str) -> None:
        ExtractorError.__init__(self, reason)
        self.path, self.problem = paths, reason

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        return type(self), (self.path, self.problem)


class Progress(NamedTuple):
    """What a ``progress`` callback gets as each input reaches its outcome (called on the batch's event loop)."""

    done: int
    total: int
    path: str
    outcome: Outcome
    cause: str | None


ProgressLike = Callable[[Progress], object] | bool | None


# -- options and where things are -----------------------------------------------------------------------------------


def run_options(contract: Contract, model: str | None, options: RunOptions | None, fields: Mapping[str, Any]
                ) -> RunOptions:
    """The run's options: ``options`` (a ``RunOptions``) with ``fields`` laid over it, the contract's name and the model
    resolved as ``extract run`` resolves ``--model``; ``UsageError`` names each field that is wrong."""
    from pydantic import ValidationError

    from extractor.options import RunOptions, explain, resolve_model

    values = {} if options is None else options.model_dump(exclude_unset=True)
    values |= dict(fields)
    if "contract" in values and values["contract"] != contract.name:
        raise UsageError(f"options name contract {values['contract']!r}; give it as contract= instead")
    values["contract"] = contract.name
    values["model"] = resolve_model(model or values.get("model"))
    try:
        return RunOptions.model_validate(values)
    except ValidationError as error:
        raise UsageError(explain(error, name=lambda field: field)) from None


@contextmanager
def opened_store(run_log: RunLogLike, *, create: bool = True) -> Iterator[Store]:
    """The run log ``run_log`` names: the CLI's by default, a database URL, an SQLite file's path, or (None) a
    throwaway SQLite file removed afterwards, so nothing is kept."""
    from extractor.store import open_store

    if run_log is None:
        with tempfile.TemporaryDirectory(prefix="extract-runlog-") as folder:
            store = open_store(f"sqlite:///{Path(folder) / 'extract.db'}")
            try:
                yield store
            finally:
                store.close()
        return
    store = open_store(database_url(run_log), create=create)
    try:
        yield store
    finally:
        store.close()


def database_url(run_log: PathLike | RunLog) -> str | None:
    """The URL ``open_store`` takes for ``run_log`` (None: the CLI's default)."""
    if isinstance(run_log, RunLog):
        return None
    given = os.fspath(run_log)
    return given if "://" in given else f"sqlite:///{Path(given).expanduser().resolve()}"


# -- running a batch ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """A batch checked before anything runs: what to read, with which contract and options."""

    paths: list[str]
    sources: list[Source]
    contract: Contract
    options: RunOptions
    concurrency: int
    run_log: RunLogLike
    progress: ProgressLike


def _plan(sources: SourceLike | Iterable[SourceLike], contract: str | Contract, model: str | None,
          options: RunOptions | None, concurrency: int | None, contracts: Iterable[PathLike], run_log: RunLogLike,
          progress: ProgressLike, fields: Mapping[str, Any]) -> _Plan:
    given = [sources] if isinstance(sources, str | os.PathLike | Source | tuple) else list(sources)
    found = [as_source(item) for item in given]
    if concurrency is not None and (not isinstance(concurrency, int) or not 1 <= concurrency <= 256):
        raise UsageError(f"concurrency: a whole number from 1 to 256, not {concurrency!r}")
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise UsageError(f"progress= takes True, a callable or None, not {type(progress).__name__}")
    chosen = resolve_contract(contract, contracts)  # a broken contract is refused before any model call
    return _Plan([item for item in found if isinstance(item, str)], [item for item in found if isinstance(item, Source)],
                 chosen, run_options(chosen, model, options, fields), concurrency or DEFAULT_CONCURRENCY, run_log,
                 progress)


async def _batch(plan: _Plan) -> tuple[Batch, bool]:
    """Run the batch; ``(batch, cancelled)``: a cancelled task stops the run as Ctrl-C does (the run log records it
    interrupted) and returns what was done, for the caller to raise."""
    opening = opened_store(plan.run_log)
    store = await asyncio.to_thread(opening.__enter__)  # a schema check, maybe a migration: not on the caller's loop
    try:
        return await _batch_in(plan, store)
    finally:
        await asyncio.to_thread(opening.__exit__, None, None, None)


async def _batch_in(plan: _Plan, store: Store) -> tuple[Batch, bool]:
    from extractor.engine.build import build_engine

    with tempfile.TemporaryDirectory(prefix="extract-sources-") as scratch:
        discovery = await asyncio.to_thread(_discover, plan, Path(scratch), store if plan.run_log is not None else None)
        notes = [f"note: {note}" for note in discovery.notes()]
        if not discovery.files:
            from extractor.engine.summary import RunSummary

            summary = RunSummary(None, outcomes=_missing(discovery))
            reason = discovery.nothing_found()
            if reason and (discovery.folders or not discovery.missing):
                raise NothingToRead(", ".join(plan.paths), reason)
            return _as_batch(store, summary, discovery, plan, notes, None), False
        progress, showing = _progress(plan.progress)
        engine = build_engine(plan.options, plan.contract.spec, store, concurrency=plan.concurrency, command=COMMAND,
                              progress=progress, note=notes.append)
        running = asyncio.ensure_future(engine.run(discovery))
        cancelled = False
        try:
            with showing:
                try:
                    summary = await asyncio.shield(running)
                except asyncio.CancelledError:
                    cancelled = True
                    running.cancel()  # the engine stops like Ctrl-C and finishes the record
                    summary = await running
        finally:
            if not running.done():
                running.cancel()
        judge = engine.judge.summary() if engine.judge is not None else None
        batch = await asyncio.to_thread(_as_batch, store, summary, discovery, plan, notes, judge)
        return batch, cancelled


def _progress(progress: ProgressLike) -> tuple[Any, AbstractContextManager[Any]]:
    """The engine's progress hooks and what to enter while the batch runs: the CLI's bar on stderr when
    ``progress=True``, a callback's calls, or nothing."""
    from extractor.engine import Progress as Hooks

    if progress is True:
        from extractor.ui.run import RunProgress

        bar = RunProgress(enabled=True)
        return bar, bar
    if progress is None or progress is False:
        return Hooks(), nullcontext()
    report = progress

    class Callback(Hooks):
        total = done = 0

        def started(self, total: int) -> None:
            self.total = total

        def finished(self, outcome: DocumentOutcome) -> None:
            self.done += 1
            report(Progress(self.done, self.total, outcome.path, outcome.state, outcome.cause))

    return Callback(), nullcontext()


def _discover(plan: _Plan, scratch: Path, keep: Store | None) -> Discovery:
    """The files of the batch: the paths as ``extract run`` finds them, then the sources given as bytes (written to
    ``scratch``, and kept in the run log as uploads when it is kept)."""
    from extractor.engine import discover
    from extractor.store.tasks import add_upload

    discovery = discover(plan.paths)
    written = write_sources(plan.sources, scratch)
    for path, source in written.items():
        if source.name in {str(file) for file in discovery.files}:
            raise UsageError(f"a Source is named {source.name}, as a file of the batch is: give it another name")
        discovery.files.append(path)
        discovery.names[path] = source.name
        if keep is not None:
            add_upload(keep.engine, source.name, source.data)
    return discovery


def _missing(discovery: Discovery) -> list[DocumentOutcome]:
    from extractor.engine import DocumentOutcome

    return [DocumentOutcome(raw, Outcome.INPUT_ERROR, f"{raw}: no such file, folder or glob match")
            for raw in discovery.missing]


def _as_batch(store: Store, summary: RunSummary, discovery: Discovery, plan: _Plan, notes: list[str],
              judge: dict[str, Any] | None) -> Batch:
    """The run's summary as the API's batch, each document read back from the run log, in the order given."""
    from extractor.api.results import result_of

    order = {name: number for number, name in enumerate([*discovery.missing,
                                                         *(discovery.name_of(path) for path in discovery.files)])}
    outcomes = sorted(summary.outcomes or _missing(discovery), key=lambda o: order.get(o.path, len(order)))
    pydantic: type[BaseModel] | None = plan.contract.model
    results = [result_of(store, outcome, pydantic) for outcome in outcomes]
    spend = summary.spend
    return Batch(run_id=summary.run_id, outcome=summary.outcome if summary.outcomes else GateDecision.NOT_EVALUABLE,
                 results=results, interrupted=summary.interrupted, stopped=summary.stopped,
                 seconds=round(summary.seconds, 3),
                 tokens=Tokens(prompt=sum(r.tokens.prompt for r in results if r.outcome is not Outcome.SKIPPED),
                               completion=sum(r.tokens.completion for r in results if r.outcome is not Outcome.SKIPPED),
                               cached=sum(r.tokens.cached for r in results if r.outcome is not Outcome.SKIPPED)),
                 cost_usd=None if spend is None else spend.known, notes=notes, judge=judge)


def _finish(batch: Batch, cancelled: bool) -> Batch:
    """What a batch's caller gets: the batch, or ``Interrupted`` when a signal stopped it (a budget's stop is not)."""
    if batch.interrupted and batch.stopped is None or cancelled:
        raise Interrupted(batch)
    return batch


async def aextract_many(sources: SourceLike | Iterable[SourceLike], *, contract: str | Contract = DEFAULT_CONTRACT,
                        model: str | None = None, options: RunOptions | None = None, concurrency: int | None = None,
                        contracts: Iterable[PathLike] = (), run_log: RunLogLike = CLI_RUN_LOG,
                        progress: ProgressLike = None, **fields: Any) -> Batch:
    """``extract_many`` as a coroutine, on the caller's event loop. Cancelling its task stops the model calls as Ctrl-C
    stops ``extract run``: the documents under way are recorded INTERRUPTED (the run too), then ``CancelledError``."""
    plan = _plan(sources, contract, model, options, concurrency, contracts, run_log, progress, fields)
    batch, cancelled = await _batch(plan)
    if cancelled:
        raise asyncio.CancelledError
    return _finish(batch, False)


def extract_many(sources: SourceLike | Iterable[SourceLike], *, contract: str | Contract = DEFAULT_CONTRACT,
                 model: str | None = None, options: RunOptions | None = None, concurrency: int | None = None,
                 contracts: Iterable[PathLike] = (), run_log: RunLogLike = CLI_RUN_LOG, progress: ProgressLike = None,
                 **fields: Any) -> Batch:
    """Convert documents as ``extract run`` does: generate, validate, repair once, (judge), route; every attempt goes
    to the run log. ``sources``: paths (files, folders, globs), ``Source``s or ``(name, bytes)``; ``fields``: any option
    of ``extract run`` by its ``RunOptions`` name (``prompt_version``, ``base_url``, ``judge``, ``max_cost``, ``force``,
    ``tags``, ...), or ``options=RunOptions(...)``. A file that cannot be read is a result with outcome INPUT_ERROR;
    the rest of the batch goes on."""
    plan = _plan(sources, contract, model, options, concurrency, contracts, run_log, progress, fields)
    batch, cancelled = _run_sync(lambda: _batch(plan))
    return _finish(batch, cancelled)


def extract(source: SourceLike, *, contract: str | Contract = DEFAULT_CONTRACT, model: str | None = None,
            options: RunOptions | None = None, contracts: Iterable[PathLike] = (), run_log: RunLogLike = CLI_RUN_LOG,
            progress: ProgressLike = None, **fields: Any) -> Result:
    """One document (a file's path, a ``Source``, or ``Source.text(...)``) converted as ``extract run`` converts it.
    A file that cannot be used raises ``InputError`` with the line ``extract run`` prints for it."""
    if not isinstance(source, str | os.PathLike | Source | tuple):
        raise UsageError(f"extract takes one document; extract_many takes several (given {type(source).__name__})")
    batch = extract_many(source, contract=contract, model=model, options=options, contracts=contracts,
                         run_log=run_log, progress=progress, **fields)
    if len(batch.results) != 1:
        raise UsageError(f"{', '.join(r.path for r in batch.results[:3])}...: one source named "
                         f"{len(batch.results)} documents (a folder, a glob, an e-mail's attachments); extract_many "
                         "converts several")
    [result] = batch.results
    if result.outcome is Outcome.INPUT_ERROR:
        cause = result.cause or f"{result.path}: cannot be read"
        raise InputError(result.path, cause.removeprefix(f"{result.path}: "))
    return result


def _run_sync(make: Callable[[], Coroutine[Any, Any, tuple[T, bool]]]) -> tuple[T, bool]:
    """Run a batch's coroutine to its end from sync code: on a loop of its own here, or, when this thread runs a loop
    already (a notebook), on a loop in another thread while this one waits; Ctrl-C while waiting stops the batch as it
    stops ``extract run`` (``(result, True)``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    started, ended = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:
            box["task"] = task = loop.create_task(make())
            box["loop"] = loop
            started.set()
            loop.run_until_complete(asyncio.wait([task]))
        finally:
            started.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            ended.set()

    threading.Thread(target=run, name="extractor-batch", daemon=True).start()
    started.wait()
    try:
        while not ended.wait(0.2):  # in slices: Ctrl-C (KeyboardInterrupt) reaches this thread between them (an
            pass                    # interrupted Thread.join would leave the thread looking stopped)
    except KeyboardInterrupt:
        box["loop"].call_soon_threadsafe(box["task"].cancel)
        ended.wait()
        result, _ = box["task"].result()
        return result, True
    found: tuple[T, bool] = box["task"].result()
    return found


# -- one document ---------------------------------------------------------------------------------------------------


def split(source: SourceLike) -> Document:
    """The document as every stage sees it: its canonical text, blocks and sentences (ids ``s1``.., offsets, pages and
    boxes where the format has them), read by a sandboxed reader as ``extract split`` reads it. ``InputError`` (the
    CLI's line) for a file that cannot be used."""
    from dataclasses import replace

    from extractor.offload import read_now

    found = as_source(source)
    if isinstance(found, str):
        return read_now(Path(found))
    with tempfile.TemporaryDirectory(prefix="extract-source-") as scratch:
        path = next(iter(write_sources([found], Path(scratch))))  # an e-mail: the mail itself
        try:
            document = read_now(path)
        except InputError as error:
            raise InputError(found.name, error.problem.replace(str(path), found.name)) from None
    return replace(document, path=found.name)


def validate(candidate: str | bytes | Mapping[str, Any] | BaseModel | os.PathLike[str], source: SourceLike, *,
             contract: str | Contract = DEFAULT_CONTRACT, contracts: Iterable[PathLike] = ()) -> Report:
    """The deterministic check alone (no model), as ``extract validate``: the candidate (an LLM's raw answer as text,
    a dict, a pydantic object, or a JSON file's path) against its source document."""
    from extractor.api.results import report_of
    from extractor.validate import validate as check

    chosen = resolve_contract(contract, contracts)
    raw = _candidate_text(candidate)
    document = split(source)
    return report_of(check(raw, document, chosen.spec), document)


def _candidate_text(candidate: Any) -> str:
    """The candidate as the validator reads it: text as given (so a broken answer is reported, not fixed)."""
    if isinstance(candidate, str):
        return candidate
    if isinstance(candidate, bytes):
        try:
            return candidate.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise UsageError(f"candidate is not UTF-8 text (byte {error.start})") from None
    if isinstance(candidate, os.PathLike):
        from extractor.rules.structure import read_candidate

        return read_candidate(Path(candidate))
    dump = getattr(candidate, "model_dump", None)
    if callable(dump):
        candidate = dump(mode="json")
    try:
        return json.dumps(candidate, ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise UsageError(f"candidate cannot be written as JSON ({error})") from None


# -- a person's decisions -------------------------------------------------------------------------------------------


def approve(document: Result | str | int, *, reviewer: str, note: str | None = None,
            edited: str | Mapping[str, Any] | BaseModel | os.PathLike[str] | None = None, force: bool = False,
            override_block: bool = False, reason: str | None = None, run_log: RunLogLike = CLI_RUN_LOG
            ) -> dict[str, Any]:
    """``extract approve``: a person approves a document's final candidate (or ``edited``, validated against the same
    source first); only approved records are exported. ``document``: a ``Result``, or what ``extract approve DOC``
    takes. Returns what ``extract approve --format json`` prints; a refusal raises ``ExtractorError`` with its line.
    An edit is checked by the contract as the run used it, found where the run recorded it (or where
    ``Contract.named(..., contracts=)`` and ``EXTRACT_CONTRACTS_PATH`` look)."""
    from extractor.review import resolve
    from extractor.review.decide import Overrides, approve_document

    with opened_store(run_log, create=False) as store:
        from extractor.store.approved import open_approved

        records = open_approved(store)
        resolved = resolve(store, _ref(document), for_decision=True)
        text = None if edited is None else _candidate_text(edited)
        result = approve_document(store, records, resolved.document_run, reviewer=reviewer, note=note, edited=text,
                                  overrides=Overrides(force, override_block, reason))
        if records is not store:
            records.close()
        return result.to_json()


def reject(document: Result | str | int, *, reviewer: str, reason: str, force: bool = False,
           run_log: RunLogLike = CLI_RUN_LOG) -> dict[str, Any]:
    """``extract reject``: a person rejects a document's candidate; returns what ``--format json`` prints."""
    from extractor.review import resolve
    from extractor.review.decide import reject_document
    from extractor.store.approved import open_approved

    with opened_store(run_log, create=False) as store:
        records = open_approved(store)
        resolved = resolve(store, _ref(document), for_decision=True)
        result = reject_document(store, records, resolved.document_run, reviewer=reviewer, reason=reason, force=force)
        if records is not store:
            records.close()
        return result.to_json()


def export_records(out: PathLike, *, format: str = "jsonl", contract: str | None = None, contract_version: int | None = None,
           explode: str | None = None, run_log: RunLogLike = CLI_RUN_LOG, contracts: Iterable[PathLike] = ()) -> int:
    """``extract export``: write the approved records (only those), with provenance, atomically; the number written."""
    from extractor.export import Wanted
    from extractor.export import export as write_export
    from extractor.store.approved import open_approved

    if format not in ("jsonl", "csv"):
        raise UsageError(f"format: jsonl or csv, not {format!r}")
    if explode is not None and format != "csv":
        raise UsageError("explode needs format='csv'")
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"{target} is a folder; give a file name")
    if not target.parent.exists():
        raise UsageError(f"folder {target.parent} does not exist")
    _search(contracts)
    with opened_store(run_log, create=False) as store:
        records = open_approved(store)
        try:
            written = write_export(records, target, format, wanted=Wanted(contract, contract_version), run_log=store,
                                   explode=explode)
        except OSError as error:
            raise ExtractorError(f"cannot write {target}: {error.strerror or error}") from None
        finally:
            if records is not store:
                records.close()
    return int(written.records)


def _ref(document: Result | str | int) -> str:
    """What ``extract approve DOC`` takes, for a ``Result`` its document run's id."""
    if isinstance(document, Result):
        if document.document_run_id is None:
            raise UsageError(f"{document.path}: no document run to decide on ({document.outcome.value})")
        return str(document.document_run_id)
    return str(document)


def _search(contracts: Iterable[PathLike]) -> None:
    from extractor.contracts import use_dirs

    use_dirs(Path(folder) for folder in contracts)
