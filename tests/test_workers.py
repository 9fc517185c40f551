"""The worker processes: a burst of answers is validated by both processes when there is nothing left to read."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from extractor import workers
from extractor.contracts import get_contract
from extractor.validate import validate as validate_here
from tests.support.batch import CANDIDATES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh_workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(workers.PROCESSES_ENV, "1")
    workers.shutdown()
    yield
    workers.shutdown()


def test_a_burst_of_answers_spills_into_the_idle_ingest_worker(fresh_workers: None) -> None:
    contract = get_contract("work_procedure")
    answer = CANDIDATES["Purchase Request"]

    document = workers.load_document(ROOT / "samples" / "en_purchase_approval.md")
    expected = validate_here(answer, document, contract).to_json()

    async def burst() -> list[int]:
        prepared, _ = await workers.prepare(ROOT / "samples" / "en_purchase_approval.md")  # starts the ingest worker
        assert prepared == document  # blocks and sentences come back from the process exactly
        assert workers._INGEST.idle_process
        tasks = [asyncio.create_task(workers.validate(answer, document, contract)) for _ in range(5)]
        await asyncio.sleep(0)  # every task has submitted its call (the choice is made before the first await)
        where = [workers._VALIDATION.pending, workers._INGEST.pending]
        for report, _ in await asyncio.gather(*tasks):
            assert report.to_json() == expected
        return where

    assert asyncio.run(burst()) == [4, 1], "the idle ingest worker takes one validation, the validation worker the rest"
    assert workers._INGEST.pending == workers._VALIDATION.pending == 0


def test_no_spill_while_the_ingest_worker_reads(fresh_workers: None) -> None:
    contract = get_contract("work_procedure")
    answer = CANDIDATES["Purchase Request"]

    async def busy() -> list[int]:
        document, _ = await workers.prepare(ROOT / "samples" / "en_purchase_approval.md")
        reading = asyncio.create_task(workers.prepare(ROOT / "samples" / "ru_vacation_approval.txt"))
        checks = [asyncio.create_task(workers.validate(answer, document, contract)) for _ in range(3)]
        await asyncio.sleep(0)
        where = [workers._VALIDATION.pending, workers._INGEST.pending]
        await asyncio.gather(reading, *checks)
        return where

    assert asyncio.run(busy()) == [3, 1]
