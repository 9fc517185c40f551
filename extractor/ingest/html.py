"""HTML: the visible text, one block per heading, list item, table cell or paragraph-like element.

Whitespace is collapsed as a browser would (it is not significant in HTML); only ``<br>`` breaks a line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from bs4 import BeautifulSoup, Tag
from bs4.element import PageElement, PreformattedString

from extractor.document import Block, BlockKind
from extractor.ingest.decode import decode
from extractor.ingest.text import join_blocks

_KINDS: dict[str, BlockKind] = {
    **{f"h{level}": BlockKind.HEADING for level in range(1, 7)},
    "li": BlockKind.LIST_ITEM,
    "td": BlockKind.TABLE_CELL,
    "th": BlockKind.TABLE_CELL,
}
# Elements that end the text run before them; text directly inside them is a paragraph.
_BLOCK_ELEMENTS = frozenset(_KINDS) | frozenset(
    "address article aside blockquote body caption dd details div dl dt fieldset figcaption figure footer form "
    "header hr html main nav ol p pre section summary table tbody tfoot thead tr ul".split()
)
_SPACE = re.compile(r"[ \t\n\r\f]+")  # HTML whitespace; a no-break space is content
_INVISIBLE = frozenset({"script", "style", "noscript", "template", "head"})
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([\w.:-]+)", re.IGNORECASE)


def parse(data: bytes, path: str) -> tuple[str, list[Block], str]:
    """Canonical text (block texts joined by ``\\n``), blocks, and the encoding the bytes were read as."""
    declared = _META_CHARSET.search(data[:4096])
    source, encoding = decode(data, path, declared.group(1).decode("ascii") if declared else None)
    text, blocks = join_blocks(pieces_of(source))
    return text, blocks, encoding


def pieces_of(source: str) -> Iterator[tuple[BlockKind, str]]:
    """The blocks of decoded HTML (an e-mail's HTML body too), as ``(kind, text)`` in reading order."""
    return _pieces(BeautifulSoup(source, "html.parser"))


def _pieces(root: BeautifulSoup) -> Iterator[tuple[BlockKind, str]]:
    """Walk the tree; inline text accumulates in a run that is emitted whenever a block element starts or ends.

    Iterative, because real pages nest deeper than Python's recursion limit.
    """
    run: list[str] = []
    stack: list[tuple[Iterator[PageElement], BlockKind, bool]] = [(iter(root.children), BlockKind.PARAGRAPH, True)]
    while stack:
        children, kind, is_block = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            if is_block:
                yield kind, _flush(run)
        elif not isinstance(child, Tag):
            if not isinstance(child, PreformattedString):  # comments, doctype, CDATA
                run.append(_SPACE.sub(" ", str(child)))  # source line breaks are just spaces
        elif child.name == "br":
            run.append("\n")
        elif child.name in _BLOCK_ELEMENTS:
            yield kind, _flush(run)
            stack.append((iter(child.children), _KINDS.get(child.name, BlockKind.PARAGRAPH), True))
        elif child.name not in _INVISIBLE:
            stack.append((iter(child.children), kind, False))


def _flush(run: list[str]) -> str:
    """The accumulated run with whitespace collapsed per ``<br>``-separated line; empties the run."""
    lines = (_SPACE.sub(" ", line).strip() for line in "".join(run).split("\n"))
    run.clear()
    return "\n".join(line for line in lines if line)
