"""The source side of validation: a segmented document with its matching indexes built once.

The pipeline keeps one ``Source`` per document, so the first attempt, the repair and a reviewer's
edit are all checked against the same normalised text without re-normalising it.
"""

from __future__ import annotations

from bisect import bisect_right
from functools import cached_property

from extractor.document import Document, Sentence
from extractor.evidence.text import NormalizedText

_COMMON = 200  # a word in more sentences than this only votes when no rarer word matched


class Source:
    def __init__(self, document: Document) -> None:
        self.document = document
        self._matchers: dict[str, NormalizedText] = {}
        self._normalised_sentences: dict[str, list[str]] = {}
        self._word_indexes: dict[str, dict[str, list[int]]] = {}

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
        """The sentence most like a non-verbatim excerpt, for a repair hint only (never for matching).

        Candidates are the sentences sharing the most words with the excerpt (an inverted index built
        once), so a failing excerpt costs the same on a 200- and a 20,000-sentence document.
        """
        from rapidfuzz import fuzz

        if not self.document.sentences:
            return None
        matcher = self.matcher(normalisation)
        if normalisation not in self._normalised_sentences:
            self._normalised_sentences[normalisation] = [matcher.normalise_query(s.text) for s in self.document.sentences]
        choices = self._normalised_sentences[normalisation]
        query = matcher.normalise_query(excerpt)
        best: tuple[float, int] | None = None
        for position in self._shortlist(normalisation, query):
            score = fuzz.partial_ratio(query, choices[position])
            if best is None or score > best[0]:
                best = (score, position)
        if best is None:
            return None
        return self.document.sentences[best[1]].id, round(best[0] / 100, 3)

    def _shortlist(self, normalisation: str, query: str, size: int = 25) -> list[int]:
        """Sentence positions sharing the most (rarest first) words with ``query``, in document order."""
        index = self._word_index(normalisation)
        votes: dict[int, float] = {}
        for word in sorted(set(query.split()), key=lambda w: len(index.get(w, ()))):
            postings = index.get(word, ())
            if len(postings) > _COMMON and votes:  # common words add cost, not discrimination
                break
            for position in postings:
                votes[position] = votes.get(position, 0.0) + 1.0 / len(postings)
        ranked = sorted(votes, key=lambda position: (-votes[position], position))[:size]
        return sorted(ranked)

    def _word_index(self, normalisation: str) -> dict[str, list[int]]:
        if normalisation not in self._word_indexes:
            index: dict[str, list[int]] = {}
            for position, text in enumerate(self._normalised_sentences[normalisation]):
                for word in set(text.split()):
                    index.setdefault(word, []).append(position)
            self._word_indexes[normalisation] = index
        return self._word_indexes[normalisation]
