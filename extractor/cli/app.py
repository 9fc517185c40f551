"""The typer app and what every command shares: formats, one-line failures, JSON output.

Only typer, the standard library and the light ``extractor.errors`` are imported here: ``extract --help``
must not pay for the sentence splitters, the LLM clients or the database. Every command imports what it needs
when it runs.
Exit codes (``extractor.vocab.ExitCode``): 0 ok, 1 findings of severity error (or a gate decision, a
refusal), 2 bad usage, unreadable input or an unusable database. An ``ExtractorError`` raised anywhere
under a command becomes its one-line ``error: ...`` and its exit code here, in ``Commands.invoke``.
"""


import dataclasses
import inspect
import json
import sys
import typing
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from extractor.errors import ContractError, ExtractorError, UsageError
from extractor.vocab import ExitCode, HelpPanel


def _plain_help(option: TyperOption | None) -> TyperOption | None:
    """``--help`` without typer's ``<bool>`` beside it."""
    if option is not None:
        option.metavar = ""
    return option


class Commands(TyperGroup):
    """The command group: any ``ExtractorError`` a command raises ends it with one line and its exit code, and
    so does a usage error click finds (a missing option or argument, an unknown option, a bad value)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        """typer draws a usage error as a five-line box; here it is ``error: <what> (<command> --help)``.

        Every error click finds in the command line derives from ``typer.TyperException`` (typer's public base
        of the click it ships), which carries the exit code (2) and the message."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.TyperException as error:
            typer.echo(f"error: {usage_message(error)}", err=True)
            sys.exit(error.exit_code)
        sys.exit(result if isinstance(result, int) else 0)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """The group named alone (``extract``, ``extract gold``) prints its help and exits 2, as a usage error
        does; typer would raise an error carrying the help as its message, which ``main`` would print again."""
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            self.format_help(ctx, None)
            raise typer.Exit(ExitCode.USAGE)
        return super().parse_args(ctx, args)  # type: ignore[no-any-return]

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer may vendor click: its own class)
        try:
            return super().invoke(ctx)
        except ExtractorError as error:
            from extractor.printable import printable

            lines = error.problems if isinstance(error, ContractError) else [str(error)]
            typer.echo("\n".join(f"error: {printable(line)}" for line in lines), err=True)
            raise typer.Exit(error.exit_code) from None

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        return _plain_help(super().get_help_option(ctx))

    def list_commands(self, ctx: Any) -> list[str]:
        """``extract``'s commands in the order a newcomer meets them (``COMMAND_GROUPS``), the rest after them."""
        from extractor.cli.examples import COMMAND_GROUPS

        names = super().list_commands(ctx)
        if getattr(ctx, "parent", None) is not None:  # a group of its own (and click may ask without a context)
            return names
        order = [name for _, group in COMMAND_GROUPS for name in group]
        return sorted(names, key=lambda name: order.index(name) if name in order else len(order))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from extractor.cli.examples import COMMAND_GROUPS
        from extractor.ui.help import COMMANDS, print_help, reflow

        listed = {name: (name, (reflow(command.help or "") or [""])[0]) for name in self.list_commands(ctx)
                  if (command := self.get_command(ctx, name)) is not None and not command.hidden}
        if ctx.parent is not None:  # a group of its own (`extract gold`, `extract judge`): one panel
            print_help(self, ctx, [(COMMANDS, list(listed.values()))])
            return
        panels = [(title, [listed.pop(name) for name in group if name in listed]) for title, group in COMMAND_GROUPS]
        print_help(self, ctx, [*panels, *([("More commands", list(listed.values()))] if listed else [])])


def usage_message(error: Any) -> str:
    """One line: what is wrong, and where the command's help is (a click ``ClickException``)."""
    message = " ".join(error.format_message().split())
    ctx = getattr(error, "ctx", None)
    return f"{message} ({ctx.command_path} --help)" if ctx is not None else message


class Command(TyperCommand):
    """A command whose help names arguments in capitals and shows no type placeholders.

    typer prints ``<bool>`` beside every flag and ``{file}`` for a required argument in the usage line;
    a flag takes no value, so it shows none, and an argument shows as ``FILE`` (``[FILE]`` when optional,
    ``PATHS...`` when it takes several).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _tidy(param)

    def get_help_option(self, ctx: Any) -> TyperOption | None:
        return _plain_help(super().get_help_option(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from extractor.cli.examples import EXAMPLES
        from extractor.ui.help import print_help

        path = " ".join(ctx.command_path.split()[1:])  # "run", "gold export": the words after `extract`
        print_help(self, ctx, examples=[(example.what, example.command) for example in EXAMPLES.get(path, ())])

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = param.metavar or (param.name or "").upper()
                pieces.append(name if param.required or name.startswith("[") else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


def _tidy(param: Any) -> None:
    if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
        param.metavar = ""
    elif isinstance(param, TyperArgument) and param.metavar is None and param.name:
        param.metavar = param.name.upper() + ("..." if param.nargs != 1 else "")


MORE_OPTIONS: ContextVar[dict[str, Any]] = ContextVar("more_options")
"""The values of the options an ``OptionsCommand`` made, by name, while its function runs."""


class OptionsCommand(Command):
    """A command with more options than its function declares: ``more_params`` makes them (from a model: ``extract
    run``'s from ``extractor.options.RunOptions``) the first time the command parses its arguments or shows its
    help, so ``extract --help`` and the other commands never import what they are made from. The function takes
    them as keyword arguments; every option sits in its panel, the panels in ``HelpPanel``'s order."""

    def more_params(self) -> list[Any]:
        raise NotImplementedError

    def more_declarations(self) -> dict[str, Any]:
        """What ``--help`` needs of those options: each one's type and limits (``extractor.ui.help.Declared``)."""
        raise NotImplementedError

    def invoke(self, ctx: Any) -> Any:
        """The values of the options ``more_params`` made reach the function in ``MORE_OPTIONS``, not as keyword
        arguments: typer passes a function the parameters it declares, and from 0.29 on refuses others."""
        self.get_params(ctx)  # the options are made
        token = MORE_OPTIONS.set({name: ctx.params.pop(name) for name in list(ctx.params) if name in self._added})
        try:
            return super().invoke(ctx)
        finally:
            MORE_OPTIONS.reset(token)

    def get_params(self, ctx: Any) -> list[Any]:
        if not getattr(self, "_complete", False):
            self._complete = True
            added = self.more_params()
            self._added = {param.name for param in added}
            for param in added:
                _tidy(param)
            order = {panel.value: number for number, panel in enumerate(HelpPanel)}
            self.params = sorted(added + self.params, key=lambda param: order.get(getattr(param, "rich_help_panel",
                                                                                          None) or "", -1))
        return super().get_params(ctx)


F = TypeVar("F", bound=Callable[..., Any])


def spread(function: F) -> Callable[..., Any]:
    """``function`` as typer reads a command: each parameter whose type is an option group (a dataclass whose fields
    are declared as a command's parameters are, ``Annotated[type, typer.Option(...)] = default``) stands for that
    group's options, in its place; called with their values, it calls ``function`` with the group made of them.

    So a command with many options takes a few typed objects that travel together (what ``extract compare``'s gate
    is told, where ``extract judge calibrate``'s scores come from) while typer, ``--help`` and the command line see
    the options one by one, as before. The groups are plain dataclasses: a read-only command stays light."""
    hints = typing.get_type_hints(function, include_extras=True)
    groups = {name: kind for name, kind in hints.items() if isinstance(kind, type) and dataclasses.is_dataclass(kind)}
    if not groups:
        return function
    parameters: list[inspect.Parameter] = []
    for name, parameter in inspect.signature(function).parameters.items():
        kind = groups.get(name)
        if kind is None:
            parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[name]))
            continue
        declared = typing.get_type_hints(kind, include_extras=True)
        parameters += [inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, annotation=declared[field.name],
                                         default=inspect.Parameter.empty if field.default is dataclasses.MISSING
                                         else field.default)
                       for field in dataclasses.fields(kind)]
    names = [parameter.name for parameter in parameters]
    twice = sorted(name for name in set(names) if names.count(name) > 1)  # by two groups, or a group and the function
    if twice:
        raise TypeError(f"{function.__qualname__}: options declared twice: {', '.join(twice)}")

    def command(**values: Any) -> Any:
        for name, kind in groups.items():
            values[name] = kind(**{field.name: values.pop(field.name) for field in dataclasses.fields(kind)})
        return function(**values)

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):  # no __wrapped__: --help reads this signature
        setattr(command, attribute, getattr(function, attribute))
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return command


class App(typer.Typer):
    """A typer app whose commands are ``Command`` unless told otherwise (``extract`` and its groups), and whose
    commands may take option groups (``spread``)."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        register = super().command(*args, cls=cls or Command, **kwargs)

        def decorator(function: F) -> F:
            register(spread(function))
            return function

        return decorator


app = App(
    cls=Commands,
    help="Turn business documents into evidence-checked structured records. The LLM proposes, "
    "deterministic rules check, a person approves.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Format(StrEnum):
    text = "text"
    json = "json"


# Help panels (``rich_help_panel``): a command with many options groups them under these titles, in this
# order; ``extractor.ui.help`` draws them and tests/test_help.py keeps every ``--help`` within 80 columns.
MODEL = HelpPanel.model.value
CONTRACT = HelpPanel.contract.value
BATCH = HelpPanel.batch.value
JUDGE = HelpPanel.judge.value
QUEUE = HelpPanel.queue.value
OUTPUT = HelpPanel.output.value

FormatOption = Annotated[Format, typer.Option("--format", "-f", help="text for people, json for machines",
                                              rich_help_panel=OUTPUT)]
ContractOption = Annotated[str, typer.Option("--contract", metavar="NAME", rich_help_panel=CONTRACT,
                                             help="output contract (`extract contracts` lists them)")]
ContractsOption = Annotated[list[Path] | None, typer.Option(
    "--contracts", metavar="DIR", rich_help_panel=CONTRACT,
    help="a folder of contracts written as files (<dir>/<name>/v<N>/) [env EXTRACT_CONTRACTS_PATH]")]


def search_contracts(dirs: list[Path] | None) -> None:
    """``--contracts`` of a command that reads stored results: where a run's contract is looked for after the
    folder the run recorded (``extractor.contracts.recorded``); nothing is loaded until a command needs it."""
    if dirs:
        from extractor.contracts.registry import use_dirs

        use_dirs(dirs)


def contract_named(name: str, dirs: list[Path] | None = None) -> Any:
    """The contract called ``name`` (looked for in ``dirs`` too), or a one-line failure naming the contracts that
    exist; a broken contract is refused with one line per problem (``ContractError``)."""
    from extractor.contracts import get_contract, use_dirs

    use_dirs(dirs or ())
    try:
        return get_contract(name)
    except KeyError as error:
        fail(str(error.args[0]))


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """End the command with ``error: <message>`` on stderr and ``code`` (see ``Commands``)."""
    raise UsageError(message, code)


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def load_document(path: Path) -> Any:
    """``path`` read by a sandboxed reader, with the reading limits a run has (``extractor.offload``)."""
    from extractor.offload import read_now

    return read_now(path)
