"""Long documents end to end: a 20,000-sentence document through windows, merge and whole-document validation.

Two parts, in one run (the machine is shared, so every ratio's baseline is measured in the same run):

1. ``extract run``'s engine on a 2,000- and a 20,000-sentence document (Russian, built from the sample by
   ``tests.support.longdocs``) against the scripted model server answering every window at once over real
   HTTP. Per stage, CPU milliseconds per 1,000 sentences as the engine measures them (``Engine.cpu_seconds``:
   ingest + segmentation in the ingest worker, windowing, merge, validation in the validation worker), and
   the ratio 20,000 / 2,000 of the time per sentence; the issue's target is at most 1.5 for each stage.
2. Segmentation speed per language next to the segmenter library alone on the same text, reusing
   ``bench/bench_segment.py``'s measurement (2,000 sentences).

    python bench/bench_longdocs.py [--quick]      (--quick: 1,000 and 5,000 sentences, no part 2)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_segment import measure  # noqa: E402

from extractor.contracts import get_contract  # noqa: E402
from extractor.engine import Engine, RunSettings  # noqa: E402
from extractor.options import RunOptions  # noqa: E402
from extractor.providers import ProviderSettings, from_string  # noqa: E402
from extractor.store import open_store  # noqa: E402
from tests.support.llm_server import Reply, ScriptedLLMServer  # noqa: E402
from tests.support.longdocs import long_document, window_answer  # noqa: E402

STAGES = ("ingest+segment", "windows", "merge", "validate")
LIMIT = 1.5
OUTPUT_BUDGET = 65_536
"""Output tokens per window (gpt-4.1's is 32,768, o3's 100,000): about 600 sentences a window, so the
run log's writes do not dominate a benchmark of the stages."""


def end_to_end(sentences: int, folder: Path) -> dict[str, float]:
    """One document of ``sentences`` sentences through the engine; stage CPU seconds, wall seconds, windows."""
    path = long_document(folder / f"ru_{sentences}.txt", "ru", sentences)
    with ScriptedLLMServer(lambda request, number: Reply(window_answer(request))) as server:
        store = open_store(f"sqlite:///{folder / f'bench_{sentences}.db'}")
        provider = from_string("openai:bench", base_url=server.base_url, settings=ProviderSettings(timeout_s=60))
        engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"), concurrency=8,
                                                     options=RunOptions(max_output_tokens=OUTPUT_BUDGET)))
        started = time.perf_counter()
        summary = asyncio.run(engine.run([str(path)]))
        wall = time.perf_counter() - started
        [outcome] = summary.outcomes
        if outcome.state != "READY_FOR_REVIEW":
            raise SystemExit(f"{sentences} sentences ended {outcome.state}: {outcome.cause}")
        store.close()
        return {"wall": wall, "calls": len(server.chat_requests), **{stage: engine.cpu_seconds[stage] for stage in STAGES}}


def main() -> None:
    quick = "--quick" in sys.argv
    small, large = (1000, 5000) if quick else (2000, 20000)
    with tempfile.TemporaryDirectory() as folder:
        results = {size: end_to_end(size, Path(folder)) for size in (small, large)}
    print(f"end to end, scripted server answering at once (Russian; budgets 128,000 in, {OUTPUT_BUDGET:,} out)")
    for size, row in results.items():
        print(f"  {size:>6,} sentences: {row['calls']:.0f} window calls, {row['wall']:.1f} s wall "
              f"({size / row['wall']:,.0f} sentences/s)")
    print(f"{'stage':16} {'ms/1k sent @' + format(small, ','):>16} {'ms/1k sent @' + format(large, ','):>17} "
          f"{'ratio':>6}  (target <= {LIMIT})")
    worst = 0.0
    for stage in STAGES:
        per = {size: results[size][stage] * 1e6 / size for size in (small, large)}
        ratio = per[large] / per[small] if per[small] else float("nan")
        worst = max(worst, ratio)
        print(f"{stage:16} {per[small]:>16.2f} {per[large]:>17.2f} {ratio:>6.2f}")
    print(f"largest ratio: {worst:.2f} ({'within' if worst <= LIMIT else 'OVER'} the target {LIMIT})")
    if quick:
        return
    print("\nsegmentation, 2,000 sentences of each sample, next to the library alone on the same block contents")
    print(f"{'lang':4} {'sentences':>9} {'segment sent/s':>15} {'library sent/s':>15} {'overhead':>9}")
    for language in ("ko", "en", "ru"):
        row = measure(language, 2000, 1)
        print(f"{language:4} {row['units']:>9,.0f} {row['units'] / row['segment']:>15,.0f} "
              f"{row['units'] / row['library']:>15,.0f} {row['segment'] / row['library']:>8.2f}x")


if __name__ == "__main__":
    main()
