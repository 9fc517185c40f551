"""How two values are compared when a run is scored against gold (docs/design.md#evaluation).

Two match modes, both always reported: **exact** (the JSON values are equal) and **normalised**: strings
after Unicode NFC, whitespace runs collapsed and trimmed, case folded where the contract compares the field
without case; numbers by value (``2000``, ``2000.0``, ``"2,000"`` and ``"2 000"`` are one number); dates by
the day they name (``2026-05-01``, ``01.05.2026``, ``2026. 5. 1.``, ``2026년 5월 1일``, ``1 May 2026``). A
string is read as a number or a date only when all of it is one, so "10 days" stays text.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date
from typing import Any

_WHITESPACE = re.compile(r"\s+")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:[ ,.\u00a0\u202f']\d{3})+(?:[.,]\d+)?$")
"""Digits in groups of three (``2,000``, ``1 500``, ``1.234.567,50``): the separators are not decimal points."""
_PLAIN = re.compile(r"^[+-]?\d+(?:[.,]\d+)?$")
_MONTHS = {name: number for number, names in enumerate((
    ("january", "jan", "января", "январь"), ("february", "feb", "февраля", "февраль"),
    ("march", "mar", "марта", "март"), ("april", "apr", "апреля", "апрель"), ("may", "мая", "май"),
    ("june", "jun", "июня", "июнь"), ("july", "jul", "июля", "июль"), ("august", "aug", "августа", "август"),
    ("september", "sep", "sept", "сентября", "сентябрь"), ("october", "oct", "октября", "октябрь"),
    ("november", "nov", "ноября", "ноябрь"), ("december", "dec", "декабря", "декабрь")), start=1) for name in names}
_YMD = re.compile(r"^(\d{4})\s*[-./년]\s*(\d{1,2})\s*[-./월]\s*(\d{1,2})\s*[.일]?$")
_DMY = re.compile(r"^(\d{1,2})\.(\d{1,2})\.(\d{4})$")
_D_MONTH_Y = re.compile(r"^(\d{1,2})\s+([^\W\d_]+)\.?,?\s+(\d{4})(?:\s*(?:г\.?|года))?$")
_MONTH_D_Y = re.compile(r"^([^\W\d_]+)\.?\s+(\d{1,2}),?\s+(\d{4})$")


def text_key(value: str, casefold: bool = False) -> str:
    """NFC, whitespace collapsed and trimmed, optionally case folded."""
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", value)).strip()
    return text.casefold() if casefold else text


def as_number(text: str) -> float | None:
    """The number a whole string states (``2,000``, ``1 500``, ``3,5``), else None."""
    compact = text.strip()
    if _GROUPED.match(compact):
        digits = re.sub(r"[ ,.\u00a0\u202f']", "", compact[: len(compact) - len(_decimals(compact))])
        decimals = _decimals(compact)
        return float(digits + ("." + decimals[1:] if decimals else ""))
    if _PLAIN.match(compact):
        return float(compact.replace(",", "."))
    return None


def _decimals(text: str) -> str:
    """The decimal part of a grouped number (``,50`` of ``1.234,50``): a last separator followed by other than
    three digits."""
    match = re.search(r"[.,](\d+)$", text)
    if match is None or len(match.group(1)) == 3:
        return ""
    return match.group(0)


def as_date(text: str) -> date | None:
    """The day a whole string names, in the forms business documents write dates; else None."""
    compact = text.strip()
    try:
        if match := _YMD.match(compact):
            return date(int(match[1]), int(match[2]), int(match[3]))
        if match := _DMY.match(compact):
            return date(int(match[3]), int(match[2]), int(match[1]))
        if (match := _D_MONTH_Y.match(compact)) and match[2].casefold() in _MONTHS:
            return date(int(match[3]), _MONTHS[match[2].casefold()], int(match[1]))
        if (match := _MONTH_D_Y.match(compact)) and match[1].casefold() in _MONTHS:
            return date(int(match[3]), _MONTHS[match[1].casefold()], int(match[2]))
    except ValueError:  # 31.02.2026: not a day
        return None
    return None


def normalised(value: Any, casefold: bool = False) -> Any:
    """A hashable key equal for two values the normalised mode takes as the same; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, str):
        number = as_number(value)
        if number is not None:
            return ("number", number)
        day = as_date(value)
        if day is not None:
            return ("date", day.isoformat())
        return ("text", text_key(value, casefold))
    if isinstance(value, list):
        return ("list", tuple(normalised(item, casefold) for item in value))
    if isinstance(value, dict):
        return ("object", tuple(sorted((key, normalised(item, casefold)) for key, item in value.items())))
    return ("other", repr(value))


def exact(value: Any) -> Any:
    """A hashable key equal for equal JSON values (``1`` and ``1.0`` are equal, as JSON numbers are)."""
    if isinstance(value, list):
        return ("list", tuple(exact(item) for item in value))
    if isinstance(value, dict):
        return ("object", tuple(sorted((key, exact(item)) for key, item in value.items())))
    if isinstance(value, bool):
        return ("bool", value)
    return value
