"""The repo documents itself: the README's walk-through runs as written, every ``extract`` command the README
and ``docs/`` show parses, every link and cited section exists, and nothing cites what a reader cannot see.

The walk-through runs every command of the README's code blocks in order, in a copy of the samples, with a
scripted model server that answers the way the bundled demonstration model does (candidates that fail
validation), and checks each exit code against what the README says. The bundled model itself runs the
README's first command in ``.ci/run`` (minutes), which this test keeps identical to the README.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from tests.support.llm_server import Reply, ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs/design.md"
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[local,test]' && "
TEST_COMMAND = ".venv/bin/python -m pytest"
# What a reader cannot resolve: the articles and issues the project was built from.
UNRESOLVABLE = re.compile(r"\bseeds? 0\d\d\b|\bissue #?\d+\b|\bstep \d+ of seed\b|\bSPEC\.md\b", re.IGNORECASE)


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines()
            if re.match(r"#{1,6} ", line)}


def shell_blocks(page: Path) -> list[list[str]]:
    """The commands of each ```sh block: continuation lines joined, comments and blank lines dropped."""
    blocks = re.findall(r"^```sh\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    result = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        commands = []
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(line.split("  #")[0].strip())
        result.append(commands)
    return result


def inline_commands(page: Path) -> list[str]:
    """``extract ...`` in inline code, except synopses (``[--model]``, ``jsonl|csv``, ``PATHS...``)."""
    text = page.read_text(encoding="utf-8")
    found = re.findall(r"`(extract [^`]+)`", text)
    return [command for command in found if not re.search(r"[\[|]|\.\.\.|<[^>]*>$", command)]


# ---------------------------------------------------------------- references a reader can follow


def test_every_cited_design_section_exists() -> None:
    known = headings(DESIGN)
    cited: dict[str, set[str]] = {}
    for path in sorted((ROOT / "extractor").rglob("*.py")):
        for name in re.findall(r"docs/design\.md#([\w-]+)", path.read_text(encoding="utf-8")):
            cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert len(cited) >= 5, cited  # the comments do cite it
    missing = {name: sorted(paths) for name, paths in cited.items() if name not in known}
    assert not missing, missing


def test_no_comment_cites_an_article_or_spec_that_is_not_in_the_repo() -> None:
    pattern = re.compile(r"\bseed 0\d\d\b|\bAGO\b|\bSPEC\.md\b")  # (Korean 제N조 "articles" are fine)
    offending = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "extractor").rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert not offending, offending


def test_every_link_of_the_readme_and_docs_reaches_a_page_and_heading() -> None:
    broken = []
    for page in [README, *PAGES]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in headings(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken
    assert len(PAGES) >= 9, PAGES  # the reference pages exist


def test_nothing_a_reader_sees_cites_an_article_or_issue() -> None:
    from extractor.contracts import catalogue, get_contract, use_dirs

    offending = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}" for page in [README, *PAGES]
                 for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
                 if UNRESOLVABLE.search(line)]
    use_dirs([ROOT / "samples/contracts"])
    try:
        cards = catalogue(get_contract("purchase_order").name) + catalogue()
    finally:
        use_dirs(())
    assert any(card.rule_id == "SKU_UNKNOWN" for card in cards)
    offending += [f"rule card {card.rule_id}: {text}" for card in cards for text in card.to_json().values()
                  if isinstance(text, str) and UNRESOLVABLE.search(text)]
    offending += [f"{path.relative_to(ROOT)}: {line}" for path in [*ROOT.glob("contracts/*/v*/*.toml"),
                                                                  *ROOT.glob("samples/contracts/*/v*/*.toml")]
                  for line in path.read_text(encoding="utf-8").splitlines() if UNRESOLVABLE.search(line)]
    assert not offending, offending


def test_the_readme_is_a_short_walk_through() -> None:
    text = README.read_text(encoding="utf-8")
    steps = re.findall(r"^## (\d)\. (.+)$", text, flags=re.MULTILINE)
    assert [title for _, title in steps][:5] == ["Install and run the samples", "Look at a result",
                                                  "Review and approve", "Export", "Compare two runs"], steps
    assert "Write your own contract" in [title for _, title in steps]
    assert len(text.splitlines()) <= 160, "reference material belongs in docs/"
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if len(p.split()) > 12]
    repeated = {p for p in paragraphs if paragraphs.count(p) > 1}
    assert not repeated, repeated


# ---------------------------------------------------------------- the commands shown parse


def parse(command: str, *, whole: bool) -> None:
    """Parse ``command`` the way ``extract`` would, without running it: an unknown option or subcommand raises
    a usage error (``typer.TyperException``, typer's public base of click's errors), and so do a missing argument
    or a wrong value when the command is ``whole`` (not a mention such as `extract show` or `extract run
    --model`). ``--help`` ends parsing with ``typer.Exit``."""
    from extractor.cli import app

    words = shlex.split(command)[1:]
    current: Any = typer.main.get_command(app)
    context = None
    name = "extract"
    while True:
        group = hasattr(current, "resolve_command")
        subcommand = next((at for at, word in enumerate(words) if group and word in current.list_commands(context)),
                          None)  # a group's options, then the subcommand's name and its words
        try:
            context = current.make_context(name, words if subcommand is None else words[:subcommand + 1], parent=context)
            if group and subcommand is None and (unknown := _positional(current, words)):
                current.resolve_command(context, unknown)  # raises: no such command
        except typer.TyperException as error:
            if whole or not _about_a_value(error, current):
                raise
            return
        if subcommand is None:
            return
        name, current, words = current.resolve_command(context, words[subcommand:])


def _positional(group: Any, words: list[str]) -> list[str]:
    """The words a group's options do not take, from the first: what would name its subcommand."""
    takes_value = {opt for param in group.params if not getattr(param, "is_flag", False) for opt in param.opts}
    at = 0
    while at < len(words) and words[at].startswith("-"):
        at += 2 if words[at] in takes_value else 1
    return words[at:]


def _about_a_value(error: typer.TyperException, command: Any) -> bool:
    """A mention's error that only says a value is missing or a placeholder: a bad or missing parameter, or an
    option ``command`` has, given without its value."""
    option = getattr(error, "option_name", None)
    return isinstance(error, typer.BadParameter) or any(option in (*param.opts, *param.secondary_opts)
                                                        for param in command.params)


def shown_commands() -> Iterator[tuple[str, str, bool]]:
    """``(page, command, whole)``: the commands of code blocks are whole, inline ones may be mentions."""
    for page in [README, *PAGES]:
        for block in shell_blocks(page):
            for line in block:
                for part in re.split(r"\s*(?:&&|;|\|)\s*", line):
                    if part.startswith("extract ") and "$(" not in part:
                        yield page.name, part.rstrip(" &"), True
        for command in inline_commands(page):
            yield page.name, command, False


def test_every_extract_command_the_readme_and_docs_show_parses() -> None:
    shown = list(shown_commands())
    assert len(shown) >= 40, shown
    failures = []
    for page, command, whole in shown:
        try:
            parse(command, whole=whole)
        except typer.Exit:
            pass
        except typer.TyperException as error:
            failures.append(f"{page}: {command}: {error.format_message()}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- the walk-through, as written


def test_the_readme_starts_with_the_two_commands_ci_runs() -> None:
    first, *_ = shell_blocks(README)
    assert first == [INSTALL + "extract run samples/*.md samples/*.txt", TEST_COMMAND]
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
    assert first[1] in ci and any(first[0] in line for line in ci), "keep .ci/run's commands the README's"


def expected_exit(command: str) -> int:
    """What the README says each command exits with: a run of the demonstration model needs a person (3); the
    hand-checked candidate with swapped SKU digits fails on purpose (1); everything else succeeds."""
    if command.startswith("extract run "):
        return 3
    if "en_sku_transposed" in command:
        return 1
    return 0


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Callable[[str], subprocess.CompletedProcess[str]]]:
    """Runs one README command the way a shell in a fresh clone would: ``extract`` on PATH, the samples in
    the current folder, the model server of the walk-through answering like the demonstration model."""
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "extract"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m extractor "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EXTRACT_", "OPENAI_"))}
    with ScriptedLLMServer(lambda request, number: Reply('{"guess": "what the tiny model writes"}')) as server:
        env |= {"PATH": f"{bin_dir}:{env['PATH']}", "PYTHONPATH": str(ROOT), "EXTRACT_MODEL": "openai:demo",
                "OPENAI_BASE_URL": server.base_url, "COLUMNS": "80"}

        def run(command: str) -> subprocess.CompletedProcess[str]:
            if command.startswith("export "):
                for assignment in shlex.split(command)[1:]:
                    name, _, value = assignment.partition("=")
                    env[name] = value
                return subprocess.CompletedProcess(command, 0, "", "")
            return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path,
                                  timeout=600)

        yield run


def test_every_command_of_the_readme_runs_as_the_readme_says(walk: Callable[[str], subprocess.CompletedProcess[str]],
                                                             tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    assert "the command exits 3" in text and "fails on purpose (exit 1)" in text
    blocks = shell_blocks(README)
    commands = [blocks[0][0].removeprefix(INSTALL)] + [command for block in blocks[1:] for command in block]
    assert len(commands) >= 14, commands
    for command in commands:
        if "FIRST_RUN" in command:  # the ids a reader copies from `extract runs`
            listed = json.loads(walk("extract runs --format json").stdout)
            command = command.replace("FIRST_RUN", listed[1]["id"][:6]).replace("SECOND_RUN",
                                                                                  listed[0]["id"][:6])
        result = walk(command)
        assert result.returncode == expected_exit(command), (command, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, (command, result.stderr)
    exported = (tmp_path / "approved.csv").read_text(encoding="utf-8").splitlines()
    assert len(exported) == 2 and "en_purchase_approval.md" in exported[1], exported
