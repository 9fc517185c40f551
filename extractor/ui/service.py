"""Terminal rendering of what ``extract serve`` keeps: its API tokens."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table
from rich.text import Text

from extractor.printable import printable
from extractor.store.tokens import TokenInfo
from extractor.ui.console import add_columns, open_console, print_table

STATUS_STYLE = {"live": "green", "expired": "yellow", "revoked": "bright_black"}


def _when(moment: datetime | None, empty: str) -> str:
    return empty if moment is None else f"{moment:%Y-%m-%d %H:%M}"


def print_tokens(tokens: list[TokenInfo]) -> None:
    """One row per token: name, role, whose work it reads, status, created, last used, expires (UTC)."""
    console = open_console()
    if not tokens:
        console.print("no token: make one with `extract tokens create NAME --role ROLE --owner TEAM`")
        return
    table = Table(title=f"{len(tokens)} token(s) (times in UTC)")
    add_columns(table, ("name", "role", "reads", "status", "created", "last used", "expires"), wrap=("name", "reads"))
    for token in tokens:
        status = token.status()
        table.add_row(printable(token.name), token.role,
                      "every owner" if token.all_owners else f"owner {printable(token.owner)}",
                      Text(status, style=STATUS_STYLE[status]), _when(token.created_at, ""),
                      _when(token.last_used_at, "never"),
                      _when(token.revoked_at, "") if status == "revoked" else _when(token.expires_at, "never"))
    print_table(console, table)
