"""Terminal output of the commands on one document and the catalogue: ``split`` and ``rules``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from extractor.document import Document
from extractor.rules import Card


def print_sentences(document: Document, name: str, console: Console | None = None) -> None:
    """The sentence units of a segmented document with ids, blocks and offsets."""
    console = console or Console()
    table = Table(title=f"{name} ({len(document.sentences)} sentences; {document.segmenter})", show_lines=False)
    for column in ("id", "block", "start", "end", "text"):
        table.add_column(column, overflow="fold")
    kinds = {block.index: block.kind.value for block in document.blocks}
    for s in document.sentences:
        table.add_row(s.id, f"{s.block}:{kinds.get(s.block, '?')}", str(s.start), str(s.end), s.text)
    console.print(table)


def print_rules(cards: Sequence[Card], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="rule catalogue (extract rules RULE_ID for a card)")
    for column in ("rule_id", "contract", "stage", "severity", "fires when"):
        table.add_column(column, overflow="fold")
    for card in cards:
        table.add_row(card.rule_id, card.contract, card.stage, card.severity.value, card.fires_when)
    console.print(table)


def print_rule_card(card: Card) -> None:
    """One line per field of the card, names right-aligned (plain text: it reads the same in a pipe)."""
    for key, value in card.to_json().items():
        print(f"{key.replace('_', ' '):>27}: {value}")
