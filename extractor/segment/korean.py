"""Korean sentences: kss's rule-based ``fast`` splitter, without the work that cannot change its answer.

A ``kss.split_sentences(text, backend="fast")`` call (kss 6.0) spends 85% of its time preparing syllables. For
every character it tries 13 tag corrections in turn, then runs a part-of-speech repair pass (``JKS 이`` followed
by ``MAG 다``, and so on). That pass can only fire on the tags a morpheme analyser gives, and the fast backend
tags every character ``-``, so it never fires. ``split`` calls kss's own splitter with a preprocessor that
remembers each character's tag and skips the pass when no syllable carries a tag it reads. The sentences are
the same, six times faster (55 Korean lines of the samples and the test corpus: 30 -> 5 ms); reading the
Korean sample, ingest included, went from 7.5 to 1.9 ms. It was the largest share of a mixed batch's reading CPU.

This relies on kss internals, so it is used only with the kss versions it was read and tested against
(``CHECKED_VERSIONS``). Any other version goes through the public function. ``tests/test_segment.py`` checks
that both give the same sentences, on the test corpus and on generated Korean text.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable
from functools import cache
from importlib.metadata import version
from types import ModuleType
from typing import Any

CHECKED_VERSIONS = frozenset({"6.0.6"})
"""kss versions whose splitter internals ``split`` was read and tested against."""

REPAIRED_TAGS = ("JKS", "EF", "EC", "EP", "UNKNOWN")
"""The tags that each rule of kss's repair pass (``SentencePreprocessor._correct_wrong_tags``) first looks for on a
syllable (as a substring of its tag). If no syllable's tag contains one, the pass changes nothing."""

def split(text: str) -> list[str]:
    """What ``kss.split_sentences(text, backend="fast")`` returns (an empty text has no sentences)."""
    return splitter()(text) if text else []


def uses_shortcut() -> bool:
    """Whether ``split`` takes the shortcut (the installed kss is a checked version)."""
    return version("kss") in CHECKED_VERSIONS


@cache
def splitter() -> Callable[[str], list[str]]:
    """The splitter ``split`` calls, built once per process (importing kss takes seconds)."""
    kss = load_kss()
    if not uses_shortcut():
        return lambda text: list(kss.split_sentences(text, backend="fast"))
    from kss._modules.morphemes.analyzers import FastAnalyzer  # type: ignore[import-untyped]
    from kss._modules.sentences.sentence_postprocessor import SentencePostprocessor  # type: ignore[import-untyped]
    from kss._modules.sentences.sentence_splitter_fast import _split_sentences_fast  # type: ignore[import-untyped]

    backend, preprocessor, postprocessor = FastAnalyzer(), _preprocessor(), SentencePostprocessor()

    def fast(text: str) -> list[str]:
        sentences: list[str] = _split_sentences_fast(text, backend=backend, strip=True, preprocessor=preprocessor,
                                                     postprocessor=postprocessor)
        return sentences

    return fast


def _preprocessor() -> Any:
    """kss's sentence preprocessor with its two per-character steps made cheap, its results unchanged."""
    from kss._elements.subclasses import Syllable  # type: ignore[import-untyped]
    from kss._modules.sentences.sentence_preprocessor import SentencePreprocessor  # type: ignore[import-untyped]

    class Preprocessor(SentencePreprocessor):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._tags: dict[tuple[str, str], str] = {}  # bounded by the characters seen

        def _convert_morphemes_to_syllables(self, morphemes: list[tuple[str, str]]) -> list[Any]:
            """kss's loop, with the tag of each (character, tag) pair computed by kss's corrections once."""
            previous = Syllable(" ", "SP", idx=0)
            syllables = [previous]
            for text, given in morphemes:
                for char in text:
                    tag = self._tags.get((char, given))
                    if tag is None:
                        tag = self._tags[(char, given)] = next(
                            (corrected for test, corrected in self._correction.items() if test(char, given)), given)
                    syllable = Syllable(char, tag, idx=len(syllables))
                    syllable.prev, previous.next = previous, syllable
                    syllables.append(syllable)
                    previous = syllable
            return syllables

        def _correct_wrong_tags(self, syllables: list[Any]) -> list[Any]:
            tags = {syllable.pos for syllable in syllables}
            if any(wanted in tag for tag in tags for wanted in REPAIRED_TAGS):
                return super()._correct_wrong_tags(syllables)  # type: ignore[no-any-return]
            return syllables

    return Preprocessor()


@cache
def load_kss() -> ModuleType:
    """kss, imported on first use because importing it takes seconds, and quietened.

    kss logs a multi-line "install mecab" advertisement when it probes analyzers; it is not our user's
    concern. And every public call tries ``from kss_cython import ...``; without that optional package, each
    failed import searches ``sys.path`` again (a quarter of kss's time on short blocks). A ``None`` in
    ``sys.modules`` makes that import fail at once, as it would anyway: same function, same sentences.
    """
    if importlib.util.find_spec("kss_cython") is None:
        sys.modules.setdefault("kss_cython", None)  # type: ignore[arg-type]
    import kss  # type: ignore[import-untyped]

    logging.getLogger("Kss").setLevel(logging.ERROR)
    module: ModuleType = kss
    return module
