"""``extract rules``: the rule catalogue, one rule's card, and ``extract rules calibrate RULE_ID LABELS.csv``.

``extract rules RULE_ID`` keeps working next to the ``calibrate`` subcommand: a first word that is not a
subcommand is a rule id (``Rules.resolve_command``). Exit codes of ``calibrate``: 0 admitted (review or
block), 1 rejected (the score cannot tell the classes apart: nothing is written), 2 bad input.
"""


from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from extractor.cli.app import App, Commands, ContractsOption, Format, FormatOption, app, contract_named, emit_json, fail
from extractor.vocab import CalibrationVerdict

if TYPE_CHECKING:
    from extractor.judge.calibrate_rule import RuleCalibration


class Rules(Commands):
    """``extract rules [RULE_ID]`` and its subcommands in one group."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return "card", self.commands["card"], args
        return super().resolve_command(ctx, args)


rules_app = App(cls=Rules, invoke_without_command=True,
                        help="The rule catalogue (extract rules RULE_ID for a card); calibrate a lexical-support rule.")
app.add_typer(rules_app, name="rules")


def _registered(contract: str | None, contracts: list[Path] | None) -> str | None:
    """Registers the contracts of ``--contracts`` folders (every one when no ``--contract`` is named; a broken
    one is refused) and returns the chosen contract's name (None: all)."""
    if contract is None and contracts:
        from extractor.contracts import use_dirs
        from extractor.contracts.files import discover

        use_dirs(contracts)  # a folder without contracts is refused, not listed as nothing
        for found in discover(Path(folder).resolve() for folder in contracts):
            contract_named(found.name, contracts)
    return contract_named(contract, contracts).name if contract else None


@rules_app.callback()
def catalogue(
    ctx: typer.Context,
    contract: Annotated[str | None, typer.Option(help="only rules of this contract")] = None,
    contracts: ContractsOption = None,
    format: FormatOption = Format.text,
) -> None:
    """The rule catalogue, or the card of one rule (extract rules RULE_ID; a contract's declared checks have cards)."""
    if ctx.invoked_subcommand is not None:  # its folders now (`rules --contracts DIR RULE_ID` needs them); the
        _registered(None, contracts)  # contract is the subcommand's to resolve: `--contracts` may follow RULE_ID
        return
    chosen = _registered(contract, contracts)
    from extractor.contracts import catalogue as cards_of

    cards = cards_of(chosen)
    if format is Format.json:
        emit_json([card.to_json() for card in cards])
        return
    from extractor.ui.documents import print_rules

    print_rules(cards)


def _either_side(ctx: typer.Context, name: str, value: Any) -> Any:
    """An option of ``extract rules`` given after RULE_ID (this command's) or before it (the group's)."""
    source = ctx.get_parameter_source(name)  # typer may vendor click: its own ParameterSource, compared by name
    given_here = source is not None and source.name != "DEFAULT"
    if given_here or ctx.parent is None:
        return value
    group_value = ctx.parent.params.get(name, value)  # as typed: typer converts only what a command receives
    return type(value)(group_value) if isinstance(value, Enum) else group_value


@rules_app.command(hidden=True)
def card(
    ctx: typer.Context,
    rule_id: Annotated[str, typer.Argument(help="print this rule's card")],
    contract: Annotated[str | None, typer.Option(help="the rule of this contract")] = None,
    contracts: ContractsOption = None,
    format: FormatOption = Format.text,
) -> None:
    """One rule's card: inputs, normalisation, pass condition, location, judge needed.

    ``--contract`` and ``--contracts`` are read before the rule id (``extract rules --contract X RULE_ID``, given
    to the group) or after it (``extract rules RULE_ID --contract X``, given here); either way they are one choice.
    """
    from extractor.contracts import catalogue as cards_of

    contract, format = _either_side(ctx, "contract", contract), _either_side(ctx, "format", format)
    chosen = _registered(contract, contracts)
    match = [c for c in cards_of(chosen) if c.rule_id == rule_id.upper()]
    if not match:
        where = f"contract {chosen}" if chosen else "`extract rules`"
        fail(f"unknown rule id {rule_id!r} in {where}; `extract rules{f' --contract {chosen}' if chosen else ''}` "
             "lists them")
    if format is Format.json:
        emit_json(match[0].to_json())
        return
    from extractor.ui.documents import print_rule_card

    print_rule_card(match[0])


@dataclass(frozen=True)
class Fit:
    """How the threshold and band are fitted and measured (``extractor.judge.calibrate_rule``)."""

    max_miss: Annotated[float, typer.Option(help="share of wrong rows allowed in the fail and pass zones; the rest "
                                            "is the judge band")] = 0.1
    min_word_length: Annotated[int | None, typer.Option(help="shortest Latin/Cyrillic word counted "
                                                        "[default: the rule's]")] = None
    resamples: Annotated[int, typer.Option(min=100, max=100_000, help="bootstrap resamples")] = 1000
    seed: Annotated[int, typer.Option(help="bootstrap seed (numpy PCG64)")] = 42


@rules_app.command()
def calibrate(
    rule_id: Annotated[str, typer.Argument(help="EVIDENCE_WEAK_SUPPORT or CLAIM_LOW_LEXICAL_SUPPORT")],
    labels: Annotated[list[Path], typer.Argument(help="CSV file(s): case_id, value, excerpt, label (1 = supported) "
                                                 "or human_label_1 + human_label_2; optional language")],
    settings: Annotated[Path | None, typer.Option(help="calibration file to write [default: calibration.json in "
                                                  "--contract's folder]")] = None,
    contract: Annotated[str | None, typer.Option(metavar="NAME", help="the contract whose calibration.json to "
                                                 "write; it must run the rule [default: work_procedure, or the "
                                                 "built-in contract that runs the rule]")] = None,
    contracts: ContractsOption = None,
    write: Annotated[bool, typer.Option("--write/--no-write", help="write the threshold and band into the "
                                        "settings")] = True,
    fit: Fit = Fit(),
    format: FormatOption = Format.text,
) -> None:
    """Fit a lexical-support rule's threshold and judge band on labelled rows; write them into the contract settings.

    Measured like a judge (AUROC, MCC, sweep, 95% bootstrap intervals, verdict), per language when the rows
    have a language column. A rejected score (AUROC lower bound near 0.5) writes nothing and exits 1.
    """
    from extractor.judge.calibrate_rule import calibrate_rule, calibrated_rule, write_settings

    target = settings or _calibration_file(calibrated_rule(rule_id), contract, contracts)  # refused before the work
    calibration = calibrate_rule(rule_id, labels, max_miss=fit.max_miss, min_word_length=fit.min_word_length,
                                 resamples=fit.resamples, seed=fit.seed)
    rejected = calibration.report.verdict is CalibrationVerdict.reject
    written = write and not rejected
    if written:
        write_settings(target, calibration.settings_section, calibration.settings)
    if format is Format.json:
        emit_json({**calibration.to_json(), "settings_file": str(target), "written": written})
    else:
        _print(calibration, target, written)
    raise typer.Exit(1 if rejected else 0)


def _calibration_file(rule_id: str, contract: str | None, contracts: list[Path] | None) -> Path:
    """``calibration.json`` in the folder of the contract whose rule is calibrated: ``--contract``, else the
    default contract, else the built-in contract that runs the rule (a rule every contract written as files runs,
    such as EVIDENCE_WEAK_SUPPORT, belongs to no one contract: the settings are a contract's)."""
    from extractor.contracts import contracts as registered
    from extractor.contracts.files import CALIBRATION_FILE
    from extractor.vocab import DEFAULT_CONTRACT

    def runs(spec: Any) -> bool:
        return any(rule.card.rule_id == rule_id for rule in spec.rules)

    if contract is not None:
        chosen = contract_named(contract, contracts)
        if not runs(chosen):
            fail(f"contract {chosen.name} v{chosen.version} does not run {rule_id}, so it has no threshold of it to "
                 f"write; name one that does with --contract, or the file with --settings")
    else:
        default = contract_named(DEFAULT_CONTRACT, contracts)
        chosen = default if runs(default) else next(spec for spec in registered() if runs(spec))
    return Path(chosen.folder) / CALIBRATION_FILE


def _print(calibration: "RuleCalibration", target: Path, written: bool) -> None:
    from extractor.calibration_report import fmt

    report, judge = calibration.report, calibration.report.judge
    lower, upper = calibration.band
    typer.echo(f"{calibration.rule_id} on {report.labels_file}: {report.cases.used} rows "
               f"({report.balance.supported} supported, {report.balance.unsupported} not), "
               f"score {report.rubric_version}")
    typer.echo(f"AUROC {fmt(judge.auroc)}")
    typer.echo(f"fitted threshold {calibration.fitted_threshold:g}: MCC {fmt(judge.mcc)}, "
               f"agreement {fmt(judge.agreement)}")
    typer.echo(f"band: fail below {lower:g}, route to judge in [{lower:g}, {upper:g}), pass from {upper:g}")
    for language, figures in calibration.by_language.items():
        auroc = "undefined" if figures.auroc is None else (
            f"{figures.auroc:.3f} [{figures.low:.3f}, {figures.high:.3f}]")
        typer.echo(f"  {language}: AUROC {auroc}, n={figures.n} ({figures.supported} supported)")
    typer.echo("sweep: " + "  ".join(f"{point.threshold:g}: MCC {point.mcc.value:.2f}"
                                     if point.mcc.value is not None else f"{point.threshold:g}: -"
                                     for point in judge.sweep))
    for reason in report.reasons:
        typer.echo(f"  {reason}")
    typer.echo(f"verdict: {report.verdict.value}")
    typer.echo(f"written to {target} ({calibration.settings_section})" if written else "nothing written")
