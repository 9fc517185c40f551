"""Start-up of the commands that only read the run log, against a bare SQLAlchemy script doing the same queries.

A run log of 10,000 document runs (``bench_store.build``: runs of 200 documents, two models, two prompt
versions, READY / MANUAL / ERROR, repairs, reviews). For each of ``runs``, ``review``, ``show``, ``stats`` and
``doctor``:

- the command as a user runs it: a new ``python -m extractor ...`` process, output to a pipe;
- the baseline: a new Python process that imports SQLAlchemy, opens the same database and executes the very
  statements the command sent to it, with the same parameters, fetching every row. The statements are
  recorded from the command itself (an SQLAlchemy ``before_cursor_execute`` listener, in a separate process
  before the clock starts), so "the same query" is exactly what the command asked of the database.

Both take turns ``--rounds`` times (a busy moment of the shared machine falls on both); the median of each and
the ratio command / baseline are printed (target <= 2x), with ``extract --help`` as the CLI's start-up floor.
The CPU time of each process (user + system) is printed beside the wall time: it leaves out waiting for a core,
so its ratio moves less with what else the machine is doing.

``--typer DIR`` measures another typer release side by side: each command also runs with ``DIR`` (a folder
made with ``pip install --no-deps --target DIR typer==X``) first on ``PYTHONPATH``, in the same rounds, and the
medians of both typers and their difference are printed. This is how the typer requirement in
``pyproject.toml`` is judged.

    python bench/bench_commands.py [--documents 10000] [--rounds 7] [--postgres ADMIN_URL] [--typer DIR]
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

TARGET_RATIO = 2.0

RECORD = """if True:
    import pickle, sys
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    sent = []
    event.listen(Engine, "before_cursor_execute",
                 lambda conn, cursor, statement, parameters, context, executemany:
                 sent.append((statement, parameters, executemany)))
    from extractor.cli import app
    try:
        app(sys.argv[2:], prog_name="extract", standalone_mode=False)
    finally:
        with open(sys.argv[1], "wb") as out:
            pickle.dump(sent, out)
"""

BARE = """if True:
    import pickle, sys
    from sqlalchemy import create_engine

    with open(sys.argv[2], "rb") as recorded:
        statements = pickle.load(recorded)
    engine = create_engine(sys.argv[1])
    with engine.connect() as connection:
        for statement, parameters, _ in statements:
            if statement.split(None, 1)[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK"):
                continue  # one transaction, rolled back below
            result = connection.exec_driver_sql(statement, parameters)
            if result.returns_rows:
                result.fetchall()
        connection.rollback()
"""
"""The baseline: SQLAlchemy's engine, the recorded statements as the driver received them
(``exec_driver_sql``), every row fetched, in one transaction: the store's own BEGIN/COMMIT (it begins its
SQLite transactions itself) are left out: replayed, the second BEGIN would fail ("cannot start a transaction within
a transaction"). The writes a command may make (marking a dead run crashed) are rolled back, so every round reads
the same run log, and ``timed`` requires the baseline to exit 0 (one that stopped part way did less work)."""


def commands(document_run: int) -> dict[str, list[str]]:
    return {
        "runs": ["runs"],
        "review": ["review"],
        "show": ["show", str(document_run)],
        "stats": ["stats"],
        "doctor": ["doctor"],
    }


def record(url: str, command: list[str], out: Path, env: dict[str, str]) -> int:
    """Run ``command`` once, recording its statements into ``out``; returns how many."""
    result = subprocess.run([sys.executable, "-c", RECORD, str(out), *command, "--database", url],
                            capture_output=True, text=True, env=env, cwd=ROOT)
    if not out.exists():
        raise SystemExit(f"extract {' '.join(command)} failed: {result.stderr[-2000:]}")
    return len(pickle.loads(out.read_bytes()))


def timed(command: list[str], env: dict[str, str], exits: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """Seconds from start to exit, and the CPU seconds the process used (user + system): on a shared machine the
    wall time includes waiting for a core, the CPU time does not. Any exit code but ``exits`` stops the bench: a
    process that failed part way did less work than it was timed for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in exits:
        raise SystemExit(f"{' '.join(command)} exited {result.returncode}: {result.stderr[-2000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    from installed import as_installed

    as_installed()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=10_000, help="document runs in the run log")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", help="admin URL: a fresh PostgreSQL database instead of an SQLite file")
    parser.add_argument("--typer", type=Path, help="a folder holding another typer release, timed side by side")
    args = parser.parse_args()

    from bench_store import build, fresh_database

    env = {**os.environ, "COLUMNS": "200"}
    env.pop("EXTRACT_APPROVED_DATABASE_URL", None)
    other = None if args.typer is None else {
        **env, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.typer.resolve()), env.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="bench_commands_") as tmp, \
            fresh_database(Path(tmp), "runlog", args.postgres) as url:
        began = time.perf_counter()
        run_ids = build(url, args.documents)
        print(f"built {args.documents:,} document runs in {len(run_ids)} runs in {time.perf_counter() - began:.0f} s",
              file=sys.stderr)
        listed = commands(document_run=args.documents - 1)
        subprocess.run([sys.executable, "-m", "extractor", "runs", "--database", url], capture_output=True, env=env,
                       cwd=ROOT)  # the first open brings the schema to the newest revision; not a start-up cost
        sides: dict[str, tuple[list[str], list[str]]] = {}
        for name, command in listed.items():
            recorded = Path(tmp) / f"{name}.pickle"
            count = record(url, command, recorded, env)
            print(f"{name}: {count} statements recorded", file=sys.stderr)
            sides[name] = ([sys.executable, "-m", "extractor", *command, "--database", url],
                           [sys.executable, "-c", BARE, url, str(recorded)])
        times: dict[str, tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {name: ([], []) for name in sides}
        with_other: dict[str, list[tuple[float, float]]] = {name: [] for name in [*sides, "--help"]}
        start_up: list[tuple[float, float]] = []
        help_command = [sys.executable, "-m", "extractor", "--help"]
        for _ in range(args.rounds):
            start_up.append(timed(help_command, env))
            if other is not None:
                with_other["--help"].append(timed(help_command, other))
            for name, (ours, bare) in sides.items():
                times[name][0].append(timed(ours, env, exits=(0, 1, 3)))  # 1: doctor's findings, 3: documents wait
                if other is not None:
                    with_other[name].append(timed(ours, other, exits=(0, 1, 3)))
                times[name][1].append(timed(bare, env))
    backend = "PostgreSQL" if args.postgres else "SQLite"
    print(f"read-only commands on {args.documents:,} document runs ({backend}), median of {args.rounds} rounds, "
          f"new process each, taking turns with the baseline (target <= {TARGET_RATIO:.1f}x)")
    print(f"  {'command':<10} {'extract':>9} {'bare SQLAlchemy':>16} {'ratio':>7}   "
          f"{'CPU: extract':>12} {'bare':>6} {'ratio':>6}")
    for name, (ours, bare) in times.items():
        (wall_ours, cpu_ours), (wall_bare, cpu_bare) = medians(ours), medians(bare)
        ratio = wall_ours / wall_bare
        verdict = "ok" if ratio <= TARGET_RATIO else "OVER TARGET"
        print(f"  {name:<10} {wall_ours:>8.2f}s {wall_bare:>15.2f}s {ratio:>6.2f}x   {cpu_ours:>11.2f}s {cpu_bare:>5.2f}s "
              f"{cpu_ours / cpu_bare:>5.2f}x  {verdict}")
    print(f"  {'--help':<10} {medians(start_up)[0]:>8.2f}s   (the CLI's start-up floor)")
    if other is not None:
        installed, side = typer_version(env), typer_version(other)
        print(f"typer {installed} (installed) against typer {side} ({args.typer}), the same rounds, medians")
        print(f"  {'command':<10} {installed:>9} {side:>9} {'difference':>11}   {'CPU: ' + installed:>13} {side:>9}")
        for name, samples in with_other.items():
            (wall_ours, cpu_ours), (wall_side, cpu_side) = medians(start_up if name == "--help" else times[name][0]), \
                medians(samples)
            print(f"  {name:<10} {wall_ours:>8.2f}s {wall_side:>8.2f}s {(wall_side - wall_ours) * 1000:>+9.0f} ms   "
                  f"{cpu_ours:>12.2f}s {cpu_side:>8.2f}s")


def typer_version(env: dict[str, str]) -> str:
    """The typer a process started with ``env`` imports."""
    return subprocess.run([sys.executable, "-c", "import typer; print(typer.__version__)"], capture_output=True,
                          text=True, env=env, cwd=ROOT, check=True).stdout.strip()


def medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    """The median wall time and the median CPU time."""
    return statistics.median(wall for wall, _ in samples), statistics.median(cpu for _, cpu in samples)

if __name__ == "__main__":
    main()
