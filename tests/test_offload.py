"""The CPU pool (``extractor.offload``): readers read files at once and within their limits, the checker checks
answers, and what ends a process (its limits, a kill, Ctrl-C, the run's end) costs one file and nothing else."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from extractor import offload
from extractor.contracts import get_contract
from extractor.errors import InputError
from extractor.validate import validate as validate_here
from tests.support.batch import CANDIDATES
from tests.support.processes import alive, wait_for

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = [ROOT / "samples" / name for name in ("en_purchase_approval.md", "ko_work_request_review.txt",
                                                "ru_vacation_approval.txt")]
BOTH = frozenset({"checker", "reader"})
READER = frozenset({"reader"})
MEETING_S = 120.0


def meet(folder: str, expected: int) -> int:
    """Run in a pool process: leave this process's pid in ``folder`` and wait until ``expected`` processes did (so
    the calls only all return if that many processes served them at once); the pid."""
    Path(folder, str(os.getpid())).touch()
    deadline = time.monotonic() + MEETING_S
    while len(os.listdir(folder)) < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(os.listdir(folder))} of {expected} processes met")
        time.sleep(0.01)
    return os.getpid()


def pid_then_wait(folder: str) -> None:
    """Run in a reader: leave its pid in ``folder``, then work until killed."""
    Path(folder, str(os.getpid())).touch()
    while True:
        time.sleep(0.1)


def process_then_wait(folder: str) -> None:
    """Run in a reader: start a process, as OCR starts Tesseract, leave its pid in ``folder``, and wait for it."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(folder, str(process.pid)).touch()
    process.wait()


def modules_loaded() -> int:
    return len(sys.modules)


def test_readers_read_every_language_as_this_process_would(fresh_pool: None) -> None:
    async def read_all() -> list[tuple[object, float]]:
        return await asyncio.gather(*(offload.read(path) for path in SAMPLES))

    for path, (document, seconds) in zip(SAMPLES, asyncio.run(read_all())):
        assert document == offload.read_here(path) and seconds > 0
        assert document.sentences  # type: ignore[attr-defined]


def test_files_are_read_by_as_many_readers_at_once_as_there_are(fresh_pool: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Three readers meet: three files are read at once, each by a process of its own; the checker never reads."""
    monkeypatch.setenv(offload.READERS_ENV, "3")

    async def three() -> list[int]:
        return list(await asyncio.gather(*(offload.POOL._call(READER, meet, (str(tmp_path), 3)) for _ in range(3))))

    pids = asyncio.run(three())
    assert len(set(pids)) == 3
    assert all(Path(f"/proc/{pid}/comm").read_text().strip() == "extract-reader" for pid in pids)


def test_a_burst_of_answers_takes_the_checker_and_every_idle_reader(fresh_pool: None, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.READERS_ENV, "2")
    contract = get_contract("work_procedure")
    answer = CANDIDATES["Purchase Request"]
    document = offload.read_here(SAMPLES[0])
    expected = validate_here(answer, document, contract).to_json()

    async def burst() -> list[int]:
        met = await asyncio.gather(*(offload.POOL._call(BOTH, meet, (str(tmp_path), 3)) for _ in range(3)))
        reports = await asyncio.gather(*(offload.validate(answer, document, contract) for _ in range(5)))
        assert [report.to_json() for report, _ in reports] == [expected] * 5
        return list(met)

    pids = asyncio.run(burst())
    names = sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids)
    assert names == ["extract-checker", "extract-reader", "extract-reader"]


def test_after_the_warm_up_the_first_documents_import_nothing(fresh_pool: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``extract worker`` does before its first batch: a first read of each language and a first validation
    then load no module in any process of the pool."""
    monkeypatch.setenv(offload.READERS_ENV, "1")
    contract = get_contract("work_procedure")
    answer = CANDIDATES["작업 요청"]

    async def first_documents() -> tuple[list[int], list[int], float]:
        spent = await offload.warm_up(contract)
        roles = (frozenset({"reader"}), frozenset({"checker"}))
        before = [await offload.POOL._call(role, modules_loaded, ()) for role in roles]
        documents = [document for document, _ in await asyncio.gather(*(offload.read(path) for path in SAMPLES))]
        await asyncio.gather(*(offload.validate(answer, documents[1], contract) for _ in range(2)))
        after = [await offload.POOL._call(role, modules_loaded, ()) for role in roles]
        return before, after, spent

    before, after, spent = asyncio.run(first_documents())
    assert after == before and spent > 0


def test_a_reader_over_its_memory_limit_costs_its_file_only(fresh_pool: None, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A 600 MB file (the size limit raised for it) cannot be read in 512 MiB: one line naming the limit; the reader
    that died is replaced and the next file is read."""
    monkeypatch.setenv(offload.MEMORY_ENV, "512M")
    monkeypatch.setenv(offload.READERS_ENV, "1")
    monkeypatch.setenv("EXTRACT_MAX_DOCUMENT_BYTES", str(700 << 20))
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as stream:
        stream.truncate(600 << 20)

    async def both() -> tuple[str, int]:
        with pytest.raises(InputError) as refused:
            await offload.read(huge)
        document, _ = await offload.read(SAMPLES[0])
        return str(refused.value), len(document.sentences)

    line, sentences = asyncio.run(both())
    assert line == f"{huge}: over the 512 MiB reading limit (EXTRACT_READ_MEMORY)"
    assert sentences == len(offload.read_here(SAMPLES[0]).sentences)


def test_the_memory_limit_counts_what_a_reader_adds_to_what_it_started_with(tmp_path: Path) -> None:
    """A process holding 600 MiB of address space (threads that ran leave arenas of 64 MiB each reserved) reads a
    file in a plain fork of itself with a 512 MiB limit: the limit is on what the reader adds, else every file read
    there would be over it. A reader that passes it on top of what it started with still is."""
    script = f"""
import mmap, threading
from pathlib import Path
from extractor import offload
from extractor.errors import InputError
from tests.test_offload import fail_after_filling_memory
held = mmap.mmap(-1, 600 << 20)
assert threading.active_count() == 1  # so the reader is a plain fork of this process, its address space and all
print(len(offload.read_now(Path({str(SAMPLES[0])!r})).sentences))
try:
    offload.in_reader("bomb.html", fail_after_filling_memory, ())
except InputError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env=os.environ | {offload.MEMORY_ENV: "512M"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(len(offload.read_here(SAMPLES[0]).sentences)),
                                        "bomb.html: over the 512 MiB reading limit (EXTRACT_READ_MEMORY)"]


def test_a_reader_past_its_deadline_is_killed(fresh_pool: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text that takes seconds to segment, read with a deadline of half a second (and the text cap raised)."""
    monkeypatch.setenv(offload.TIMEOUT_ENV, "0.5")
    monkeypatch.setenv(offload.TEXT_ENV, "20000000")
    slow = tmp_path / "slow.md"
    slow.write_text(" ".join(f"The clerk files form {n} today." for n in range(200_000)) + "\n", encoding="utf-8")

    async def late() -> str:
        with pytest.raises(InputError) as refused:
            await offload.read(slow)
        return str(refused.value)

    assert asyncio.run(late()) == f"{slow}: still reading after 0.5 s (the reading limit EXTRACT_READ_TIMEOUT)"


def test_a_reader_stopped_takes_the_processes_it_started(fresh_pool: None, tmp_path: Path) -> None:
    """A scan's Tesseract processes would go on after their reader is killed (for its time, or because the run
    stops): they are killed with it."""

    async def stopped() -> int:
        working = asyncio.create_task(offload.POOL._call(READER, process_then_wait, (str(tmp_path),),
                                                         offload.Limits.from_environment()))
        await asyncio.to_thread(wait_for, lambda: any(tmp_path.iterdir()), "the reader to start a process")
        working.cancel()
        with pytest.raises(asyncio.CancelledError):
            await working
        return int(next(tmp_path.iterdir()).name)

    started = asyncio.run(stopped())
    wait_for(lambda: not alive(started), "the process the reader started to end", timeout=30)


def test_text_over_the_cap_is_refused_before_it_is_segmented(fresh_pool: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.TEXT_ENV, "500")
    with pytest.raises(InputError) as refused:
        asyncio.run(offload.read(SAMPLES[0]))
    assert str(refused.value) == f"{SAMPLES[0]}: text over 500 characters (the reading limit EXTRACT_READ_TEXT); refused"


def test_a_limit_that_is_not_one_is_named(fresh_pool: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.MEMORY_ENV, "lots")
    with pytest.raises(InputError, match="EXTRACT_READ_MEMORY must be a size such as 1G, 512M"):
        asyncio.run(offload.read(SAMPLES[0]))


def test_a_reader_killed_from_outside_is_reported_and_replaced(fresh_pool: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.READERS_ENV, "1")

    async def killed() -> tuple[str, int]:
        working = asyncio.create_task(offload.POOL._call(READER, pid_then_wait, (str(tmp_path),)))
        await asyncio.to_thread(wait_for, lambda: any(tmp_path.iterdir()), "the reader to start")
        os.kill(int(next(tmp_path.iterdir()).name), signal.SIGKILL)
        with pytest.raises(offload.Gone) as gone:
            await working
        document, _ = await offload.read(SAMPLES[2])
        return str(gone.value), len(document.sentences)

    why, sentences = asyncio.run(killed())
    assert why == "the reader process was killed by SIGKILL (out of memory, or stopped)"
    assert sentences > 0


def test_a_reader_past_the_soft_deadline_lets_one_more_start(fresh_pool: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """One reader: a file holding it past the soft deadline does not hold up the next, a reader starts for it and the
    slow one reads on at nice 19; with two such files a third waits (never more than twice ``EXTRACT_READERS``); the
    extra reader leaves once the slow files are done."""
    monkeypatch.setenv(offload.READERS_ENV, "1")
    monkeypatch.setenv(offload.SOFT_TIMEOUT_ENV, "0.3")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    limits = offload.Limits.from_environment()

    def pid_in(folder: Path) -> int:
        wait_for(lambda: any(folder.iterdir()), f"a reader to start in {folder.name}")
        return int(next(folder.iterdir()).name)

    async def slow_files() -> tuple[int, int, bool, int, list[int]]:
        pool = offload.POOL
        slow = [asyncio.create_task(pool._call(READER, pid_then_wait, (str(first),), limits))]
        await asyncio.wait_for(offload.read(SAMPLES[0]), 30)  # read by a reader started for it, within its deadline
        slow.append(asyncio.create_task(pool._call(READER, pid_then_wait, (str(second),), limits)))
        pids = [await asyncio.to_thread(pid_in, folder) for folder in (first, second)]
        await asyncio.to_thread(wait_for, lambda: len(pool._overdue) == 2, "both slow files past the soft deadline")
        third = asyncio.create_task(offload.read(SAMPLES[1]))
        await asyncio.sleep(1)
        waited, readers = not third.done(), pool._readers()
        nice = [int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) for pid in pids]
        for pid, task in zip(pids, slow):
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(offload.Gone):
                await task
        document, _ = await asyncio.wait_for(third, 120)
        assert document.sentences
        return len(set(pids)), readers, waited, pool._readers(), nice

    assert asyncio.run(slow_files()) == (2, 2, True, 1, [offload.LOW_PRIORITY] * 2)


def test_a_cancelled_read_stops_its_reader_at_once(fresh_pool: None, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C cancels what the run waits for: the reader working on it is killed, not left to finish, and the next
    file gets a new one."""
    monkeypatch.setenv(offload.READERS_ENV, "1")

    async def cancelled() -> tuple[int, int]:
        working = asyncio.create_task(offload.POOL._call(READER, pid_then_wait, (str(tmp_path),)))
        await asyncio.to_thread(wait_for, lambda: any(tmp_path.iterdir()), "the reader to start")
        working.cancel()
        with pytest.raises(asyncio.CancelledError):
            await working
        document, _ = await asyncio.wait_for(offload.read(SAMPLES[0]), 120)
        return int(next(tmp_path.iterdir()).name), len(document.sentences)

    pid, sentences = asyncio.run(cancelled())
    wait_for(lambda: not alive(pid), "the cancelled reader to end", timeout=30)
    assert sentences > 0


ORPHAN = """
import asyncio, os, sys
from pathlib import Path
from extractor import offload

if __name__ == "__main__":
    asyncio.run(offload.read(Path(sys.argv[1])))
    print(" ".join(str(pid) for pid in offload.POOL.pids()), flush=True)
    os.kill(os.getpid(), 9)
"""


def test_the_pool_leaves_when_its_run_is_killed(tmp_path: Path) -> None:
    """A run killed outright (SIGKILL) cannot stop its pool: each process leaves on its own."""
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(SAMPLES[0])], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT), offload.READERS_ENV: "2"})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 1  # the one process that read (the others never started)
    wait_for(lambda: not any(alive(pid) for pid in pids), "the pool's processes to leave", timeout=30)


def test_split_reads_within_the_limits_too(tmp_path: Path) -> None:
    """``extract split`` reads its one file in a reader of its own: over the text cap, one line and exit 2."""
    done = subprocess.run([sys.executable, "-m", "extractor", "split", str(SAMPLES[0])], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=os.environ | {offload.TEXT_ENV: "500"})
    assert done.returncode == 2
    assert done.stderr == (f"error: {SAMPLES[0]}: text over 500 characters (the reading limit EXTRACT_READ_TEXT); "
                           "refused\n")


def fail_after_filling_memory() -> None:
    """What lxml did at its limit: an allocation failed in C code, which raised something other than MemoryError."""
    held = []
    try:
        while True:
            held.append(bytearray(16 << 20))
    except MemoryError:
        held.clear()
    raise SystemError("error return without exception set")


def test_any_failure_of_a_reader_that_reached_its_memory_limit_is_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.MEMORY_ENV, "512M")
    with pytest.raises(InputError) as refused:
        offload.in_reader("bomb.html", fail_after_filling_memory, ())
    assert str(refused.value) == "bomb.html: over the 512 MiB reading limit (EXTRACT_READ_MEMORY)"
