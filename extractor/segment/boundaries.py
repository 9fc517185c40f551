"""Boundary rules the sentence splitters do not know: lines that are units by layout, and splits to undo.

Before a block is split, ``line_pieces`` cuts it at the lines that are units by their layout whatever their
punctuation: the ``Field: value`` header lines of a form and the rows of a fixed-width table (a splitter sees a
block's lines as one paragraph and would glue ``Requested by: Dana Kim`` to ``Due date: 2026-03-14``). After it,
``repair`` undoes two kinds of split:

- inside a short quotation (razdel ends a sentence at the ``!`` of ``«Не включать! Работают люди».``, the Korean
  rules at the ``!`` of ``「전원 투입 금지! 작업 중」``), and right after one whose text ends without sentence
  punctuation;
- before a number that ends the previous sentence: pysbd reads ``order 2. The clerk ...`` as a numbered list
  item ``2.`` and cuts after ``order``; the number goes back to the sentence it ends, unless the units really
  are a list (``1. ... 2. ...`` or an item after a colon).

Every rule works on offsets into the block's content and only moves or removes boundaries between
non-space characters, so units stay exact slices and ``check_invariants`` holds.
"""

from __future__ import annotations

import re
import unicodedata

_FIELD_LINE = re.compile(r"(?P<label>[^\W\d_](?:[^\W_]|[ ./()&'-]){0,39}?)\s?[:：][ \t]+\S")
"""``Requested by: Dana Kim``, ``Выдал: Иванов И. И.``, ``완료 기한: 2026년 3월 14일``: a short label of words (it
starts with a letter; no sentence punctuation before the colon), a colon, a value on the same line."""
_LABEL_WORDS = 5
_COLUMN_GAP = re.compile(r"(?<=[^\s.!?…:;])(?: {2,}|\t+)(?=\S)")
"""A gap between two cells of a fixed-width row: two or more spaces or a tab, not after sentence punctuation
(typewriter spacing after a full stop is not a column)."""
_QUOTES = {"«": "»", "“": "”", "„": "“", "\"": "\"", "「": "」", "『": "』"}
_OPENING = re.compile("[" + re.escape("".join(_QUOTES)) + "]")
_QUOTE_LIMIT = 300
"""Characters a quotation may span to be kept whole: a sign's text or a short statement, not a stray mark."""
_TERMINALS = frozenset(".!?…。！？")
_LIST_NUMBER = re.compile(r"(\d{1,3})\.\s")
_OPENING_NUMBER = re.compile(r"([:：])\s+(\d{1,3}\.)\Z")
_WORD_END = re.compile(r"[^\W_]\Z")


def line_pieces(content: str) -> list[tuple[int, int, bool]]:
    """``content`` cut before every form field line and around every fixed-width table row (lines after a field
    line that are neither stay with it: a wrapped value), as ``(start, end, row)``; a table row (``row``) is one
    unit whatever punctuation its cells hold, a field line may still hold several sentences. One piece, the
    whole content, when it has no such lines.

    A field line also ends before a line that does not start in lowercase (``Due: 04/30/2026`` above a sentence).
    Cutting before a field line needs two of them in the block (a form) and a table two aligned rows, so a
    single ``Note: ...`` line wrapped in prose or one double space does not change how a paragraph is split.
    """
    lines = _lines(content) if "\n" in content else []
    if len(lines) < 2:
        return [(0, len(content), False)]
    texts = [content[start:end] for start, end in lines]
    fields = [_is_field_line(text) for text in texts]
    rows = _table_rows(texts)
    if not any(fields) and not any(rows):
        return [(0, len(content), False)]
    form = sum(fields) >= 2
    pieces = [(0, rows[0])]
    for index in range(1, len(lines)):
        after_field = fields[index - 1] and not texts[index][0].islower()  # a lowercase line wraps the value
        if rows[index] or rows[index - 1] or after_field or (form and fields[index]):
            pieces.append((lines[index][0], rows[index]))
    ends = [start for start, _ in pieces[1:]] + [len(content)]
    return [(start, end, row) for (start, row), end in zip(pieces, ends)]


def _lines(content: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each line of ``content`` with text, trimmed."""
    found = []
    for match in re.finditer(r"[^\n]+", content):
        text = match.group()
        if text.strip():
            start = match.start() + len(text) - len(text.lstrip())
            found.append((start, match.start() + len(text.rstrip())))
    return found


def _is_field_line(line: str) -> bool:
    match = _FIELD_LINE.match(line)
    if match is None:
        return False
    label = match.group("label")
    first = label[0]
    return len(label.split()) <= _LABEL_WORDS and (first.isupper() or not first.islower())


def _table_rows(lines: list[str]) -> list[bool]:
    """Which lines are rows of a fixed-width table: lines with a column gap, in a run of at least two whose cell
    counts agree or whose columns start at a shared display column (wide Hangul counts two)."""
    starts = [_column_starts(line) for line in lines]
    rows = [False] * len(lines)
    for index in range(1, len(lines)):
        above, here = starts[index - 1], starts[index]
        if above and here and (len(above) == len(here) or above & here):
            rows[index - 1] = rows[index] = True
    return rows


def _column_starts(line: str) -> frozenset[int]:
    """Display columns where the cells after a column gap start; empty when the line has no gap."""
    starts = set()
    for gap in _COLUMN_GAP.finditer(line):
        starts.add(_width(line[: gap.end()]))
    return frozenset(starts)


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def repair(content: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The splitter's units with the splits inside quotations removed and list numbers that end a sentence
    given back to it (see the module docstring)."""
    return _number_back(content, _join_quoted(content, spans))


def _quotations(content: str) -> list[tuple[int, int]]:
    """``[open, close]`` offsets of the quotations of ``content`` that close within ``_QUOTE_LIMIT`` characters."""
    found: list[tuple[int, int]] = []
    position = 0
    while (opening := _OPENING.search(content, position)) is not None:
        position = opening.start()
        closer = _QUOTES[opening.group()]
        if content[position + 1 : position + 2].isspace():
            position += 1
            continue
        end = content.find(closer, position + 1, position + 1 + _QUOTE_LIMIT)
        while end > 0 and content[end - 1].isspace():  # a closing mark follows the quoted text
            end = content.find(closer, end + 1, position + 1 + _QUOTE_LIMIT)
        if end < 0:
            position += 1
            continue
        found.append((position, end))
        position = end + 1
    return found


def _join_quoted(content: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Units merged across every boundary that lies inside a quotation or right after one that does not end
    a sentence (its text ends without ``.!?…``)."""
    quotations = _quotations(content)
    if not quotations or len(spans) < 2:
        return spans
    joined = [spans[0]]
    for start, end in spans[1:]:
        boundary = joined[-1][1]
        if any(open_ < boundary and start <= close or boundary == close + 1 and content[close - 1] not in _TERMINALS
               for open_, close in quotations):
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((start, end))
    return joined


def _number_back(content: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A unit that starts with ``N.`` after a unit ending in a word gives ``N.`` back to that unit, unless the
    units are a numbered list (the unit before starts with ``N-1.``); a unit that ends with a list number after
    a colon (razdel's ``Шаги: 1.``) gives it to the item it opens."""
    fixed: list[tuple[int, int]] = []
    for start, end in spans:
        number = _LIST_NUMBER.match(content, start)
        if fixed and number is not None and number.end() < end:
            previous = fixed[-1]
            before = _LIST_NUMBER.match(content, previous[0])
            in_list = before is not None and int(before.group(1)) == int(number.group(1)) - 1
            if not in_list and _WORD_END.search(content, previous[0], previous[1]):
                fixed[-1] = (previous[0], number.end() - 1)  # up to its full stop
                start = number.end()
                while content[start].isspace():
                    start += 1
        opening = _OPENING_NUMBER.search(content, fixed[-1][0], fixed[-1][1]) if fixed else None
        if opening is not None:
            fixed[-1] = (fixed[-1][0], opening.end(1))
            start = opening.start(2)
        fixed.append((start, end))
    return fixed
