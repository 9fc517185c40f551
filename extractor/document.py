"""The document as every stage sees it: canonical text, its block structure and its sentence units.

All offsets are Python string indices into ``Document.text`` (the canonical text: Unicode NFC,
``\\n`` line ends). Nothing downstream ever re-reads the file, so every span is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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

    __reduce__ = by_fields

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "kind": self.kind.value, "start": self.start, "end": self.end}


@dataclass(frozen=True, slots=True)
class Sentence:
    """One sentence unit ``sN``; ``text == document.text[start:end]`` always."""

    id: str
    text: str
    start: int
    end: int
    block: int

    __reduce__ = by_fields

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "text": self.text, "start": self.start, "end": self.end, "block": self.block}


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

