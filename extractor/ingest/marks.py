"""List marks Tesseract's models do not know (□ ■ ○ ● ①), found on the page image before OCR (docs/formats.md#scans).

Korean offices write procedures with □ ○ ■ - and circled numbers at the start of lines. Tesseract's Korean
model reads □ as ``디`` or ``니``, ○ as ``(``, ① as ``01)``, and drops ■ while misreading the word after it,
so list detection would see prose. These marks are shapes, not letters: each line's first glyph is looked at
on the binarised page (a square frame, a filled square, a ring, a disc, a ring around a digit), a mark is
painted out before Tesseract reads the page, and its character is put back at the start of its line.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

MARKS_VERSION = "marks/1"
"""Part of the OCR reader id: another detector may find other marks and change the text."""
_FONTS = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
          "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc")
_CIRCLED = "".join(chr(0x2460 + n) for n in range(20))  # ① .. ⑳
_SIDE = 32  # templates and glyphs are compared at this size


@dataclass(frozen=True)
class Mark:
    """A mark found at the start of a line: its character and its box in pixels (x0, top, x1, bottom)."""

    char: str
    box: tuple[int, int, int, int]


def find_marks(image: Image.Image) -> list[Mark]:
    """The marks that start lines of ``image`` (grey or colour), top to bottom."""
    ink = np.asarray(image.convert("L")) < 128
    found = []
    for top, bottom in _line_bands(ink):
        glyph = _first_glyph(ink, top, bottom)
        if glyph is None:
            continue
        char = _classify(ink[glyph[1]:glyph[3], glyph[0]:glyph[2]])
        if char:
            found.append(Mark(char, glyph))
    return found


def erase(image: Image.Image, marks: list[Mark]) -> Image.Image:
    """A copy of ``image`` with the marks painted white, so Tesseract reads the words after them."""
    if not marks:
        return image
    copy = image.copy()
    draw = ImageDraw.Draw(copy)
    white = 255 if copy.mode == "L" else (255,) * len(copy.getbands())
    for mark in marks:
        x0, top, x1, bottom = mark.box
        draw.rectangle((x0 - 2, top - 2, x1 + 2, bottom + 2), fill=white)  # type: ignore[arg-type]
    return copy


def _line_bands(ink: np.ndarray) -> list[tuple[int, int]]:
    """Rows of ink separated by blank rows: the text lines of a single-column page (a line's accents join it)."""
    rows = np.concatenate(([False], np.asarray(ink.any(axis=1), dtype=bool), [False]))
    edges = np.flatnonzero(rows[1:] != rows[:-1])  # where runs of inked rows start and end
    bands = [(int(start), int(end)) for start, end in zip(edges[::2], edges[1::2])]
    if not bands:
        return []
    typical = float(np.median([bottom - top for top, bottom in bands]))
    return [(top, bottom) for top, bottom in bands if bottom - top >= 0.5 * typical]


def _first_glyph(ink: np.ndarray, top: int, bottom: int) -> tuple[int, int, int, int] | None:
    """The first run of ink columns of a line that is followed by a space (a gap of a quarter of the line's
    height): a mark stands apart from the word after it. ``(x0, top, x1, bottom)`` tight around its ink."""
    band = ink[top:bottom]
    height = bottom - top
    columns: np.ndarray = np.asarray(band.any(axis=0), dtype=bool)
    xs = np.flatnonzero(columns)
    if xs.size == 0:
        return None
    x0 = int(xs[0])
    gap_needed = max(2, int(0.25 * height))
    x, blank = x0, 0
    while x < columns.size and x - x0 <= 2 * height:
        blank = 0 if columns[x] else blank + 1
        if blank >= gap_needed:
            break
        x += 1
    if blank < gap_needed:
        return None
    x1 = x - blank + 1
    rows = np.flatnonzero(band[:, x0:x1].any(axis=1))
    return x0, top + int(rows[0]), x1, top + int(rows[-1]) + 1


def _classify(glyph: np.ndarray) -> str | None:
    """□ ■ ○ ● or a circled number from the shape of one glyph's ink, else None (a letter, a digit, a dash)."""
    height, width = glyph.shape
    if height < 8 or width < 8 or not 0.8 <= width / height <= 1.25:
        return None
    fill = float(glyph.mean())
    edge = max(1, round(0.12 * height))
    corners = np.concatenate([glyph[:edge, :edge].ravel(), glyph[:edge, -edge:].ravel(),
                              glyph[-edge:, :edge].ravel(), glyph[-edge:, -edge:].ravel()]).mean()
    middle = glyph[height // 4: height - height // 4, width // 4: width - width // 4]
    sides = [glyph[:edge].any(axis=0).mean(), glyph[-edge:].any(axis=0).mean(),
             glyph[:, :edge].any(axis=1).mean(), glyph[:, -edge:].any(axis=1).mean()]
    if fill > 0.9:
        return "■"
    if min(sides) > 0.95 and corners > 0.3 and middle.mean() < 0.02:  # a thin frame fills a third of a corner
        return "□"
    if corners < 0.08 and 0.6 < fill < 0.85 and middle.mean() > 0.97:
        return "●"
    if corners < 0.08 and min(sides) > 0.15:  # a ring: round, touching all four sides
        inner = glyph[round(0.22 * height): height - round(0.22 * height), round(0.22 * width): width - round(0.22 * width)]
        if inner.mean() < 0.01:
            return "○"
        return _circled_number(glyph)
    return None


def _circled_number(glyph: np.ndarray) -> str | None:
    """Which of ① .. ⑳ a ring with ink inside is, by the best match against the marks drawn in Debian's CJK
    fonts; None when nothing matches well (a letter that happens to be round)."""
    sample = _normalised(glyph)
    best, score = None, 0.0
    for char, template in _templates():
        similarity = float((sample * template).mean())
        if similarity > score:
            best, score = char, similarity
    return best if score > 0.75 else None


def _normalised(glyph: np.ndarray) -> np.ndarray:
    picture = Image.fromarray((glyph * 255).astype(np.uint8)).resize((_SIDE, _SIDE), Image.Resampling.BILINEAR)
    values = np.asarray(picture, dtype=np.float64)
    values -= values.mean()
    norm = np.sqrt((values**2).mean())
    return values / norm if norm else values


@cache
def _templates() -> tuple[tuple[str, np.ndarray], ...]:
    templates = []
    for path in _FONTS:
        try:
            face = ImageFont.truetype(path, 96)
        except OSError:  # a font that is not installed: the other one still matches
            continue
        for char in _CIRCLED:
            canvas = Image.new("L", (128, 128), 0)
            ImageDraw.Draw(canvas).text((8, 0), char, font=face, fill=255)
            ink = np.asarray(canvas) > 127
            rows, columns = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
            if rows.size:
                templates.append((char, _normalised(ink[rows[0]:rows[-1] + 1, columns[0]:columns[-1] + 1])))
    return tuple(templates)
