"""Korean sentences: kss's rule-based ``fast`` splitter, without the work that cannot change its answer.

A ``kss.split_sentences(text, backend="fast")`` call (kss 6.0) spends 85% of its time preparing syllables. For
every character it tries 13 tag corrections in turn, then runs a part-of-speech repair pass (``JKS 이`` followed
by ``MAG 다``, and so on). That pass can only fire on the tags a morpheme analyser gives, and the fast backend
tags every character ``-``, so it never fires. ``split`` calls kss's own splitter with a preprocessor that
remembers each character's tag and skips the pass when no syllable carries a tag it reads. The sentences are
the same, several times faster (``bench/bench_segment.py`` prints it next to kss alone); kss's own
preparation was the largest share of a mixed batch's reading CPU.

Only the splitter's own modules are loaded. ``import kss`` runs kss's ``__init__``, which imports every tool
kss has (g2p, spacing, paradigms, the pecab analyser, scipy): 11-14 s and 347 MB, paid by every process that
reads Korean, for functions the fast splitter never calls. ``_fast_package`` registers kss's package without
running that ``__init__`` and imports the splitter's modules from it (``_fast_splitter_module``): a fraction of
a second and a few MB. ``bench/bench_korean.py`` holds ``extract split`` of the Korean sample to at most 1.5x
the English one's time. A later ``import kss`` in the process still gets all of kss
(``_complete_on_first_use``).

This relies on kss internals, so it is used only with the kss versions it was read and tested against
(``CHECKED_VERSIONS``). Any other version goes through the public function, imported whole.
``tests/test_segment.py`` checks that both give the same sentences, on the test corpus and on generated
Korean text, and that a fresh process splitting Korean imports none of kss's other tools.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from collections.abc import Callable
from functools import cache
from importlib.machinery import ModuleSpec
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
    """The splitter ``split`` calls, built once per process."""
    with _LOADING:
        if not uses_shortcut():
            kss = _public_kss()
            return lambda text: list(kss.split_sentences(text, backend="fast"))
        split_fast = _fast_splitter_module()._split_sentences_fast
        from kss._modules.sentences.sentence_postprocessor import SentencePostprocessor  # type: ignore[import-untyped]

        backend, preprocessor, postprocessor = _Characters(), _preprocessor(), SentencePostprocessor()

    def fast(text: str) -> list[str]:
        sentences: list[str] = split_fast(text, backend=backend, strip=True, preprocessor=preprocessor,
                                          postprocessor=postprocessor)
        return sentences

    return fast


class _Characters:
    """kss's ``FastAnalyzer`` (a ``CharacterAnalyzer``): the fast backend's "morphemes" are the characters, each
    tagged ``-``. It lives in kss's ``analyzers`` module, whose class bodies load the pecab analyser and probe for
    mecab at import (1.4 s, 65 MB) for backends the fast splitter never calls."""

    def pos(self, text: str, drop_space: bool) -> list[tuple[str, str]]:
        assert not drop_space, "the fast splitter keeps spaces"
        return [(char, "-") for char in text]


_ANALYZERS = "kss._modules.morphemes.analyzers"


def _fast_splitter_module() -> ModuleType:
    """kss's ``sentence_splitter_fast`` module, imported without kss's ``__init__`` and ``analyzers``.

    The splitter module imports ``Analyzer`` and ``CharacterAnalyzer`` from ``analyzers`` only to annotate its
    ``backend`` parameter. While it is imported, a stand-in module holding those two names takes the place of
    ``analyzers`` in ``sys.modules``, and it is removed afterwards, so anything importing ``analyzers`` later
    (all of kss, for its other backends) gets the real one.
    """
    _fast_package()
    name = "kss._modules.sentences.sentence_splitter_fast"
    if name in sys.modules or _ANALYZERS in sys.modules:
        return importlib.import_module(name)
    stand_in = ModuleType(_ANALYZERS, "annotations of kss's fast splitter (extractor.segment.korean)")
    stand_in.Analyzer = stand_in.CharacterAnalyzer = object  # type: ignore[attr-defined]
    sys.modules[_ANALYZERS] = stand_in
    try:
        return importlib.import_module(name)
    finally:
        if sys.modules.get(_ANALYZERS) is stand_in:
            del sys.modules[_ANALYZERS]


_LOADING = threading.RLock()
"""Two threads segmenting their first Korean text must not both register kss's package (re-entrant: kss's
``__init__``, run by ``_complete_on_first_use``, may ask the package for a name while it runs)."""


def _fast_package() -> None:
    """Make ``kss`` importable as a package without running its ``__init__`` (see the module docstring).

    The import system needs only the package's module object with its ``__path__`` to find kss's submodules;
    ``module_from_spec`` makes exactly that, without executing anything. If kss is already imported (whole, or
    by an earlier call), nothing changes.
    """
    if "kss" in sys.modules:
        return
    spec = importlib.util.find_spec("kss")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("kss is not installed", name="kss")
    package = importlib.util.module_from_spec(spec)
    package.__dict__["__getattr__"] = _complete_on_first_use(package, spec)
    sys.modules["kss"] = package


def _complete_on_first_use(package: ModuleType, spec: ModuleSpec) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that runs kss's real ``__init__`` into the registered package the first
    time anything asks it for a name the splitter's modules did not define, such as ``kss.split_sentences``:
    code that imports kss after us gets the whole package, not our partial one. kss's ``__init__`` finds the
    splitter's modules already imported and reuses them."""
    started = False

    def complete(name: str) -> Any:
        nonlocal started
        with _LOADING:
            if not started:  # (a name asked for while the __init__ runs is looked up as it stands)
                started = True
                assert spec.loader is not None
                spec.loader.exec_module(package)
                del package.__dict__["__getattr__"]
                logging.getLogger("Kss").setLevel(logging.ERROR)
        if name in package.__dict__:
            return package.__dict__[name]
        raise AttributeError(f"module 'kss' has no attribute {name!r}")

    return complete


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


def _public_kss() -> ModuleType:
    """All of kss, for a kss version the shortcut was not checked against (seconds to import), quietened.

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
