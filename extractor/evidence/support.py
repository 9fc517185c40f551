"""Lexical support: how much of a value its excerpt states, as one score in [0, 1] for Korean, Russian, English.

Seed 000's lexical check (shared words of four letters or more) fails on morphology: a Korean claim
written with other particles and endings than its source (``요청을 작성합니다`` / ``요청은 작성한다``)
shares no whole word with it and scored 0.00, while a contradicting claim that copied one long word scored
0.50. Here every word is reduced before it is compared:

- Hangul: trailing particles (josa) and verb endings are stripped (longest first, the stem keeps at least
  one syllable), then the stem gives character bigrams (a one-syllable stem is its own token), so
  compound nouns split differently still meet;
- Cyrillic and Latin: the Snowball stemmer of the language (``snowballstemmer``, versioned in
  ``TOKENIZER``), stop words and words shorter than ``min_word_length`` dropped;
- dates and numbers are facts, each read into one canonical spelling first (``extractor.evidence.values``:
  ``2026-03-14`` is "2026년 3월 14일", "14.03.2026", "March 14, 2026"; ``2000`` is "2,000개" and "2 000 шт."),
  weighing double: a changed number or date is a changed fact; a number's unit or currency (``u:hour`` for "h",
  "ч", "시간") is part of it, so "2.5 hours" is not "2,5 кг", and a unit named alone is a token;
- a value may be stated in other words than its own: an enum code's words per language, from the schema
  (``x-enum-words``, docs/contracts.md), are scored as alternatives and the best one counts (``best_support``).

score = weighted share of the value's tokens found among the excerpt's tokens, halved when a date or number of
the value is missing from the excerpt, and halved again when one side is negated and the other is not. It
still cannot prove a statement follows from a text (docs/design.md#judge-calibration); it ranks, and its thresholds are
calibrated on labelled rows (``extract rules calibrate``) with a band routed to a judge.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib.metadata import version

import snowballstemmer  # type: ignore[import-untyped]

from extractor.evidence.values import CURRENCY_TOKENS, Fact, typed

_HANGUL_WORD = re.compile(r"[\uac00-\ud7a3]+")
_CYRILLIC_WORD = re.compile(r"[а-яё]+")
_LATIN_WORD = re.compile(r"[a-z]+")

JOSA_AND_ENDINGS = tuple(sorted(set("""
    하시겠습니까 하겠습니다 되었습니다 하였습니다 했습니다 합니다 됩니다 습니다 입니다 갑니다 줍니다 받습니다
    해야 하여야 하여 해서 하고 하며 하면 하는 하지 하거나 하도록 하기 하는지 한다 하다 했다 된다 되다 되어 되고
    되며 되는 되면 돼야 됐다 있다 있으며 있고 는다 니다 다
    할 한 된 될 이며 이고 이다 이면 이나 이라도 이라면 에서는 에서도 에게서 에게는 으로서
    으로써 으로는 으로도 에서 에게 에는 에도 까지 부터 로부터 으로부터 으로 로서 로써 로는 보다 처럼 만큼 마다 과는
    와는 은 는 이 가 을 를 에 의 와 과 도 만 로 께 요 고 며 면 며 서 지 게 기 음 함 됨 임
""".split()), key=len, reverse=True))
"""Korean particles and endings stripped from the end of a word (longest first, repeatedly)."""

ENDING_WORDS = frozenset(ending for ending in JOSA_AND_ENDINGS if len(ending) > 1)
KOREAN_STOP = frozenset("수 있 것 등 및 때 후 중 더 또는 그리고 그 이 저 각 모든 경우 위 해당 대한 통해".split())
NEGATION = {
    "ko": re.compile(r"않|없|못|말아|불가|금지|(?<![\uac00-\ud7a3])안(?![\uac00-\ud7a3])"),
    "ru": re.compile(r"(?<![а-яё])(?:не|нет|ни|без|нельзя|запрещ\w*)(?![а-яё])"),
    "en": re.compile(r"\b(?:not|no|never|without|cannot|can't|won't|isn't|aren't|doesn't|don't|forbidden|prohibited)\b"),
}
STOP = {
    "en": frozenset("the and for with from that this these those into onto over under upon will shall must may "
                    "also only have has been being their there they them then than when which while what where "
                    "each every within about after before".split()),
    "ru": frozenset("это этот эта эти того тому также только если когда чтобы который которая которые которых "
                    "после перед через более менее всех всего каждый каждая должен должна должны может могут "
                    "быть было были будет".split()),
}
NUMBER_WEIGHT = 2.0
TOKENIZER = f"support/2 (typed dates, numbers and units; snowballstemmer {version('snowballstemmer')})"
"""Recorded with a calibration: a threshold fitted on one tokenizer is not valid for another
(docs/design.md#judge-calibration)."""


@cache
def _stemmer(language: str) -> snowballstemmer.stemmer:
    return snowballstemmer.stemmer({"en": "english", "ru": "russian"}[language])


@lru_cache(maxsize=1 << 16)
def _stem(language: str, word: str) -> str:
    """Snowball's stem, remembered: documents repeat their words, and stemming was half of validation's CPU."""
    return str(_stemmer(language).stemWord(word))


@lru_cache(maxsize=1 << 16)
def _korean_stem(word: str) -> str:
    stem = word
    changed = True
    while changed and len(stem) > 1:
        changed = False
        for suffix in JOSA_AND_ENDINGS:
            if stem.endswith(suffix) and len(stem) > len(suffix):
                stem = stem[: -len(suffix)]
                changed = True
                break
    return stem


@dataclass(frozen=True)
class Tokens:
    """A text's word tokens with weights, its facts (dates and numbers), and whether it is negated."""

    weights: dict[str, float]
    facts: tuple[Fact, ...]
    negated: bool

    def states(self, fact: Fact) -> bool:
        """Whether one of this text's facts states a fact of another text."""
        return any(fact.stated_by(own) for own in self.facts)


def tokens(text: str, min_word_length: int = 4) -> Tokens:
    """The support tokens of ``text`` (see the module docstring)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    found = typed(folded)
    weights: dict[str, float] = dict.fromkeys(found.units, 1.0)
    facts = tuple({(fact.readings, fact.unit): fact for fact in found.facts}.values())  # a repeat is one fact
    rest = found.rest
    for word in _HANGUL_WORD.findall(rest):
        if len(word) > 1 and word in ENDING_WORDS:  # an auxiliary on its own (해야 합니다): no content
            continue
        stem = _korean_stem(word)
        if stem in KOREAN_STOP:
            continue
        grams = [stem] if len(stem) == 1 else [stem[i : i + 2] for i in range(len(stem) - 1)]
        for gram in grams:
            weights.setdefault(gram, 1.0)
    for language, pattern in (("ru", _CYRILLIC_WORD), ("en", _LATIN_WORD)):
        for word in pattern.findall(rest):
            if len(word) >= min_word_length and word not in STOP[language]:
                weights.setdefault(f"{language}:{_stem(language, word)}", 1.0)
    negated = any(pattern.search(folded) for pattern in NEGATION.values())
    return Tokens(weights, facts, negated)


def support_score(value: str, excerpt: str, min_word_length: int = 4) -> float | None:
    """How much of ``value`` ``excerpt`` states, in [0, 1]; None when the value has no checkable token."""
    return _score(tokens(value, min_word_length), tokens(excerpt, min_word_length))


def best_support(values: Iterable[str], excerpt: str, min_word_length: int = 4) -> float | None:
    """The best ``support_score`` of any of ``values``, the ways of stating one value (a code and its words);
    None when none of them has a checkable token."""
    source = tokens(excerpt, min_word_length)
    scores = [score for value in values if (score := _score(tokens(value, min_word_length), source)) is not None]
    return max(scores, default=None)


def _weight(fact: Fact) -> float:
    """A date or number weighs double; a unit written with it (not a currency, which is a token of its own) is
    one more word: "48 hours" weighs what "48" and "hours" weighed as tokens."""
    return NUMBER_WEIGHT + (fact.unit is not None and fact.unit not in CURRENCY_TOKENS)


def _score(said: Tokens, source: Tokens) -> float | None:
    total = sum(said.weights.values()) + sum(map(_weight, said.facts))
    if total == 0:
        return None
    stated = [source.states(fact) for fact in said.facts]
    score = (sum(weight for token, weight in said.weights.items() if token in source.weights)
             + sum(_weight(fact) for fact, found in zip(said.facts, stated) if found)) / total
    if not all(stated):
        score /= 2
    if said.negated != source.negated:
        score /= 2
    return score
