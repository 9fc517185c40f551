"""The source side of validation: a segmented document with its matching indexes built once.

The pipeline keeps one ``Source`` per document, so the first attempt, the repair and a reviewer's
edit are all checked against the same normalised text without re-normalising it.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import cached_property

from extractor.document import Document, Sentence
from extractor.evidence.text import NormalizedText

_COMMON = 200  # a word in more sentences than this only votes when no rarer word matched
_SHORTLIST_CAP = 400  # sentences tied for the shortlist that are still scored (a bound on one hint's cost)
_WORD = re.compile(r"\w+")


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

        Candidates are the sentences sharing the most words with the excerpt (an inverted index built once, rarest
        words first), every sentence tied with the last one kept included, so a document repeating one sentence in
        many places still has the right one scored; a failing excerpt costs about the same on a 200- and a
        20,000-sentence document. Only when no word of the excerpt narrows the candidates to ``_SHORTLIST_CAP``
        does rapidfuzz rank every sentence. Each candidate is scored by ``_fit``, then ``_whole``; ties go to the first.
        """
        if not self.document.sentences:
            return None
        matcher = self.matcher(normalisation)
        if normalisation not in self._normalised_sentences:
            self._normalised_sentences[normalisation] = [matcher.normalise_query(s.text) for s in self.document.sentences]
        choices = self._normalised_sentences[normalisation]
        query = matcher.normalise_query(excerpt)
        shortlist = self._shortlist(normalisation, query)
        if shortlist is None:  # no word tells more than _SHORTLIST_CAP sentences apart: rank them all, in C
            from rapidfuzz import fuzz, process

            shortlist = [position for _, _, position in process.extract(
                query, choices, scorer=fuzz.partial_ratio, limit=_SHORTLIST_CAP)]
        best: tuple[float, float, int] | None = None
        for position in sorted(shortlist):
            fit = _fit(query, choices[position], best[0] if best else 0.0)
            if best is not None and fit < best[0]:
                continue
            whole = _whole(query, choices[position])
            if best is None or (fit, whole) > best[:2]:
                best = (fit, whole, position)
        if best is None:
            return None
        return self.document.sentences[best[2]].id, round(best[0] / 100, 3)

    def _shortlist(self, normalisation: str, query: str, size: int = 25) -> list[int] | None:
        """Sentence positions sharing the most (rarest first) words with ``query``: the best ``size``, and every
        one tied with the last of them; None when those are more than ``_SHORTLIST_CAP``. Words are compared
        case-folded without punctuation (``1501.`` is ``1501,``), so a changed mark does not hide the one word
        that tells copies of a sentence apart."""
        index = self._word_index(normalisation)
        votes: dict[int, float] = {}
        for word in sorted(set(_WORD.findall(query.casefold())), key=lambda w: len(index.get(w, ()))):
            postings = index.get(word, ())
            if len(postings) > _COMMON and votes:  # common words add cost, not discrimination
                break
            for position in postings:
                votes[position] = votes.get(position, 0.0) + 1.0 / len(postings)
        ranked = sorted(votes, key=lambda position: (-votes[position], position))
        if len(ranked) > size:
            last = votes[ranked[size - 1]]
            ranked = [position for position in ranked[:_SHORTLIST_CAP + 1] if votes[position] >= last]
        return ranked if len(ranked) <= _SHORTLIST_CAP else None

    def _word_index(self, normalisation: str) -> dict[str, list[int]]:
        if normalisation not in self._word_indexes:
            index: dict[str, list[int]] = {}
            for position, text in enumerate(self._normalised_sentences[normalisation]):
                for word in set(_WORD.findall(text.casefold())):
                    index.setdefault(word, []).append(position)
            self._word_indexes[normalisation] = index
        return self._word_indexes[normalisation]


def _fit(excerpt: str, sentence: str, cutoff: float = 0.0) -> float:
    """How well ``excerpt`` fits the sentence (0-100; 0 below ``cutoff``, where rapidfuzz stops early): a sentence
    at least as long as the excerpt is scored by the excerpt's best alignment inside it (``partial_ratio``), a
    shorter one as a whole (``ratio``), since an excerpt cannot lie inside a shorter sentence: a short sentence
    the excerpt merely contains is not what the model copied from. Ties go to the more alike whole (``_whole``)."""
    from rapidfuzz import fuzz

    scorer = fuzz.partial_ratio if len(sentence) >= len(excerpt) else fuzz.ratio
    return float(scorer(excerpt, sentence, score_cutoff=cutoff))


def _whole(excerpt: str, sentence: str) -> float:
    from rapidfuzz import fuzz

    return float(fuzz.ratio(excerpt, sentence))
