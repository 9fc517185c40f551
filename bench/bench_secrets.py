"""Secret and pipeline-phrase scan speed: the literal shortcuts against a scan without them, in the same run.

The texts are what the critical rules read: every string of each sample candidate (``samples/expected``), and
the lines of the sample documents (``samples/*.md``, ``*.txt``) as one large answer quoting its document. For
each this prints

- ``secrets``: ``find_secrets`` as the rules call it; ``full``: the same texts plus one holding ``ſ`` (which
  ``str.lower`` and ``re.IGNORECASE`` read differently, so every shortcut is off and every plugin reads every
  text), the baseline of the ratio;
- ``phrases``: ``pipeline_instructions`` over the joined normalised texts, as the rule's fast path calls it;
  ``full``: the same normalisation, then every phrase pattern searched without its literals.

Best of 30 rounds, the two ways alternating (the machine is shared).

    python bench/bench_secrets.py [--quick]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench_segment import interleaved  # the best time of each action, the actions alternating

from extractor.evidence.sensitive import PIPELINE_INSTRUCTIONS, find_secrets, normalise, pipeline_instructions
from extractor.rules.guards import strings

ROOT = Path(__file__).resolve().parents[1]
NO_SHORTCUT = "ſ turns every shortcut off"


def answers() -> dict[str, list[str]]:
    found = {path.name.removesuffix(".candidate.json"): [text for _, text in strings(json.loads(path.read_text()))]
             for path in sorted((ROOT / "samples" / "expected").rglob("*.candidate.json"))}
    found["sample documents, by line"] = [line for path in sorted(ROOT.glob("samples/*.[mt][dx]*"))
                                          for line in path.read_text().splitlines() if line.strip()]
    return found


def main() -> None:
    rounds = 5 if "--quick" in sys.argv else 30
    patterns = [pattern for _, pattern, _ in PIPELINE_INSTRUCTIONS]
    print(f"{'answer':<34} {'texts':>5} {'chars':>7} {'secrets ms':>10} {'full ms':>8} {'ratio':>6} "
          f"{'phrases us':>10} {'full us':>8} {'ratio':>6}")
    totals = [0.0] * 4
    for name, texts in answers().items():
        joined = " \x00 ".join(normalise(text) for text in texts)
        assert find_secrets(texts) == find_secrets([*texts, NO_SHORTCUT]), name  # the same finds either way
        secrets, full = interleaved(rounds, lambda t=texts: find_secrets(t), lambda t=texts: find_secrets([*t, NO_SHORTCUT]))
        phrases, every = interleaved(rounds, lambda j=joined: pipeline_instructions(j),
                              lambda j=joined: [p for p in patterns if p.search(normalise(j))])
        totals = [a + b for a, b in zip(totals, (secrets, full, phrases, every))]
        print(f"{name:<34} {len(texts):>5} {sum(map(len, texts)):>7,} {secrets * 1e3:>10.2f} {full * 1e3:>8.2f} "
              f"{secrets / full:>6.2f} {phrases * 1e6:>10.1f} {every * 1e6:>8.1f} {phrases / every:>6.2f}")
    print(f"{'all':<34} {'':>5} {'':>7} {totals[0] * 1e3:>10.2f} {totals[1] * 1e3:>8.2f} {totals[0] / totals[1]:>6.2f} "
          f"{totals[2] * 1e6:>10.1f} {totals[3] * 1e6:>8.1f} {totals[2] / totals[3]:>6.2f}")


if __name__ == "__main__":
    main()
