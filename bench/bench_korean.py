"""What Korean costs beside English: ``extract split`` of each sample, and the memory of a batch's processes.

1. ``extract split`` on the Korean sample and on the English one, each a fresh process as a user runs it, in
   turn, best of ``--rounds``: seconds, peak memory, and the Korean time / the English time (target <= 1.5x).
2. ``extract run`` on a batch of small Korean documents, and on the same number of English ones, against a
   scripted model server on 127.0.0.1 that answers every call with the sample's passing candidate, with the
   run's CPU pool (``extractor.offload``) as shipped. The peak resident memory (``VmHWM``) of every
   process of the run, read from ``/proc`` while it runs, and the largest of them as the kernel accounts it
   once they have all ended (target: none over 150 MB).

A Korean splitting library would be loaded by every process that reads Korean (all of kss: 15 s and 340 MB;
kiwipiepy's analyser: 1.5-3 s and 260 MB); ``extractor.segment.korean``'s rules load nothing
(docs/design.md#dependencies).

    python bench/bench_korean.py [--rounds 5] [--documents 12]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

from tests.support.batch import SAMPLES, answer_for, cli_env, extract_command, write_batch  # noqa: E402
from tests.support.llm_server import Reply, ScriptedLLMServer  # noqa: E402

TIME_TARGET = 1.5
MEMORY_TARGET_MB = 150.0
KOREAN = ROOT / "samples" / "ko_work_request_review.txt"
ENGLISH = ROOT / "samples" / "en_purchase_approval.md"


def timed_process(command: list[str], env: dict[str, str] | None = None,
                  found: dict[int, tuple[str, float]] | None = None) -> tuple[float, float, int, str, int]:
    """Wall seconds, the peak resident MB of the largest of the process and the descendants it waited for (the
    kernel's ``ru_maxrss`` of a reaped child covers both), its exit code, its stderr and its pid. With ``found``, the
    peak of each process of the tree while it runs, by pid (``peaks_while_running``)."""
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=env, cwd=ROOT)
        done = threading.Event()
        watcher = threading.Thread(target=peaks_while_running, args=(process.pid, done, found), daemon=True)
        if found is not None:
            watcher.start()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        done.set()
        if found is not None:
            watcher.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        return seconds, usage.ru_maxrss / 1024, process.returncode, errors.read().decode(errors="replace"), process.pid


def split_side_by_side(rounds: int) -> None:
    best = {KOREAN: (float("inf"), 0.0), ENGLISH: (float("inf"), 0.0)}
    for _ in range(rounds):  # in turn, so load from other processes falls on both alike
        for sample in (KOREAN, ENGLISH):
            seconds, peak_mb, code, errors, _ = timed_process(extract_command("split", str(sample)))
            if code != 0:
                raise SystemExit(f"extract split {sample.name} exited {code}: {errors.strip()}")
            best[sample] = min(best[sample], (seconds, peak_mb))
    print(f"extract split, best of {rounds} fresh processes each:")
    for sample, (seconds, peak_mb) in best.items():
        print(f"  {sample.name:32} {seconds:6.2f} s  {peak_mb:6.0f} MB")
    ratio = best[KOREAN][0] / best[ENGLISH][0]
    verdict = "ok" if ratio <= TIME_TARGET else "OVER TARGET"
    print(f"  Korean / English time: {ratio:.2f}x (target <= {TIME_TARGET}x): {verdict}")


def peaks_while_running(root_pid: int, done: threading.Event, found: dict[int, tuple[str, float]]) -> None:
    """Every 20 ms, the peak resident MB (VmHWM) of ``root_pid`` and each of its descendants, kept by pid."""
    while not done.is_set():
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                        parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(parent, []).append(int(entry))
        pending = [root_pid]
        while pending:
            pid = pending.pop()
            pending.extend(children.get(pid, []))
            try:
                with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
                    peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    name = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except (OSError, StopIteration, ValueError):
                continue
            found[pid] = (name or found.get(pid, ("?", 0.0))[0], max(peak_kb / 1024, found.get(pid, ("", 0.0))[1]))
        done.wait(0.02)


def batch(language: str, documents: int, workdir: Path, base_url: str) -> None:
    sample = next(index for index, (name, _, _) in enumerate(SAMPLES) if name.startswith(language))
    folder = workdir / f"docs_{language}"
    paths = write_batch(folder, len(SAMPLES) * documents)[sample :: len(SAMPLES)]
    for path in set(folder.iterdir()) - set(paths):
        path.unlink()
    env = cli_env(base_url, f"sqlite:///{workdir / f'{language}.db'}")
    command = extract_command("run", str(folder), "--model", "openai:scripted", "--format", "json")
    found: dict[int, tuple[str, float]] = {}
    seconds, largest, code, errors, root = timed_process(command, env, found)
    if code != 0:
        raise SystemExit(f"extract run on {documents} {language} documents exited {code}: {errors.strip()[-2000:]}")
    print(f"extract run, {documents} small {language} documents: {seconds:.1f} s, {len(found)} processes")
    for pid, (name, peak_mb) in sorted(found.items()):
        role = "the run" if pid == root else "worker"
        print(f"  {role:7} pid {pid:<7} peak {peak_mb:6.0f} MB  {name[:70]}")
    verdict = "ok" if largest <= MEMORY_TARGET_MB else "OVER TARGET"
    print(f"  largest process (kernel, after all ended): {largest:.0f} MB (target <= {MEMORY_TARGET_MB:.0f} MB): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per sample for extract split")
    parser.add_argument("--documents", type=int, default=12, help="documents per batch")
    args = parser.parse_args()
    split_side_by_side(args.rounds)
    print()
    with tempfile.TemporaryDirectory() as scratch, ScriptedLLMServer(lambda request, n: Reply(answer_for(request))) as server:
        for language in ("ko", "en"):
            batch(language, args.documents, Path(scratch), server.base_url)


if __name__ == "__main__":
    main()
