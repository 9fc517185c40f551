"""Command-line options made from a model's fields (``extractor.options.RunOptions``): one option per field with a
``Cli`` mark, its help the field's description, its limits the field's bounds (the model checks them again, with
every other rule, when the command builds it).

Imported only by a command that shows or parses such options (``OptionsCommand``): it imports pydantic.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any, get_args, get_origin

import annotated_types
import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from extractor.cli.app import fail
from extractor.options import Cli, RunOptions, explain
from extractor.ui.help import Declared, one_value


def option_params(model: type[BaseModel], names: tuple[str, ...] | None = None) -> list[Any]:
    """The click parameters of ``model``'s fields that have a ``Cli`` mark (of ``names`` only, when given).

    typer makes them the way it makes any command's: from a function whose signature declares one parameter per
    option (typer's public API; its internal helpers for one parameter differ between releases)."""
    parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind)
                  for name, kind, info in _options(model, names)]

    def declared(**values: Any) -> None:
        """Never called: its signature is what typer reads."""

    declared.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    declared.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    holder = typer.Typer(add_completion=False)
    holder.command()(declared)
    return list(typer.main.get_command(holder).params)


def option_declarations(model: type[BaseModel], names: tuple[str, ...] | None = None) -> dict[str, Declared]:
    """Those options as ``--help`` reads a function's parameters (``extractor.ui.help.Declared``)."""
    return {name: Declared(one_value(kind), info) for name, kind, info in _options(model, names)}


def _options(model: type[BaseModel], names: tuple[str, ...] | None) -> Iterator[tuple[str, Any, Any]]:
    """``(name, the option's type, its typer.Option)`` of each field with a ``Cli`` mark."""
    for name, field in model.model_fields.items():
        mark = next((m for m in field.metadata if isinstance(m, Cli)), None)
        if mark is None or (names is not None and name not in names):
            continue
        declared: tuple[str, ...] = (mark.flag,) if mark.flag else ()
        low, high = _limits(field)
        info = typer.Option(None if field.default == () else field.default, *declared, help=field.description,
                            metavar=mark.metavar, rich_help_panel=mark.panel.value, envvar=mark.envvar,
                            min=low, max=high)
        yield name, _command_line_type(field), info


def _limits(field: FieldInfo) -> tuple[float | None, float | None]:
    """A field's inclusive bounds as the option's (shown in its help); exclusive ones are the model's to check."""
    low = next((bound.ge for bound in field.metadata if isinstance(bound, annotated_types.Ge)), None)
    high = next((bound.le for bound in field.metadata if isinstance(bound, annotated_types.Le)), None)
    return low, high  # type: ignore[return-value]


def _command_line_type(field: FieldInfo) -> Any:
    """The field's type as the option takes it: a tuple of values is a repeatable option."""
    kind = field.annotation
    if get_origin(kind) is tuple:
        return list[get_args(kind)[0]] | None  # type: ignore[index,misc]
    return kind


DEFAULT_OPENAI_MODEL = "gpt-4o-mini"


def resolve_model(model: str | None) -> str:
    """--model, else EXTRACT_MODEL, else OpenAI when a key is set, else the bundled local demo model."""
    if model:
        return model
    if os.environ.get("EXTRACT_MODEL"):
        return os.environ["EXTRACT_MODEL"]
    if os.environ.get("OPENAI_API_KEY"):
        return f"openai:{DEFAULT_OPENAI_MODEL}"
    return "local"


def run_options(given: dict[str, Any]) -> RunOptions:
    """The run's options from the command line, the model resolved (``resolve_model``); one line on what is wrong."""
    values = {name: value for name, value in given.items() if value is not None}
    values["model"] = resolve_model(values.get("model"))
    try:
        return RunOptions.model_validate(values)
    except ValidationError as error:
        fail(explain(error))
