"""The run log at a million document runs: the commands that read what grows, at 100,000 and 1,000,000 document runs.

1. A seed log made by the real pipeline: ``extract run``'s engine converts numbered copies of the purchase
   procedure through the scripted OpenAI-compatible server (``tests/support/llm_server.py``, real HTTP) in
   runs of two models with mixed outcomes (passes, repairs, MANUAL_REVIEW, ERROR, BLOCKED), then a person
   decides through the review module as ``extract approve``/``reject`` do: approvals as produced, approvals of a
   corrected candidate (what changed is recorded), rejections. The newest run is left waiting for review.
2. Replication in the same schema, inside the database: the seed's decided runs are copied with ``INSERT ...
   SELECT`` (new ids, run ids, content hashes and file names, each copy earlier in time) up to each size. The
   same is done on SQLite and on PostgreSQL (``--postgres ADMIN_URL``, or a cluster of its own kept in
   ``--keep``), and the logs are kept in ``--keep`` for the next run: building a million takes a while.
3. Each command as a user runs it (a new ``python -m extractor`` process, start-up included), the two sizes
   taking turns ``--rounds`` times; the median is printed per size with the ratio 1M / 100k, against the
   targets of docs/runs.md:

   - ``stats --corrections``: < 2 s at 1M;
   - ``export`` (JSONL and CSV, every approved record): >= 20,000 records per second, peak memory flat (the
     1M / 100k ratio of the process's peak resident memory); ``export --since 1d``: flat;
   - ``doctor --full`` (what it costs), then a new ``extract run`` of 20 documents and ``doctor``: < 2 s at 1M;
   - ``show PATH`` and ``show SHA-PREFIX``: flat (1M within 0.25 s of 100k); ``show RUN``: < 1 s.

    python bench/bench_runlog.py [--sizes 100000 1000000] [--keep /tmp/bench_runlog] [--rounds 3]
                                 [--backends sqlite postgresql] [--postgres ADMIN_URL]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

SEED_RUNS = (("model-a", 120), ("model-b", 120), ("model-a", 200), ("model-b", 80), ("model-a", 160),
             ("model-b", 120))
"""The seed's decided runs: model and documents (800 document runs, replicated); a 20-document run waits."""
WAITING = 20
NEW_RUN = 20
"""Documents of the ``extract run`` made between ``doctor --full`` and ``doctor``."""
BLOCK = 50
"""Copies made per transaction."""
TARGET_CORRECTIONS_S = 2.0
TARGET_EXPORT_RATE = 20_000
TARGET_DOCTOR_S = 2.0
TARGET_SHOW_RUN_S = 1.0
FLAT_S = 0.25
"""How much slower at 1M than at 100k a command may be and still count as flat."""


def behaviour(number: int) -> str:
    """What the scripted model does with document ``number`` (``tests.support.corpus.script``)."""
    kinds = ("pass",) * 11 + ("repaired", "repaired", "fail", "fail", "warn", "error", "leak", "empty", "pass")
    return kinds[number % len(kinds)]


# ---------------------------------------------------------------- PostgreSQL cluster kept between runs


@contextmanager
def kept_cluster(folder: Path) -> Iterator[str]:
    """A PostgreSQL cluster whose data stays in ``folder`` (created there the first time), started for this run
    and stopped after it; yields its admin URL. Started as ``tests/support/databases.py`` starts the tests' own
    (trust authentication on 127.0.0.1; as the ``postgres`` system user under root), with fsync off."""
    from tests.support.databases import _free_port, pg_ctl

    executable = pg_ctl()
    if executable is None:
        raise SystemExit("no PostgreSQL server binaries (apt-get install postgresql), or pass --postgres ADMIN_URL")
    folder.mkdir(parents=True, exist_ok=True)
    prefix: list[str] = []
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(folder, account.pw_uid, account.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    if not data.exists():
        subprocess.run([*prefix, executable, "initdb", "-D", str(data), "-o", "--auth=trust --username=postgres"],
                       check=True, capture_output=True)
    port = _free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off " \
              "-c full_page_writes=off -c shared_buffers=512MB -c max_connections=100"
    subprocess.run([*prefix, executable, "start", "-w", "-D", str(data), "-l", str(folder / "postgresql.log"),
                    "-o", options], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, executable, "stop", "-D", str(data), "-m", "fast"], capture_output=True)


def database_on(admin: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``admin``, created when missing."""
    from sqlalchemy import create_engine, make_url, text

    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        if connection.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first() is None:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return make_url(admin).set(database=name).render_as_string(hide_password=False)


def drop_database(admin: str, name: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


# ---------------------------------------------------------------- 1. the seed, by the real pipeline


def seed(url: str, folder: Path) -> None:
    """The seed log in ``url``: the runs of ``SEED_RUNS`` decided by a person, then one run left waiting."""
    from extractor.review.decide import Refused, approve_document, reject_document
    from extractor.store import open_store
    from tests.support.corpus import GOOD, run, script, write_documents
    from tests.support.llm_server import ScriptedLLMServer

    plan = {model: behaviour for model in ("model-a", "model-b")}
    first = 1
    with ScriptedLLMServer(script(plan)) as server:
        for model, count in SEED_RUNS:
            paths = write_documents(folder / "docs" / f"run{first}", range(first, first + count))
            run(url, server, paths, model)
            first += count
        store = open_store(url)
        decided = rejected = 0
        for run_id in [r.id for r in store.find_runs()]:
            for document_run in store.document_runs_for(run_id):
                kind, number = behaviour(int(document_run.path.rsplit("_", 1)[1][:-3])), document_run.id
                try:
                    if kind in ("pass", "repaired") and number % 7:
                        approve_document(store, store, document_run, reviewer="kim")
                    elif kind in ("fail", "warn") and number % 3:  # the person corrects the candidate
                        approve_document(store, store, document_run, reviewer="lee", edited=json.dumps(GOOD))
                    elif kind != "error":
                        reject_document(store, store, document_run, reviewer="kim", reason="not what the document says")
                        rejected += 1
                        continue
                    else:
                        continue
                except Refused as refused:
                    raise SystemExit(f"seed: document run {document_run.id} ({kind}): {refused}") from None
                decided += 1
        store.close()
        waiting = write_documents(folder / "docs" / "waiting", range(first, first + WAITING))
        run(url, server, waiting, "model-a")
    print(f"seed: {sum(c for _, c in SEED_RUNS)} decided document runs ({decided} approved, {rejected} rejected) "
          f"and {WAITING} waiting", file=sys.stderr)


# ---------------------------------------------------------------- 2. replication inside the database


@dataclass(frozen=True)
class Copying:
    """How one table's rows are copied: the seed rows to copy and each column's expression in the copy."""

    table: str
    where: str
    columns: dict[str, str]


def copy_plan(engine: Any, seed_runs: list[str]) -> tuple[list[Copying], dict[str, int]]:
    """Per table (parents first), the copy of the seed's decided rows; and each integer key's step per copy.

    In the copies (``copies.k`` from 1): integer ids move by k times the seed's largest id, run ids and content
    hashes get k as their first 8 hex digits, file names ``purchase_k_N.md``, and every time moves k times the
    seed's span (plus a day) into the past.
    """
    from sqlalchemy import func, select

    from extractor.store import tables

    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        steps = {name: int(connection.execute(select(func.max(tables.metadata.tables[name].c.id))).scalar() or 0)
                 for name in ("documents", "document_runs", "attempts", "reviews", "approved_records")}
        first, last = connection.execute(select(func.min(tables.runs.c.started_at),
                                                func.max(tables.runs.c.finished_at))).one()
    span = int((last - first).total_seconds()) + 86_400
    hex8 = "printf('%08x', copies.k)" if sqlite else "lpad(to_hex(copies.k), 8, '0')"

    def key(column: str) -> str:
        return f"{hex8} || substr({column}, 9)"

    def when(column: str) -> str:
        if sqlite:
            return (f"strftime('%Y-%m-%d %H:%M:%S', {column}, '-' || (copies.k * {span}) || ' seconds') "
                    f"|| substr({column}, 20)")
        return f"{column} - make_interval(secs => copies.k * {span})"

    def moved(column: str, table: str) -> str:
        return f"{column} + copies.k * {steps[table]}"

    def renamed(column: str) -> str:
        return f"replace({column}, 'purchase_', 'purchase_' || copies.k || '_')"

    special = {
        ("runs", "id"): key("id"), ("documents", "id"): moved("id", "documents"), ("documents", "sha256"): key("sha256"),
        ("documents", "path"): renamed("path"), ("document_runs", "id"): moved("id", "document_runs"),
        ("document_runs", "path"): renamed("path"), ("document_runs", "name"): renamed("name"),
        ("attempts", "id"): moved("id", "attempts"),
        ("attempts", "reused_from"): moved("reused_from", "attempts"), ("reviews", "id"): moved("id", "reviews"),
        ("approved_records", "id"): moved("id", "approved_records"),
        ("approved_records", "document_sha256"): key("document_sha256"),
        ("approved_records", "document_path"): renamed("document_path"),
        ("approved_records", "attempt_id"): moved("attempt_id", "attempts"), ("approved_records", "run_id"): key("run_id"),
    }
    ids = ", ".join(f"'{run_id}'" for run_id in seed_runs)
    where = {"runs": f"id IN ({ids})",
             "documents": f"id IN (SELECT document_id FROM document_runs WHERE run_id IN ({ids}))",
             "document_runs": f"run_id IN ({ids})",
             "claims": f"run_id IN ({ids})", "attempts": f"run_id IN ({ids})", "approved_records": f"run_id IN ({ids})",
             "reviews": f"document_run_id IN (SELECT id FROM document_runs WHERE run_id IN ({ids}))",
             "review_fields": f"run_id IN ({ids})"}
    with engine.connect() as connection:
        for name, table in tables.metadata.tables.items():
            if name not in where and name not in ("request_parts", "integrity_checks") and connection.execute(
                    select(func.count()).select_from(table)).scalar():
                raise SystemExit(f"bench_runlog does not know how to copy the rows of {name}: add it to copy_plan")
    plan = []
    # attempts before their document runs: a document run names its final attempt, and SQLite, checking keys at
    # commit, would look for the document runs naming each new attempt (no index) if they came first
    order = sorted(tables.metadata.sorted_tables, key=lambda table: table.name != "attempts" and table.name != "runs"
                   and table.name != "documents")
    for table in order:
        if table.name not in where:
            continue
        columns = {}
        for column in table.columns:
            expression = special.get((table.name, column.name))
            if expression is None and column.foreign_keys:
                target = next(iter(column.foreign_keys)).column.table.name
                expression = (key(column.name) if target == "runs" else moved(column.name, target) if target in steps
                              else None)
            if expression is None and column.type.__class__.__name__ == "UTCDateTime":
                expression = when(column.name)
            columns[column.name] = expression or f'"{column.name}"'  # quoted: PostgreSQL reserves "window"
        plan.append(Copying(table.name, where[table.name], columns))
    return plan, steps


def replicate(url: str, size: int, seed_runs: list[str]) -> None:
    """Copies of the seed's decided runs in ``url`` until it holds at least ``size`` document runs."""
    from sqlalchemy import func, select, text

    from extractor.store import open_store, tables

    store = open_store(url)
    engine = store.engine
    plan, steps = copy_plan(engine, seed_runs)
    per_copy = len(store.find_document_runs(run_ids=seed_runs))
    with engine.connect() as connection:
        have = int(connection.execute(select(func.count()).select_from(tables.document_runs)).scalar() or 0)
    copies = max(0, -(-(size - have) // per_copy))
    began = time.perf_counter()
    sqlite = engine.dialect.name == "sqlite"
    raw = engine.raw_connection()  # the copies are of rows that satisfy their keys: copied with key checks off
    try:
        cursor = raw.cursor()
        if sqlite:  # (outside a transaction, where SQLite honours it; the store's connections leave autocommit on)
            cursor.execute("PRAGMA foreign_keys = OFF")
        cursor.execute("CREATE TEMPORARY TABLE copies (k INTEGER)")
        for start in range(1, copies + 1, BLOCK):
            numbers = range(start, min(start + BLOCK, copies + 1))
            if sqlite:
                cursor.execute("BEGIN")
            else:  # PostgreSQL's keys are not deferrable: replica mode skips their checks for this transaction
                cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute("DELETE FROM copies")
            cursor.execute(f"INSERT INTO copies (k) VALUES {', '.join(f'({k})' for k in numbers)}")
            for copying in plan:
                names = ", ".join(f'"{name}"' for name in copying.columns)
                values = ", ".join(copying.columns.values())
                cursor.execute(f"INSERT INTO {copying.table} ({names}) SELECT {values} "
                               f"FROM {copying.table} CROSS JOIN copies WHERE {copying.where}")
            if sqlite:
                cursor.execute("COMMIT")
            else:
                raw.commit()
            print(f"  {url.split('/')[-1]}: {have + numbers[-1] * per_copy:,} document runs "
                  f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
        if sqlite:
            cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        raw.close()
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            for name in steps:
                connection.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), "
                                        f"(SELECT max(id) FROM {name}))"))
            connection.execute(text("ANALYZE"))  # (autovacuum would, a while later)
    # SQLite gets no statistics: the product never gathers them, so its plans must hold without (sqlite_stat1)
    store.close()


# ---------------------------------------------------------------- 3. the commands


@dataclass(frozen=True)
class Timed:
    """What one command cost: wall seconds, the CPU seconds of its process (and whatever it started), and those of
    the PostgreSQL server (None: not measured; SQLite, or a server not in this bench's own cluster)."""

    wall: float
    cpu: float
    server: float | None


SERVER_CPU: list[Callable[[], float]] = []
"""How to read the bench's own PostgreSQL cluster's CPU seconds so far, once it runs (``cluster_cpu``)."""


def cluster_cpu(folder: Path) -> Callable[[], float]:
    """CPU seconds of the cluster in ``folder``: its postmaster, every backend it has reaped (a connection's backend
    ends with the command) and those alive, read from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: str) -> list[str]:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()

    def read() -> float:
        postmaster = (folder / "data" / "postmaster.pid").read_text().split()[0]
        while True:
            own = fields(postmaster)
            total = sum(int(value) for value in own[11:15])  # utime stime cutime cstime
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    found = fields(pid)
                except OSError:
                    continue  # gone meanwhile: reaped, so in the postmaster's cutime (checked below)
                if found[1] == postmaster:
                    total += int(found[11]) + int(found[12])
            if fields(postmaster)[13:15] == own[13:15]:  # no backend reaped while it was read: counted once
                return total / tick
            # else one was reaped after the postmaster's times were read and before its own: counted in neither

    return read


def run_extract(args: list[str], env: dict[str, str], *, peak: Path | None = None,
                exits: tuple[int, ...] = (0,)) -> tuple[Timed, str]:
    """What one ``extract ...`` in a new process cost, and its stdout; with ``peak``, its peak resident memory (KiB)
    is written there (``tests/support/peak.py``). Its CPU is what the children of this process used meanwhile (it is
    the only one running)."""
    command = [sys.executable, "-m", "extractor", *args]
    if peak is not None:
        command = [sys.executable, str(ROOT / "tests/support/peak.py"), str(peak), "--", *command]
    server = SERVER_CPU[0] if SERVER_CPU and "postgresql" in " ".join(args) else None
    server_before = server() if server else 0.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if result.returncode not in exits:
        raise SystemExit(f"extract {' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
    return Timed(seconds, cpu, server() - server_before if server else None), result.stdout


@dataclass
class Log:
    """One kept run log: where it is, and what the commands are given."""

    backend: str
    size: int
    url: str
    path: str = ""
    sha_prefix: str = ""
    run_id: str = ""
    approved: int = 0
    with_cells: int = 0


def describe(log: Log) -> None:
    """What ``show`` looks up in ``log``: a document of the oldest copy by path and by content hash, a run of
    the seed; and how many records export writes (``with_cells``: of them, how many have the CSV cells their
    approval stored, which export writes as they are)."""
    from sqlalchemy import func, select

    from extractor.store import open_store, tables

    store = open_store(log.url)
    with store.engine.connect() as connection:
        oldest = connection.execute(
            select(tables.document_runs.c.path, tables.documents.c.sha256)
            .join(tables.documents, tables.documents.c.id == tables.document_runs.c.document_id)
            .order_by(tables.document_runs.c.started_at, tables.document_runs.c.id).limit(1)).one()
        log.approved = int(connection.execute(select(func.count()).select_from(tables.approved_records)).scalar() or 0)
        log.with_cells = int(connection.execute(select(func.count()).select_from(tables.approved_records).where(
            tables.approved_records.c.record_cells.is_not(None))).scalar() or 0)
        biggest = connection.execute(
            select(tables.document_runs.c.run_id).group_by(tables.document_runs.c.run_id)
            .order_by(func.count().desc()).limit(1)).scalar_one()
    store.close()
    log.path, log.sha_prefix, log.run_id = oldest.path, oldest.sha256[:12], biggest


def new_run(log: Log, folder: Path, env: dict[str, str], round_: int) -> Timed:
    """An ``extract run`` of ``NEW_RUN`` new documents against the scripted server (in this process: its CPU is not
    counted); returns what it cost."""
    from tests.support.corpus import script, write_documents
    from tests.support.llm_server import ScriptedLLMServer

    numbers = range(100_000 + round_ * NEW_RUN, 100_000 + (round_ + 1) * NEW_RUN)
    paths = write_documents(folder / f"new-{log.backend}-{log.size}-{round_}", numbers)
    with ScriptedLLMServer(script({"model-a": behaviour})) as server:
        timed, _ = run_extract(["run", *map(str, paths), "--model", "openai:model-a", "--base-url", server.base_url,
                                "--database", log.url, "--format", "json"], env, exits=(0, 1, 3, 4))
    return timed


Found = dict[tuple[str, int, str], list[float]]
"""Every value measured, per (backend, size, name): ``NAME`` wall seconds, ``NAME cpu`` the process's CPU seconds and
``NAME server`` PostgreSQL's, ``export FMT rate`` records per CPU second of the process, ``export FMT server rate``
per CPU second of the server, ``export FMT peak MiB``, and ``load`` the 1-minute load average as each was measured."""


def measure(logs: list[Log], folder: Path, rounds: int, env: dict[str, str], full: bool = True) -> Found:
    """Every timed command on every log, ``rounds`` times, the logs taking turns."""
    found: Found = {}

    def note(log: Log, name: str, value: float) -> None:
        found.setdefault((log.backend, log.size, name), []).append(value)

    def noted(log: Log, name: str, timed: Timed) -> Timed:
        load = os.getloadavg()[0]
        note(log, name, timed.wall)
        note(log, f"{name} cpu", timed.cpu)
        if timed.server is not None:
            note(log, f"{name} server", timed.server)
        note(log, "load", load)
        server = "" if timed.server is None else f" + {timed.server:.2f} s server"
        print(f"  {log.backend} {log.size:,} {name}: {timed.wall:.2f} s wall, {timed.cpu:.2f} s CPU{server} "
              f"(load {load:.1f})", file=sys.stderr, flush=True)
        return timed

    for round_ in range(rounds):
        for log in logs:
            database = ["--database", log.url]
            timed: dict[str, list[str]] = {
                "stats --corrections": ["stats", "--corrections", "--format", "json"],
                "show PATH": ["show", log.path, "--format", "json"],
                "show SHA-PREFIX": ["show", log.sha_prefix, "--format", "json"],
                "show RUN": ["show", log.run_id],
                "runs": ["runs"],
                "review": ["review"],
                "export --since 1d": ["export", "--since", "1d", "--out", str(folder / "since.jsonl")],
            }
            for name, args in timed.items():
                noted(log, name, run_extract([*args, *database], env, exits=(0, 3))[0])
            for fmt in ("jsonl", "csv"):
                out, peak = folder / f"all.{fmt}", folder / "peak"
                spent = noted(log, f"export {fmt}", run_extract(["export", "--format", fmt, "--out", str(out),
                                                                 *database], env, peak=peak)[0])
                note(log, f"export {fmt} rate", log.approved / spent.cpu)
                if spent.server:
                    note(log, f"export {fmt} server rate", log.approved / spent.server)
                note(log, f"export {fmt} peak MiB", int(peak.read_text()) / 1024)
                out.unlink()
            if full:  # what a full check costs (no target); the build ended with one, so doctor has a clean base
                noted(log, "doctor --full", run_extract(["doctor", "--full", *database], env)[0])
            noted(log, "extract run (20 documents)", new_run(log, folder, env, round_))
            noted(log, "doctor", run_extract(["doctor", *database], env)[0])
    return found


def report(found: Found, backends: list[str], sizes: list[int]) -> None:
    """Per backend, the median of each command at both sizes: wall seconds, CPU seconds (the process's, plus the
    server's on PostgreSQL: what a machine running both spends), the ratio of the CPU seconds, and the target checked
    on the CPU seconds (wall seconds follow the machine's load; CPU seconds what the command does)."""
    small, large = sizes[0], sizes[-1]
    names = [name for name in dict.fromkeys(name for _, _, name in found)
             if not name.endswith((" cpu", " server")) and name != "load"]
    for backend in backends:
        loads = [value for (b, _, name), values in found.items() if b == backend and name == "load" for value in values]
        print(f"\n{backend}: median of {rounds_of(found)} round(s); {small:,} and {large:,} document runs; load average "
              f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")
        print(f"  {'command':<28} {'wall ' + f'{small:,}':>13} {f'{large:,}':>10} {'CPU ' + f'{small:,}':>12} "
              f"{f'{large:,}':>10} {'ratio':>7}   target (on CPU)")
        for name in names:
            wall = [median(found, backend, size, name) for size in (small, large)]
            if name.endswith(("rate", "MiB")):
                unit = "/s" if name.endswith("rate") else " MiB"
                a, b = wall
                if not a or not b:
                    continue  # a server's rate on SQLite
                print(f"  {name:<28} {'':>13} {'':>10} {a:>10,.0f}{unit:<2} {b:>10,.0f}{unit:<2} {b / a:>6.2f}x   "
                      f"{verdict(name, a, b)}")
                continue
            a, b = (median(found, backend, size, f"{name} cpu") + median(found, backend, size, f"{name} server")
                    for size in (small, large))
            print(f"  {name:<28} {wall[0]:>11.2f} s {wall[1]:>8.2f} s {a:>10.2f} s {b:>8.2f} s {b / a:>6.2f}x   "
                  f"{verdict(name, a, b)}")


def rounds_of(found: Found) -> int:
    return max(len(values) for (_, _, name), values in found.items() if name.endswith(" cpu"))


def median(found: Found, backend: str, size: int, name: str) -> float:
    """The median of what was measured, 0 when nothing was (a server's CPU on SQLite)."""
    values = found.get((backend, size, name))
    return statistics.median(values) if values else 0.0


def verdict(name: str, small: float, large: float) -> str:
    rate = f">= {TARGET_EXPORT_RATE:,} records/s"
    checks: dict[str, Callable[[], tuple[bool, str]]] = {
        "stats --corrections": lambda: (large < TARGET_CORRECTIONS_S, f"< {TARGET_CORRECTIONS_S:.0f} s at the largest"),
        "export jsonl rate": lambda: (min(small, large) >= TARGET_EXPORT_RATE, rate),
        "export csv rate": lambda: (min(small, large) >= TARGET_EXPORT_RATE, rate),
        "export jsonl server rate": lambda: (min(small, large) >= TARGET_EXPORT_RATE, rate),
        "export csv server rate": lambda: (min(small, large) >= TARGET_EXPORT_RATE, rate),
        "export jsonl peak MiB": lambda: (large <= small * 1.1, "flat (within 10%)"),
        "export csv peak MiB": lambda: (large <= small * 1.1, "flat (within 10%)"),
        "doctor": lambda: (large < TARGET_DOCTOR_S, f"< {TARGET_DOCTOR_S:.0f} s at the largest"),
        "show RUN": lambda: (max(small, large) < TARGET_SHOW_RUN_S, f"< {TARGET_SHOW_RUN_S:.0f} s at every size"),
        "show PATH": lambda: (large - small <= FLAT_S, f"flat (within {FLAT_S} s)"),
        "show SHA-PREFIX": lambda: (large - small <= FLAT_S, f"flat (within {FLAT_S} s)"),
        "export --since 1d": lambda: (large - small <= FLAT_S, f"flat (within {FLAT_S} s)"),
    }
    if name not in checks:
        return ""
    ok, target = checks[name]()
    return f"{'ok' if ok else 'MISSED'}: {target}"


def prepare(backend: str, size: int, keep: Path, admin: str | None, seed_folder: Path) -> Log:
    """The kept log of ``backend`` at ``size`` document runs, built (seed, then replication) when missing."""
    from extractor.store import open_store

    name = f"runlog_{size}"
    marker = keep / f"{backend}-{size}.json"
    if backend == "sqlite":
        url = f"sqlite:///{keep / name}.db"
    else:
        assert admin is not None
        url = database_on(admin, name)
    if not marker.exists():
        if backend == "sqlite":
            Path(f"{keep / name}.db").unlink(missing_ok=True)
        else:
            drop_database(admin or "", name)
            url = database_on(admin or "", name)
        began = time.perf_counter()
        seed(url, seed_folder / f"{backend}-{size}")
        store = open_store(url)
        seed_runs = [run.id for run in store.find_runs()][1:]  # the newest waits for review: not copied
        store.close()
        replicate(url, size, seed_runs)
        run_extract(["doctor", "--full", "--database", url], {**os.environ}, exits=(0,))
        marker.write_text(json.dumps({"seed_runs": seed_runs, "built_s": round(time.perf_counter() - began)}))
        print(f"built {backend} {size:,} in {time.perf_counter() - began:.0f} s", file=sys.stderr)
    log = Log(backend, size, url)
    describe(log)
    return log


def main() -> None:
    from installed import as_installed

    as_installed()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs=2, default=[100_000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "bench_runlog",
                        help="where the logs (and a PostgreSQL cluster of the bench's own) are kept between runs")
    parser.add_argument("--backends", nargs="+", choices=["sqlite", "postgresql"], default=["sqlite", "postgresql"])
    parser.add_argument("--postgres", help="admin URL of a PostgreSQL server to use instead of a cluster in --keep")
    parser.add_argument("--build-only", action="store_true", help="build the logs missing in --keep, measure nothing")
    parser.add_argument("--no-full", action="store_true", help="leave out timing doctor --full (minutes at 1M)")
    args = parser.parse_args()

    args.keep.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLUMNS": "200"}
    for variable in ("EXTRACT_APPROVED_DATABASE_URL", "EXTRACT_DATABASE_URL"):
        env.pop(variable, None)
    with contextmanager_or_none("postgresql" in args.backends and not args.postgres, args.keep / "postgres") as own, \
            tempfile.TemporaryDirectory(prefix="bench_runlog_") as tmp:
        admin = args.postgres or own
        logs = [prepare(backend, size, args.keep, admin, args.keep / "seed")
                for backend in args.backends for size in args.sizes]
        for log in logs:
            print(f"{log.backend} {log.size:,}: {log.approved:,} approved records ({log.with_cells:,} with stored CSV "
                  f"cells); show {log.path}, {log.sha_prefix}, run {log.run_id[:12]}", file=sys.stderr)
        if args.build_only:
            return
        found = measure(logs, Path(tmp), args.rounds, env, full=not args.no_full)
    report(found, args.backends, args.sizes)


@contextmanager
def contextmanager_or_none(wanted: bool, folder: Path) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    with kept_cluster(folder) as url:
        SERVER_CPU.append(cluster_cpu(folder))
        yield url


if __name__ == "__main__":
    main()
