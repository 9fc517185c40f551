"""Images (.png .jpg .tif): every page OCR'd with Tesseract (``extractor.ingest.ocr``), words kept with their
boxes and confidence; a multi-page TIFF is one document of several pages (docs/formats.md#scans)."""

from __future__ import annotations

from functools import partial
from io import BytesIO
from typing import Any

from extractor.errors import InputError
from extractor.ingest.assemble import Assembler, Paged
from extractor.ingest.contain import MAX_PAGES, check_pixels
from extractor.ingest.ocr import OcrError, OnPage, choose, read_pages


def parse(data: bytes, path: str, on_page: OnPage | None = None) -> Paged:
    """Every page OCR'd, one at a time. Each page's size is read from its header and checked, all of them,
    before any page is decoded; a page is decoded when it is read."""
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = None  # Pillow's own check warns or fails by its limit; ours (check_pixels) is lower
    try:
        picture = Image.open(BytesIO(data))  # reads the header only
        frames = getattr(picture, "n_frames", 1)
        if frames > MAX_PAGES:
            raise InputError(path, f"image has {frames} pages (limit {MAX_PAGES}); refused")
        total = 0
        for frame in range(frames):
            picture.seek(frame)  # the next frame's header; its pixels are not decoded
            width, height = picture.size
            check_pixels(width, height, path, "image" if frames == 1 else f"page {frame + 1}")
            total += width * height
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as error:
        raise InputError(path, f"not a readable image ({type(error).__name__}: {error})") from None
    if total > MAX_TOTAL_PIXELS:
        raise InputError(path, f"image has {frames} pages of {total / 1e6:.0f} megapixels in all (limit "
                               f"{MAX_TOTAL_PIXELS / 1e6:.0f}); refused")
    try:
        settings = choose(path, "", lambda: _frame(picture, 0, path))
        lines = read_pages([partial(_frame, picture, frame, path) for frame in range(frames)], range(1, frames + 1),
                           settings, on_page)
    except OcrError as error:
        raise InputError(path, str(error)) from None
    assembler = Assembler()
    for number in range(1, frames + 1):
        assembler.lines(lines[number])
    text, blocks, words = assembler.result()
    if not blocks:
        raise InputError(path, f"no text found by OCR ({settings.languages}) in the image")
    return Paged(text, blocks, words, frames, settings.reader)


MAX_TOTAL_PIXELS = 2_000_000_000
"""All pages of one image together: 200 A4 pages scanned at 300 dpi. Pages are decoded one at a time, so this
bounds the work, not the memory."""


def _frame(picture: Any, frame: int, path: str) -> Any:
    """One page decoded, as grey, when it is read (``read_pages`` holds one page at a time)."""
    try:
        picture.seek(frame)
        return picture.convert("L")
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise InputError(path, f"image cannot be decoded ({type(error).__name__}: {error})") from None
