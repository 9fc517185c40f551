"""Terminal output of the commands on one document and the catalogue: ``split`` and ``rules``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from extractor.document import Document
from extractor.printable import printable
from extractor.rules import Card
from extractor.ui.console import add_columns, open_console, print_table


def print_sentences(document: Document, name: str, console: Console | None = None) -> None:
    """The sentence units of a segmented document with ids, blocks and offsets."""
    console = console or open_console()
    table = Table(title=f"{printable(name)} ({len(document.sentences)} sentences; {document.segmenter})", show_lines=False)
    add_columns(table, ("id", "block", "start", "end", "text"), wrap=("text",), right=("start", "end"))
    kinds = {block.index: block.kind.value for block in document.blocks}
    for s in document.sentences:
        place = f" [{printable(s.location)}]" if s.location else ""  # a cell's address, or a footnote, a text box
        table.add_row(s.id, f"{s.block}:{kinds.get(s.block, '?')}{place}", str(s.start), str(s.end), printable(s.text))
    print_table(console, table)


def print_rules(cards: Sequence[Card], console: Console | None = None) -> None:
    console = console or open_console()
    table = Table(title="rule catalogue (extract rules RULE_ID for a card)")
    add_columns(table, ("rule_id", "contract", "stage", "severity", "fires when"), wrap=("fires when",))
    for card in cards:
        table.add_row(card.rule_id, card.contract, card.stage, card.severity.value, card.fires_when)
    print_table(console, table)


def print_rule_card(card: Card) -> None:
    """One line per field of the card, names right-aligned (plain text: it reads the same in a pipe)."""
    for key, value in card.to_json().items():
        print(f"{key.replace('_', ' '):>27}: {value}")
