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
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = None  # Pillow's own check warns or fails by its limit; ours (check_pixels) is lower
    try:
        picture = Image.open(BytesIO(data))  # reads the header only
        frames = getattr(picture, "n_frames", 1)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as error:
        raise InputError(path, f"not a readable image ({type(error).__name__}: {error})") from None
    if frames > MAX_PAGES:
        raise InputError(path, f"image has {frames} pages (limit {MAX_PAGES}); refused")
    pages = []
    for frame in range(frames):
        picture.seek(frame)
        width, height = picture.size
        check_pixels(width, height, path, "image" if frames == 1 else f"page {frame + 1}")
        try:
            pages.append(picture.convert("L"))
        except (OSError, ValueError, SyntaxError) as error:
            raise InputError(path, f"image cannot be decoded ({type(error).__name__}: {error})") from None
    try:
        settings = choose(path, "", lambda: pages[0])
        lines = read_pages([partial(_same, page) for page in pages], range(1, frames + 1), settings, on_page)
    except OcrError as error:
        raise InputError(path, str(error)) from None
    assembler = Assembler()
    for number in range(1, frames + 1):
        assembler.lines(lines[number])
    text, blocks, words = assembler.result()
    if not blocks:
        raise InputError(path, f"no text found by OCR ({settings.languages}) in the image")
    return Paged(text, blocks, words, frames, settings.reader)


def _same(page: Any) -> Any:
    """A page already decoded (``read_pages`` takes callables, so PDF pages are rendered only when read)."""
    return page
