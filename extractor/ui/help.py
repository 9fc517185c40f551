"""``--help`` for people: every option whole at 80 columns, grouped into panels, prose reflowed.

typer's own rich help draws six columns (option, short option, negative option, its short form, a type
placeholder such as ``<list[Path]>``, the help), so at 80 columns it cut option names (``--prompt-versio…``)
and kept the docstring's line breaks, splitting sentences. Here each option is one entry: its names and a
value placeholder (``--contracts DIR``, ``--wait / --no-wait``) on the left, the help wrapped on the
right, or below it when the names are long; nothing is ever cut. Options carry their panel in
``rich_help_panel`` (model, contract, batch, output, ...); a command without panels shows one "Options".
Only typer, rich and the standard library are imported: ``extract --help`` must stay cheap.
"""

from __future__ import annotations

import inspect
import os
import re
import textwrap
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

import typer
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

MAX_WIDTH = 100
"""Help is wrapped to the terminal, but never wider than this: long lines of prose are hard to read."""
NAME_COLUMN = 28
"""Option names up to this wide sit beside their help; longer ones get a line of their own above it."""
ARGUMENTS = "Arguments"
OPTIONS = "Options"
COMMANDS = "Commands"
OUTPUT = "Output"


def help_console() -> Console:
    """stdout at the terminal's width (``COLUMNS`` when set, 80 in a pipe), at most ``MAX_WIDTH``."""
    probe = Console(markup=False, highlight=False)
    width = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else probe.width
    return Console(markup=False, highlight=False, width=max(40, min(width, MAX_WIDTH)))


def reflow(text: str) -> list[str]:
    """The paragraphs of a docstring with their line breaks removed (a list item starting ``- `` stays its own)."""
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", textwrap.dedent(text).strip()):
        items = re.split(r"\n(?=\s*- )", block)
        paragraphs.extend(" ".join(item.split()) for item in items if item.strip())
    return paragraphs


VALUE_WORDS: dict[type, str] = {str: "TEXT", int: "N", float: "NUMBER", Path: "PATH"}
"""The placeholder of an option's value by its declared type, unless the option names its own (``metavar``)."""


class Declared(NamedTuple):
    """A parameter as the command's function declares it: the type of one value (``Optional`` and ``list``
    taken off) and typer's ``Option``/``Argument`` (its ``min`` and ``max``). The help is drawn from these, not from
    the parameter objects typer builds, whose types differ from one typer release to the next."""

    kind: Any
    info: Any


def declarations(command: Any) -> dict[str, Declared]:
    """Each parameter of ``command``'s function by name (typer's commands wrap it: ``__wrapped__``), and those a
    command makes besides them (``more_declarations``: ``extract run``'s from its options model)."""
    more = getattr(command, "more_declarations", None)
    found = dict(more()) if more is not None else {}
    if command.callback is None:
        return found
    function = inspect.unwrap(command.callback)
    hints = typing.get_type_hints(function, include_extras=True)
    for name, parameter in inspect.signature(function).parameters.items():
        hint = hints.get(name, parameter.annotation)
        extras: tuple[Any, ...] = ()
        if typing.get_origin(hint) is typing.Annotated:
            hint, *rest = typing.get_args(hint)
            extras = tuple(rest)
        infos = [extra for extra in (*extras, parameter.default) if isinstance(extra, typer.models.ParameterInfo)]
        found[name] = Declared(one_value(hint), infos[0] if infos else None)
    return found


def one_value(hint: Any) -> Any:
    """``int`` of ``int | None``, ``Path`` of ``list[Path] | None``."""
    while True:
        arguments = [argument for argument in typing.get_args(hint) if argument is not type(None)]
        if typing.get_origin(hint) in (list, typing.Union, types.UnionType) and len(arguments) == 1:
            hint = arguments[0]
        else:
            return hint


def metavar(param: Any, declared: Declared | None = None) -> str:
    """What follows an option's name: nothing for a flag, its choices, or a word for its kind of value."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    if param.metavar:
        return str(param.metavar)
    kind = declared.kind if declared is not None else str
    if isinstance(kind, type) and issubclass(kind, Enum):  # the choice of an Enum's members
        return "|".join(str(member.value) for member in kind)
    return VALUE_WORDS.get(kind, getattr(kind, "__name__", str(kind)).upper())


def names(param: Any, declared: Declared | None = None) -> str:
    """``-f, --format text|json``, ``--wait / --no-wait`` (the negative form only when the flag is on by
    default), ``PATHS...``."""
    if param.param_type_name == "argument":
        return str(param.metavar or param.name.upper())
    shown = ", ".join(sorted(param.opts, key=len))
    if param.secondary_opts and param.default is True:  # "--no-replace" for an option that is off anyway: noise
        shown += " / " + ", ".join(param.secondary_opts)
    value = metavar(param, declared)
    return f"{shown} {value}".strip()


def _limits(declared: Declared | None) -> str:
    """``1 to 256``, ``at least 1``: the ``min`` and ``max`` the option declares."""
    info = declared.info if declared is not None else None
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if low is not None and high is not None:
        return f"{low} to {high}"
    if low is not None:
        return f"at least {low}"
    return f"at most {high}" if high is not None else ""


def describe(param: Any, ctx: Any, declared: Declared | None = None) -> str:
    """The help of one parameter with its limits, default and environment variable appended."""
    parts = [" ".join((getattr(param, "help", None) or "").split())]
    notes: list[str] = []
    if limits := _limits(declared):
        notes.append(limits)
    if getattr(param, "multiple", False) and "repeatable" not in parts[0]:
        notes.append("repeatable")
    envvar = getattr(param, "envvar", None)
    if isinstance(envvar, str) and envvar not in parts[0]:
        notes.append(f"env {envvar}")
    default = param.get_default(ctx, call=False) if param.param_type_name == "option" else None
    shown_default = _default(param, default)
    if shown_default and "default" not in parts[0]:
        notes.append(f"default: {shown_default}")
    if param.required and param.param_type_name == "option":
        notes.append("required")
    text = parts[0]
    if notes and text.endswith("]") and "[" in text:  # one bracket of notes: "[env X; repeatable]"
        return f"{text[:-1]}; {'; '.join(notes)}]"
    return f"{text} [{'; '.join(notes)}]".strip() if notes else text


def _default(param: Any, default: Any) -> str:
    if default is None or default == () or default == [] or param.name == "help":
        return ""
    if getattr(param, "is_flag", False):
        if param.secondary_opts and default is True:
            return max(param.opts, key=len)
        return ""
    value = getattr(default, "value", default)
    return "" if value == "" else str(value)


def name_column(rows: Iterable[tuple[str, str]]) -> int:
    """The width of the names column: the longest name up to ``NAME_COLUMN``."""
    return max((len(name) for name, _ in rows if len(name) <= NAME_COLUMN), default=0)


def entries_panel(title: str, rows: Sequence[tuple[str, str]], width: int, column: int) -> Panel:
    """``rows`` of (names, help) in a panel ``width`` wide: names beside their help when they fit ``column``,
    else on a line of their own; help wrapped at words, never cut."""
    inner = width - 4  # the panel's border and padding
    text = Text()
    for number, (name, help_text) in enumerate(rows):
        if number:
            text.append("\n")
        beside = len(name) <= column and inner - column - 2 >= 24
        indent = column + 2 if beside else 4
        lines = textwrap.wrap(help_text, width=inner - indent, break_long_words=False, break_on_hyphens=False) or [""]
        if beside:
            text.append(name.ljust(column), style="bold cyan")
            text.append("  " + lines[0])
            rest = lines[1:]
        else:
            text.append(name, style="bold cyan")
            rest = lines if help_text else []
        for line in rest:
            text.append("\n" + " " * indent + line)
    return Panel(text, title=title, title_align="left", border_style="dim", width=width)


def panels(params: Iterable[Any], ctx: Any, declared: Mapping[str, Declared] | None = None) -> dict[str, list[tuple[str, str]]]:
    """Visible parameters grouped by panel, in the order the command declares them; arguments first and
    ``--help`` last (with the output options when there are any)."""
    grouped: dict[str, list[tuple[str, str]]] = {}
    help_row = None
    for param in params:
        if getattr(param, "hidden", False):
            continue
        found = (declared or {}).get(param.name)
        row = (names(param, found), describe(param, ctx, found))
        if param.name == "help":
            help_row = row
            continue
        default = ARGUMENTS if param.param_type_name == "argument" else OPTIONS
        grouped.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(row)
    ordered = dict(sorted(grouped.items(), key=lambda item: item[0] != ARGUMENTS))
    if help_row is not None:
        ordered.setdefault(OUTPUT if OUTPUT in ordered else OPTIONS, []).append(help_row)
    return ordered


def print_help(command: Any, ctx: Any, subcommands: Sequence[tuple[str, Sequence[tuple[str, str]]]] = (),
               examples: Sequence[tuple[str, str]] = ()) -> None:
    """A command's (or a group's) help: usage, its description reflowed, panels of parameters, its subcommands in
    panels (title, rows), then ``examples`` as (what it does, command) to paste, outside any panel so that a
    selection copies no border."""
    console = help_console()
    width = console.width
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    console.print(Text.assemble(("Usage: ", "bold"), usage))
    for paragraph in reflow(command.help or ""):
        console.print()
        console.print(Text(paragraph))
    console.print()
    grouped = panels(command.get_params(ctx), ctx, declarations(command))
    column = name_column(row for rows in grouped.values() for row in rows)
    for title, rows in grouped.items():
        console.print(entries_panel(title, rows, width, column))
    if subcommands:
        column = name_column(row for _, entries in subcommands for row in entries)
        for title, entries in subcommands:
            console.print(entries_panel(title, entries, width, column))
    if examples:
        console.print(Text("Examples (in a clone of the repository):", style="bold"))
        for what, example in examples:
            for line in textwrap.wrap(what, width=width - 4, break_long_words=False, break_on_hyphens=False):
                console.print(Text(f"  # {line}", style="dim"), soft_wrap=True)
            for line in example.splitlines():
                console.print(Text(f"  {line}", style="bold"), soft_wrap=True)
