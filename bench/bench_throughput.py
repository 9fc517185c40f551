"""Throughput of ``extract run`` against a model that always takes the same time to answer.

An OpenAI-compatible server (asyncio, in its own process so its CPU is not the pipeline's; its answers are
``tests/support/llm_server.py``'s) answers every call a fixed delay after its request arrived (the answer is built
during the wait, so the server's own work adds nothing) with a candidate that passes validation, so
every document costs exactly one call. Each level runs in a fresh process on a fresh database, with at
least ``--waves`` rounds of calls (documents = max(--documents, waves x concurrency), so the first and last
round weigh little). The documents are the three samples, each copy with its own title line so content
hashes differ.

The ideal is concurrency / latency documents per second. That ideal must be one the machine can reach: a
level whose ideal is above ``--max-rate`` documents per second gets a longer latency (concurrency /
max-rate), so 256 calls in flight are measured at 4 s, not at a rate no 2-core machine can feed; the
latency is printed per level.

The baseline, measured in the same run against the same server: a bare aiohttp client (one
``ClientSession``, a ``TCPConnector`` sized to the concurrency, each call a POST of a chat request carrying
the document's text, its JSON answer read and parsed) making as many calls at the same concurrency, in a
fresh process of its own. What the product adds over it is the pipeline's own work, not the HTTP client's.

Printed per level: documents per second next to the ideal, and the calls per second of the product's provider
alone (request built, answer parsed, its HTTP session; no pipeline) and of the bare client next to the same
ideal; the pipeline's own CPU time per document as the
run measures it (``Engine.cpu_seconds``: ingest + segmentation and validation in the CPU pool's processes,
run-log writes in the run's writer thread; per thread, ``time.thread_time``); the run process's whole CPU
per document, i.e. per call (HTTP client, event loop, run-log writes; the CPU pool's is not in it) next to
the provider's and the bare client's CPU per call; peak memory (max
RSS) of the run process and of the largest process of its CPU pool (a reader). Then, per
level, where the seconds beyond the ideal went, from the run log's timestamps (``where_time_went``).

    python bench/bench_throughput.py [--documents 500] [--latency 1.0] [--concurrency 1 8 32 64 256]
                                     [--waves 10] [--max-rate 64] [--postgres ADMIN_URL] [--quick]

``--quick`` runs 100 documents at concurrency below 32. ``--postgres`` runs each level on a fresh
PostgreSQL database created through the admin URL (e.g. the one ``.ci/postgres.sh`` prints) instead of an
SQLite file. Imports (the splitters, the clients) are warmed up before the clock starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

from tests.support.batch import SAMPLES, answer_for, write_batch  # noqa: E402  (after the sys.path fix)

TARGET_SHARE = 0.95
TARGET_CPU_MS = 10.0


def serve(latency_s: float) -> None:
    """Answer every call ``latency_s`` after its request arrived, with the sample candidate for the document's language.

    An asyncio HTTP/1.1 server (kept-alive connections, one coroutine each), not the tests' threaded
    ``ScriptedLLMServer``: with 256 calls in flight its 256 threads wake together and queue for one
    interpreter lock, which adds up to hundreds of milliseconds to calls that should take ``latency_s``, a
    delay that belongs to no real model server. Each answer is what ``ScriptedLLMServer`` would send.
    """
    asyncio.run(_serve(latency_s))


async def _serve(latency_s: float) -> None:
    from tests.support.llm_server import Reply, ScriptedLLMServer

    shapes = ScriptedLLMServer(lambda request, number: Reply(""))  # only for its chat.completion body
    served = 0
    loop = asyncio.get_running_loop()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                due = loop.time() + latency_s  # the answer leaves latency_s after the request arrived, however long
                body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))) or b"null")
                served += 1
                completion = shapes._completion(Reply(answer_for(body), delay_s=latency_s), body, served)
                data = json.dumps(completion, ensure_ascii=False).encode()  # (made before the wait, not after it)
                await asyncio.sleep(due - loop.time())
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(data)).encode() + b"\r\n\r\n" + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed its connection
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    server.close()


# ---------------------------------------------------------------- one concurrency level (its own process)


def own_peak_kib() -> int:
    """This process's peak resident memory (VmHWM; ru_maxrss would count the parent's at spawn)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def where_time_went(store: Any, run_id: str, concurrency: int, latency_s: float, seconds: float) -> dict[str, float]:
    """Where a level's seconds beyond the ideal went, from the run log's own timestamps.

    A level ends when the slot that opened last has made its last call. So the loss is: the time outside the
    run record (discovery, freeing dead runs, recording the start; recording the end), the opening (the run
    record written to the ``concurrency``-th call sent: reading, claims, requests), a last round only partly
    full, each answer's latency over the server's (the event loop reading it late, the request leaving late),
    the gap from an answer to the call that takes its slot, and the tail (last answer to the run recorded as
    finished); ``other`` is what these leave unexplained, negative where they overlap (with a last round only
    partly full, the slots that opened first make one call more, so the opening counts less).
    """
    from sqlalchemy import select

    from extractor.store.tables import attempts, runs

    with store.engine.connect() as connection:
        started, finished = connection.execute(select(runs.c.started_at, runs.c.finished_at).where(runs.c.id == run_id)).one()
        rows = connection.execute(select(attempts.c.created_at, attempts.c.latency_ms)
                                  .where(attempts.c.run_id == run_id)).all()
    if not rows or finished is None:
        return {}  # no call was made, or the run did not end: nothing to take apart
    calls = sorted((at - started).total_seconds() for at, _ in rows)
    answers = sorted((at - started).total_seconds() + latency_ms / 1000 for at, latency_ms in rows)
    slots = min(concurrency, len(calls))
    gaps = [calls[i + slots] - answers[i] for i in range(len(calls) - slots)]
    rounds = -(-len(calls) // slots)
    parts = {
        "outside_s": seconds - (finished - started).total_seconds(),
        "opening_s": calls[slots - 1],
        "uneven_s": (rounds - len(calls) / slots) * latency_s,
        "late_ms": statistics.mean(latency_ms for _, latency_ms in rows) - latency_s * 1000,
        "gap_ms": statistics.mean(gaps) * 1000 if gaps else 0.0,
        "tail_s": (finished - started).total_seconds() - answers[-1],
    }
    explained = (parts["outside_s"] + parts["opening_s"] + parts["uneven_s"] + parts["tail_s"]
                 + (rounds * parts["late_ms"] + (rounds - 1) * parts["gap_ms"]) / 1000)
    ideal_s = len(calls) * latency_s / slots
    return {**parts, "rounds": rounds, "ideal_s": ideal_s, "other_s": seconds - ideal_s - explained}


def level(base_url: str, database_url: str, folder: Path, concurrency: int, latency_s: float) -> dict[str, Any]:
    from extractor import offload
    from extractor.contracts import get_contract
    from extractor.engine import AdaptiveLimit, Engine, RunSettings
    from extractor.providers import ProviderSettings, from_string
    from extractor.store import open_store

    async def warm_up() -> None:  # start the CPU pool and import the segmenters before the clock starts
        for name, _, _ in SAMPLES:
            document, _ = await offload.read(ROOT / "samples" / name)
            await offload.validate("{}", document, get_contract("work_procedure"))

    asyncio.run(warm_up())
    store = open_store(database_url)
    limit = AdaptiveLimit(concurrency)
    provider = from_string("openai:bench", base_url=base_url, on_rate_limit=limit.on_rate_limit,
                           settings=ProviderSettings(timeout_s=30, max_transport_retries=0, connections=concurrency))
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"), concurrency=concurrency),
                        limit=limit)
    cpu_before = time.process_time()
    summary = asyncio.run(engine.run([str(folder)]))
    process_cpu = time.process_time() - cpu_before
    offload.POOL.close()  # the pool's peak memory is counted once its processes have exited
    documents = len(summary.outcomes)
    return {
        "concurrency": concurrency,
        "documents": documents,
        "counts": dict(summary.counts),
        "seconds": summary.seconds,
        "stage_ms": {stage: seconds * 1000 / documents for stage, seconds in engine.cpu_seconds.items()},
        "process_cpu_ms": process_cpu * 1000 / documents,
        "peak_rss_mb": own_peak_kib() / 1024,
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "integrity": store.integrity_check(),
        "loss": where_time_went(store, summary.run_id or "", concurrency, latency_s, summary.seconds),
    }


# ---------------------------------------------------------------- the baseline: a bare aiohttp client


def bare(base_url: str, concurrency: int, calls: int) -> dict[str, Any]:
    """``calls`` chat calls through aiohttp alone, ``concurrency`` in flight: the HTTP client's own cost."""
    import aiohttp

    texts = [(ROOT / "samples" / name).read_text(encoding="utf-8") for name, _, _ in SAMPLES]

    async def run() -> float:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector, headers={"Authorization": "Bearer bench"}) as session:
            pending = iter(range(calls))

            async def worker() -> None:
                for number in pending:
                    body = {"model": "bench", "temperature": 0.0,
                            "messages": [{"role": "system", "content": "Extract the procedure as JSON."},
                                         {"role": "user", "content": texts[number % len(texts)]}]}
                    async with session.post(f"{base_url}/chat/completions", json=body) as response:
                        answer = json.loads(await response.read())
                    assert response.status == 200 and answer["choices"][0]["message"]["content"], answer

            began = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.monotonic() - began

    cpu_before = time.process_time()
    seconds = asyncio.run(run())
    return {"calls": calls, "seconds": seconds, "cpu_ms": (time.process_time() - cpu_before) * 1000 / calls,
            "peak_rss_mb": own_peak_kib() / 1024}


def provider_alone(base_url: str, concurrency: int, calls: int) -> dict[str, Any]:
    """The same calls through the product's provider alone (request built, answer parsed, its HTTP session):
    what a model call costs the run process beside the pipeline's work."""
    from dataclasses import fields

    from extractor.contracts import get_contract
    from extractor.generate import GenerationRequest
    from extractor.providers import ProviderSettings, from_string

    texts = [(ROOT / "samples" / name).read_text(encoding="utf-8") for name, _, _ in SAMPLES]
    contract = get_contract("work_procedure")
    sized = {"connections": concurrency} if "connections" in {f.name for f in fields(ProviderSettings)} else {}
    provider = from_string("openai:bench", base_url=base_url,
                           settings=ProviderSettings(timeout_s=30, max_transport_retries=0, **sized))
    requests = [GenerationRequest(messages=[{"role": "system", "content": "Extract the procedure as JSON."},
                                            {"role": "user", "content": text}],
                                  schema=contract.schema, schema_name=contract.name) for text in texts]

    async def run() -> float:
        pending = iter(range(calls))

        async def worker() -> None:
            for number in pending:
                result = await provider.generate(requests[number % len(requests)])
                assert result.text, result

        began = time.monotonic()
        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            await provider.aclose()
        return time.monotonic() - began

    cpu_before = time.process_time()
    seconds = asyncio.run(run())
    return {"calls": calls, "seconds": seconds, "cpu_ms": (time.process_time() - cpu_before) * 1000 / calls,
            "peak_rss_mb": own_peak_kib() / 1024}


# ---------------------------------------------------------------- orchestration


def fresh_database(workdir: Path, postgres_admin: str | None, concurrency: int) -> tuple[str, Any]:
    if not postgres_admin:
        return f"sqlite:///{workdir}/bench_c{concurrency}.db", lambda: None
    from sqlalchemy import create_engine, make_url, text

    name = f"extract_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_admin, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(postgres_admin).set(database=name).render_as_string(hide_password=False), drop


class Servers:
    """One scripted server process per latency, started on first use."""

    def __init__(self) -> None:
        self._running: dict[float, tuple[subprocess.Popen[str], str]] = {}

    def url(self, latency_s: float) -> str:
        if latency_s not in self._running:
            server = subprocess.Popen([sys.executable, __file__, "--serve", "--latency", str(latency_s)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert server.stdout is not None
            self._running[latency_s] = (server, server.stdout.readline().strip())
        return self._running[latency_s][1]

    def stop(self) -> None:
        for server, _ in self._running.values():
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=10)


def print_losses(losses: list[tuple[int, dict[str, Any]]]) -> None:
    """Where each level's time beyond the ideal went (``where_time_went``), in seconds of the level's run."""
    print(f"\nwhere the time beyond the ideal went, seconds (late answer and slot gap: ms per call, x rounds)\n"
          f"{'conc':>4} {'ideal':>7} {'loss':>6} = {'outside':>7} + {'opening':>7} + {'uneven':>6} + "
          f"{'rounds x (late answer + slot gap)':>33} + {'tail':>5} + {'other':>6}")
    for concurrency, result in losses:
        loss = result["loss"]
        if not loss:
            print(f"{concurrency:>4} no model call, or no end, on record")
            continue
        ideal_s = loss["ideal_s"]
        per_round = f"{loss['rounds']:.0f} x ({loss['late_ms']:.1f} + {loss['gap_ms']:.1f} ms)"
        print(f"{concurrency:>4} {ideal_s:>7.2f} {result['seconds'] - ideal_s:>6.3f} = {loss['outside_s']:>7.3f} + "
              f"{loss['opening_s']:>7.3f} + {loss['uneven_s']:>6.3f} + {per_round:>33} + {loss['tail_s']:>5.3f} + "
              f"{loss['other_s']:>6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64, 256])
    parser.add_argument("--waves", type=int, default=10, help="rounds of calls per level, at least")
    parser.add_argument("--max-rate", type=float, default=64.0, help="highest ideal documents per second")
    parser.add_argument("--postgres", metavar="ADMIN_URL", help="run on fresh PostgreSQL databases")
    parser.add_argument("--quick", action="store_true", help="100 documents at concurrency below 32")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--level", nargs=4, metavar=("BASE_URL", "DB_URL", "FOLDER", "C"), help=argparse.SUPPRESS)
    parser.add_argument("--bare", nargs=3, metavar=("BASE_URL", "C", "CALLS"), help=argparse.SUPPRESS)
    parser.add_argument("--provider", nargs=3, metavar=("BASE_URL", "C", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.latency)
        return
    if args.level:
        base_url, database_url, folder, concurrency = args.level
        print(json.dumps(level(base_url, database_url, Path(folder), int(concurrency), args.latency)))
        return
    if args.bare:
        print(json.dumps(bare(args.bare[0], int(args.bare[1]), int(args.bare[2]))))
        return
    if args.provider:
        print(json.dumps(provider_alone(args.provider[0], int(args.provider[1]), int(args.provider[2]))))
        return

    servers = Servers()
    try:
        with tempfile.TemporaryDirectory(prefix="extract-bench-") as temp:
            workdir = Path(temp)
            print(f"database {'PostgreSQL' if args.postgres else 'SQLite (WAL)'}; {os.cpu_count()} CPUs; "
                  f"server in its own process; at least {args.waves} rounds of calls per level")
            print(f"{'conc':>4} {'latency':>7} {'docs':>5} {'seconds':>8} {'docs/s':>7} {'ideal':>7} {'share':>6}  "
                  f"{'pipeline CPU ms/doc = segment + validate + db':<45} {'run process':>11} "
                  f"{'peak RSS run + largest worker':>29}")
            verdicts = []
            losses: list[tuple[int, dict[str, Any]]] = []
            for concurrency in args.concurrency:
                latency = max(args.latency, concurrency / args.max_rate)
                count = (min(args.documents, 100) if args.quick and concurrency < 32
                         else max(args.documents, args.waves * concurrency))
                folder = workdir / f"docs_{count}"
                if not folder.exists():
                    write_batch(folder, count)
                database_url, drop = fresh_database(workdir, args.postgres, concurrency)
                try:
                    child = subprocess.run(
                        [sys.executable, __file__, "--level", servers.url(latency), database_url, str(folder),
                         str(concurrency), "--latency", str(latency)],
                        capture_output=True, text=True, check=False, env={**os.environ, "OPENAI_API_KEY": ""})
                finally:
                    drop()
                if child.returncode != 0:
                    sys.exit(f"concurrency {concurrency} failed:\n{child.stderr}")
                result = json.loads(child.stdout.strip().splitlines()[-1])
                calls: dict[str, dict[str, Any]] = {}
                for mode in ("provider", "bare"):  # the provider alone, then the baseline: same calls, same server
                    child = subprocess.run(
                        [sys.executable, __file__, f"--{mode}", servers.url(latency), str(concurrency), str(count)],
                        capture_output=True, text=True, check=False, env={**os.environ, "OPENAI_API_KEY": ""})
                    if child.returncode != 0:
                        sys.exit(f"{mode} at concurrency {concurrency} failed:\n{child.stderr}")
                    calls[mode] = json.loads(child.stdout.strip().splitlines()[-1])
                bare_result = calls["bare"]
                rate = result["documents"] / result["seconds"]
                ideal = min(concurrency, result["documents"]) / latency
                bare_rate = bare_result["calls"] / bare_result["seconds"]
                stages = result["stage_ms"]
                pipeline_ms = sum(stages.values())
                parts = " + ".join(f"{stages.get(s, 0):.1f}" for s in ("ingest+segment", "validate", "database"))
                print(f"{concurrency:>4} {latency:>6g}s {result['documents']:>5} {result['seconds']:>8.1f} {rate:>7.2f} "
                      f"{ideal:>7.2f} {rate / ideal:>6.0%}  {pipeline_ms:>6.1f} = {parts:<36} "
                      f"{result['process_cpu_ms']:>8.1f} ms {result['peak_rss_mb']:>9.0f} MB + "
                      f"{result['worker_peak_rss_mb']:>6.0f} MB", flush=True)
                for label, mode in (("provider alone", "provider"), ("bare aiohttp", "bare")):
                    alone = calls[mode]
                    alone_rate = alone["calls"] / alone["seconds"]
                    print(f"{label:>18} {alone['calls']:>5} {alone['seconds']:>8.1f} {alone_rate:>7.2f} {ideal:>7.2f} "
                          f"{alone_rate / ideal:>6.0%}  {'':<45} {alone['cpu_ms']:>8.2f} ms "
                          f"{alone['peak_rss_mb']:>9.0f} MB", flush=True)
                if result["counts"] != {"READY_FOR_REVIEW": result["documents"]} or result["integrity"]:
                    print(f"     unexpected outcome: {result['counts']} {result['integrity'][:3]}")
                verdicts.append((concurrency, rate / ideal, pipeline_ms, bare_rate / ideal, result["process_cpu_ms"],
                                 bare_result["cpu_ms"], calls["provider"]["cpu_ms"]))
                losses.append((concurrency, result))
            print_losses(losses)
            for concurrency, share, _, bare_share, cpu_ms, bare_cpu_ms, provider_cpu_ms in verdicts:
                if concurrency >= 64:
                    ok = share >= TARGET_SHARE
                    print(f"concurrency {concurrency}: {share:.0%} of ideal ({'OK' if ok else 'BELOW'} target "
                          f"{TARGET_SHARE:.0%}), bare aiohttp {bare_share:.0%} (run / bare {share / bare_share:.2f}); "
                          f"CPU per call: run process "
                          f"{cpu_ms:.2f} ms, provider alone {provider_cpu_ms:.2f} ms, bare aiohttp {bare_cpu_ms:.2f} ms")
            worst = max(verdict[2] for verdict in verdicts)
            print(f"pipeline CPU per document: at most {worst:.1f} ms ({'OK' if worst < TARGET_CPU_MS else 'OVER'} "
                  f"target {TARGET_CPU_MS:.0f} ms)")
    finally:
        servers.stop()


if __name__ == "__main__":
    main()
