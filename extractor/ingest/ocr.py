"""OCR of page images with Tesseract (Debian's ``tesseract-ocr``), word by word with boxes and confidence
(docs/formats.md#scans).

Settings are chosen by measurement (``bench/bench_ocr.py``, rendered procedure pages with known text): the
page is read as one uniform block of text (``--psm 6``). Tesseract's default page segmentation (``--psm 3``)
finds columns and picture regions in a Korean procedure page and drops most of its text (character accuracy
0.23 against 0.99 with psm 6 on the same page); for Russian and English both read 1.00, and psm 6 is the
faster. Languages come from ``--ocr-lang`` (``EXTRACT_OCR_LANG``), else from the document's text layer on other
pages, else from Tesseract's script detection on the first page to read.

Each page is read by its own ``tesseract`` process, one per core at a time with one thread each (OpenMP
threads inside one process gain less than a second process does); the pages of a long scan are read in
parallel and reported as each finishes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
"""Korean alone: its model reads Latin letters and digits, and with ``eng`` beside it Tesseract read Korean
words as English ones (``요청을`` -> ``SAS``; character accuracy 0.95 against 0.996 for ``kor``)."""
BY_SCRIPT = {"Korean": "kor", "Hangul": "kor", "Cyrillic": "rus+eng", "Latin": "eng"}
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

    @property
    def reader(self) -> str:
        """What read the text (``Document.reader``): another version, language, mode or mark detector may read
        other words, so sentences stored under one are never reused under another."""
        return f"ocr=tesseract-{version()} lang={self.languages} psm={self.psm} {MARKS_VERSION}"


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
    if language in BY_LANGUAGE:
        return Settings(BY_LANGUAGE[language])
    return Settings(_detected(first_image()))


def _detected(image: Image.Image) -> str:
    """Tesseract's orientation and script detection (``--psm 0``); every language when it cannot tell."""
    found = re.search(r"Script:\s*(\w+)", _osd(image))
    return BY_SCRIPT.get(found.group(1), ALL) if found else ALL


def read_pages(images: Sequence[Callable[[], Image.Image]], pages: Sequence[int], settings: Settings,
               on_page: OnPage | None = None) -> dict[int, list[list[Placed]]]:
    """Each page's lines of words (``pages[i]`` is the page number of ``images[i]``), pages read in parallel.

    ``images`` are callables, so a page is rendered only when a core is free to read it (a 300 dpi page is
    25 MB as RGB).
    """
    workers = max(1, min(len(images), os.cpu_count() or 1))
    done = 0
    found: dict[int, list[list[Placed]]] = {}
    if on_page is not None:  # the count first: a reader is allowed time per page (extractor.offload)
        on_page(0, len(images))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ocr") as pool:
        futures = {pool.submit(_render_and_read, image, page, settings): page for image, page in zip(images, pages)}
        for future in futures:
            found[futures[future]] = future.result()
            done += 1
            if on_page is not None:
                on_page(done, len(images))
    return found


def _render_and_read(image: Callable[[], Image.Image], page: int, settings: Settings) -> list[list[Placed]]:
    return read_page(image(), page, settings)


def read_page(image: Image.Image, page: int, settings: Settings) -> list[list[Placed]]:
    """The lines of one page image: Tesseract's words with boxes (fractions of the page) and confidence, with
    the list marks it cannot read put back at the start of their lines (``extractor.ingest.marks``)."""
    grey = image.convert("L")
    marks = find_marks(grey)
    text, tsv = _tesseract(erase(grey, marks), ["--psm", str(settings.psm)], settings.languages)
    lines: dict[tuple[int, int, int], list[_Word]] = {}
    spaced = _spaces_before(text)
    for row in tsv.splitlines()[1:]:
        cells = row.split("\t")
        if len(cells) != 12 or cells[0] != "5" or not cells[11].strip():
            continue
        left, top, width, height = (int(value) for value in cells[6:10])
        key = (int(cells[2]), int(cells[3]), int(cells[4]))
        word = _Word(cells[11], left, top, left + width, top + height, max(0.0, float(cells[10])))
        line = lines.setdefault(key, [])
        if spaced(word.text) or not line:
            line.append(word)
        else:  # the text output writes no space here: one word Tesseract's TSV lists in pieces
            line[-1] = line[-1].joined(word)
    ordered = list(lines.values())
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
    import io

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
