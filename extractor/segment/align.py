"""Map the sentence strings a splitter returned back to offsets in the text it was given.

Splitters may strip, collapse or re-flow whitespace (pysbd is given line breaks as spaces), and may alter or
drop characters (pysbd silently drops a sentence it cannot find again in its input). Offsets are therefore recovered by
matching non-whitespace characters in order, never by trusting a returned string to be a slice.
"""

from __future__ import annotations

from collections.abc import Iterable

_TOLERANCE = 64
"""How many non-whitespace characters a piece may sit before or after the place the pieces before it
predict; absorbs splitters that lengthen or shorten a piece they altered."""


def align(content: str, pieces: Iterable[str]) -> list[tuple[int, int]]:
    """Return ``(start, end)`` offsets into ``content`` for each sentence unit, in order.

    A piece whose non-whitespace characters occur, in order, after the previous unit becomes a unit from
    its first to its last non-whitespace character in ``content``. Text that no found piece claims (the
    splitter dropped or altered it) becomes a unit of its own. So every non-whitespace character of
    ``content`` lies in exactly one unit, and no unit starts or ends with whitespace, whatever the splitter
    returned. Each piece is looked for only in a window around where it is expected, which keeps the work
    linear in the input size unless the splitter both drops and alters text.
    """
    pieces = list(pieces)
    verbatim = _verbatim(content, pieces)
    if verbatim is not None:
        return verbatim
    positions = [index for index, char in enumerate(content) if not char.isspace()]
    dense = "".join(content[index] for index in positions)
    wanted = [squeezed for piece in pieces if (squeezed := "".join(piece.split()))]
    slack = max(0, len(dense) - sum(len(piece) for piece in wanted))
    spans: list[tuple[int, int]] = []
    cursor = 0  # first character of ``dense`` not yet in a unit
    skipped = 0  # length of the pieces since ``cursor`` that were not found
    for piece in wanted:
        expected = cursor + skipped
        found = dense.find(
            piece, max(cursor, expected - _TOLERANCE), expected + len(piece) + slack + _TOLERANCE
        )
        if found < 0:
            skipped += len(piece)
            continue
        if found > cursor:
            spans.append((positions[cursor], positions[found - 1] + 1))
        cursor = found + len(piece)
        spans.append((positions[found], positions[cursor - 1] + 1))
        skipped = 0
    if cursor < len(dense):
        spans.append((positions[cursor], positions[-1] + 1))
    return spans


def _verbatim(content: str, pieces: list[str]) -> list[tuple[int, int]] | None:
    """The common case without the per-character work: every piece, trimmed, is a slice of ``content``
    that follows the previous one after nothing but whitespace, and only whitespace follows the last.

    Then the search above would find each piece exactly there, so the spans are the same; otherwise
    ``None`` and the search runs.
    """
    spans: list[tuple[int, int]] = []
    cursor = 0
    for piece in pieces:
        trimmed = piece.strip()
        if not trimmed:
            continue
        found = content.find(trimmed, cursor)
        if found < 0 or found > cursor and not content[cursor:found].isspace():
            return None
        cursor = found + len(trimmed)
        spans.append((found, cursor))
    return None if content[cursor:].strip() else spans
