"""Every ``--help`` reads at 80 columns: nothing cut, no line over 80, no type placeholders, every option whole,
the description's sentences not split by the docstring's line breaks, and the options of ``extract run``
grouped into panels.

A command added or given a new option keeps this green by giving it a help text (and, on ``extract run``, a
panel: ``rich_help_panel=MODEL`` and the other titles in ``extractor/cli/app.py``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from extractor.cli import app
from extractor.ui.help import reflow

WIDTH = 80
PLACEHOLDER = re.compile(r"<(?:str|int|float|bool|path|list\[[^\]]*\]|text|[a-z]+ range)>", re.IGNORECASE)
RUN_PANELS = ["Contract", "Model", "Batch", "Judge", "Queue", "Output"]


def commands() -> Iterator[tuple[list[str], Any]]:
    """Every command and group with the words that call it (``[]`` is ``extract`` itself)."""
    stack: list[tuple[list[str], Any]] = [([], typer.main.get_command(app))]
    while stack:
        words, command = stack.pop()
        yield words, command
        stack.extend(([*words, name], child) for name, child in (getattr(command, "commands", None) or {}).items()
                     if not child.hidden)


def help_of(words: list[str], columns: int = WIDTH) -> str:
    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, (words, result.output)
    return result.output


def panel_titles(output: str) -> list[str]:
    return re.findall(r"^╭─ (.+?) ─", output, flags=re.MULTILINE)


def description_lines(output: str) -> list[list[str]]:
    """The paragraphs between the usage line and the first panel, as their printed lines."""
    text = output.split("╭", 1)[0]
    blocks = re.split(r"\n\s*\n", text.strip())[1:]  # the first block is the usage line
    return [block.splitlines() for block in blocks]


ALL = list(commands())


def test_every_command_is_checked() -> None:
    names = {" ".join(words) for words, _ in ALL}
    assert {"", "run", "review", "approve", "export", "rules calibrate", "judge calibrate", "tokens create"} <= names
    assert len(ALL) >= 25, names


@pytest.mark.parametrize("words", [words for words, _ in ALL], ids=lambda words: " ".join(words) or "extract")
def test_help_fits_80_columns_with_nothing_cut(words: list[str]) -> None:
    command = dict((" ".join(w), c) for w, c in ALL)[" ".join(words)]
    output = help_of(words)
    long = [line for line in output.splitlines() if len(line) > WIDTH]
    assert not long, "\n".join(long)
    assert "…" not in output and "..." not in re.sub(r"[A-Z_]+\]?\.\.\.", "", output), output
    assert not PLACEHOLDER.search(output), PLACEHOLDER.search(output)
    flat = " ".join(output.replace("│", " ").split())
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        for name in param.opts if param.param_type_name == "option" else []:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", flat), (words, name)
        help_text = " ".join((getattr(param, "help", None) or "").split())
        assert help_text and help_text.rstrip("]") in flat, (words, param.name, help_text)  # notes may join its "[...]"
    for paragraph in reflow(command.help or ""):
        assert paragraph in flat, (words, paragraph)
    for lines in description_lines(output):
        # a line ends early only where its paragraph ends: no line break carried over from the docstring
        assert all(len(line.rstrip()) > WIDTH - 20 for line in lines[:-1]), (words, lines)


def test_subcommands_are_listed_with_their_whole_first_paragraph() -> None:
    output = help_of([])
    flat = " ".join(output.replace("│", " ").split())
    for name, command in typer.main.get_command(app).commands.items():
        if not command.hidden:
            assert f"{name} {reflow(command.help)[0]}" in flat, name


def test_run_groups_its_options_into_panels() -> None:
    output = help_of(["run"])
    assert panel_titles(output) == ["Arguments", *RUN_PANELS], panel_titles(output)
    run = typer.main.get_command(app).commands["run"]
    unplaced = [param.name for param in run.params
                if param.param_type_name == "option" and param.name != "help" and not param.rich_help_panel]
    assert not unplaced, f"give these options of `extract run` a panel: {unplaced}"
    assert len(output.splitlines()) < 120, "long explanations belong in docs/"


def test_descriptions_stay_short() -> None:
    too_long = {" ".join(words): len(sum(description_lines(help_of(words)), []))
                for words, _ in ALL}
    assert not {name: lines for name, lines in too_long.items() if lines > 12}, too_long


def test_help_in_a_pipe_is_80_columns_and_wider_terminals_are_used() -> None:
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-m", "extractor", "review", "--help"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert max(len(line) for line in piped.stdout.splitlines()) == WIDTH
    wide = help_of(["review"], columns=100)
    assert max(len(line) for line in wide.splitlines()) == 100
    assert len(wide.splitlines()) < len(help_of(["review"]).splitlines())


def test_extract_help_lists_the_commands_in_the_order_a_newcomer_meets_them() -> None:
    output = help_of([])
    assert panel_titles(output)[1:] == ["Convert and decide", "Measure", "Contracts and rules", "Run a service"]
    names = re.findall(r"^│ ([a-z]+) ", output, flags=re.MULTILINE)
    assert names[:7] == ["run", "runs", "show", "review", "approve", "reject", "export"], names
    listed = {name for name, child in typer.main.get_command(app).commands.items() if not child.hidden}  # type: ignore[attr-defined]
    assert sorted(names) == sorted(listed)  # every command once


@pytest.mark.parametrize("words", [["run"], ["review"], ["show"], ["approve"], ["export"], ["eval"], ["compare"],
                                   ["serve"]], ids=lambda words: words[0])
def test_the_commands_people_run_first_end_with_examples(words: list[str]) -> None:
    """The last thing their --help prints: one or two commands to paste, each after a comment saying what it does
    (tests/test_docs.py pastes them); outside any panel, so a selection copies no border."""
    output = help_of(words)
    examples = output.split("Examples (in a clone of the repository):\n", 1)[1].splitlines()
    commands = [line for line in examples if line.startswith("  extract ")]
    assert 1 <= len(commands) <= 2 and examples[0].startswith("  # "), examples
    assert all(line.startswith(("  # ", "  extract ", "      --")) for line in examples if line), examples
    assert "│" not in "\n".join(examples)
