"""OCR of page images with Tesseract (Debian's ``tesseract-ocr``), word by word with boxes and confidence
(docs/formats.md#scans).

Settings are chosen by measurement (``bench/bench_ocr.py``, rendered procedure pages with known text): the
page is read as one uniform block of text (``--psm 6``). Tesseract's default page segmentation (``--psm 3``)
finds columns and picture regions in a Korean procedure page and drops most of its text (character accuracy
0.23 against 0.99 with psm 6 on the same page); for Russian and English both read 1.00, and psm 6 is the
faster. Languages come from ``--ocr-lang`` (``EXTRACT_OCR_LANG``), else from the document's text layer on other
pages, else from Tesseract's script detection on the first page to read.

Each page is read by its own ``tesseract`` process with one thread (OpenMP threads inside one process gain
less than a second process does), one page at a time: a document holds one page image at once, and documents
are read side by side instead. Each page is reported as it is read.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from PIL import Image

from extractor.errors import InputError
from extractor.ingest.assemble import Placed
from extractor.ingest.marks import MARKS_VERSION, erase, find_marks

LANGUAGE_ENV = "EXTRACT_OCR_LANG"
CACHE_ENV = "EXTRACT_OCR_CACHE"
PSM = 6
"""One uniform block of text: measured best for Korean, Russian and English procedure pages (see above)."""
DPI = 300
"""What a scanned PDF page is rendered at for OCR: Tesseract's models are trained on text of 20-40 px."""
BY_LANGUAGE = {"ko": "kor", "ru": "rus+eng", "en": "eng"}
BY_SCRIPT = {"Korean": "kor", "Hangul": "kor", "Cyrillic": "rus+eng", "Latin": "eng"}
ALTERNATIVE = {"kor": "kor+eng"}
"""A second reading of a page the first read with doubt, the more confident kept (``RECHECK``). Measured on
rendered A4 pages (``bench/bench_ocr.py``): a Korean page read with ``kor`` alone 0.997 of its characters, with
``kor+eng`` 0.963 (``요청을`` read as ``SAS``); a Korean page with the Latin words Korean offices write (ERP, SAP,
PDF, an e-mail address) 0.782 with ``kor`` alone (none of 10 Latin words) and 0.933 with ``kor+eng`` (8 of 10).
Tesseract's mean word confidence tells the two apart: 92.0 against 91.3 on the first page, 83.1 against 88.7
on the second. Russian reads 1.00 with ``rus+eng`` either way, so it always has ``eng`` beside it."""
RECHECK = 90.0
"""Mean word confidence (0-100) below which a page is read again with the alternative languages."""
ALL = "kor+rus+eng"
"""When nothing tells the language (a page whose script Tesseract cannot detect): every installed model."""
_LANGUAGES = re.compile(r"[a-z_]{3,8}(\+[a-z_]{3,8})*")
TIMEOUT_S = 300
"""One page; a page Tesseract needs longer for is not a page of a document."""

OnPage = Callable[[int, int], None]
"""Called with (pages read, pages to read) as each page of a scan is read."""


@dataclass(frozen=True)
class Settings:
    languages: str
    psm: int = PSM
    alternative: str | None = None
    """Languages a page read with doubt is read again with (``ALTERNATIVE``); the more confident reading is kept."""

    @property
    def reader(self) -> str:
        """What read the text (``Document.reader``): another version, language, mode or mark detector may read
        other words, so sentences stored under one are never reused under another."""
        languages = self.languages + (f"|{self.alternative}<{RECHECK:g}" if self.alternative else "")
        return f"ocr=tesseract-{version()} lang={languages} psm={self.psm} {MARKS_VERSION}"


class OcrError(Exception):
    """Tesseract could not read a page (missing, failed, too slow); the reader names the file."""


@cache
def version() -> str:
    try:
        done = subprocess.run(["tesseract", "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise OcrError(f"OCR is not available ({error}); install Debian's tesseract-ocr") from None
    found = re.search(r"tesseract\s+(\S+)", done.stdout + done.stderr)
    return found.group(1) if found else "unknown"


@cache
def installed() -> frozenset[str]:
    try:
        done = subprocess.run(["tesseract", "--list-langs"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise OcrError(f"OCR is not available ({error}); install Debian's tesseract-ocr") from None
    return frozenset(line.strip() for line in done.stdout.splitlines()[1:] if line.strip())


def requested(path: str) -> str | None:
    """The languages ``--ocr-lang`` asked for (``kor+eng``), checked against the installed models."""
    raw = os.environ.get(LANGUAGE_ENV, "").strip()
    if not raw:
        return None
    if not _LANGUAGES.fullmatch(raw):
        raise InputError(path, f"{LANGUAGE_ENV} must be Tesseract language codes joined by '+' (kor+eng), not {raw!r}")
    missing = [code for code in raw.split("+") if code not in installed()]
    if missing:
        raise InputError(path, f"no Tesseract model for {'+'.join(missing)} (installed: {' '.join(sorted(installed()))})")
    return raw


def choose(path: str, text_elsewhere: str, first_image: Callable[[], Image.Image]) -> Settings:
    """The OCR settings of one document: asked-for languages, else the language of its text layer, else the
    script Tesseract detects on its first page to read."""
    from extractor.document import language_of

    asked = requested(path)
    if asked:
        return Settings(asked)
    language = language_of(text_elsewhere)
    languages = BY_LANGUAGE[language] if language in BY_LANGUAGE else _detected(first_image())
    return Settings(languages, alternative=ALTERNATIVE.get(languages))


def _detected(image: Image.Image) -> str:
    """Tesseract's orientation and script detection (``--psm 0``); every language when it cannot tell."""
    found = re.search(r"Script:\s*(\w+)", _osd(image))
    return BY_SCRIPT.get(found.group(1), ALL) if found else ALL


def read_pages(images: Sequence[Callable[[], Image.Image]], pages: Sequence[int], settings: Settings,
               on_page: OnPage | None = None) -> dict[int, list[list[Placed]]]:
    """Each page's lines of words (``pages[i]`` is the page number of ``images[i]``), one page at a time.

    ``images`` are callables: a page is decoded or rendered only when it is read, and let go before the next
    (a 300 dpi page is 9 MB as grey), so a document holds one page image at a time, whatever its length.
    Documents are read side by side instead, each by its own reader.
    """
    found: dict[int, list[list[Placed]]] = {}
    if on_page is not None:  # the count first: a reader is allowed time per page (extractor.offload)
        on_page(0, len(images))
    for done, (image, page) in enumerate(zip(images, pages), start=1):
        found[page] = read_page(image(), page, settings)
        if on_page is not None:
            on_page(done, len(images))
    return found


def read_page(image: Image.Image, page: int, settings: Settings) -> list[list[Placed]]:
    """The lines of one page image: Tesseract's words with boxes (fractions of the page) and confidence, with
    the list marks it cannot read put back at the start of their lines (``extractor.ingest.marks``). A page read
    with doubt (mean confidence under ``RECHECK``) is read again with the alternative languages, and the more
    confident reading is kept."""
    grey = image.convert("L")
    if grey.width * grey.height > OCR_PIXELS:
        scale = (OCR_PIXELS / (grey.width * grey.height)) ** 0.5
        grey = grey.resize((max(1, int(grey.width * scale)), max(1, int(grey.height * scale))), Image.Resampling.BOX)
    marks = find_marks(grey)
    erased = erase(grey, marks)
    lines = _lines(erased, settings.languages, settings.psm)
    if settings.alternative and _confidence(lines) < RECHECK:
        again = _lines(erased, settings.alternative, settings.psm)
        if _confidence(again) > _confidence(lines):
            lines = again
    ordered = list(lines)
    for mark in marks:  # a mark starts the line it is level with; alone (a square picture) it is no text
        x0, top, x1, bottom = mark.box
        middle = (top + bottom) / 2
        level = next((line for line in ordered if min(w.top for w in line) <= middle <= max(w.bottom for w in line)),
                     None)
        if level is not None and level[0].left >= x1:
            level.insert(0, _Word(mark.char, x0, top, x1, bottom, None))
    ordered.sort(key=lambda line: min(word.top for word in line))
    width, height = grey.size
    return [[Placed(w.text, page, (w.left / width, w.top / height, w.right / width, w.bottom / height), w.confidence)
             for w in line] for line in ordered]


OCR_PIXELS = 40_000_000
"""A page larger than this (an A4 page at 600 dpi is 35 million pixels) is scaled down before Tesseract reads it:
it needs no more, and its memory grows with the pixels (a 120-megapixel page took 1.2 GB)."""


def _lines(image: Image.Image, languages: str, psm: int) -> list[list[_Word]]:
    """Tesseract's words of one page, line by line (its TSV, read with the standard library's csv reader), the
    pieces of one word joined where its text output writes no space between them."""
    text, tsv = _tesseract(image, ["--psm", str(psm)], languages)
    lines: dict[tuple[str, str, str], list[_Word]] = {}
    spaced = _spaces_before(text)
    for row in csv.DictReader(io.StringIO(tsv), delimiter="\t", quoting=csv.QUOTE_NONE):
        word = (row.get("text") or "").strip()
        if row.get("level") != "5" or not word:
            continue
        try:
            left, top, width, height = (int(row[key]) for key in ("left", "top", "width", "height"))
            confidence = max(0.0, float(row["conf"]))
        except (KeyError, TypeError, ValueError):
            continue  # a row Tesseract wrote without its numbers: no box to place a word in
        key = (row["block_num"], row["par_num"], row["line_num"])
        found = _Word(word, left, top, left + width, top + height, confidence)
        line = lines.setdefault(key, [])
        if spaced(found.text) or not line:
            line.append(found)
        else:  # the text output writes no space here: one word Tesseract's TSV lists in pieces
            line[-1] = line[-1].joined(found)
    return list(lines.values())


def _confidence(lines: list[list[_Word]]) -> float:
    """Mean confidence of a page's words (0 for a page without any)."""
    found = [word.confidence for line in lines for word in line if word.confidence is not None]
    return sum(found) / len(found) if found else 0.0


@dataclass
class _Word:
    """A word of Tesseract's TSV in pixels."""

    text: str
    left: int
    top: int
    right: int
    bottom: int
    confidence: float | None

    def joined(self, other: _Word) -> _Word:
        """This word and the piece after it as one word: the box around both, the lower confidence."""
        confidences = [c for c in (self.confidence, other.confidence) if c is not None]
        return _Word(self.text + other.text, min(self.left, other.left), min(self.top, other.top),
                     max(self.right, other.right), max(self.bottom, other.bottom),
                     min(confidences) if confidences else None)


def _spaces_before(text: str) -> Callable[[str], bool]:
    """Reads Tesseract's text output along its TSV words: whether whitespace precedes each next word.

    The TSV lists the syllables of a Korean word as words of their own; the text output, written from the
    same recognition, joins them by a space count the TSV does not carry. A word the text does not hold
    where expected (never seen) counts as spaced.
    """
    position = 0

    def spaced(word: str) -> bool:
        nonlocal position
        start = position
        while position < len(text) and text[position].isspace():
            position += 1
        if text.startswith(word, position):
            gap = position > start
            position += len(word)
            return gap
        position = start
        return True

    return spaced


def _tesseract(image: Image.Image, options: list[str], languages: str) -> tuple[str, str]:
    """Run Debian's ``tesseract`` on one image with one thread: its text and its TSV output, written from one
    recognition."""
    import tempfile

    raw = image.tobytes()  # the cache key: the pixels, whatever file format carries them to Tesseract
    command = ["tesseract", "page.pgm", "page", "-l", languages, *options, "txt", "tsv"]
    cached = _cache_file(f"{image.mode} {image.size}".encode() + raw, command)
    if cached is not None and cached.exists():
        found = json.loads(cached.read_text(encoding="utf-8"))
        return found["text"], found["tsv"]
    environment = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    with tempfile.TemporaryDirectory(prefix="extract-ocr-") as folder:
        # an uncompressed PGM file: written in 10 ms where a PNG took 150-200 (on an A4 page at 300 dpi); from
        # its standard input Tesseract read the same PGM a second slower
        picture, base = os.path.join(folder, "page.pgm"), os.path.join(folder, "page")
        image.convert("L").save(picture, "PPM")
        _run(["tesseract", picture, base, *command[3:]], b"", environment)
        with open(f"{base}.txt", encoding="utf-8", errors="replace") as text, \
                open(f"{base}.tsv", encoding="utf-8", errors="replace") as tsv:
            result = text.read(), tsv.read()
    if cached is not None:
        _store(cached, {"text": result[0], "tsv": result[1]})
    return result


def _cache_file(image: bytes, command: list[str]) -> Path | None:
    """Where Tesseract's output for this image and command is kept (``EXTRACT_OCR_CACHE``, default
    ``~/.cache/extractor/ocr``; ``off`` keeps nothing). Reading a scan again (``extract show``, the review page,
    an approval that re-reads the source) then takes milliseconds, not seconds per page; the key is the image's
    bytes, the command and Tesseract's version, so a cached answer is the one Tesseract would give."""
    setting = os.environ.get(CACHE_ENV, "").strip()
    if setting.lower() == "off":
        return None
    folder = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "extractor" / "ocr"
    key = hashlib.sha256(image + "\0".join([version(), *command]).encode("utf-8")).hexdigest()
    return folder / key[:2] / f"{key}.json"


def _store(path: Path, value: dict[str, str]) -> None:
    """Written whole or not at all (a temporary file renamed into place); a cache that cannot be written is
    only slower."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        return


def _osd(image: Image.Image) -> str:
    """Tesseract's orientation and script detection report for one image."""
    buffer = io.BytesIO()
    image.save(buffer, "PNG", compress_level=1)
    command = ["tesseract", "stdin", "stdout", "--psm", "0", "-l", "osd"]
    cached = _cache_file(buffer.getvalue(), command)
    if cached is not None and cached.exists():
        return str(json.loads(cached.read_text(encoding="utf-8"))["osd"])
    done = _run(command, buffer.getvalue(), {**os.environ, "OMP_THREAD_LIMIT": "1"}, check=False)
    report = done.stdout.decode("utf-8", "replace")
    if cached is not None:
        _store(cached, {"osd": report})
    return report


def _run(command: list[str], data: bytes, environment: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[bytes]:
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=TIMEOUT_S, env=environment)
    except FileNotFoundError:
        raise OcrError("OCR is not available: install Debian's tesseract-ocr") from None
    except subprocess.TimeoutExpired:
        raise OcrError(f"OCR of one page took longer than {TIMEOUT_S} s") from None
    if check and done.returncode != 0:
        message = " ".join(done.stderr.decode("utf-8", "replace").split())[-300:]
        raise OcrError(f"OCR failed ({message})")
    return done
