"""The source side of validation: a segmented document with its matching indexes built once.

The pipeline keeps one ``Source`` per document, so the first attempt, the repair and a reviewer's
edit are all checked against the same normalised text without re-normalising it.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import cached_property

from extractor.document import Document, Sentence
from extractor.validate.text import NormalizedText


class Source:
    def __init__(self, document: Document) -> None:
        self.document = document
        self._matchers: dict[str, NormalizedText] = {}
        self._normalised_sentences: dict[str, list[str]] = {}

    def matcher(self, normalisation: str) -> NormalizedText:
        if normalisation not in self._matchers:
            self._matchers[normalisation] = NormalizedText(self.document.text, normalisation)
        return self._matchers[normalisation]

    @cached_property
    def _ends(self) -> list[int]:
        return [s.end for s in self.document.sentences]

    @cached_property
    def ids(self) -> dict[str, Sentence]:
        return {s.id: s for s in self.document.sentences}

    def sentences_overlapping(self, start: int, end: int) -> list[Sentence]:
        """Sentences sharing at least one character with ``[start, end)``."""
        sentences = self.document.sentences
        found: list[Sentence] = []
        position = bisect_right(self._ends, start)
        while position < len(sentences) and sentences[position].start < end:
            found.append(sentences[position])
            position += 1
        return found

    def nearest_sentence(self, excerpt: str, normalisation: str) -> tuple[str, float] | None:
        """The sentence most like a non-verbatim excerpt, for a repair hint only (never for matching)."""
        from rapidfuzz import fuzz, process

        if not self.document.sentences:
            return None
        matcher = self.matcher(normalisation)
        if normalisation not in self._normalised_sentences:
            self._normalised_sentences[normalisation] = [matcher.normalise_query(s.text) for s in self.document.sentences]
        choices = self._normalised_sentences[normalisation]
        best = process.extractOne(matcher.normalise_query(excerpt), choices, scorer=fuzz.partial_ratio)
        if best is None:
            return None
        _, score, position = best
        return self.document.sentences[position].id, round(score / 100, 3)
