"""Throughput of ``extract worker``s (1, 2, 4) against a model that always takes the same time to answer, next
to the ideal, and queue latency (enqueue to start) at p50 and p95.

A real redis-server, real worker processes (``python -m extractor worker``) and a scripted model server in its
own process (``bench_throughput.py --serve``) answering every call after ``--latency`` seconds with a candidate
that passes, so every document costs one call. The ideal is workers x concurrency / latency documents per
second. Workers are added between levels and warmed up (each has converted a document) before a
level's clock starts; every level converts documents of its own (distinct content). The database is an SQLite
file unless ``--postgres ADMIN_URL`` names a server to create a fresh database on.

    python bench/bench_workers.py [--workers 1 2 4] [--documents 60] [--latency 0.5] [--concurrency 4]
                                  [--postgres ADMIN_URL]

``--end-to-end`` measures what a user waits for instead: per level, fresh workers are started and one
``extract run --queue`` (a process of its own, its start included) submits the level's documents with a
configuration no worker has seen, into a run log that exists already (each level's SQLite file is created
before its clock starts, as a service's is before its batches); the clock runs from starting the workers and the
command to the command's exit, and the speed-up of each level over one worker is printed beside it (same run).
``--rounds N`` measures the levels N times, alternated (1, 2, 1, 2, ...), and prints each level's median.

    python bench/bench_workers.py --end-to-end --workers 1 2 --documents 200 --latency 1 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

from tests.support.batch import write_batch  # noqa: E402  (after the sys.path fix)
from tests.support.redis_server import redis_server  # noqa: E402

WARM_UP_TIMEOUT_S = 300.0
PROBES = 5


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    from installed import as_installed

    as_installed()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--documents", type=int, default=60, help="documents per level")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the model takes per call")
    parser.add_argument("--concurrency", type=int, default=4, help="model calls in flight per worker")
    parser.add_argument("--postgres", metavar="ADMIN_URL", help="run on a fresh PostgreSQL database")
    parser.add_argument("--rounds", type=int, default=1, help="--end-to-end: times each level is measured, "
                        "alternated; medians are compared")
    parser.add_argument("--end-to-end", action="store_true", help="time fresh workers and `extract run --queue` "
                        "from their start to the batch's end")
    args = parser.parse_args()
    if args.end_to_end:
        end_to_end(args)
        return

    from sqlalchemy import create_engine, make_url, text

    from extractor.engine import Progress, discover
    from extractor.queue.news import wakeup_for
    from extractor.queue.outbox import Outbox
    from extractor.queue.settings import BatchSettings
    from extractor.queue.submit import Submission
    from extractor.store import open_store, tasks

    workdir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    levels = sorted(args.workers)
    everything = iter(write_batch(workdir / "all", (len(levels) + 1) * (args.documents + PROBES)))
    folders: list[Path] = []
    probes: list[Path] = []
    for number in range(len(levels) + 1):  # the first folder warms the workers up
        for name, count, into in (("level", args.documents, folders), ("probes", PROBES, probes)):
            folder = workdir / f"{name}{number}"
            folder.mkdir()
            for _ in range(count):
                path = next(everything)
                path.rename(folder / path.name)
            into.append(folder)

    drop = None
    database = f"sqlite:///{workdir}/bench.db"
    if args.postgres:
        name = f"extract_bench_{uuid.uuid4().hex[:12]}"
        admin = create_engine(args.postgres, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        database = make_url(args.postgres).set(database=name).render_as_string(hide_password=False)

        def drop() -> None:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_throughput.py"), "--serve", "--latency",
                               str(args.latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    base_url = server.stdout.readline().strip()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        with redis_server(workdir) as broker:
            env = os.environ | {"EXTRACT_DATABASE_URL": database, "EXTRACT_BROKER_URL": broker,
                                "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench"}
            store = open_store(database)
            settings = BatchSettings(model="openai:bench", base_url=base_url, retries=0, timeout=30)
            outbox = Outbox(store, broker)

            def submit(*paths: Path) -> tuple[str, float]:
                submission = Submission(store, settings, outbox, submitted_by="bench", max_pending=1 << 30, wait=True,
                                        progress=Progress(), wakeup=wakeup_for(broker))
                summary = submission.run(discover([str(path) for path in paths]))
                assert summary.run_id is not None and set(summary.counts) == {"READY_FOR_REVIEW"}, summary.counts
                return summary.run_id, summary.seconds

            print(f"{args.documents} documents per level, model latency {args.latency} s, {args.concurrency} calls in "
                  f"flight per worker, {'PostgreSQL' if args.postgres else 'SQLite'}, {os.cpu_count()} cores")
            print("queue: enqueue to start of the level's documents, all enqueued at once (so it includes the backlog); "
                  f"idle: {PROBES} documents sent one at a time to idle workers")
            print(f"{'workers':>7} {'docs/s':>8} {'ideal':>8} {'share':>6} {'queue p50 ms':>13} {'queue p95 ms':>13} "
                  f"{'idle p50 ms':>13} {'idle max ms':>13}")

            def queue_waits(batch_id: str) -> list[float]:
                return [(task.started_at - task.enqueued_at).total_seconds() * 1000
                        for task in tasks.tasks_of_batch(store.engine, batch_id) if task.started_at is not None]
            warm_round = 0
            for number, count in enumerate(levels, start=1):
                while len(workers) < count:
                    workers.append(subprocess.Popen(
                        [sys.executable, "-m", "extractor", "worker", "--concurrency", str(args.concurrency)],
                        env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.monotonic() + WARM_UP_TIMEOUT_S
                pids = {worker.pid for worker in workers}
                while {run.pid for run in store.find_runs()} & pids != pids:  # until each has converted a document
                    if time.monotonic() > deadline:
                        raise SystemExit(f"workers did not start within {WARM_UP_TIMEOUT_S} s")
                    warm_round += 1
                    for path in folders[0].iterdir():  # new content each round: converted, not skipped as done
                        first, rest = path.read_text(encoding="utf-8").split("\n", 1)
                        path.write_text(f"{first} warm-up {warm_round}\n{rest}", encoding="utf-8")
                    submit(folders[0])
                batch_id, seconds = submit(folders[number])
                waits = queue_waits(batch_id)
                idle = [wait for path in sorted(probes[number].iterdir()) for wait in queue_waits(submit(path)[0])]
                rate = args.documents / seconds
                ideal = count * args.concurrency / args.latency
                print(f"{count:>7} {rate:>8.1f} {ideal:>8.1f} {rate / ideal:>6.0%} {statistics.median(waits):>13.0f} "
                      f"{percentile(waits, 0.95):>13.0f} {statistics.median(idle):>13.0f} {max(idle):>13.0f}", flush=True)
            store.close()
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
        if drop is not None:
            drop()
        shutil.rmtree(workdir, ignore_errors=True)


def end_to_end(args: argparse.Namespace) -> None:
    """Fresh workers and one ``extract run --queue`` per level, timed from their start to the batch's end."""
    from extractor.store import open_store

    workdir = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    levels = sorted(args.workers)
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_throughput.py"), "--serve", "--latency",
                               str(args.latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    base_url = server.stdout.readline().strip()
    print(f"{args.documents} documents per level, model latency {args.latency} s, {args.concurrency} calls in flight "
          f"per worker, SQLite, {os.cpu_count()} cores; fresh workers and a new configuration per level")
    print(f"{'round':>5} {'workers':>7} {'seconds':>8} {'ideal s':>8}")
    times: dict[int, list[float]] = {count: [] for count in levels}
    try:
        for number, count in enumerate(levels * args.rounds):
            folder = workdir / f"level{number}"
            write_batch(folder, args.documents)
            with redis_server(workdir) as broker:
                database = f"sqlite:///{workdir}/bench{number}.db"
                open_store(database).close()  # a service's run log exists before its batches: not part of the clock
                env = os.environ | {"EXTRACT_DATABASE_URL": database, "EXTRACT_BROKER_URL": broker,
                                    "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench"}
                started = time.monotonic()
                workers = [subprocess.Popen([sys.executable, "-m", "extractor", "worker", "--concurrency",
                                             str(args.concurrency)], env=env, cwd=workdir, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL) for _ in range(count)]
                try:
                    run = subprocess.run([sys.executable, "-m", "extractor", "run", "--queue", broker, str(folder),
                                          "--model", "openai:bench", "--prompt-version", "v1", "--retries", "0",
                                          "--tag", f"level{number}", "--format", "json"],
                                         env=env, cwd=workdir, capture_output=True, text=True)
                    seconds = time.monotonic() - started
                finally:
                    for worker in workers:
                        worker.terminate()
                    for worker in workers:
                        worker.wait(timeout=60)
            if run.returncode not in (0, 3):
                raise SystemExit(f"extract run --queue exited {run.returncode}: {run.stderr[-2000:]}")
            times[count].append(seconds)
            ideal = args.documents * args.latency / (count * args.concurrency)
            print(f"{number // len(levels) + 1:>5} {count:>7} {seconds:>8.1f} {ideal:>8.1f}", flush=True)
        first = statistics.median(times[levels[0]])
        for count in levels:
            median = statistics.median(times[count])
            print(f"{count} worker(s): median {median:.1f} s of {len(times[count])}, speed-up over {levels[0]}: "
                  f"{first / median:.2f}x")
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
