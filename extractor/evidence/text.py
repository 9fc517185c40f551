"""Exact matching after a declared normalisation, with spans mapped back to the canonical text.

A document is normalised once (``NormalizedText``); every excerpt is then looked up through a
word-start index, so the cost of one lookup does not grow with the document. Only the normalisations
named in a contract's settings exist here: no stemming, no punctuation or digit stripping.
"""

from __future__ import annotations

import re
import unicodedata
from array import array
from collections.abc import Callable
from functools import cached_property

_WHITESPACE = re.compile(r"\s+")
_KEY = 8  # characters indexed at every word start; long enough to be selective, short enough for short words


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _nfkc_casefold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


NORMALISATIONS: dict[str, Callable[[str], str]] = {
    "nfc_whitespace": _nfc,
    "nfkc_casefold_whitespace": _nfkc_casefold,
}


class NormalizedText:
    """``text`` after a normalisation and whitespace collapse, plus the map back to original offsets.

    ``origin[i]`` is the original index of normalised character ``i``; ``origin[len(norm)]`` is the
    original end. Whitespace runs become one space; characters whose normalisation changes their length
    (``ß`` -> ``ss``) map every produced character back to the one original character.
    """

    def __init__(self, text: str, normalisation: str) -> None:
        self.normalise_piece = NORMALISATIONS[normalisation]
        parts: list[str] = []
        origin = array("q")
        position = 0
        for match in _WHITESPACE.finditer(text):
            self._append_run(text, position, match.start(), parts, origin)
            parts.append(" ")
            origin.append(match.start())
            position = match.end()
        self._append_run(text, position, len(text), parts, origin)
        origin.append(len(text))
        self.norm = "".join(parts)
        self.origin = origin

    def _append_run(self, text: str, start: int, end: int, parts: list[str], origin: array[int]) -> None:
        if start == end:
            return
        run = text[start:end]
        normalised = self.normalise_piece(run)
        if len(normalised) == len(run):
            parts.append(normalised)
            origin.extend(range(start, end))
            return
        for offset, char in enumerate(run):
            piece = self.normalise_piece(char)
            parts.append(piece)
            origin.extend([start + offset] * len(piece))

    def normalise_query(self, query: str) -> str:
        """Normalise an excerpt exactly as the document was (NFC first so decomposed input still matches)."""
        return " ".join(self.normalise_piece(_nfc(query)).split())

    @cached_property
    def _word_starts(self) -> dict[str, list[int]]:
        index: dict[str, list[int]] = {}
        norm = self.norm
        index.setdefault(norm[:_KEY], []).append(0)
        position = norm.find(" ")
        while position != -1:
            start = position + 1
            index.setdefault(norm[start : start + _KEY], []).append(start)
            position = norm.find(" ", start)
        return index

    def find_all(self, query: str, limit: int) -> list[tuple[int, int]]:
        """Original-text spans of up to ``limit`` occurrences of the normalised ``query``, in order."""
        needle = self.normalise_query(query)
        if not needle:
            return []
        starts = self._candidate_starts(needle)
        if starts is None:
            starts = self._scan(needle, limit)
        norm, origin = self.norm, self.origin
        spans: list[tuple[int, int]] = []
        for start in starts:
            if start >= 0 and norm.startswith(needle, start):
                spans.append((origin[start], origin[start + len(needle) - 1] + 1))
                if len(spans) >= limit:
                    break
        return spans

    def _candidate_starts(self, needle: str) -> list[int] | None:
        """Start positions worth verifying, from the most selective word start inside the needle.

        Any occurrence of the needle puts each of its inner word starts on a document word start, so
        the rarest inner key bounds the candidates. ``None`` when the needle has no usable inner key.
        """
        best: list[int] | None = None
        best_offset = 0
        position = needle.find(" ")
        while position != -1 and position + 1 + _KEY <= len(needle):
            offset = position + 1
            postings = self._word_starts.get(needle[offset : offset + _KEY], [])
            if best is None or len(postings) < len(best):
                best, best_offset = postings, offset
                if not postings:
                    return []
            position = needle.find(" ", offset)
        if best is None:
            return None
        return [start - best_offset for start in best]

    def _scan(self, needle: str, limit: int) -> list[int]:
        found: list[int] = []
        position = self.norm.find(needle)
        while position != -1 and len(found) < limit:
            found.append(position)
            position = self.norm.find(needle, position + 1)
        return found
