"""Page images for the review page: a PDF page rendered with PDFium, an image's page as it is, scaled to the
width the page shows and cached on disk (docs/formats.md#pages-and-boxes)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from extractor.queue.uploads import Source

WIDTH = 1000
"""Pixels across: sharp beside the text on a laptop screen, about 150 KB as PNG."""
CACHE_ENV = "EXTRACT_PAGE_CACHE"


def page_png(source: Source, sha256: str, page: int, width: int = WIDTH) -> bytes:
    """Page ``page`` (1-based) of ``source`` (an upload's bytes, or a file) as PNG, ``width`` pixels across; from the
    cache when it has it (keyed by the source's content hash, so a changed file is never shown with another's
    page)."""
    folder = _cache()
    cached = None if folder is None else folder / f"{sha256}-{page}-{width}.png"
    if cached is not None and cached.exists():
        return cached.read_bytes()
    picture = _page_image(source, page)
    scale = width / picture.width
    picture = picture.resize((width, max(1, round(picture.height * scale))))
    buffer = io.BytesIO()
    picture.save(buffer, "PNG", optimize=False, compress_level=6)
    data = buffer.getvalue()
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            temporary = cached.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, cached)
        except OSError:  # a cache that cannot be written only makes the next view slower
            pass
    return data


def _page_image(source: Source, page: int) -> Any:
    from PIL import Image

    from extractor.ingest.contain import check_pixels
    from extractor.ingest.pdf import render

    data, suffix = source.content()
    if suffix == ".pdf":
        return render(data, page, dpi=110)
    Image.MAX_IMAGE_PIXELS = None  # checked below from the header, as ingest does
    picture = Image.open(io.BytesIO(data))
    picture.seek(page - 1)
    check_pixels(*picture.size, source.name)
    return picture.convert("L")


def _cache() -> Path | None:
    setting = os.environ.get(CACHE_ENV, "").strip()
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "extractor" / "pages"
