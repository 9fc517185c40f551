"""Abbreviations that never end a sentence, in the languages the segmenter knows.

Two stages ask the same question: ingest, when a line ends with a full stop (does the next line start a
new block, or does ``т. е.`` wrap onto it?), and segment, which hides their dots from the splitters
(razdel splits ``доб. 412.`` after ``доб.``, and then not after ``412.``). Only abbreviations that cannot
close a sentence belong here: ``т. д.``, ``г.`` (year) and ``etc.`` often do, so they are left to the
splitters.
"""

from __future__ import annotations

import re

NEVER_FINAL: tuple[str, ...] = (
    # Russian: that is, because, including, for example, see, compare, extension, phone, street, house,
    # room, office, paragraph(s), page, article, chapter, named after, region, building, block, inventory (number)
    "т. е.", "т. к.", "т. ч.", "напр.", "см.", "ср.", "доб.", "тел.", "ул.", "д.", "кв.", "каб.", "п.",
    "пп.", "с.", "ст.", "гл.", "им.", "обл.", "корп.", "стр.", "пр-т.", "пер.", "инв.",
    # English
    "e.g.", "i.e.", "cf.", "Mr.", "Mrs.", "Ms.", "Dr.", "Prof.", "No.", "Nos.", "vs.", "approx.", "incl.",
    "ext.", "Tel.", "Fig.", "pp.", "inv.", "Inv.",
)  # fmt: skip


def _pattern(abbreviation: str) -> str:
    """``т. е.`` also matches ``т.е.`` and ``т.  е.``; a Russian abbreviation also matches capitalised."""
    parts = [re.escape(part.strip()) for part in abbreviation.split(".") if part.strip()]
    body = r"\.\s*".join(parts) + r"\."
    first = abbreviation[0]
    if first.islower() and not first.isascii():
        body = f"[{first}{first.upper()}]" + body[len(re.escape(first)) :]
    if len(parts) == 1 and len(parts[0]) == 1:  # not the д. of "и т. д." or the п. of "и т. п."
        body = r"(?<!т\.\s)(?<!т\.)" + body
    return body


_ALTERNATIVES = "|".join(map(_pattern, NEVER_FINAL))
_FIRST = "".join(sorted({a[0] for a in NEVER_FINAL} | {a[0].upper() for a in NEVER_FINAL}))
_BEFORE_NUMERO = re.compile(r"(?<![\w.-])\w{1,6}\.(?=\s*№)")
"""``инв. №``, ``рег. №``, ``зав. №``: a short word with a dot before the number sign is an abbreviation."""
_AT_END = re.compile(r"(?<![\w.-])(?:" + _ALTERNATIVES + r")\Z")
_ANYWHERE = re.compile(r"(?=[" + _FIRST + r"])(?<![\w.-])(?:" + _ALTERNATIVES + ")")  # the look-ahead is a fast filter


def ends_with_abbreviation(text: str) -> bool:
    """True when ``text`` (trailing whitespace aside) ends with an abbreviation that never ends a sentence."""
    tail = text.rstrip()[-16:]  # longer than any abbreviation and the character before it
    return tail.endswith(".") and _AT_END.search(tail) is not None


def mask(text: str) -> str:
    """``text`` with the dots of those abbreviations turned into letters: same length, same offsets, and
    nothing a splitter could end a sentence at (``доб. 412.`` -> ``добx 412.``)."""
    masked = _ANYWHERE.sub(lambda match: match.group().replace(".", "x"), text)
    return _BEFORE_NUMERO.sub(lambda match: match.group()[:-1] + "x", masked) if "№" in masked else masked
