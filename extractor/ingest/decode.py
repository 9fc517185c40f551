"""Bytes -> str for the text formats (.txt, .md, .html).

Business documents arrive in whatever the author's machine saved: UTF-8 (with or without BOM), UTF-16
from Windows tools, and legacy Russian and Korean code pages. Guessing is limited to a short list of
code pages so that a detector cannot pick an exotic encoding that merely happens to decode.
"""

from __future__ import annotations

import codecs

from extractor.errors import InputError

# UTF-32 LE before UTF-16 LE: its BOM (FF FE 00 00) starts with the UTF-16 LE BOM (FF FE).
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
LEGACY_ENCODINGS: tuple[str, ...] = ("cp1251", "koi8_r", "cp949", "cp1252")
# Letters that make up ~65% of Russian text; a cp1251 <-> koi8-r mix-up turns them into rare ones.
_COMMON_RUSSIAN = frozenset("оеаинтсрвлОЕАИНТСРВЛ")


def decode(data: bytes, path: str, declared: str | None = None) -> tuple[str, str]:
    """Return ``(text, encoding name)``; ``declared`` is a charset the file names itself (HTML meta).

    A BOM is authoritative; valid UTF-8 wins over a declared charset because mislabelled UTF-8 is far
    more common than legacy text that happens to be valid UTF-8.
    """
    for bom, name in BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(name.removesuffix("-sig")), name
            except UnicodeDecodeError as exc:
                problem = f"invalid {name} text after its byte order mark (byte {exc.start + len(bom)})"
                raise InputError(path, problem) from exc
    nul = data.find(b"\x00")
    if nul >= 0:
        utf16 = _bomless_utf16(data)
        if utf16 is None:
            raise InputError(path, f"binary file (NUL byte at offset {nul}); not a text document")
        return utf16
    for charset in ("utf-8", declared):
        if charset is not None:
            try:
                return data.decode(charset), codecs.lookup(charset).name
            except (UnicodeDecodeError, LookupError):
                pass
    return _legacy(data, path)


def _bomless_utf16(data: bytes) -> tuple[str, str] | None:
    """UTF-16 without BOM: NULs are mostly the high byte of ASCII characters, so their parity gives the byte order."""
    if len(data) % 2:
        return None
    odd, even = data[1::2].count(0), data[0::2].count(0)
    name = "utf-16-le" if odd >= even else "utf-16-be"
    if min(odd, even) > len(data) // 200:  # real UTF-16 text has NULs on one side only; binary has both
        return None
    try:
        text = data.decode(name)
    except UnicodeDecodeError:
        return None
    printable = sum(char.isprintable() or char in "\t\n\r\f" for char in text)
    return (text, name) if printable >= 0.95 * len(text) else None


def _legacy(data: bytes, path: str) -> tuple[str, str]:
    """Best legacy code page by charset_normalizer; cp1251 vs koi8-r ties are settled by Russian letter frequency.

    On one or two sentences the detector often scores cp1251 and koi8-r equally (same letters, permuted).
    """
    from charset_normalizer import from_bytes  # only for a file that is not UTF-8 (docs/design.md#data-flow)

    matches = from_bytes(data, cp_isolation=list(LEGACY_ENCODINGS))
    best = matches.best()
    if best is None:
        raise InputError(
            path,
            "binary file or unsupported encoding (not UTF-8/UTF-16/UTF-32, cp1251, koi8-r, cp949/EUC-KR or cp1252)",
        )
    if best.encoding in ("cp1251", "koi8_r"):
        tied = [m for m in matches if m.chaos <= best.chaos and m.encoding in ("cp1251", "koi8_r")]
        best = max(tied, key=lambda m: sum(char in _COMMON_RUSSIAN for char in str(m)))
    return str(best), best.encoding
