"""Korean sentences, found by the punctuation and the formal ending that close them.

A Korean sentence ends with ``.``, ``?``, ``!`` or ``…`` (``합니다.``, ``할까요?``), with the quotes and brackets
that close around it, or with the formal ending ``-(스)ㅂ니다``, which ends nothing else, even where the full stop
is missing (``작성합니다 검토자는``). A full stop ends none after a number, a date part, a list letter, an initial
or a Roman numeral (``2024. 3. 15.``, ``1.``, ``가.``, ``U.S.``, ``Ⅱ.``), nor before a character no sentence
starts with, nor where a quotation is spoken on (``"좋다." 하고``); ``1.5`` and ``www.example.co.kr`` have no
space after their dots. Abbreviations, short quotations and list numbers are the segmenter's, as in every
language (``extractor.segment.abbreviations``, ``extractor.segment.boundaries``).

Rules rather than a library: kss and kiwipiepy cost every process that reads Korean seconds and hundreds of MB,
and give no better boundaries on our Korean documents; the light sentencex ends sentences at ``2024.`` and
``1.`` (numbers in docs/design.md#dependencies).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_END = re.compile(r"[.!?…。．！？]+[\"'”’»)\]}」』〉》]*|(?<=니다)(?=\s)")
"""A run of sentence punctuation with the quotes and brackets closing around it, or the ending ``-니다`` before a
space (a zero-width match)."""
_TERMINALS = frozenset(".!?…。．！？")
_QUOTES = frozenset("\"'”’»」』〉》")
_NUMBERING = re.compile(r"(?<!\S)(?:\d+(?:\.\d+)*|[A-Za-zЁА-яё](?:\.[A-Za-zЁА-яё])*|[가나다라마바사아자차카타파하]|[Ⅰ-ⅿ]+)\.\Z")
"""A word whose full stop ends no sentence: ``2024.``, ``3.1.``, ``J.``, ``U.S.``, ``И.``, ``가.``, ``Ⅳ.``."""
_NEXT = re.compile(r"\s+(\S)")
_NO_START = frozenset(",;:.!?…)]}」』〉》”’»")
"""Characters no sentence starts with (``"...한다."\\n},`` in JSON is one unit)."""
_QUOTATIVE = re.compile(r"\s+(?:하|라|이라)(?:고|며|면서|는)\s")
"""A quotation closed by its own full stop and spoken on: ``"좋다." 하고 떠났다.`` is one sentence."""


def split(text: str) -> list[str]:
    """The sentences of ``text`` in order, each a trimmed slice of it (no sentence for blank text)."""
    cuts = [0, *_ends(text), len(text)]
    return [sentence for start, end in zip(cuts, cuts[1:]) if (sentence := text[start:end].strip())]


def _ends(text: str) -> Iterator[int]:
    """Offsets where a sentence ends and another starts (see the module docstring); linear in ``text``."""
    for match in _END.finditer(text):
        start, end = match.span()
        if start == 0 or end == len(text) or text[start - 1].isspace():
            continue
        mark = match.group()
        if text[end].isspace():
            following = _NEXT.match(text, end)
            if (following is None or following.group(1) in _NO_START
                    or mark == "." and _NUMBERING.search(text, max(0, start - 16), end)
                    or mark[-1:] in _QUOTES and _QUOTATIVE.match(text, end)):
                continue
            yield end
        elif mark[-1] in _TERMINALS and _is_syllable(text[start - 1]) and _is_syllable(text[end]):
            yield end  # 작성합니다.검토자는


def _is_syllable(char: str) -> bool:
    return "가" <= char <= "힣"
