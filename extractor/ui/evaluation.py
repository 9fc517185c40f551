"""``extract eval``: accuracy against gold as tables, and per-field F1 with intervals as a picture."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from extractor.ui.console import add_columns, open_console, print_table

if TYPE_CHECKING:
    from extractor.evaluation.evaluate import Evaluation, GroupScore
    from extractor.evaluation.metrics import Interval, Score
    from extractor.evaluation.paired import AccuracyComparison


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def interval(found: Interval) -> str:
    if found.low is None or found.high is None:
        return "-"
    undefined = f" ({found.undefined} undefined)" if found.undefined else ""
    return f"[{found.low:.3f}, {found.high:.3f}]{undefined}"


def undefined_note(resamples: int) -> str:
    """What ``(N undefined)`` beside an interval means (printed under a table that shows one)."""
    return (f"(N undefined): in N of the {resamples} resamples the documents drawn held no value of that row (a "
            "field, or a language's documents), in gold or in the candidates, so it had no F1 there; the interval is "
            "of the other resamples")


def _any_undefined(intervals: list[Interval]) -> bool:
    return any(found.undefined and found.low is not None for found in intervals)


def score_cells(score: Score) -> list[str]:
    return [number(score.precision), number(score.recall), number(score.f1), interval(score.f1_interval)]


def groups_table(title: str, rows: list[tuple[str, GroupScore]], first: str) -> Table:
    table = Table(title=title, title_justify="left")
    add_columns(table, (first, "documents", "gold", "candidate", "P", "R", "F1", "F1 95% CI", "exact F1",
                        "false values", "misses (asked)"),
                right=("documents", "gold", "candidate", "P", "R", "F1", "exact F1", "false values"))
    for name, group in rows:
        counts = group.counts
        false_values = counts["false_values"]
        table.add_row(name, str(group.documents), str(counts["gold"]), str(counts["candidate"]),
                      *score_cells(group.normalised), number(group.exact.f1),
                      Text(str(false_values), style="bold red" if false_values else ""),
                      f"{counts['misses']} ({counts['asked_misses']})")
    return table


def print_evaluation(result: Evaluation, console: Console | None = None) -> None:
    """Overall, per contract and language, per field; NEEDS_INPUT outcomes; evidence; what was left aside."""
    console = console or open_console()
    runs = ", ".join(f"{r.id[:12]} ({r.model}, prompt {r.prompt_version})" for r in result.runs[:5])
    more = f" and {len(result.runs) - 5} more" if len(result.runs) > 5 else ""
    console.print(f"eval {result.selection}: runs {runs}{more}")
    console.print("gold: " + "; ".join(f"{g.folder} ({g.contract_id}, {len(g.records)} records)" for g in result.gold))
    if result.not_evaluable:
        console.print(Text(f"not evaluable, the model never answered (left out of every score): "
                           f"{len(result.not_evaluable)} document(s)", style="yellow"))
        for document in result.not_evaluable[:20]:
            console.print(f"  {document.path}: {document.without_candidate}", highlight=False)
        if len(result.not_evaluable) > 20:
            console.print(f"  ... and {len(result.not_evaluable) - 20} more (--format json lists them)")
    if result.outcome is not None:
        console.print(Text.assemble(("NOT_EVALUABLE", "bold magenta"), ": the model answered none of the documents gold "
                                    "has, so there is no accuracy to measure (no F1, nothing kept); rerun them with "
                                    "`extract run` (it retries what ended ERROR), then eval again"))
    elif result.overall is None or not result.documents:
        console.print("no document of the selection has a gold record: nothing scored", style="bold yellow")
    else:
        overall = [("overall", result.overall)]
        print_table(console, groups_table("accuracy of values (normalised; exact F1 beside)", overall
                                          + [(g.name, g) for g in result.contracts if len(result.contracts) > 1]
                                          + [(f"language {g.name}", g) for g in result.languages], "group"))
        print_table(console, groups_table("per field", [(f"{c} {g.name}" if len(result.contracts) > 1 else g.name, g)
                                                        for c, g in result.fields], "field"))
        shown = [result.overall, *result.contracts, *result.languages, *(g for _, g in result.fields)]
        if _any_undefined([g.normalised.f1_interval for g in shown]):
            console.print(undefined_note(result.resamples), style="bright_black")
        counts = result.overall.counts
        console.print(Text.assemble(
            "NEEDS_INPUT: ", (f"{counts['false_values']} false value(s)", "bold red" if counts["false_values"] else ""),
            " (a value where gold has none: the costly error); ",
            f"{counts['misses']} miss(es), {counts['asked_misses']} of them asked as a question; "
            f"{counts['asked_correct']} question(s) where gold has no value either"))
        console.print(f"documents fully right: {result.fully_right} of {len(result.documents)}")
        if result.evidence_overall is not None and result.evidence_overall.gold:
            table = Table(title="evidence (shares a sentence with gold's evidence)", title_justify="left")
            add_columns(table, ("unit", "gold evidenced", "cited", "overlapping", "precision", "recall"),
                        right=("gold evidenced", "cited", "overlapping", "precision", "recall"))
            for name, found in [("overall", result.evidence_overall), *((e.name, e) for _, e in result.evidence)]:
                data = found.to_json()
                table.add_row(name, str(found.gold), str(found.checked), str(found.overlap), number(data["precision"]),
                              number(data["recall"]))
            print_table(console, table)
        else:
            console.print("evidence: not scored (no gold record has evidence)")
    missing = result.without_candidate
    if missing:
        console.print(f"without a final candidate (every gold value counted as a miss): {len(missing)}", style="yellow")
        for document in missing:
            console.print(f"  {document.path}: {document.without_candidate}", highlight=False)
    if result.not_in_gold:
        console.print(f"not scored, no gold record: {len(result.not_in_gold)} document(s): "
                      + ", ".join(d["path"] for d in result.not_in_gold[:10])
                      + (" ..." if len(result.not_in_gold) > 10 else ""), highlight=False)
    if result.gold_not_run:
        console.print(f"gold records the selection did not run: {len(result.gold_not_run)}: "
                      + ", ".join(Path(d["gold"]).name for d in result.gold_not_run[:10])
                      + (" ..." if len(result.gold_not_run) > 10 else ""), highlight=False)
    cost = result.summary()["cost"]
    if cost is not None and cost["calls"] and cost.get("calls_in_process") == cost["calls"]:
        console.print(f"cost: local model, no API price ({cost['calls']} model call(s))")
    elif cost is not None and cost["calls"]:
        from extractor.prices import dollars

        console.print(f"cost: {dollars(cost['cost_usd'])} for {cost['calls']} model call(s); "
                      f"{dollars(cost['per_document_usd'])} per document, {dollars(cost['per_correct_field_usd'])} "
                      "per correct field" + ("" if cost["cost_usd"] is not None else
                                             f" (no price for {', '.join(cost['models_without_price']) or 'some calls'})"))
    if result.overall is not None:
        console.print(f"95% percentile bootstrap intervals over documents: {result.resamples} resamples, "
                      f"seed {result.seed}")


def plot_fields(result: Evaluation, path: Path) -> Path:
    """A PNG of per-field F1 (normalised, with its 95% interval; exact F1 as a mark), one row per field."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(f"{c} {g.name}" if len(result.contracts) > 1 else g.name, g) for c, g in result.fields]
    rows = [row for row in rows if row[1].normalised.f1 is not None]
    if result.overall is not None and result.overall.normalised.f1 is not None:
        rows.insert(0, ("overall", result.overall))
    height = max(2.5, 0.42 * len(rows) + 1.4)
    figure, axis = plt.subplots(figsize=(9, height))
    for y, (_, group) in enumerate(rows):
        score = group.normalised
        f1 = score.f1 or 0.0
        low, high = score.f1_interval.low, score.f1_interval.high
        axis.barh(y, f1, color="tab:blue" if y or rows[0][0] != "overall" else "tab:gray", alpha=0.75)
        if low is not None and high is not None:
            axis.errorbar(f1, y, xerr=[[f1 - low], [high - f1]], fmt="none", ecolor="black", capsize=3)
        if group.exact.f1 is not None:
            axis.plot(group.exact.f1, y, marker="|", color="tab:red", markersize=14)
    axis.set_yticks(range(len(rows)), [name for name, _ in rows])
    axis.invert_yaxis()
    axis.set_xlim(0, 1)
    axis.set_xlabel(f"F1 (normalised; bar: 95% bootstrap interval, {result.resamples} resamples; red: exact F1)")
    axis.set_title(f"eval {result.selection} against " + ", ".join(g.contract_id for g in result.gold), fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def print_accuracy_comparison(accuracy: AccuracyComparison, console: Console) -> None:
    """``compare --gold``: per-field F1 on both sides with the paired interval of the difference, documents
    fully right and McNemar's p, and the accuracy decision."""
    from extractor.ui.run import DECISION_STYLE

    if accuracy.overall is None:
        console.print(Text.assemble(("accuracy: ", "bold"), (accuracy.decision, DECISION_STYLE[accuracy.decision]),
                                    f"  ({accuracy.reason})"))
        return
    table = Table(title=f"accuracy against gold on {accuracy.documents} paired document(s): F1 (normalised), "
                        f"candidate - baseline with a paired 95% bootstrap interval ({accuracy.resamples} resamples, "
                        f"seed {accuracy.seed})", title_justify="left")
    add_columns(table, ("field", "baseline F1", "candidate F1", "difference", "95% CI", "regressed"),
                right=("baseline F1", "candidate F1", "difference"))
    several = len({f.contract for f in accuracy.fields}) > 1
    for change in [accuracy.overall, *accuracy.fields]:
        regressed = change.regressed(accuracy.max_drop)
        difference = change.difference
        table.add_row(f"{change.contract} {change.name}" if several and change.contract else change.name,
                      number(change.f1_a), number(change.f1_b),
                      Text("-" if difference is None else f"{difference:+.3f}",
                           style="red" if difference is not None and difference < 0 else ""),
                      interval(change.interval), Text("REGRESSED" if regressed else "", style="bold red"))
    print_table(console, table)
    if _any_undefined([change.interval for change in [accuracy.overall, *accuracy.fields]]):
        console.print(undefined_note(accuracy.resamples).replace("so it had no F1 there", "so the difference had no "
                                                                 "value there"), style="bright_black")
    console.print(f"documents fully right: both {accuracy.both_right}, only baseline {accuracy.only_a_right}, only "
                  f"candidate {accuracy.only_b_right}; McNemar exact p = {accuracy.mcnemar_p:.4f} (alpha {accuracy.alpha:g})")
    from extractor.prices import dollars

    for side, cost in accuracy.cost.items():
        if cost and cost["calls"]:
            console.print(f"cost {side}: {dollars(cost['cost_usd'])}; {dollars(cost['per_document_usd'])} per document, "
                          f"{dollars(cost['per_correct_field_usd'])} per correct field")
    console.print(Text.assemble(("accuracy: ", "bold"), (accuracy.decision, DECISION_STYLE[accuracy.decision]),
                                f"  ({accuracy.reason})"))
