"""Segmentation speed: sentences per second in Korean, English and Russian, next to the library alone.

The text of each language is its bundled sample (``samples/``) repeated, blank-line separated, until it
holds 2,000 or 20,000 sentences. For each language and size this prints

- ``ingest``: ``from_text`` (canonical text and block parsing), timed on its own;
- ``segment``: ``segment(document)``, the whole stage (script detection, abbreviation masking, windowed
  splitting, alignment to offsets, the glue guard, the invariant check);
- ``library``: the splitter alone (the Korean rules of ``extractor.segment.korean``, ``razdel.sentenize``, one
  ``pysbd.Segmenter``) on the same block contents ``segment`` splits, in the same process;
- ``overhead``: segment time / library time, the baseline measured in the same run.

The best of five rounds, each running ingest, segment and the library in turn (the machine is shared).
The library runs in the interpreter ``segment`` has run in. What loading a splitter costs a fresh process is
``bench/bench_korean.py``'s.

    python bench/bench_segment.py [--quick]
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = {
    "ko": ROOT / "samples" / "ko_work_request_review.txt",
    "en": ROOT / "samples" / "en_purchase_approval.md",
    "ru": ROOT / "samples" / "ru_vacation_approval.txt",
}


def best_of(runs: int, action: Callable[[], object]) -> float:
    return min(interleaved(runs, action))


def interleaved(runs: int, *actions: Callable[[], object]) -> list[float]:
    """The best time of each action over ``runs`` rounds that run them in turn, so that load from other
    processes on a shared machine falls on all of them alike."""
    best = [float("inf")] * len(actions)
    for _ in range(runs):
        for index, action in enumerate(actions):
            started = time.perf_counter()
            action()
            best[index] = min(best[index], time.perf_counter() - started)
    return best


def build_text(language: str, sentences: int) -> str:
    """The sample repeated until the text holds at least ``sentences`` units."""
    from extractor.ingest import from_text
    from extractor.segment import segment

    sample = SAMPLES[language].read_text(encoding="utf-8")
    per_copy = len(segment(from_text(sample)).sentences)
    return "\n\n".join([sample] * -(-sentences // per_copy))


def library(language: str) -> Callable[[str], object]:
    """The splitter call ``segment`` makes for this language, as a user of the splitter would make it."""
    if language == "ko":
        from extractor.segment import korean

        return korean.split
    if language == "ru":
        import razdel

        return lambda text: list(razdel.sentenize(text))
    import pysbd

    segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
    return segmenter.segment


def measure(language: str, sentences: int, runs: int) -> dict[str, float]:
    from extractor.ingest import from_text
    from extractor.segment import segment

    text = build_text(language, sentences)
    document = from_text(text)
    units = len(segment(copy.copy(document)).sentences)
    contents = [document.text[b.content_start : b.end] for b in document.blocks]
    split = library(language)
    ingest, segmented, alone = interleaved(
        runs,
        lambda: from_text(text),
        lambda: segment(copy.copy(document)),
        lambda: [split(content) for content in contents],
    )
    return {"units": units, "ingest": ingest, "segment": segmented, "library": alone}


def one_block(language: str, sentences: int, with_library: bool) -> tuple[float, float | None]:
    """One paragraph of ``sentences`` sentences: ``segment`` splits it a window at a time; pysbd alone is
    quadratic in its input, which is why the windows exist."""
    import random

    from extractor.ingest import from_text
    from extractor.segment import segment

    words = {
        "en": "the clerk will review every request e.g. a note and record the result at noon".split(),
        "ru": "отдел рассмотрит каждую заявку т. е. письмо и запишет результат в журнал".split(),
    }[language]
    chooser = random.Random(7)
    text = " ".join(
        " ".join([chooser.choice(words).capitalize()] + chooser.choices(words, k=11)) + "." for _ in range(sentences)
    )
    document = from_text(text)
    ours = best_of(3, lambda: segment(copy.copy(document)))
    split = library(language)
    return ours, best_of(1, lambda: split(text)) if with_library else None


def align_worst_case(pieces: int) -> float:
    """Seconds to align ``pieces`` pieces that are all altered (none found verbatim or squeezed)."""
    from extractor.segment.align import align

    originals = [f"Sentence number {n} is here." for n in range(pieces)]
    content = " ".join(originals)
    altered = [piece.replace("is", "IS") for piece in originals]
    return best_of(3, lambda: align(content, altered))


def main() -> None:
    quick = "--quick" in sys.argv
    sizes = [2000] if quick else [2000, 20000]
    runs = 1 if quick else 5
    results = {(language, size): measure(language, size, runs) for language in ("ko", "en", "ru") for size in sizes}
    header = f"{'lang':4} {'sentences':>9} {'ingest s':>9} {'segment s':>9} {'sent/s':>8} {'library s':>9} {'sent/s':>8}"
    print(header + f" {'overhead':>8} {'per sentence vs 2,000':>22}")
    for (language, _), row in results.items():
        base = results[(language, sizes[0])]
        growth = (row["segment"] / row["units"]) / (base["segment"] / base["units"])
        print(
            f"{language:4} {row['units']:>9,} {row['ingest']:>9.3f} {row['segment']:>9.3f} "
            f"{row['units'] / row['segment']:>8,.0f} {row['library']:>9.3f} {row['units'] / row['library']:>8,.0f} "
            f"{row['segment'] / row['library']:>7.2f}x {growth:>21.2f}x"
        )
    print()
    for language in ("en", "ru"):
        ours, alone = one_block(language, 2000, with_library=not quick)
        versus = f"; the library alone on it: {alone:.2f} s" if alone is not None else ""
        print(f"one paragraph of 2,000 {language} sentences: segment {ours:.2f} s{versus}")
    small, large = align_worst_case(700), align_worst_case(7000)
    print(f"align, every piece altered: 700 pieces {small:.3f} s, 7,000 pieces {large:.3f} s ({large / small:.1f}x for 10x)")


if __name__ == "__main__":
    main()
