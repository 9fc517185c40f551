"""Canonical text, blocks and word boxes of a format built piece by piece (PDF pages, scans, workbooks, HWP).

Container formats know their structure (a table cell, a heading style) and add blocks as they are; paged
text without structure (a PDF text layer, an OCR'd page) is added as lines and parsed like plain text
(``extractor.ingest.text.parse_blocks``), with each word's box carried to its place in the canonical text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from extractor.document import Block, BlockKind, Box, Word
from extractor.ingest.text import canonicalize, parse_blocks


@dataclass(frozen=True, slots=True)
class Paged:
    """What a reader of a paged format returns: the text and blocks, where the words are, the number of pages,
    and what read the text when the bytes alone do not decide it (``Document.reader``)."""

    text: str
    blocks: list[Block]
    words: list[Word]
    pages: int
    reader: str = ""


@dataclass(frozen=True, slots=True)
class Placed:
    """A word of a page before it has a place in the document: its text, box and OCR confidence."""

    text: str
    page: int
    box: Box
    confidence: float | None = None


class Assembler:
    """Appends pieces to one canonical text: each block on its own line, paged text in groups a blank line apart."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self.blocks: list[Block] = []
        self.words: list[Word] = []
        self._paragraph_break = False  # the last piece was parsed text: the next block starts after a blank line

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def _append(self, piece: str, separator: str) -> int:
        """Add ``piece`` after ``separator`` (none at the very start); the offset where it starts."""
        if self._length:
            self._parts.append(separator)
            self._length += len(separator)
        start = self._length
        self._parts.append(piece)
        self._length += len(piece)
        return start

    def block(self, kind: BlockKind, text: str, *, marker: str = "", location: str | None = None,
              words: Iterable[Placed] = ()) -> None:
        """One block of known kind; ``marker`` (a list number the format generates, ``1.`` or ``가.``) goes before
        the text and is skipped by the block's content. ``words`` (space-separated in ``text``) carry boxes."""
        piece = canonicalize(text).strip()
        if not piece:
            return
        marker = canonicalize(marker).strip()
        line = f"{marker} {piece}" if marker else piece
        start = self._append(line, "\n\n" if self._paragraph_break else "\n")
        self._paragraph_break = False
        content = start + (len(marker) + 1 if marker else 0)
        self.blocks.append(Block(len(self.blocks), kind, start, start + len(line), content, location))
        self._place(words, content, piece)

    def lines(self, lines: Iterable[list[Placed]]) -> None:
        """Paged text as lines of words (one space between words): parsed into blocks like plain text."""
        rows = [[word for word in line if canonicalize(word.text).strip()] for line in lines]
        rows = [row for row in rows if row]
        if not rows:
            return
        chunk = "\n".join(" ".join(canonicalize(word.text).strip() for word in row) for row in rows)
        offset = self.plain(chunk)
        for row in rows:
            for word in row:
                token = canonicalize(word.text).strip()
                self.words.append(Word(offset, offset + len(token), word.page, word.box, word.confidence))
                offset += len(token) + 1

    def plain(self, text: str) -> int:
        """Plain text parsed into blocks like a .txt file, a blank line after what came before; where it starts."""
        chunk = canonicalize(text).lstrip("\n").rstrip()
        if not chunk:
            return self._length
        start = self._append(chunk, "\n\n")
        self._paragraph_break = True
        first = len(self.blocks)
        for block in parse_blocks(chunk):
            self.blocks.append(Block(first + block.index, block.kind, start + block.start, start + block.end,
                                     start + block.content_start, block.location))
        return start

    def _place(self, words: Iterable[Placed], start: int, piece: str) -> None:
        """Word boxes of a block: each word found in order in the block's text."""
        cursor = 0
        for word in words:
            token = canonicalize(word.text).strip()
            found = piece.find(token, cursor) if token else -1
            if found < 0:
                continue
            self.words.append(Word(start + found, start + found + len(token), word.page, word.box, word.confidence))
            cursor = found + len(token)

    def result(self) -> tuple[str, list[Block], list[Word]]:
        return self.text, self.blocks, sorted(self.words, key=lambda word: word.start)
