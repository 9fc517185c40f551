"""Where output goes and how wide it may be, and tables that stay readable at any width.

rich lays a table out to the console's width and, when it has less room than the content, folds cells
letter by letter: at 80 columns ``extract review``, ``runs``, ``judge reports`` and ``rules`` came out one
letter wide. Two rules keep every table readable:

- a pipe (``| less``, ``| grep``, a file) gets a width no table reaches, so tables are drawn at their
  natural width and lines are never cut (``PIPE_WIDTH``; rich would otherwise assume 80 or ``COLUMNS``);
- on a terminal, a table is drawn as a table only if it fits with its free-text columns wrapped at word
  boundaries and every other column (ids, states, rule ids, numbers: ``no_wrap`` columns) whole; when it
  does not, each row is printed as a record, one ``column: value`` line per cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # rich.progress is imported only by a command that draws a bar
    from rich.progress import Progress as RichProgress

PIPE_WIDTH = 10_000
"""Columns assumed when the output is not a terminal: wider than any row the tables here produce."""


def open_console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr) at the terminal's width, or at ``PIPE_WIDTH`` when not a terminal.

    Markup is off: the strings printed here carry document text, model answers and causes, and rich would
    read ``[긴급]`` or ``checks.toml [evidence]`` as style tags and drop them (or fail on a stray ``[/x]``);
    styles are given as ``Text`` spans or ``style=`` instead."""
    probe = Console(stderr=stderr, markup=False)
    if probe.is_terminal:
        return probe
    return Console(stderr=stderr, width=PIPE_WIDTH, markup=False)


def _as_text(console: Console, cell: object) -> Text:
    if isinstance(cell, Text):
        return cell
    return console.render_str(str(cell)) if isinstance(cell, str) else Text(str(cell))


def narrowest(console: Console, table: Table) -> int:
    """The table's width with free-text columns wrapped at their longest word and ``no_wrap`` columns whole."""
    options = console.options.update_width(PIPE_WIDTH)
    natural = Measurement.get(console, options, table).maximum
    saved = 0
    for column in table.columns:
        if column.no_wrap:
            continue
        cells = [Measurement.get(console, options, cell) for cell in column.cells]
        if cells:
            saved += max(cell.maximum for cell in cells) - max(cell.minimum for cell in cells)
    return natural - saved


def print_table(console: Console, table: Table) -> None:
    """``table`` as a table when it fits the console (see the module's docstring), else one record per row."""
    if console.width >= PIPE_WIDTH or narrowest(console, table) <= console.width:  # a pipe: no need to measure
        console.print(table)
        return
    if table.title:
        console.print(_as_text(console, table.title), style="bold")
    headers = [" ".join(str(column.header).split()) for column in table.columns]
    rows = zip(*(list(column.cells) for column in table.columns), strict=True)
    for row in rows:
        first, *rest = (_as_text(console, cell) for cell in row)
        console.print(Text.assemble((f"{headers[0]} ", "bold"), first))
        for header, cell in zip(headers[1:], rest, strict=True):
            if cell.plain.strip():
                print_hanging(console, Text.assemble(f"  {header}: ", cell), indent=4)
    if table.caption:
        console.print(_as_text(console, table.caption))


def print_hanging(console: Console, text: Text, indent: int = 2) -> None:
    """``text`` wrapped at words to the console's width, every line after the first indented by ``indent``: a
    wrapped line never starts at the margin, where the next entry starts."""
    if console.width >= PIPE_WIDTH:
        console.print(text)
        return
    for number, line in enumerate(text.wrap(console, max(20, console.width - indent))):
        console.print(Text(" " * indent) + line if number else line, soft_wrap=True)


def add_columns(table: Table, names: tuple[str, ...], *, wrap: tuple[str, ...] = (), right: tuple[str, ...] = ()) -> None:
    """Columns ``names``: the ``wrap`` ones hold free text (wrapped at words), every other one is kept whole."""
    for name in names:
        table.add_column(name, justify="right" if name in right else "left", no_wrap=name not in wrap,
                         overflow="fold" if name in wrap else "ellipsis")


def progress_bar(title: str) -> RichProgress:
    """A bar on stderr for long work (``doctor --full``, ``export``): drawn on a terminal and gone when done; a
    pipe or a log gets nothing (the command's summary line says what it did)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = open_console(stderr=True)
    return Progress(TextColumn(f"[bold]{title}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.description}", markup=False), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console, transient=True, disable=not console.is_terminal)
