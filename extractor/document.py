"""The document as every stage sees it: canonical text, its block structure and its sentence units.

All offsets are Python string indices into ``Document.text`` (the canonical text: Unicode NFC,
``\\n`` line ends). Nothing downstream ever re-reads the file, so every span is reproducible.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


def by_fields(record: Any) -> tuple[type[Any], tuple[Any, ...]]:
    """``__reduce__`` of a frozen slotted record: its class and field values. The dataclass default looks up
    ``fields()`` for every object it unpickles, half of what a document or a report costs on its way to and from
    a worker process, in the run's process, where every call in flight waits for the interpreter."""
    return type(record), tuple(getattr(record, name) for name in type(record).__slots__)


class BlockKind(StrEnum):
    """Structural role of a block; sentence units never cross a block boundary."""

    HEADING = "heading"
    LIST_ITEM = "list_item"
    PARAGRAPH = "paragraph"
    TABLE_CELL = "table_cell"
    CODE = "code"  # a fenced code block: one unit, never split into sentences


@dataclass(frozen=True, slots=True)
class Block:
    """A run of canonical text with one structural role.

    ``content_start`` skips a list marker (``- ``, ``1. ``, ``①``), a Markdown heading/table prefix or the
    opening fence of fenced code, so that sentences start at the words a person would quote.
    """

    index: int
    kind: BlockKind
    start: int
    end: int
    content_start: int
    location: str | None = None
    """Where a format without pages puts it: a workbook's cell (``Sheet1!B3``), or a place outside the body flow
    (``footnote 2``, ``text box 1``, ``caption of table 3``, ``header``); None in the body."""

    __reduce__ = by_fields

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {"index": self.index, "kind": self.kind.value, "start": self.start, "end": self.end}
        if self.location is not None:
            found["location"] = self.location
        return found


Box = tuple[float, float, float, float]
"""``(x0, top, x1, bottom)`` as fractions of the page's width and height, so a box fits any rendering of the page."""


@dataclass(frozen=True, slots=True)
class Word:
    """A word as the page shows it (docs/formats.md#pages-and-boxes): its span of the canonical text, its page (1-based),
    its box, and Tesseract's confidence (0-100) when it was read by OCR (None: from a text layer)."""

    start: int
    end: int
    page: int
    box: Box
    confidence: float | None = None

    __reduce__ = by_fields


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence unit ``sN``; ``text == document.text[start:end]`` always."""

    id: str
    text: str
    start: int
    end: int
    block: int
    page: int | None = None
    """The page of its first word, when the format has pages (PDF, scans, images)."""
    box: Box | None = None
    """The box around its words on that page."""
    location: str | None = None
    """Its block's place in a format without pages (``Sheet1!B3``)."""

    __reduce__ = by_fields

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {"id": self.id, "text": self.text, "start": self.start, "end": self.end,
                                    "block": self.block}
        if self.page is not None:  # formats without pages or places store what they always stored
            found["page"] = self.page
        if self.box is not None:
            found["box"] = [round(edge, 4) for edge in self.box]
        if self.location is not None:
            found["location"] = self.location
        return found


@dataclass(slots=True)
class Document:
    """A source document after ingest.

    ``sha256`` hashes the raw file bytes, so a changed file is detected even when its canonical text is
    identical; ``encoding`` records what the bytes were decoded as (``None`` for container formats).
    """

    path: str
    text: str
    blocks: list[Block]
    sha256: str
    format: str
    encoding: str | None = None
    sentences: list[Sentence] = field(default_factory=list)
    segmenter: str = ""
    words: list[Word] = field(default_factory=list)
    """Where the words are on the pages, in text order (empty for formats without pages)."""
    pages: int = 0
    """Pages of a paged format (PDF, scan, image), else 0."""
    reader: str = ""
    """What read the text when the bytes alone do not decide it (OCR: engine, version, languages, settings);
    part of the segmenter id stored with the sentences, so another OCR setting never reuses their ids."""

    def sentence(self, sentence_id: str) -> Sentence | None:
        """Look a sentence up by id (``s1`` is ``sentences[0]``)."""
        if not sentence_id.startswith("s") or not sentence_id[1:].isdigit():
            return None
        position = int(sentence_id[1:]) - 1
        if 0 <= position < len(self.sentences) and self.sentences[position].id == sentence_id:
            return self.sentences[position]
        return next((s for s in self.sentences if s.id == sentence_id), None)


def language_of(text: str) -> str:
    """The document's language as a BCP 47 tag, from the script most of its letters are in (``ko``, ``ru``,
    ``en``; ``und`` without letters): the review page's ``lang`` attribute, and the language ``extract eval``
    scores by."""
    import re

    hangul = len(re.findall(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]", text))
    cyrillic = len(re.findall(r"[\u0400-\u04ff]", text))
    latin = len(re.findall(r"[A-Za-z]", text))
    best = max((hangul, "ko"), (cyrillic, "ru"), (latin, "en"))
    return best[1] if best[0] else "und"


def words_in(words: list[Word], start: int, end: int) -> list[Word]:
    """The words (in text order, as ``Document.words`` keeps them) that overlap ``text[start:end]``."""
    first = bisect_right(words, start, key=lambda word: word.end)  # the first word ending after start
    found = []
    for word in words[first:]:
        if word.start >= end:
            break
        found.append(word)
    return found


def line_boxes(words: list[Word]) -> list[tuple[int, Box]]:
    """``(page, box)`` per run of words on one line: a quote that wraps gets a box per line, not one box over
    the whole paragraph's width."""
    lines: list[tuple[int, Box]] = []
    for word in words:
        x0, top, x1, bottom = word.box
        if lines and lines[-1][0] == word.page:
            lx0, ltop, lx1, lbottom = lines[-1][1]
            middle = (top + bottom) / 2
            if ltop <= middle <= lbottom and x0 >= lx0:
                lines[-1] = (word.page, (lx0, min(ltop, top), max(lx1, x1), max(lbottom, bottom)))
                continue
        lines.append((word.page, word.box))
    return lines


def place(sentences: list[Sentence], words: list[Word]) -> list[Sentence]:
    """Each sentence with the page of its first word and the box around its words on that page."""
    if not words:
        return sentences
    placed = []
    for sentence in sentences:
        found = words_in(words, sentence.start, sentence.end)
        if not found:
            placed.append(sentence)
            continue
        page = found[0].page
        on_page = [word.box for word in found if word.page == page]
        box = (min(b[0] for b in on_page), min(b[1] for b in on_page), max(b[2] for b in on_page),
               max(b[3] for b in on_page))
        placed.append(replace(sentence, page=page, box=box))
    return placed
