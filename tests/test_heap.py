"""Long-lived objects stay out of full garbage collections: in the worker processes once they imported what they
use, and in the run's process while a run lasts (``extractor.heap``)."""

from __future__ import annotations

import asyncio
import gc
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from extractor import heap, workers
from extractor.contracts import get_contract
from extractor.engine import Engine, RunSettings
from extractor.providers import from_string
from extractor.store import open_store
from tests.support.heap_probe import heap_counts
from tests.support.llm_server import Reply, ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]
GOOD_EN = (ROOT / "samples/expected/en_purchase_approval.candidate.json").read_text(encoding="utf-8")


def test_the_ingest_worker_keeps_what_it_imported_out_of_full_collections(fresh_workers: None) -> None:
    async def read_korean_then_count() -> tuple[int, int]:
        await workers.prepare(ROOT / "samples" / "ko_work_request_review.txt")  # the ingest worker segments Korean
        counts: tuple[int, int] = await workers._INGEST.call(heap_counts)
        return counts

    frozen, walked = asyncio.run(read_korean_then_count())
    assert frozen > 10_000, f"the modules the worker imported (kss's splitter among them) are not frozen: {frozen}"
    assert walked < frozen // 5, f"a full collection still walks {walked} objects ({frozen} frozen)"


def test_frozen_while_a_run_lasts_and_released_when_the_last_run_ends() -> None:
    gc.unfreeze()
    with heap.frozen_during_run():
        outer = gc.get_freeze_count()
        with heap.frozen_during_run():
            pass
        assert gc.get_freeze_count() >= outer > 0, "the inner run's end must not release the outer run's objects"
    assert gc.get_freeze_count() == 0


def test_an_engine_run_freezes_its_heap_only_while_it_runs(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    seen: list[int] = []

    def answer(request: dict[str, Any] | None, number: int) -> Reply:
        seen.append(gc.get_freeze_count())  # the scripted server answers from a thread of this process
        return Reply(GOOD_EN)

    document = tmp_path / "purchase.md"
    shutil.copy(ROOT / "samples/en_purchase_approval.md", document)
    server = llm_server(answer)
    engine = Engine(open_store(db_url), from_string("openai:scripted", base_url=server.base_url),
                    RunSettings(contract=get_contract("work_procedure")))
    gc.unfreeze()
    summary = asyncio.run(engine.run([str(document)]))
    assert [outcome.state for outcome in summary.outcomes] == ["READY_FOR_REVIEW"]
    assert len(seen) == 1 and seen[0] > 10_000, "the heap is frozen while the model is asked"
    assert gc.get_freeze_count() == 0, "after the run its objects can be collected again"


def test_a_start_up_runs_without_the_collector_and_freezes_what_it_made() -> None:
    """``collector_off``: no collection during it, what it made frozen after it, and the collector on again (off
    already before it: left off)."""
    gc.unfreeze()
    made: list[object] = []
    with heap.collector_off():
        assert not gc.isenabled()
        made.extend([[number] for number in range(1000)])  # objects the collector tracks, made during the start-up
    try:
        assert gc.isenabled()
        assert gc.get_freeze_count() >= 1000
        gc.disable()
        with heap.collector_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
