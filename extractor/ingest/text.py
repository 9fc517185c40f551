"""Canonical text and the line-based block parser for plain text, Markdown and PDF text layers.

Every span downstream (sentences, evidence quotes) indexes the canonical text, so canonicalisation is
deliberately minimal: only changes that never alter what a reader sees.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from extractor.document import Block, BlockKind

# "- ", "* ", "• ", "1. ", "1.2) ", "a) ", Cyrillic/Korean "б) ", "가. "; the marker must be followed by text.
_LIST_MARKER = re.compile(r"(?:[-*+•·–—◦▪●○■□]|\d{1,3}(?:\.\d{1,3})*[.)]|[a-zA-Z]\)|[а-яёА-ЯЁ가-힣][.)])\s+(?=\S)")
_MD_HEADING = re.compile(r"#{1,6}\s+(?=\S)")
_TABLE_SEPARATOR = frozenset("|:- \t")
_SENTENCE_END = tuple(".!?。…:;．！？：；")
_CLOSING = "\"'»”’)]）」』"


def canonicalize(text: str) -> str:
    """NFC, ``\\n`` line ends, no leading BOM: nothing else, so quotes still match the source."""
    return unicodedata.normalize("NFC", text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n"))


def join_blocks(pieces: Iterable[tuple[BlockKind, str]]) -> tuple[str, list[Block]]:
    """Canonical text of a container format: each non-empty block text, trimmed, on its own line."""
    parts: list[str] = []
    blocks: list[Block] = []
    position = 0
    for kind, raw in pieces:
        piece = canonicalize(raw).strip()
        if piece:
            blocks.append(Block(len(blocks), kind, position, position + len(piece), position))
            parts.append(piece)
            position += len(piece) + 1
    return "\n".join(parts), blocks


def parse_blocks(text: str) -> list[Block]:
    """Split canonical plain text / Markdown into blocks; blank lines separate groups of lines.

    In a group: Markdown headings, table rows (one block per cell) and list items stand alone; a list item
    takes following lines that are indented or continue an unfinished sentence; a short line without
    sentence-final punctuation is a heading when it opens the group or precedes a blank line / list;
    other consecutive lines form one paragraph.
    """
    spans: list[tuple[BlockKind, int, int, int]] = []  # kind, start, content_start, end
    lines: list[tuple[int, str]] = []
    offset = 0
    for line in text.split("\n"):
        lines.append((offset, line))
        offset += len(line) + 1
    current: BlockKind | None = None  # kind of the block the next plain line may continue
    previous = ""  # previous line of the group, "" at the start of a group
    for number, (offset, line) in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            current, previous = None, ""
            continue
        indent = len(line) - len(line.lstrip())
        start, end = offset + indent, offset + len(line.rstrip())
        following = lines[number + 1][1] if number + 1 < len(lines) else ""
        if stripped.startswith("|"):
            if not set(stripped) <= _TABLE_SEPARATOR:
                spans.extend(_cells(line, offset))
            current = None
        elif heading := _MD_HEADING.match(line, indent):
            spans.append((BlockKind.HEADING, start, offset + heading.end(), end))
            current = None
        elif marker := _LIST_MARKER.match(line, indent):
            spans.append((BlockKind.LIST_ITEM, start, offset + marker.end(), end))
            current = BlockKind.LIST_ITEM
        elif current is BlockKind.LIST_ITEM and (indent > 0 or not _ends_sentence(previous)):
            spans[-1] = (*spans[-1][:3], end)
        elif _is_heading(stripped, previous, following, continues=current is not None):
            spans.append((BlockKind.HEADING, start, start, end))
            current = None
        elif current is BlockKind.PARAGRAPH:
            spans[-1] = (*spans[-1][:3], end)
        else:
            spans.append((BlockKind.PARAGRAPH, start, start, end))
            current = BlockKind.PARAGRAPH
        previous = line
    return [Block(index, kind, start, end, content) for index, (kind, start, content, end) in enumerate(spans)]


def _ends_sentence(line: str) -> bool:
    return line.strip().rstrip(_CLOSING).endswith(_SENTENCE_END)


def _is_special(line: str) -> bool:
    """Lines that always start their own block, so a short line before them can be a heading."""
    indent = len(line) - len(line.lstrip())
    return line.lstrip().startswith("|") or bool(_MD_HEADING.match(line, indent) or _LIST_MARKER.match(line, indent))


def _is_heading(stripped: str, previous: str, following: str, *, continues: bool) -> bool:
    """Short, unpunctuated, and not the tail of an unfinished sentence.

    It must open its group (unless the next line starts lower-case, i.e. the line is wrapped prose) or
    stand right before a blank line, a list or a table.
    """
    if len(stripped) > 60 or len(stripped.split()) > 8 or _ends_sentence(stripped):
        return False
    if not any(char.isalpha() for char in stripped) or (continues and not _ends_sentence(previous)):
        return False
    if not previous:
        return _is_special(following) or not following.lstrip()[:1].islower()
    return not following.strip() or _is_special(following)


def _cells(line: str, offset: int) -> list[tuple[BlockKind, int, int, int]]:
    """One TABLE_CELL span per non-empty ``|``-separated cell, trimmed to its text."""
    spans: list[tuple[BlockKind, int, int, int]] = []
    for cell in re.finditer(r"[^|]+", line):
        value = cell.group()
        if value.strip():
            start = offset + cell.start() + len(value) - len(value.lstrip())
            spans.append((BlockKind.TABLE_CELL, start, start, offset + cell.start() + len(value.rstrip())))
    return spans
