"""The examples at the end of a command's ``--help``, and the order ``extract --help`` lists the commands in.

Kept apart from the commands' declarations so that rewriting a command's options leaves its examples alone.
Every example works when pasted in a clone of the repository, with the bundled model or a model server of one's
own: tests/test_docs.py pastes each one, in the order of ``EXAMPLES``, on a fresh copy of the samples, and checks
the exit code given here. A line ending in `` \\`` continues on the next one, as in a shell.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    """What it does (a shell comment), the command, and the exit code it ends with in the clone."""

    what: str
    command: str
    exits: int = 0
    serves: bool = False
    """A server: it runs until stopped (the test stops it once it answers)."""


EXAMPLES: dict[str, tuple[Example, ...]] = {
    "run": (
        Example("the samples with the bundled model: exit 3, its guesses need a person",
                "extract run samples/*.md samples/*.txt", 3),
        Example("again (exit 3): a rerun skips what it finished before; --force redoes it",
                "extract run samples/*.md samples/*.txt --force", 3),
    ),
    "show": (
        Example("one document's newest result: source, candidate, fields, every attempt",
                "extract show samples/en_purchase_approval.md"),
        Example("the newest run: its configuration and documents", "extract show latest"),
    ),
    "review": (
        Example("what waits for a person, with the findings", "extract review"),
        Example("the first five that need a person", "extract review --state manual --limit 5"),
    ),
    "approve": (
        Example("approve a corrected record (the sample's own), checked against the source",
                "extract approve samples/en_purchase_approval.md --reviewer me \\\n"
                "    --edited samples/expected/en_purchase_approval.candidate.json"),
    ),
    "export": (
        Example("every approved record, with its provenance, as CSV", "extract export --format csv --out approved.csv"),
        Example("the same as JSON lines", "extract export --out approved.jsonl"),
    ),
    "eval": (
        Example("the newest work_procedure run against the samples' gold records",
                "extract eval contract=work_procedure,run=latest --gold samples/gold/procedures"),
    ),
    "compare": (
        Example("the run before the newest (baseline) against the newest (candidate)",
                "extract compare latest~1 latest"),
        Example("the same, with accuracy against gold as part of the gate",
                "extract compare latest~1 latest --gold samples/gold/procedures"),
    ),
    "serve": (
        Example("a token to sign in with; then the API and review pages on 127.0.0.1:8000",
                "extract tokens create me --role reviewer --all-owners"),
        Example("(Ctrl-C stops it)", "extract serve", serves=True),
    ),
}
"""By command name; tests/test_docs.py pastes them in this order."""

COMMAND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Convert and decide", ("run", "runs", "show", "review", "approve", "reject", "export")),
    ("Measure", ("compare", "eval", "stats", "gold")),
    ("Contracts and rules", ("contracts", "validate", "split", "rules", "judge")),
    ("Run a service", ("serve", "worker", "tokens", "doctor")),
)
"""How ``extract --help`` lists the commands: in the order a newcomer meets them (README), by topic."""
