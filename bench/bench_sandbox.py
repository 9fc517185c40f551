"""A batch with bombs in it: how much later its good files finish, and the peak memory of the run's process tree.

Two folders, measured in turn (``--rounds`` times each, alternated; each run into a fresh SQLite run log): 36 good
documents alone, and the same 36 with 4 bombs among them (docs/formats.md#reading-limits): an xlsx whose one 900 KB
shared string 2,000 cells name (1.8 GB of text), an HWPX of 3,000,000 characters, 9.6 MB of HTML in 1,200,000
paragraphs (1.9 GB and minutes to read outside a reader), and an e-mail of 9.5 MB with 40,000 attachments (refused
for its MIME parts, counted before it is parsed; the run's causes below say how each ended). Every run is ``extract
run FOLDER`` as a process of its own against a scripted model server in its own process (``bench_throughput.py
--serve``) answering after ``--latency`` seconds. With ``--queue``, every run is ``extract run --queue FOLDER`` and
one ``extract worker`` (``--concurrency 8``), both started together, over a redis-server of the bench's own
(``tests.support.redis_server``); the worker stops when the run has ended. With ``--mail``, the good files and the
bombs are e-mails: 36 e-mails of one text attachment each (72 good documents) and 5 e-mail bombs: the 40,000
attachments above, parts nested 50,000 deep, a 7 MB text attachment (over the text cap once read), and two whose 20
attachments are named in Content-Dispositions of 30,000 parameters (minutes of the parser's time: each holds its
reader until the deadline). ``extract run --queue`` has a reader take each e-mail apart before it queues it
(docs/formats.md#e-mail): the good e-mails after a bomb wait for it unless other readers take them apart meanwhile.

Printed: for each run, when its last good document finished (from the command's start: discovery, the CPU pool's
start-up and all; the time the run log records; with ``--queue``, also when the last good one was queued) and the
largest resident size of the run's whole process tree, summed over its processes (the run, the fork server, the
readers, the checker, Tesseract; with ``--queue`` the submitter's and the worker's trees together), sampled every 20
ms; then the median of each folder and the ratio with bombs to without (target <= 1.3x), and the peak against
readers x the reading limit + 300 MB (the target; readers past the soft deadline let as many extra readers start,
and the documented bound is twice that many readers' limits). The load average is printed with each run: the
machine may be shared.

    python bench/bench_sandbox.py [--rounds 3] [--latency 0.5] [--read-timeout 20] [--queue] [--mail]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

from tests.support.batch import write_batch, write_mail_batch  # noqa: E402  (after the sys.path fix)
from tests.support.hostile import (  # noqa: E402
    large_attachment,
    long_hwpx,
    many_attachments,
    many_elements_html,
    many_parameters,
    nested_parts,
    shared_string_bomb,
)
from tests.support.processes import TreePeak  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

GOOD = 36
GOOD_STEMS = ("en_purchase_approval", "ko_work_request_review", "ru_vacation_approval")


def good(path: str) -> bool:
    """Whether ``path`` (as the run log names it) is one of the good documents: a sample, an e-mail of one, or its
    attachment."""
    stem = Path(path).stem
    return any(stem == sample or stem.endswith(f"_{sample}") for sample in GOOD_STEMS)


def good_state(path: str) -> str:
    """Where a good document ends: its sample's answer passes for it; an e-mail's leaves its headers and list of
    attachments unaccounted for, and goes to review."""
    return "MANUAL_REVIEW" if path.endswith(".eml") else "READY_FOR_REVIEW"


def measured_run(folder: Path, database: Path, env: dict[str, str], broker: str | None, expected: int,
                 bombs: int) -> tuple[float, float | None, int, str]:
    """``extract run folder`` (with a broker: ``--queue`` and a worker of its own): seconds from the command's start
    to its last good document's end (``expected`` of them), to the last good one queued (with a broker), peak tree
    RSS, and the causes of its INPUT_ERRORs (and how many documents there were, when more than the good ones and
    ``bombs``)."""
    import json
    from datetime import UTC, datetime

    from sqlalchemy import create_engine, text

    url = f"sqlite:///{database}"
    env = env | {"EXTRACT_DATABASE_URL": url}
    command = [sys.executable, "-m", "extractor", "run", str(folder), "--model", "openai:bench", "--retries", "0",
               "--format", "json"]
    worker, worker_log = None, database.with_suffix(".worker.log")
    if broker is not None:
        command += ["--queue", broker]
        env |= {"EXTRACT_BROKER_URL": broker, "EXTRACT_MODEL": "openai:bench"}
        with worker_log.open("w") as log:
            worker = subprocess.Popen([sys.executable, "-m", "extractor", "worker", "--concurrency", "8"], env=env,
                                      cwd=folder.parent, stdout=log, stderr=subprocess.STDOUT)
    launched = datetime.now(UTC)
    process = subprocess.Popen(command, env=env, cwd=folder.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    tree = TreePeak(process.pid, *([worker.pid] if worker is not None else [])).start()
    out, err = process.communicate(timeout=1800)
    if worker is not None:
        worker.terminate()
        if worker.wait(timeout=120) != 0:
            raise SystemExit(f"extract worker exited {worker.returncode}: {worker_log.read_text()[-2000:]}")
    peak = tree.stop()
    if process.returncode not in (0, 2, 3):
        raise SystemExit(f"extract run exited {process.returncode}: {err[-2000:]}")
    engine = create_engine(url)
    with engine.connect() as connection:
        ended = connection.execute(text("SELECT path, state, finished_at FROM document_runs")).all()
        queued = [] if broker is None else connection.execute(text(
            "SELECT uploads.name, tasks.enqueued_at FROM tasks JOIN uploads ON uploads.id = tasks.upload_id")).all()
    engine.dispose()
    finished = {path: (state, at) for path, state, at in ended if good(path)}
    if len(finished) != expected or any(state != good_state(path) for path, (state, _) in finished.items()):
        raise SystemExit(f"the good documents ended {sorted(finished.items())}, not {expected} done: {err[-2000:]}")

    def after(at: object) -> float:
        return (datetime.fromisoformat(str(at)).replace(tzinfo=UTC) - launched).total_seconds()

    seconds = max(after(at) for _, at in finished.values())
    last_queued = max((after(at) for name, at in queued if good(name)), default=None)
    summary = json.loads(out[out.index("{"):])
    causes = "; ".join(o["cause"].rsplit("/", 1)[-1] for o in summary["outcomes"] if o["state"] == "INPUT_ERROR")
    if len(summary["outcomes"]) > expected + bombs:
        causes += f"; {len(summary['outcomes'])} documents"
    return seconds, last_queued, peak, causes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the model takes per call")
    parser.add_argument("--read-timeout", default="20", help="EXTRACT_READ_TIMEOUT for the runs (seconds)")
    parser.add_argument("--queue", action="store_true", help="extract run --queue and one extract worker per run")
    parser.add_argument("--mail", action="store_true", help="good files and bombs are e-mails")
    args = parser.parse_args()

    from extractor.offload import Limits, memory_label, readers

    workdir = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    alone, mixed = workdir / "alone", workdir / "mixed"
    (write_mail_batch if args.mail else write_batch)(alone, GOOD)
    expected = 2 * GOOD if args.mail else GOOD  # an e-mail and its attachment
    shutil.copytree(alone, mixed)
    if args.mail:  # each before the good e-mails of its place in the folder
        bombs = [many_parameters(mixed / "00000_parameters.eml"), many_attachments(mixed / "00009_attachments.eml", 40_000),
                 many_parameters(mixed / "00018_parameters.eml", 19), nested_parts(mixed / "00027_nested.eml"),
                 large_attachment(mixed / "00035_large.eml")]
    else:
        bombs = [shared_string_bomb(mixed / "00009_shared_strings.xlsx"), long_hwpx(mixed / "00018_long.hwpx"),
                 many_elements_html(mixed / "00027_elements.html"),
                 many_attachments(mixed / "00035_attachments.eml", 40_000)]
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_throughput.py"), "--serve", "--latency",
                               str(args.latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    base_url = server.stdout.readline().strip()
    env = os.environ | {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "bench", "EXTRACT_READ_TIMEOUT": args.read_timeout}
    limits = Limits.from_environment()
    count = readers()
    redis = RedisServer(workdir) if args.queue else None
    broker = None
    print(f"{GOOD} good {'e-mails' if args.mail else 'documents'} alone and with {len(bombs)} bombs, model latency "
          f"{args.latency} s, {count} readers of {memory_label(limits.memory)}, read timeout {args.read_timeout} s, "
          f"{os.cpu_count()} cores"
          + (", extract run --queue and one extract worker" if args.queue else ""))
    times: dict[str, list[float]] = {"alone": [], "with bombs": []}
    peaks: dict[str, list[int]] = {"alone": [], "with bombs": []}
    try:
        if redis is not None:
            redis.start()
            broker = redis.url
        for number in range(args.rounds):
            for name, folder in (("alone", alone), ("with bombs", mixed)):
                seconds, last_queued, peak, causes = measured_run(
                    folder, workdir / f"{name.replace(' ', '_')}{number}.db", env, broker, expected, len(bombs))
                times[name].append(seconds)
                peaks[name].append(peak)
                queued = "" if last_queued is None else f"queued after {last_queued:5.1f} s, "
                print(f"round {number + 1} {name:>10}: good files {queued}done after {seconds:6.1f} s, peak tree "
                      f"{peak / 2**20:6.0f} MiB, load {os.getloadavg()[0]:.1f}" + (f"  ({causes})" if causes else ""),
                      flush=True)
    finally:
        if redis is not None:
            redis.stop()
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = statistics.median(times["with bombs"]) / statistics.median(times["alone"])
    bound = count * limits.memory + 300 * 2**20
    peak = max(peaks["with bombs"])
    print(f"good files with bombs / alone (medians): {ratio:.2f}x (target <= 1.3x)")
    print(f"peak tree with bombs: {peak / 2**20:.0f} MiB; bound {count} x {memory_label(limits.memory)} + 300 MB = "
          f"{bound / 2**20:.0f} MiB ({'within' if peak <= bound else 'OVER'}; with extra readers past the soft deadline "
          f"the bound is {2 * count} x {memory_label(limits.memory)} + 300 MB)")


if __name__ == "__main__":
    main()
