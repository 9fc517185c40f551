"""Labelled OCR words for calibrating EVIDENCE_LOW_OCR_CONFIDENCE: each word Tesseract read, its confidence, and
whether it is the word printed there.

Pages are rendered from known text (``tests/support/scans.py``), Korean, Russian and English, clean and
degraded as real scans are (150 dpi, out of focus, heavy JPEG), and read by ``extractor.ingest.ocr``
exactly as ingest reads them. The words read are aligned with the words drawn (difflib over the word
sequences): a word inside an equal run is labelled 1, a word read in place of another, or read where none
was printed, 0. The marks put back by shape have no confidence and are left out.

    python bench/ocr_confidence_labels.py samples/ocr_confidence/labels.csv
    extract rules calibrate EVIDENCE_LOW_OCR_CONFIDENCE samples/ocr_confidence/labels.csv --contract work_procedure
"""

from __future__ import annotations

import csv
import difflib
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image, ImageFilter  # noqa: E402

from tests.support.scans import PROCEDURES, render  # noqa: E402

LANGUAGES = {"kor": ("ko", "kor"), "rus": ("ru", "rus+eng"), "eng": ("en", "eng")}


def low_resolution(page: Image.Image) -> Image.Image:
    """A 150 dpi scan: half the pixels each way."""
    return page.resize((page.width // 2, page.height // 2), Image.Resampling.BILINEAR)


def blurred(page: Image.Image) -> Image.Image:
    """Out of focus at 150 dpi: a photo of a page, or a worn copy."""
    return low_resolution(page).filter(ImageFilter.GaussianBlur(1.6))


def compressed(page: Image.Image) -> Image.Image:
    """Saved as a JPEG of quality 8 at 150 dpi: what a mail-in photo of a form looks like."""
    buffer = io.BytesIO()
    low_resolution(page).save(buffer, "JPEG", quality=8)
    return Image.open(io.BytesIO(buffer.getvalue())).convert("L")


VARIANTS: dict[str, Callable[[Image.Image], Image.Image]] = {
    "clean": lambda page: page, "150dpi": low_resolution, "blurred": blurred, "jpeg8": compressed,
}


def rows_for(code: str, variant: str) -> list[dict[str, object]]:
    from extractor.ingest.ocr import Settings, read_page

    language, languages = LANGUAGES[code]
    scan = render(PROCEDURES[code])
    lines = read_page(VARIANTS[variant](scan.image), 1, Settings(languages))
    read = [word for line in lines for word in line if word.confidence is not None]
    drawn = scan.text.split()
    matcher = difflib.SequenceMatcher(a=[w.text for w in read], b=drawn, autojunk=False)
    rows = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        for offset, word in enumerate(read[a0:a1]):
            printed = drawn[b0 + offset] if tag in ("equal", "replace") and b0 + offset < b1 else ""
            rows.append({"case_id": f"{code}-{variant}-{a0 + offset + 1:03d}", "language": language, "variant": variant,
                         "value": word.text, "excerpt": printed, "label": int(tag == "equal"),
                         "confidence": f"{(word.confidence or 0) / 100:.4f}"})
    return rows


def main(path: Path) -> None:
    os.environ.setdefault("EXTRACT_OCR_CACHE", "off")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # each page is its own tesseract process
        pages = list(pool.map(lambda job: rows_for(*job), [(code, variant) for code in LANGUAGES for variant in VARIANTS]))
    rows = [row for page in pages for row in page]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    wrong = sum(1 for row in rows if row["label"] == 0)
    print(f"{path}: {len(rows)} words, {wrong} misread")
    for variant in VARIANTS:
        mine = [row for row in rows if row["variant"] == variant]
        print(f"  {variant:8} {len(mine):4} words, {sum(1 for r in mine if r['label'] == 0):3} misread")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
