"""Run-log queries and the regression gate: ``runs``, ``stats``, ``compare``.

``runs`` and ``stats`` exit 0. ``compare`` exits with its decision so CI can gate on it:
0 PROMOTE, 1 BLOCK, 3 MANUAL_REVIEW, 4 NOT_EVALUABLE (2 stays bad usage).
"""


from pathlib import Path
from typing import Annotated, Any

import typer

from extractor.cli.app import Format, FormatOption, app, emit_json, fail
from extractor.cli.review import DatabaseOption, open_run_log
from extractor.vocab import MIN_ID_PREFIX

ModelOption = Annotated[str | None, typer.Option(help="only runs of this model: as `extract runs` shows it, or as given "
                                                      "to `extract run --model` (openai:gpt-4o-mini)")]
PromptOption = Annotated[str | None, typer.Option("--prompt-version", "--prompt", help="only this prompt version")]
ContractOption = Annotated[str | None, typer.Option(help="only this contract")]
ValidatorOption = Annotated[str | None, typer.Option("--validator", help="only this validator version")]
SinceOption = Annotated[str | None, typer.Option(help="started at or after: 2026-05-01, 2026-05-01T12:00 (UTC), 7d, 12h")]
UntilOption = Annotated[str | None, typer.Option(help="started before (same forms as --since)")]


def _filter(model: str | None, prompt_version: str | None, contract: str | None, validator: str | None,
            since: str | None, until: str | None) -> Any:
    from extractor.runfilter import RunFilter, parse_when

    return RunFilter(model=model, prompt_version=prompt_version, contract=contract, validator_version=validator,
                     since=parse_when(since) if since else None, until=parse_when(until) if until else None)


@app.command()
def runs(
    model: ModelOption = None,
    prompt_version: PromptOption = None,
    contract: ContractOption = None,
    validator: ValidatorOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many runs")] = 20,
    database: DatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Recent runs, newest first: configuration, documents per state, and accuracy against gold (`extract eval`)."""
    from extractor.review.view import run_summary

    selection = _filter(model, prompt_version, contract, validator, since, until)
    store = open_run_log(database)
    found = selection.select(store, limit=limit, every_run=True)
    accuracy = store.latest_evaluations([run.id for run in found])
    spend = run_spend(store, found)
    if format is Format.json:
        emit_json([run_summary(run) | {"accuracy": _accuracy(accuracy.get(run.id)),
                                       "cost": spend[run.id].to_json() | {
                                           "per_document_usd": spend[run.id].per(sum(run.counts.values()))}}
                   for run in found])
        return
    from extractor.ui.review import print_runs

    print_runs(found, accuracy=accuracy, spend=spend)


def run_spend(store: Any, runs: list[Any]) -> dict[str, Any]:
    """Per run: its model calls' tokens and cost (``extractor.prices``; unknown where a price is)."""
    from extractor.prices import RunModels, Spend, spend_by_key

    found = spend_by_key(store.spend(run_ids=[run.id for run in runs]), lambda row: row[0],
                         {run.id: RunModels.of_run(run) for run in runs})
    return {run.id: found.get(run.id, Spend()) for run in runs}


def _accuracy(evaluation: Any) -> dict[str, Any] | None:
    """A run's newest score against gold (``extract eval``), as ``extract runs --format json`` shows it."""
    if evaluation is None:
        return None
    return {"evaluation_id": evaluation.id, "evaluated_at": evaluation.created_at.isoformat(timespec="seconds"),
            "gold": evaluation.gold, **evaluation.summary}


@app.command()
def stats(
    selections: Annotated[list[str] | None, typer.Argument(
        metavar="[RUN_OR_FILTER]...", help=f"run ids (or their first {MIN_ID_PREFIX}+ characters) or key=value filters "
        "(prompt=v2,model=x); default: the newest runs matching the options")] = None,
    model: ModelOption = None,
    prompt_version: PromptOption = None,
    contract: ContractOption = None,
    validator: ValidatorOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    rule: Annotated[str | None, typer.Option(help="only this rule id")] = None,
    corrections: Annotated[bool, typer.Option(help="per field, the share of approved records whose value a person "
                                              "edited, by model, prompt version and contract version")] = False,
    limit: Annotated[int, typer.Option(min=1, help="at most this many runs [default: 5; with --corrections "
                                       "every matching run]")] = 5,
    database: DatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """Failure rates per rule_id per run, oldest to newest: trace a regression to the rule that started failing.

    Per rule: documents whose final attempt fails it (after the one repair), and in brackets whose first
    generation failed it; warnings as wN. With --corrections: what reviewers changed before approving, per field.
    """
    from extractor.runfilter import select_runs
    from extractor.stats import correction_stats, rule_stats

    options = _filter(model, prompt_version, contract, validator, since, until)
    store = open_run_log(database)
    if corrections:
        every = not selections and options.empty and limit == 5  # no selection: every run, no list of ids to pass
        groups = correction_stats(store, None if every else [run.id for run in select_runs(
            store, selections or [], options, limit=limit if limit != 5 else 1_000_000, counts=False)])
        if format is Format.json:
            emit_json([group.to_json() for group in groups])
            return
        from extractor.ui.review import print_corrections

        print_corrections(groups)
        return
    result = rule_stats(store, select_runs(store, selections or [], options, limit=limit))
    if rule is not None:
        result = [entry.only(rule.upper()) for entry in result]
    if format is Format.json:
        emit_json([entry.to_json() for entry in result])
        return
    from extractor.ui.review import print_stats

    print_stats(result)


@app.command()
def compare(
    baseline: Annotated[str, typer.Argument(help=f"run id (or its first {MIN_ID_PREFIX}+ characters), or key=value "
                                            "filters: prompt=, model=, contract=, contract_hash=, validator=, run=, "
                                            "since=, until=")],
    candidate: Annotated[str, typer.Argument(help="the same forms as BASELINE")],
    delta: Annotated[float, typer.Option(min=0.0, max=0.99, help="smallest drop in pass rate that matters")] = 0.03,
    block: Annotated[float, typer.Option(min=0.0, max=1.0, help="BLOCK when rho >= this")] = 0.8,
    review_at: Annotated[float, typer.Option("--review", min=0.0, max=1.0,
                                             help="MANUAL_REVIEW when rho >= this")] = 0.5,
    samples: Annotated[int, typer.Option(min=100, help="Monte Carlo samples")] = 10_000,
    seed: Annotated[int, typer.Option(help="random seed (same counts + seed = same rho)")] = 42,
    weights: Annotated[str | None, typer.Option(help="category traffic shares, e.g. hr=0.7,finance=0.3; implies "
                                                "--by-tag (default: shares of the compared documents)")] = None,
    by_tag: Annotated[bool, typer.Option(help="categories = document tags (extract run --tag)")] = False,
    tag_prefix: Annotated[str | None, typer.Option(help="categories = the tag starting with this, e.g. domain:")] = None,
    max_unevaluable: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of matched documents that may be "
                                                   "not evaluable (ERROR) before PROMOTE becomes MANUAL_REVIEW")] = 0.0,
    plot: Annotated[Path | None, typer.Option(help="also write a PNG of the posteriors")] = None,
    gold: Annotated[list[Path] | None, typer.Option(
        "--gold", help="also score both sides against this gold folder (repeatable: one per contract); a "
        "significant accuracy regression BLOCKs")] = None,
    max_f1_drop: Annotated[float, typer.Option(min=0.0, max=1.0, help="with --gold: BLOCK when F1 dropped by more "
                                               "than this, significantly (the whole 95% interval below -this)")] = 0.0,
    alpha: Annotated[float, typer.Option(min=0.0001, max=0.5, help="with --gold: McNemar's significance level on "
                                         "documents fully right")] = 0.05,
    resamples: Annotated[int, typer.Option(min=100, max=100_000, help="with --gold: paired bootstrap resamples")] = 1_000,
    database: DatabaseOption = None,
    format: FormatOption = Format.text,
) -> None:
    """The regression gate: per-category Beta posteriors, rho = P(rate_B < rate_A - delta), a decision.

    With --gold, both sides are scored against gold records too, paired by document: per-field F1 difference
    with a paired bootstrap interval, McNemar's exact test on documents fully right; a significant accuracy
    regression BLOCKs, a significantly regressed field needs MANUAL_REVIEW. Exit 0 PROMOTE, 1 BLOCK,
    3 MANUAL_REVIEW, 4 NOT_EVALUABLE, 2 bad usage.
    """
    from extractor.compare import AccuracySettings, parse_weights
    from extractor.compare import compare as run_compare
    from extractor.compare import plot as write_plot
    from extractor.gate import GateSettings

    settings = GateSettings(delta=delta, block=block, review=review_at, samples=samples, seed=seed)
    shares = parse_weights(weights) if weights else None
    store = open_run_log(database)
    result = run_compare(store, baseline, candidate, settings, weights=shares, by_tag=by_tag or weights is not None,
                         tag_prefix=tag_prefix, max_unevaluable=max_unevaluable, gold=gold or (),
                         accuracy=AccuracySettings(max_f1_drop, alpha, resamples))
    data = result.to_json()
    if plot is not None:
        try:
            data["plot"] = str(write_plot(result, plot))
        except OSError as error:
            fail(f"cannot write {plot}: {error.strerror or error}")
    if format is Format.json:
        emit_json(data)
    else:
        from extractor.ui.review import print_comparison

        print_comparison(result)
        if plot is not None:
            typer.echo(f"plot: {plot}")
    raise typer.Exit(result.exit_code)
