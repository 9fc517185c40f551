"""The worker processes: a burst of answers is validated by both processes when there is nothing left to read."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from extractor import workers
from extractor.contracts import get_contract
from extractor.validate import validate as validate_here
from tests.support.batch import CANDIDATES

ROOT = Path(__file__).resolve().parents[1]


def test_a_burst_of_answers_spills_into_the_idle_ingest_worker(fresh_workers: None) -> None:
    contract = get_contract("work_procedure")
    answer = CANDIDATES["Purchase Request"]

    document = workers.load_document(ROOT / "samples" / "en_purchase_approval.md")
    expected = validate_here(answer, document, contract).to_json()
    korean = ROOT / "samples" / "ko_work_request_review.txt"

    async def burst() -> list[int]:
        prepared, _ = await workers.prepare(korean)  # read by the validation worker, segmented by the ingest worker
        assert prepared == workers.load_document(korean)  # blocks and sentences come back from the processes exactly
        assert workers._INGEST.free()
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
        document, _ = await workers.prepare(ROOT / "samples" / "ko_work_request_review.txt")  # starts both workers
        first = asyncio.create_task(workers.validate(answer, document, contract))  # the validation worker is busy,
        reading = asyncio.create_task(workers.prepare(ROOT / "samples" / "ru_vacation_approval.txt"))  # so: ingest
        checks = [first, *(asyncio.create_task(workers.validate(answer, document, contract)) for _ in range(2))]
        await asyncio.sleep(0)
        where = [workers._VALIDATION.pending, workers._INGEST.pending]
        await asyncio.gather(reading, *checks)
        return where

    assert asyncio.run(busy()) == [3, 1]


def kss_imported() -> bool:
    """Run in a worker process: whether kss was ever imported there."""
    import sys

    return "kss" in sys.modules


def test_a_batch_start_reads_in_both_processes(fresh_workers: None) -> None:
    """The first file goes to the validation worker (idle, not even started), the next two to the ingest worker;
    the fourth waits in the run until one of them finishes. Every document is what one process makes of it."""
    names = ["en_purchase_approval.md", "ru_vacation_approval.txt"] * 2
    expected = [workers.load_document(ROOT / "samples" / name) for name in names]

    async def start() -> tuple[list[int], bool]:
        tasks = [asyncio.create_task(workers.prepare(ROOT / "samples" / name)) for name in names]
        await asyncio.sleep(0)
        where = [workers._INGEST.pending, workers._VALIDATION.pending]
        for (document, seconds), wanted in zip(await asyncio.gather(*tasks), expected):
            assert document == wanted and seconds > 0
        return where, await workers._VALIDATION.call(kss_imported)

    where, validation_has_kss = asyncio.run(start())
    assert where == [workers.READ_AHEAD, 1]
    assert not validation_has_kss


def test_a_korean_file_read_by_the_validation_worker_is_segmented_by_the_ingest_worker(fresh_workers: None) -> None:
    """The validation worker reads it, finds Hangul and hands it back unsegmented: it never imports kss."""
    names = ["ko_work_request_review.txt", "en_purchase_approval.md", "ru_vacation_approval.txt"]

    async def start() -> tuple[list[int], bool]:
        tasks = [asyncio.create_task(workers.prepare(ROOT / "samples" / name)) for name in names]
        await asyncio.sleep(0)
        where = [workers._INGEST.pending, workers._VALIDATION.pending]
        documents = [document for document, _ in await asyncio.gather(*tasks)]
        assert documents == [workers.load_document(ROOT / "samples" / name) for name in names]
        return where, await workers._VALIDATION.call(kss_imported)

    where, validation_has_kss = asyncio.run(start())
    assert where == [2, 1]
    assert not validation_has_kss


def modules_loaded() -> int:
    """Run in a worker process: how many modules it has imported."""
    import sys

    return len(sys.modules)


def test_after_the_warm_up_the_first_documents_import_nothing_in_either_process(fresh_workers: None) -> None:
    """What ``extract worker`` does before its first batch: a first read of each language and a first validation
    then load no module in either worker process (without it, each would import ingest, the segmenters, the
    Korean splitter or the rules' libraries), and the answers are the same."""
    contract = get_contract("work_procedure")
    names = ["ko_work_request_review.txt", "en_purchase_approval.md", "ru_vacation_approval.txt"]
    expected = [workers.load_document(ROOT / "samples" / name) for name in names]
    answer = CANDIDATES["작업 요청"]

    async def first_documents() -> tuple[list[int], list[int], float]:
        spent = await workers.warm_up(contract)
        before = [await process.call(modules_loaded) for process in (workers._INGEST, workers._VALIDATION)]
        documents = [document for document, _ in await asyncio.gather(*(workers.prepare(ROOT / "samples" / name)
                                                                         for name in names))]
        assert documents == expected
        reports = await asyncio.gather(workers.validate(answer, documents[0], contract),
                                       workers.validate(answer, documents[0], contract))  # one in each process
        assert [report.to_json() for report, _ in reports] == [validate_here(answer, expected[0], contract).to_json()] * 2
        after = [await process.call(modules_loaded) for process in (workers._INGEST, workers._VALIDATION)]
        return before, after, spent

    before, after, spent = asyncio.run(first_documents())
    assert after == before
    assert spent > 0


def test_a_file_waiting_on_one_event_loop_is_woken_by_calls_finishing_on_another(fresh_workers: None,
                                                                                  tmp_path: Path) -> None:
    """Two loops in two threads share the workers: a file waiting for a reader on the main loop must not wait
    forever when the calls that free a worker finish on the other loop."""
    import threading

    big = tmp_path / "big.md"
    big.write_text(" ".join(f"The clerk files form {n} today." for n in range(1, 1500)) + "\n", encoding="utf-8")
    submitted = threading.Event()

    async def other_loop() -> None:
        tasks = [asyncio.create_task(workers.prepare(big)) for _ in range(3)]  # 2 to ingest, 1 to validation
        await asyncio.sleep(0)
        submitted.set()
        await asyncio.gather(*tasks)

    other = threading.Thread(target=lambda: asyncio.run(other_loop()))
    other.start()
    assert submitted.wait(timeout=120)

    async def main_loop() -> tuple[object, list[int]]:
        where = [workers._INGEST.pending, workers._VALIDATION.pending]  # both busy: this file must wait
        document, _ = await asyncio.wait_for(workers.prepare(ROOT / "samples" / "ru_vacation_approval.txt"), 300)
        return document, where

    document, where = asyncio.run(main_loop())
    other.join(timeout=300)
    assert where == [2, 1]
    assert document == workers.load_document(ROOT / "samples" / "ru_vacation_approval.txt")


def test_a_finished_call_wakes_one_waiting_file_and_a_cancelled_one_passes_the_wake_on(fresh_workers: None,
                                                                                       tmp_path: Path) -> None:
    """With both readers busy, files wait in order. Waking the first one wakes only it; cancelled before it could
    look, it hands the wake to the next, so no file waits for a call that already finished."""
    big = tmp_path / "big.md"
    big.write_text(" ".join(f"The clerk files form {n} today." for n in range(1, 1500)) + "\n", encoding="utf-8")

    async def run() -> tuple[int, bool, bool]:
        busy = [asyncio.create_task(workers.prepare(big)) for _ in range(3)]  # 1 to validation, 2 to ingest
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(workers._reader()) for _ in range(3)]
        await asyncio.sleep(0)
        queue = workers._READERS_WAITING[asyncio.get_running_loop()]
        queued = len(queue)
        first, second = queue[0], queue[1]
        workers._wake_first(queue)  # as a finished call would
        waiting[0].cancel()  # before the woken file could look
        await asyncio.sleep(0)
        handed_on = second.done() and first.done() and not first.cancelled()
        await asyncio.gather(*busy)
        readers = await asyncio.gather(*waiting[1:])
        return queued, handed_on, all(r in (workers._INGEST, workers._VALIDATION) for r in readers)

    queued, handed_on, served = asyncio.run(run())
    assert queued == 3
    assert handed_on, "the cancelled file's wake went to the next file"
    assert served


FORK_SERVER_PROBE = """
import asyncio, os, sys, threading
from pathlib import Path
from extractor import workers

if sys.argv[1] == "thread":  # a thread already running: forking this process would not be safe
    threading.Thread(target=threading.Event().wait, daemon=True).start()
workers.start_early()
document, _ = asyncio.run(workers.prepare(Path(sys.argv[2])))
helper = workers._VALIDATION.executor()._processes  # the worker process that read it
(pid,) = helper
server = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
print(len(document.sentences), Path(f"/proc/{server}/cmdline").read_text().replace(chr(0), " "))
"""


def test_a_process_without_threads_is_the_fork_server_of_its_workers_else_a_new_interpreter_is() -> None:
    """``start_early``: forked from the caller (its command line), or, with a thread running, the standard library's
    fork server; the document read is the same either way."""
    sample = ROOT / "samples" / "en_purchase_approval.md"
    found = {}
    for case in ("alone", "thread"):
        done = subprocess.run([sys.executable, "-c", FORK_SERVER_PROBE, case, str(sample)], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        sentences, command = done.stdout.strip().split(" ", 1)
        found[case] = (int(sentences), command)
    expected = len(workers.load_document(sample).sentences)
    assert found["alone"][0] == found["thread"][0] == expected > 0
    assert "import asyncio" in found["alone"][1]  # this very process, forked
    assert "multiprocessing.forkserver" in found["thread"][1]
