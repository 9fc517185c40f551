"""Validator speed: time per evidence excerpt must stay flat as the document grows.

Documents of 200, 2,000 and 20,000 synthetic sentences; candidates with 100, 1,000 and 10,000 excerpts
(90% verbatim, 10% altered so the nearest-sentence hint runs). The one-off index build of a document is
timed on its own; each size is also validated with no excerpts at all, and the per-excerpt time is the
difference divided by the excerpt count, so what belongs to the document (its coverage entries, its
index) is printed separately, not hidden. The baseline of every ratio is the 200-sentence document
measured in the same run.

Also prints the cold start of ``extract --help`` next to ``python -c "import typer"``.

    python bench/bench_validate.py [--quick]
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import time

from extractor.contracts import get_contract
from extractor.document import Document, Sentence
from extractor.evidence.source import Source
from extractor.validate import validate

CONTRACT = get_contract("work_procedure")


def make_document(sentences: int, rng: random.Random) -> Document:
    syllables = ["ka", "ro", "mi", "te", "su", "na", "li", "po", "ve", "da", "zo", "ri", "me", "tu", "ga"]
    vocabulary = ["".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(6000)]
    units, lines, position = [], [], 0
    for number in range(1, sentences + 1):
        line = " ".join(rng.choices(vocabulary, k=rng.randint(8, 16))).capitalize() + f" {number}."
        units.append(Sentence(f"s{number}", line, position, position + len(line), number - 1))
        lines.append(line)
        position += len(line) + 1
    return Document("bench.txt", "\n".join(lines), [], "0" * 64, "txt", sentences=units, segmenter="bench")


def make_candidate(document: Document, excerpts: int, rng: random.Random) -> str:
    rules, evidence, mapped = [], [], {}
    for index in range(excerpts):
        sentence = rng.choice(document.sentences)
        words = sentence.text.split()
        start = rng.randint(0, len(words) - 5)
        excerpt = " ".join(words[start:start + rng.randint(4, 6)])
        if index % 10 == 9:
            excerpt = excerpt.replace(excerpt.split()[1], "altered")
        else:
            mapped.setdefault(sentence.id, []).append(f"rules[{index}]")
        rules.append(excerpt)
        evidence.append({"fieldPath": f"rules[{index}]", "sourceExcerpt": excerpt})
    coverage = [
        {"sentenceId": s.id, "status": "MAPPED", "fieldPaths": mapped[s.id]} if s.id in mapped
        else {"sentenceId": s.id, "status": "UNMAPPED", "reason": "background"}
        for s in document.sentences
    ]
    return json.dumps({"documentPurpose": None, "participants": [], "processSteps": [], "rules": rules,
                       "assignmentRule": None, "missingFields": [{"fieldPath": "documentPurpose", "question": "?"},
                                                                 {"fieldPath": "assignmentRule", "question": "?"}],
                       "evidence": evidence, "sentenceCoverage": coverage})


def best_of(runs: int, action) -> float:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return min(timings)


def cold_start(command: list[str], runs: int = 7) -> float:
    return statistics.median(best_of(1, lambda: subprocess.run(command, capture_output=True, check=True))
                             for _ in range(runs))


def main() -> None:
    from installed import as_installed

    as_installed()
    quick = "--quick" in sys.argv
    rng = random.Random(7)
    sizes = (200, 2_000) if quick else (200, 2_000, 20_000)
    counts = (100, 1_000) if quick else (100, 1_000, 10_000)
    print("index ms: one-off per document (normalised text, word-start index, hint index), reused by the repair")
    print("doc ms:   validating a candidate with no excerpts (schema + coverage of every sentence)")
    print(f"{'sentences':>9} {'index ms':>9} {'excerpts':>8} {'total ms':>9} {'doc ms':>8} {'us/excerpt':>11} {'vs 200':>7}")
    baseline: dict[int, float] = {}
    for size in sizes:
        document = make_document(size, rng)
        source = Source(document)
        index_s = best_of(1, lambda s=source: (s.matcher("nfc_whitespace").find_all("warm up", 1),
                                               s.nearest_sentence("warm up", "nfc_whitespace")))
        empty = make_candidate(document, 0, rng)
        for count in counts:
            candidate = make_candidate(document, count, rng)
            total = best_of(3, lambda c=candidate, s=source: validate(c, s, CONTRACT))
            fixed = best_of(3, lambda c=empty, s=source: validate(c, s, CONTRACT))
            per_excerpt = max(total - fixed, 0.0) / count
            baseline.setdefault(count, per_excerpt)
            print(f"{size:>9,} {index_s * 1e3:>9.1f} {count:>8,} {total * 1e3:>9.1f} {fixed * 1e3:>8.1f} "
                  f"{per_excerpt * 1e6:>11.1f} {per_excerpt / baseline[count]:>6.2f}x")
            if size == 2_000 and count == 1_000:
                first = index_s + total
                verdict = "OK" if first < 0.5 else "TOO SLOW"
                print(f"          1,000 excerpts on 2,000 sentences, index build included: {first * 1e3:.0f} ms "
                      f"({verdict}; target well under 1 s)")
    typer_s = cold_start([sys.executable, "-c", "import typer"])
    help_s = cold_start([sys.executable, "-m", "extractor", "--help"])
    print(f"cold start: python -c 'import typer' {typer_s * 1e3:.0f} ms, extract --help {help_s * 1e3:.0f} ms "
          f"(ratio {help_s / typer_s:.2f}x)")


if __name__ == "__main__":
    main()
