"""Text from outside made safe to print on a terminal (docs/design.md#terminal-output).

A file name, an attachment name, a document's text or a model's answer may hold control characters: an ESC that
starts a terminal sequence (colours, a moved cursor, a changed window title), a CR or newline that forges a line of
our own output ("INPUT_ERROR ..."). Everything a command prints for people goes through ``printable``, which shows
each such character escaped (``\\x1b``, ``\\n``) and leaves every other character as it is. ``--format json``
prints values exactly (JSON escapes control characters itself).
"""

from __future__ import annotations

import re

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls, DEL, the Unicode line and paragraph separators, and the marks that reorder text as it is drawn
(a name that reads one way and is another)."""
_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(found: re.Match[str]) -> str:
    character = found.group()
    if character in _NAMED:
        return _NAMED[character]
    code = ord(character)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, lines: bool = False) -> str:
    """``text`` with every control character shown escaped; ``lines``: newlines and tabs kept (a document's text
    drawn as lines, where a line break is layout and cannot pass for a line of ours)."""
    return (_KEEP_LINES if lines else _CONTROLS).sub(_escaped, str(text))
