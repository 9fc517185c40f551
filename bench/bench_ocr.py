"""OCR accuracy and speed on clean scans, against Tesseract's own CLI on the same pages in the same run.

Pages are rendered from known text (``tests/support/scans.py``: an A4 procedure page per language, Noto CJK,
300 dpi), so accuracy is measured against what was drawn. Character accuracy is 1 - edit distance / length
of the drawn text, runs of whitespace counted as one space.

1. **Settings by measurement**: every language with Tesseract's page segmentation modes 3 (its default), 4
   and 6, through the CLI's text output; the mode ingest uses (``extractor.ingest.ocr.PSM``) and our reader's
   own accuracy (marks put back, Korean words joined) with the languages it chooses by itself. Targets:
   Korean >= 0.94, Russian and English >= 0.99.
2. **Languages by measurement**: the Korean page, a Korean page with Latin words (``KOREAN_WITH_LATIN``) and
   the Russian page, each read by our reader with one language set and with Latin beside it: character
   accuracy, Latin words read, and Tesseract's mean word confidence, which picks the reading kept
   (``extractor.ingest.ocr.RECHECK``); then what ``load`` reads by itself.
3. **OCR speed**: a ``--pages``-page Korean scan read by ``extractor.ingest.load`` (find marks, Tesseract,
   assemble, parse blocks) with the OCR cache off and the language given, as a multi-page TIFF and as an
   image-only PDF (PDFium renders each page), against the CLI on the same pages as PNG files: one process
   after another with one thread (what a document's reader does: one page at a time, documents side by side),
   with Tesseract's default threads, and two at a time with one thread each (the best the CLI does on two
   cores); the PDF also against ``pdftoppm`` + the CLI. Overhead = our seconds / the CLI's one page at a time
   with one thread; target <= 1.2.
Text-layer PDFs are measured by ``bench/bench_pdf.py``.

    python bench/bench_ocr.py [--pages 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

from tests.support.scans import PROCEDURES, render, save_pdf  # noqa: E402

LANGUAGES: dict[str, str] = {"kor": "kor", "rus": "rus+eng", "eng": "eng"}
TARGETS = {"kor": 0.94, "rus": 0.99, "eng": 0.99}


def accuracy(read: str, drawn: str) -> float:
    read, drawn = " ".join(read.split()), " ".join(drawn.split())
    return 1 - Levenshtein.distance(read, drawn) / len(drawn)


def cli_text(png: Path, languages: str, psm: int, threads: int | None = None) -> str:
    environment = dict(os.environ) | ({"OMP_THREAD_LIMIT": str(threads)} if threads else {})
    done = subprocess.run(["tesseract", str(png), "stdout", "-l", languages, "--psm", str(psm)], capture_output=True,
                          text=True, env=environment, check=True)
    return done.stdout


def best(rounds: int, action: Callable[[], object]) -> float:
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return min(seconds)


def settings_table(folder: Path) -> None:
    from extractor.ingest import load
    from extractor.ingest.ocr import PSM

    print("1. character accuracy on clean 300 dpi scans (CLI text output by page segmentation mode; ours)")
    print(f"{'language':9} {'psm 3':>7} {'psm 4':>7} {'psm 6':>7} {'ours':>7}  {'target':>6}  reader")
    for code, text in PROCEDURES.items():
        scan = render(text)
        png = folder / f"{code}.png"
        scan.image.save(png, dpi=(300, 300))
        modes = {psm: accuracy(cli_text(png, LANGUAGES[code], psm), scan.text) for psm in (3, 4, 6)}
        os.environ.pop("EXTRACT_OCR_LANG", None)
        document = load(png)
        ours = accuracy(document.text, scan.text)
        verdict = "ok" if ours >= TARGETS[code] else "BELOW"
        print(f"{code:9} {modes[3]:7.3f} {modes[4]:7.3f} {modes[6]:7.3f} {ours:7.3f}  {TARGETS[code]:6.2f} {verdict}  "
              f"{document.reader}")
    print(f"ingest reads with psm {PSM}\n")


def languages_table(folder: Path) -> None:
    from extractor.ingest import load
    from extractor.ingest.ocr import Settings, read_page
    from tests.support.scans import KOREAN_WITH_LATIN

    latin = ("ERP", "SAP", "PDF", "USD", "CFO", "FOB", "PO", "Purchase", "Order", "purchasing@example.com")
    print("2. languages: character accuracy, Latin words read, mean word confidence")
    for name, text, sets in (("kor", PROCEDURES["kor"], ("kor", "kor+eng")),
                             ("kor+latin", KOREAN_WITH_LATIN, ("kor", "kor+eng")),
                             ("rus", PROCEDURES["rus"], ("rus", "rus+eng"))):
        scan = render(text)
        expected = [word for word in latin if word in text.split() or f"({word})" in text.split()]
        for languages in sets:
            lines = read_page(scan.image, 1, Settings(languages))
            read = "\n".join(" ".join(word.text for word in line) for line in lines)
            words = {word.strip("()") for word in read.split()}
            confidence = [word.confidence for line in lines for word in line if word.confidence is not None]
            print(f"   {name:10} {languages:8} {accuracy(read, scan.text):6.3f}  latin {sum(w in words for w in expected)}"
                  f"/{len(expected)}  confidence {sum(confidence) / len(confidence):5.1f}")
        png = folder / f"{name}.png"
        scan.image.save(png, dpi=(300, 300))
        document = load(png)
        print(f"   {name:10} ours     {accuracy(document.text, scan.text):6.3f}  {document.reader}")
    print()


def speed(folder: Path, pages: int, rounds: int) -> None:
    from extractor.ingest import load

    scans = [render(PROCEDURES["kor"]) for _ in range(pages)]
    pngs = []
    for number, scan in enumerate(scans):
        pngs.append(folder / f"page{number}.png")
        scan.image.save(pngs[-1], dpi=(300, 300))
    tiff = folder / "scans.tif"
    frames = [Image.frombytes("L", scan.image.size, scan.image.tobytes()) for scan in scans]  # no PNG info
    frames[0].save(tiff, save_all=True, append_images=frames[1:], dpi=(300, 300), compression="tiff_lzw")
    pdf = save_pdf(scans, folder / "scans.pdf")

    def cli_one_by_one(threads: int | None = None) -> None:
        for png in pngs:
            cli_text(png, "kor", 6, threads=threads)

    def cli_two_at_a_time(images: list[Path]) -> None:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda png: cli_text(png, "kor", 6, threads=1), images))

    def poppler_and_cli() -> None:
        subprocess.run(["pdftoppm", "-r", "300", "-gray", "-png", str(pdf), str(folder / "rendered")], check=True)
        cli_two_at_a_time(sorted(folder.glob("rendered*.png")))

    os.environ["EXTRACT_OCR_CACHE"] = "off"
    os.environ["EXTRACT_OCR_LANG"] = "kor"  # as the CLI is told; script detection is timed apart below
    print(f"3. OCR of one {pages}-page Korean scan (kor, psm 6), best of {rounds}, {os.cpu_count()} cores")
    single = best(rounds, lambda: cli_one_by_one(threads=1))
    one = best(rounds, cli_one_by_one)
    two = best(rounds, lambda: cli_two_at_a_time(pngs))
    image = best(rounds, lambda: load(tiff))
    poppler = best(rounds, poppler_and_cli)
    ours_pdf = best(rounds, lambda: load(pdf))
    os.environ.pop("EXTRACT_OCR_LANG")
    detect = best(rounds, lambda: load(pngs[0])) - best(rounds, lambda: cli_text(pngs[0], "kor", 6, threads=1))
    for label, seconds in (("tesseract CLI on the PNGs, one after another, 1 thread", single),
                           ("tesseract CLI on the PNGs, one after another", one),
                           ("tesseract CLI on the PNGs, two at a time", two),
                           ("extractor.ingest.load, the pages as a TIFF", image),
                           ("pdftoppm + tesseract CLI two at a time, the PDF", poppler),
                           ("extractor.ingest.load, the pages as a PDF", ours_pdf)):
        print(f"   {label:50} {seconds:7.2f} s  {pages / seconds:6.3f} pages/s")
    print(f"   overhead, images: {image / single:.2f}x the CLI a page at a time (target <= 1.2), "
          f"{image / min(one, two):.2f}x its best on all cores; PDF: {ours_pdf / single:.2f}x the CLI a page at a "
          f"time on ready PNGs")
    print(f"   script detection (no --ocr-lang) adds {detect:.2f} s to a document\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ocr-") as folder:
        settings_table(Path(folder))
        languages_table(Path(folder))
        speed(Path(folder), arguments.pages, arguments.rounds)


if __name__ == "__main__":
    main()
