"""Canonical text and the line-based block parser for plain text, Markdown and PDF text layers.

Every span downstream (sentences, evidence quotes) indexes the canonical text, so canonicalisation is
deliberately minimal: only changes that never alter what a reader sees.

The parser reads the layouts business documents are written in: Markdown (``#`` and setext headings,
fenced code, tables, lists), numbered sections (``1.``, ``3.1.``, ``1)``, ``(1)``), lettered lists
(``а)``, ``가.``), the Korean 개조식 bullets (□ ○ ■ -), circled clauses (① ②) and 제N조 articles. The one
rule that decides most cases: a marker never eats the first word of a wrapped sentence. A line that could
continue the unfinished sentence above it continues it, unless it is clearly an item.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from extractor.document import Block, BlockKind
from extractor.segment.abbreviations import ends_with_abbreviation

_CYRILLIC_SERIES = "абвгдежзиклмнопрстуфхцчшщэюя"  # list letters: ё й ъ ы ь are skipped
_HANGUL_SERIES = "가나다라마바사아자차카타파하"
_SYMBOLS = "•◦▪●○■□◆◇▶►※"  # bullets no sentence starts with
_LETTERS = ("latin", "cyrillic", "hangul", "parenthesised-hangul")
_MARKER = re.compile(
    r"(?:(?P<bullet>[-*+·–—" + _SYMBOLS + r"])"
    r"|(?P<number>\d{1,3}(?:\.\d{1,3})*)(?P<number_close>[.)])"
    r"|\((?P<parenthesised>\d{1,2}|[" + _HANGUL_SERIES + r"])\)"
    r"|(?P<circled>[\u2460-\u2473])"
    r"|(?P<latin>[a-zA-Z])\)"
    r"|(?P<cyrillic>[а-яёА-ЯЁ])(?P<cyrillic_close>[.)])"
    r"|(?P<hangul>[" + _HANGUL_SERIES + r"])(?P<hangul_close>[.)])"
    r")\s+(?=\S)"
)
# 제3조(신청 방법), 제3조의2 【정의】, or a bare 제3조 before ① or alone: an article heading; what follows it on
# the line is the article's text. "제2조 제1항에 따라" at the start of a wrapped line is a reference, not a heading.
_ARTICLE = re.compile(
    r"제\s?\d{1,3}\s?조(?:의\s?\d{1,2})?(?:\s?(?:\([^()\n]{1,40}\)|【[^】\n]{1,40}】)(?=\s|$)|(?=\s*[\u2460-\u2473]\s|\s*$))"
)
_MD_HEADING = re.compile(r"#{1,6}\s+(?=\S)")
_RULE = re.compile(r"([-=*_])(?:[ \t]*\1){2,}[ \t]*$")  # thematic break, or a setext underline (- and =)
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")
_TABLE_SEPARATOR = frozenset("|:- \t")
_SENTENCE_END = tuple(".!?。…:;．！？：；")
_UNFINISHED_OR_FINAL = (*_SENTENCE_END, ",", "，", "、")  # no title ends so
_CLOSING = "\"'»”’)]）」』"
_NARROWEST_WRAP = 40  # columns: nobody wraps lines shorter, so the lines of a tiny document never look wrapped
_WIDE = re.compile("[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]")
# Korean particles and connective endings: a line ending in one is a wrapped sentence, not a title. (Not
# 고, 서, 의, 과, 한, 할: 참고, 신청서, 회의, 결과, 권한 and 역할 are titles.)
_KOREAN_UNFINISHED = ("을", "를", "은", "는", "에", "와", "에서", "에게", "으로", "하고", "하며", "하여", "하면", "하는",
                      "되는", "있는", "있어", "위해", "위한", "따라", "따른", "대한", "및", "또는", "후", "때")  # fmt: skip


_SPACES = dict.fromkeys(map(ord, "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                                 "\u202f\u205f\u3000"), " ")
"""Every Unicode space separator (category Zs) but the space itself: a no-break or full-width space shows as a
space, and the words on either side of one are two words to every later stage (docs/formats.md)."""


def canonicalize(text: str) -> str:
    """NFC, ``\\n`` line ends, no leading BOM, every space separator a space: nothing else, so quotes still match
    the source as a reader sees it (one character for one, so nothing moves)."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").translate(_SPACES)
    return unicodedata.normalize("NFC", text)


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


@dataclass(frozen=True, slots=True)
class _Marker:
    """A list or section marker at the start of a line."""

    length: int  # characters from the marker to the item's text
    family: tuple[str, ...]  # what the items of one list share ("number", depth, close) / ("bullet", "-")
    ordinal: int | None  # place in its series (numbers, letters, circled) for telling a list from prose
    symbol: bool  # a symbol no sentence starts with (□ ○ ■ ①)
    needs_sibling: bool  # "г. Москва", "п. 3": a Cyrillic letter and a dot is an abbreviation unless a list goes on


@dataclass(slots=True)
class _Line:
    """One line of a group; a 제N조 line is two: the article heading and the text after it."""

    start: int  # offset of the first non-space character
    end: int  # offset after the last non-space character
    indent: int  # leading whitespace of the physical line
    text: str
    role: str = ""  # "table", "heading" (Markdown #), "article", "rule" (---, ===), "" for text
    marker: _Marker | None = None
    clear: bool = False  # the marker makes this an item whatever the line above says (a symbol, or a sibling)


_Span = tuple[BlockKind, int, int, int]  # kind, start, content_start, end


def parse_blocks(text: str) -> list[Block]:
    """Split canonical plain text / Markdown into blocks; blank lines separate groups of lines.

    Fenced code is one CODE block; horizontal rules belong to no block. In a group: Markdown and setext
    headings, 제N조 article headings and table rows (one block per cell) stand alone; list items take the
    lines that are indented deeper or continue their unfinished sentence; a short line without
    sentence-final punctuation is a heading when it opens its group or stands before a blank line, list or
    table, and so is a short marked line (``1. 목적``, ``■ 문의처``) directly above a paragraph; other
    consecutive lines form one paragraph.
    """
    raw = text.split("\n")
    width = _WrapWidth(raw)
    spans: list[_Span] = []
    group: list[_Line] = []
    fence: _Fence | None = None
    offset = 0
    for line in raw:
        if fence is not None:
            if fence.closed_by(line):
                spans.extend(fence.span())
                fence = None
            else:
                fence.add(line, offset)
        elif (opening := _FENCE.match(line)) and (opening.group(1)[0] == "~" or "`" not in opening.group(2)):
            spans.extend(_group_spans(group, width))
            group, fence = [], _Fence(opening.group(1), offset + len(line) - len(line.lstrip()))
        elif line.strip():
            group.extend(_lines(line, offset))
        else:
            spans.extend(_group_spans(group, width))
            group = []
        offset += len(line) + 1
    if fence is not None:  # an unclosed fence runs to the end, as in CommonMark
        spans.extend(fence.span())
    spans.extend(_group_spans(group, width))
    return [Block(index, kind, start, end, content) for index, (kind, start, content, end) in enumerate(spans)]


@dataclass(slots=True)
class _Fence:
    """A fenced code block being read: its opening fence and the extent of the code lines."""

    marker: str  # the opening run of backticks or tildes; the closing one is at least as long
    start: int
    code: tuple[int, int] | None = None  # first non-space character of the code, end of its last line

    def closed_by(self, line: str) -> bool:
        stripped = line.strip()
        return stripped.startswith(self.marker) and not stripped.strip(self.marker[0])

    def add(self, line: str, offset: int) -> None:
        if line.strip():
            first = self.code[0] if self.code else offset + len(line) - len(line.lstrip())
            self.code = (first, offset + len(line.rstrip()))

    def span(self) -> list[_Span]:
        """The CODE block from the opening fence to the last line of code; none when there is no code."""
        return [(BlockKind.CODE, self.start, *self.code)] if self.code else []


def _lines(line: str, offset: int) -> list[_Line]:
    """The logical lines of one physical line, with their role and list marker."""
    indent = len(line) - len(line.lstrip())
    stripped = line.strip()
    start, end = offset + indent, offset + len(line.rstrip())
    first = stripped[0]  # each pattern below is only tried on lines that start the way it does
    if first == "|":
        return [_Line(start, end, indent, stripped, "table")]
    if first == "#" and _MD_HEADING.match(stripped):
        return [_Line(start, end, indent, stripped, "heading")]
    if first in "-=*_" and _RULE.match(stripped):
        return [_Line(start, end, indent, stripped, "rule")]
    article = _ARTICLE.match(stripped) if first == "제" else None
    if article:
        head = _Line(start, start + article.end(), indent, article.group(), "article")
        rest = stripped[article.end() :].lstrip()
        if not rest:
            return [head]
        return [head, _with_marker(_Line(end - len(rest), end, indent, rest))]
    return [_with_marker(_Line(start, end, indent, stripped))]


def _with_marker(line: _Line) -> _Line:
    """Attach the list marker the line starts with, if any."""
    match = _MARKER.match(line.text)
    if match is None:
        return line
    found = match.groupdict()
    ordinal: int | None = None
    if found["bullet"]:
        family: tuple[str, ...] = ("bullet", found["bullet"])
    elif found["number"]:
        parts = found["number"].split(".")
        family, ordinal = ("number", str(len(parts)), found["number_close"]), int(parts[-1])
    elif found["parenthesised"]:
        value = found["parenthesised"]
        family = ("parenthesised-number",) if value.isdigit() else ("parenthesised-hangul",)
        ordinal = int(value) if value.isdigit() else _HANGUL_SERIES.index(value)
    elif found["circled"]:
        family, ordinal = ("circled",), ord(found["circled"])
    elif found["latin"]:
        family, ordinal = ("latin", str(found["latin"].isupper())), ord(found["latin"].lower()) - ord("a")
    elif found["cyrillic"]:
        letter = found["cyrillic"].lower()
        if letter not in _CYRILLIC_SERIES:
            return line
        family = ("cyrillic", str(found["cyrillic"].isupper()), found["cyrillic_close"])
        ordinal = _CYRILLIC_SERIES.index(letter)
    else:
        family, ordinal = ("hangul", found["hangul_close"]), _HANGUL_SERIES.index(found["hangul"])
    symbol = bool(found["circled"]) or bool(found["bullet"] and found["bullet"] in _SYMBOLS)
    needs_sibling = found["cyrillic_close"] == "."
    line.marker = _Marker(match.end(), family, ordinal, symbol, needs_sibling)
    return line


def _mark_items(lines: list[_Line]) -> None:
    """Drop markers that are abbreviations; flag markers that are items whatever comes before them.

    A sibling is a line of the same group at the same indent with a marker of the same family; in a
    numbered series it must be a neighbour (3.2. next to 3.1.), and letters must run from the first one
    (а, б, в), so that ``с. 5`` and ``т. е.`` at the starts of two wrapped lines are not a list.
    """
    seen: dict[tuple[int, tuple[str, ...]], dict[int | None, int]] = {}
    for line in lines:
        if line.marker:
            counts = seen.setdefault((line.indent, line.marker.family), {})
            counts[line.marker.ordinal] = counts.get(line.marker.ordinal, 0) + 1
    for line in lines:
        marker = line.marker
        if marker is None:
            continue
        ordinals = seen[(line.indent, marker.family)]
        if marker.ordinal is None:
            sibling = ordinals[None] > 1
        elif marker.family[0] in _LETTERS:  # а), б), в): the series must run from its first letter
            sibling = all(n in ordinals for n in range(max(marker.ordinal, 1) + 1))
        else:
            sibling = marker.ordinal - 1 in ordinals or marker.ordinal + 1 in ordinals
        if marker.needs_sibling and not sibling:
            line.marker = None
        else:
            line.clear = marker.symbol or sibling


def _group_spans(lines: list[_Line], width: _WrapWidth) -> list[_Span]:
    """The blocks of one group of lines (no blank line between them)."""
    _mark_items(lines)
    spans: list[_Span] = []
    current: BlockKind | None = None  # kind of the open block the next plain line may continue
    opener: _Line | None = None  # first line of the open block
    previous: _Line | None = None  # previous line of the group; None at its start or after a rule
    for number, line in enumerate(lines):
        following = lines[number + 1] if number + 1 < len(lines) else None
        unfinished = current in (BlockKind.PARAGRAPH, BlockKind.LIST_ITEM) and not _ends_sentence(previous)
        marker = line.marker
        if marker and unfinished and not _clearly_item(line, marker, current, opener):
            marker = None  # "т. к. аналогов нет": the line continues the sentence above
        if line.role == "table":
            if not set(line.text) <= _TABLE_SEPARATOR:
                spans.extend(_cells(line))
            current = None
        elif line.role == "rule":
            if _underlines(line, previous, spans):
                spans[-1] = (BlockKind.HEADING, *spans[-1][1:])
            current, previous = None, None
            continue
        elif line.role == "heading":
            prefix = _MD_HEADING.match(line.text)
            spans.append((BlockKind.HEADING, line.start, line.start + (prefix.end() if prefix else 0), line.end))
            current = None
        elif line.role == "article":
            spans.append((BlockKind.HEADING, line.start, line.start, line.end))
            current = None
        elif marker:
            content = line.start + marker.length
            if _titles_next(line, marker, following, width):
                same_list = current is BlockKind.LIST_ITEM and _same_list(line, marker, opener)
                spans.append((BlockKind.LIST_ITEM if same_list else BlockKind.HEADING, line.start, content, line.end))
                current = None
            else:
                spans.append((BlockKind.LIST_ITEM, line.start, content, line.end))
                current, opener = BlockKind.LIST_ITEM, line
        elif current is BlockKind.LIST_ITEM and (unfinished or opener is not None and line.indent > opener.indent):
            spans[-1] = (*spans[-1][:3], line.end)
        elif _is_heading(line, previous, following, width, continues=current is not None):
            spans.append((BlockKind.HEADING, line.start, line.start, line.end))
            current = None
        elif current is BlockKind.PARAGRAPH:
            spans[-1] = (*spans[-1][:3], line.end)
        else:
            spans.append((BlockKind.PARAGRAPH, line.start, line.start, line.end))
            current, opener = BlockKind.PARAGRAPH, line
        previous = line
    return spans


def _ends_sentence(line: _Line | None) -> bool:
    """Sentence-final punctuation (closing quotes aside) that is not an abbreviation (``т. е.``)."""
    if line is None:
        return True
    return line.text.rstrip(_CLOSING).endswith(_SENTENCE_END) and not ends_with_abbreviation(line.text)


def _clearly_item(line: _Line, marker: _Marker, current: BlockKind | None, opener: _Line | None) -> bool:
    """Whether a marked line below an unfinished sentence is an item all the same.

    A symbol (□ ①) or a series with its neighbour (а) next to б), 3.2. next to 3.1.) is; a dash or star,
    which also occurs in prose, only inside its own list or indented deeper than the item above it.
    """
    if marker.family[0] != "bullet" or marker.symbol:
        return line.clear
    if opener is None:
        return False
    return line.indent > opener.indent or current is BlockKind.LIST_ITEM and _same_list(line, marker, opener)


def _same_list(line: _Line, marker: _Marker, opener: _Line | None) -> bool:
    """The open block is an item of the same list (same marker family, same indent)."""
    return opener is not None and opener.marker is not None and (opener.indent, opener.marker.family) == (
        line.indent,
        marker.family,
    )


def _starts_block(line: _Line | None) -> bool:
    """Lines that always start their own block, so a short line before them can be a heading."""
    return line is not None and (line.role != "" or line.clear)


def _starts_lower(line: _Line) -> bool:
    """The line's first word (after any marker) starts with a lower-case letter: wrapped prose."""
    text = line.text[line.marker.length :] if line.marker else line.text
    return text[:1].islower()


def _fits(line: _Line, following: _Line, width: _WrapWidth) -> bool:
    """The next line's first word would have fitted on this line: the break was made on purpose."""
    return line.indent + _width(line.text) + 1 + _width(following.text.split()[0]) <= width.columns


def looks_like_title(text: str) -> bool:
    """A line a reader takes for a title: short, unpunctuated, not a wrapped sentence (formats that mark their
    numbered paragraphs but not which of them are titles ask this: HWP outline paragraphs)."""
    return _title_like(text)


def _title_like(text: str) -> bool:
    """Short, unpunctuated, with a letter, and not ending in a comma or a Korean particle."""
    if len(text) > 60 or len(text.split()) > 8 or text.rstrip(_CLOSING).endswith(_UNFINISHED_OR_FINAL):
        return False
    return not (text.endswith(_KOREAN_UNFINISHED) and _WIDE.search(text)) and any(map(str.isalpha, text))


def _is_heading(
    line: _Line, previous: _Line | None, following: _Line | None, width: _WrapWidth, *, continues: bool
) -> bool:
    """A short title line that is not the tail of an unfinished sentence.

    It must open its group (unless the next line is wrapped prose: lower-case, or a break the next word
    would have fitted on) or stand right before a blank line, a list, a table or a rule.
    """
    if (continues and not _ends_sentence(previous)) or not _title_like(line.text):
        return False
    if following is None or _starts_block(following):
        return True
    return previous is None and not _starts_lower(following) and _fits(line, following, width)


def _titles_next(line: _Line, marker: _Marker, following: _Line | None, width: _WrapWidth) -> bool:
    """A marked title directly above its text (``1. 목적``, ``3.1. Цель``, ``■ 문의처``), not a wrapped item;
    or above articles or a list of another kind (``3. 추진 배경`` over ``□ 현황``)."""
    if following is None or marker.family == ("circled",) or not _title_like(line.text[marker.length :]):
        return False  # a circled number marks a clause of an article: a sentence, never a title
    if following.role == "article" or following.clear and following.marker and following.marker.family != marker.family:
        return following.indent >= line.indent
    if _starts_block(following) or following.indent > line.indent:
        return False
    return not _starts_lower(following) and _fits(line, following, width)


def _underlines(rule: _Line, previous: _Line | None, spans: list[_Span]) -> bool:
    """A setext underline (``===`` or ``---``) right below a one-line paragraph or heading."""
    if previous is None or previous.role or previous.marker or not spans or len(set(rule.text)) != 1:
        return False
    _, start, _, end = spans[-1]
    return rule.text[0] in "=-" and (start, end) == (previous.start, previous.end)


class _WrapWidth:
    """The widest line of the document in screen columns (at least ``_NARROWEST_WRAP``), measured on first
    use: most documents never ask."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines

    @cached_property
    def columns(self) -> int:
        widest = _NARROWEST_WRAP
        for line in sorted(self._lines, key=len, reverse=True):  # longest first; a line is at most 2x its length
            if 2 * len(line) <= widest:
                break
            if not line.lstrip().startswith("|"):
                widest = max(widest, _width(line))
        return widest


def _width(text: str) -> int:
    """Columns on a monospace screen: Hangul and other East Asian wide characters take two."""
    return len(text) + len(_WIDE.findall(text))


def _cells(line: _Line) -> list[_Span]:
    """One TABLE_CELL span per non-empty ``|``-separated cell, trimmed to its text."""
    spans: list[_Span] = []
    for cell in re.finditer(r"[^|]+", line.text):
        value = cell.group()
        if value.strip():
            start = line.start + cell.start() + len(value) - len(value.lstrip())
            spans.append((BlockKind.TABLE_CELL, start, start, line.start + cell.start() + len(value.rstrip())))
    return spans
