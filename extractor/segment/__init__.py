"""Segment stage: split every block's content into sentence units ``s1..sN`` with exact offsets.

Ids are positions, so they are only stable for one ``SEGMENTER_ID``: another razdel or pysbd version, or a
change to the rules here or in ``extractor.segment.korean``, may move one boundary and renumber every later
sentence. Store ``Document.segmenter`` with anything that refers to sentence ids.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from importlib.metadata import version

from extractor.document import Block, BlockKind, Document, Sentence, place
from extractor.segment import boundaries, korean
from extractor.segment.abbreviations import mask
from extractor.segment.align import align

__all__ = ["SEGMENTER_ID", "check_invariants", "segment"]

SEGMENTER_ID: str = f"extractor-seg/5 razdel={version('razdel')} pysbd={version('pysbd')}"
"""Names this segmenter and every library version that decides where boundaries (and so ids) fall.

Bump ``extractor-seg/N`` whenever a rule below, or a block rule of ``extractor.ingest.text`` (blocks bound
the units), changes. Versions come from package metadata: reading a text (``extract show`` does) imports no
splitter.

2: wrapped lines starting with an abbreviation, marked titles above their text, circled clauses, 제N조
articles, fenced code, no split after an abbreviation that never ends a sentence.
3: form field lines and fixed-width table rows are units of their own; no split inside a short quotation, before
``№`` or after ``инв.``; a number that ends a sentence (``order 2.``) stays with it (``extractor.segment.boundaries``).
4: a lone field line ends before the sentence under it; a Korean ending before a parenthesis (``교체한다(2.5시간).``)
ends its sentence.
5: Korean by ``extractor.segment.korean``'s rules, not kss: a list letter stays with its item (``가. 요청자는``),
a full stop after a code or a noun ends its sentence (``PO-2025-0314.``, ``2루타.``), a quotation spoken on
(``”라며``) does not.
"""

Splitter = Callable[[str], list[str]]

_WINDOW = 2000
"""Characters a splitter sees per call; pysbd is quadratic in its input (11 s for one 2,000-sentence
paragraph, 0.6 s in 200 pieces)."""

_HANGUL = re.compile("[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff]")
_CYRILLIC = re.compile("[\u0400-\u052f]+")
_TERMINALS = frozenset(".!?…。！？")
_ONE_ENGLISH_SENTENCE = re.compile("\\s*[A-Za-z0-9\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f ,/&%+#@=\n-]+[.!?]?\\s*")
"""Text pysbd returns whole: letters, digits, spaces and ``,/&%+#@=-``, at most one ``.``, ``!`` or ``?`` at the
end. Every pysbd rule needs another mark (an inner period, a bracket, a quote, a colon, an ellipsis, a list
number's period) to split or change anything, and its placeholder characters are not among these (checked
against pysbd in ``tests/test_segment.py``)."""
_CLOSERS = frozenset("\"'”’»)]}")


def segment(document: Document) -> Document:
    """Fill ``document.sentences`` (ids ``s1..sN`` in document order) and ``document.segmenter``.

    Each block's content is split on its own, so no unit crosses a block boundary: a splitter alone glues a
    heading to the next line (``목표\\n요청자는 ...``). Returns the same document.
    """
    if document.format == "blocks":  # a JSON blocks source names its own units (extractor.ingest.blocks)
        return document
    sentences: list[Sentence] = []
    for block in document.blocks:
        content = document.text[block.content_start : block.end]
        for start, end in _block_units(content, block.kind):
            sentences.append(
                Sentence(
                    id=f"s{len(sentences) + 1}",
                    text=content[start:end],
                    start=block.content_start + start,
                    end=block.content_start + end,
                    block=block.index,
                    location=block.location,
                )
            )
    document.sentences = place(sentences, document.words)
    # OCR settings decide the text as much as the segmenter does (docs/formats.md#pages-and-boxes)
    document.segmenter = f"{SEGMENTER_ID} {document.reader}" if document.reader else SEGMENTER_ID
    check_invariants(document)
    return document


def check_invariants(document: Document) -> None:
    """Raise ``AssertionError`` unless the sentences are exact, trimmed, ordered, inside their block's
    content, and together cover every non-whitespace character of every block's content exactly once.

    Every later stage (evidence spans, coverage) relies on these; ``segment`` calls this on its output.
    """
    blocks = {block.index: block for block in document.blocks}
    by_block: dict[int, list[Sentence]] = defaultdict(list)
    previous_end = 0
    for position, sentence in enumerate(document.sentences, start=1):
        problem = _sentence_problem(document.text, sentence, position, previous_end, blocks.get(sentence.block))
        if problem:
            raise AssertionError(f"sentence {sentence.id} {problem}: {sentence!r}")
        previous_end = sentence.end
        by_block[sentence.block].append(sentence)
    for block in document.blocks:
        cursor = block.content_start
        for sentence in by_block[block.index]:
            _require_blank(document.text, cursor, sentence.start, block.index)
            cursor = sentence.end
        _require_blank(document.text, cursor, block.end, block.index)


def _sentence_problem(
    text: str, sentence: Sentence, position: int, previous_end: int, block: Block | None
) -> str | None:
    """What is wrong with one sentence on its own and against the one before it, if anything."""
    if sentence.id != f"s{position}":
        return f"is not s{position}"
    if text[sentence.start : sentence.end] != sentence.text:
        return "text is not text[start:end]"
    if not sentence.text or sentence.text != sentence.text.strip():
        return "is empty or not trimmed"
    if sentence.start < previous_end:
        return "overlaps or precedes the previous sentence"
    if block is None:
        return "names an unknown block"
    if not block.content_start <= sentence.start < sentence.end <= block.end:
        return "lies outside its block's content"
    return None


def _require_blank(text: str, start: int, end: int, block: int) -> None:
    """Raise when text between units of a block holds something no sentence covers."""
    if text[start:end].strip():
        raise AssertionError(f"block {block}: text[{start}:{end}] {text[start:end]!r} is in no sentence")


def _block_units(content: str, kind: BlockKind) -> list[tuple[int, int]]:
    """Offsets of the sentence units of one block's content; fenced code is one unit, not prose.

    Form field lines and table rows are split apart first (``boundaries.line_pieces``); each piece is split by
    the splitter of its script, which sees the piece with the dots of never-final abbreviations masked (same
    offsets), so none of them ends a sentence at ``доб.`` or ``т. е.``.
    """
    if not content or content.isspace():
        return []
    if kind is BlockKind.CODE:
        return [(len(content) - len(content.lstrip()), len(content.rstrip()))]
    units: list[tuple[int, int]] = []
    for start, end, row in boundaries.line_pieces(content):
        piece = content[start:end]
        if row:  # a table row is one unit, whatever its cells hold
            units.append((start + len(piece) - len(piece.lstrip()), start + len(piece.rstrip())))
        else:
            units += [(start + a, start + b) for a, b in _piece_units(piece)]
    return units


def _piece_units(content: str) -> list[tuple[int, int]]:
    """The sentence units of a piece of a block's content (see ``_block_units``)."""
    if not content or content.isspace():
        return []
    splitter = _splitter_for(content)
    if splitter is _split_english and _ONE_ENGLISH_SENTENCE.fullmatch(content):
        # headings and one-sentence items, most blocks of a procedure: 3.9 -> 1.0 ms for the sample
        return [(len(content) - len(content.lstrip()), len(content.rstrip()))]
    return boundaries.repair(content, _join_glued(content, _split_windowed(mask(content), splitter)))


def _splitter_for(content: str) -> Splitter:
    """Pick by script: any Hangul is Korean, a Cyrillic majority of letters is Russian, else English."""
    if _HANGUL.search(content):
        return korean.split
    cyrillic = sum(map(len, _CYRILLIC.findall(content)))  # runs, not characters: few objects per block
    if cyrillic and (2 * cyrillic > len(content) or 2 * cyrillic > sum(map(str.isalpha, content))):
        return _split_russian  # (a majority of all characters is one of the letters without counting them)
    return _split_english


def _split_russian(text: str) -> list[str]:
    """razdel keeps ``т. п.``, ``т. е.``, ``2023 г.`` and initials together."""
    # Imported here, not with the module: reading a text (``extract show`` does) needs no splitter.
    import razdel  # type: ignore[import-untyped]

    return [sentence.text for sentence in razdel.sentenize(text)]


def _split_english(text: str) -> list[str]:
    """pysbd without cleaning, so the sentences it returns are slices of ``text`` (it may drop some).

    pysbd ends a sentence at every line break; inside a block a line break is a wrapped line (a block's
    lines are one paragraph or item), so it sees spaces instead. The alignment ignores whitespace.
    """
    import pysbd  # type: ignore[import-untyped]  # (imported here: see _split_russian)

    segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
    return [span.sent for span in segmenter.segment(text.replace("\n", " "))]


def _split_windowed(content: str, split: Splitter) -> list[tuple[int, int]]:
    """Split ``content`` one window of about ``_WINDOW`` characters at a time, aligning each result.

    The last unit of a window may be cut by the window's edge, so it is split again as the start of the
    next window; a window holding less than two units is doubled until it holds two or reaches the end.
    """
    spans: list[tuple[int, int]] = []
    start, limit = 0, _WINDOW
    while True:
        end = _window_end(content, start, start + limit)
        units = align(content[start:end], split(content[start:end]))
        if end == len(content):
            return spans + [(start + unit_start, start + unit_end) for unit_start, unit_end in units]
        if len(units) < 2:
            limit *= 2
            continue
        spans.extend((start + unit_start, start + unit_end) for unit_start, unit_end in units[:-1])
        start, limit = start + units[-1][0], _WINDOW


def _window_end(content: str, start: int, target: int) -> int:
    """The whitespace nearest before ``target`` (else after it), so no word is cut; or the end."""
    if target >= len(content):
        return len(content)
    for index in range(target, start, -1):
        if content[index].isspace():
            return index
    return next((index for index in range(target, len(content)) if content[index].isspace()), len(content))


def _join_glued(content: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge units that touch with no whitespace between them, unless the left one ends with sentence
    punctuation and the right one starts with a letter (``합니다.검토자는``).

    This is the guard against a boundary inside a word: a splitter's, or one alignment makes around text a
    splitter dropped or altered.
    """
    joined: list[tuple[int, int]] = []
    for start, end in spans:
        if joined and joined[-1][1] == start and not _ends_sentence(content, joined[-1], start):
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((start, end))
    return joined


def _ends_sentence(content: str, left: tuple[int, int], right_start: int) -> bool:
    """True when ``left`` ends in ``.!?…`` (closing quotes/brackets aside) and a letter follows."""
    index = left[1] - 1
    while index > left[0] and content[index] in _CLOSERS:
        index -= 1
    return content[index] in _TERMINALS and content[right_start].isalpha()
