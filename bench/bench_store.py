"""The run log at scale: bytes per document run, and whether ``review``, ``stats`` and ``compare`` slow down as it grows.

1. Bytes per document run, measured with a real run: ``extract``'s pipeline converts 3-sentence documents
   through the scripted OpenAI-compatible server (``tests/support/llm_server.py``, real HTTP) into a fresh
   database; total database bytes (SQLite: the file after a WAL checkpoint and VACUUM; PostgreSQL: every
   table with its indexes and TOAST after VACUUM FULL) divided by document runs. Twice: an answer that
   passes (one attempt per document) and one that needs the repair (two attempts).
2. Scale: run logs of 10,000 and 100,000 document runs, built with bulk inserts into the store's own
   tables and spread over runs as real use would be (runs of 200 documents, two models, two prompt
   versions, READY / MANUAL / ERROR results, a repair for one document in five; the documents of every run
   but the newest five already approved or rejected). Each command runs as a user runs it (a new
   ``python -m extractor`` process, start-up included), 6 times per size, the sizes taking turns so that a
   busy moment of the machine weighs on both; the median is printed for both sizes with the ratio
   100k / 10k, next to ``extract --help`` as the start-up floor.

    python bench/bench_store.py [--sizes 10000 100000] [--documents 2000] [--postgres ADMIN_URL] [--skip-bytes]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))  # the repository's ``tests`` package (its support modules)

RUN_SIZE = 200
WAITING_RUNS = 5
REPEATS = 6
TARGET_BYTES = 4096
TARGET_RATIO = 1.10
SOURCE = ("# Leave Request {n}\n\nThe employee submits a leave request in the HR portal. "
          "The team lead approves or rejects the request within two days.\n")
ANSWER: dict[str, Any] = {
    "documentPurpose": None,
    "participants": [{"id": "employee", "name": "Employee"}, {"id": "team_lead", "name": "Team lead"}],
    "processSteps": [{"order": 1, "actorId": "employee", "action": "Submit a leave request in the HR portal."},
                     {"order": 2, "actorId": "team_lead", "action": "Approve or reject the request within two days."}],
    "rules": [], "assignmentRule": None,
    "missingFields": [{"fieldPath": "documentPurpose", "question": "What is the purpose of this procedure?"},
                      {"fieldPath": "assignmentRule", "question": "Which team lead decides?"}],
    "evidence": [
        {"fieldPath": "participants[0]", "sourceExcerpt": "The employee submits a leave request in the HR portal."},
        {"fieldPath": "participants[1]",
         "sourceExcerpt": "The team lead approves or rejects the request within two days."},
        {"fieldPath": "processSteps[0]", "sourceExcerpt": "The employee submits a leave request in the HR portal."},
        {"fieldPath": "processSteps[1]",
         "sourceExcerpt": "The team lead approves or rejects the request within two days."}],
    "sentenceCoverage": [{"sentenceId": "s1", "status": "EXCLUDED", "reason": "title"},
                         {"sentenceId": "s2", "status": "MAPPED", "fieldPaths": ["participants[0]", "processSteps[0]"]},
                         {"sentenceId": "s3", "status": "MAPPED", "fieldPaths": ["participants[1]", "processSteps[1]"]}],
}


# ---------------------------------------------------------------- databases


@contextmanager
def fresh_database(workdir: Path, name: str, postgres_admin: str | None) -> Iterator[str]:
    """An empty SQLite file, or a PostgreSQL database created through the admin URL and dropped after."""
    from tests.support.databases import fresh_database as fresh

    if postgres_admin:
        os.environ["EXTRACT_TEST_POSTGRES_URL"] = postgres_admin
    folder = workdir / name
    folder.mkdir()
    with fresh("postgresql" if postgres_admin else "sqlite", folder) as url:
        yield url


def database_bytes(url: str) -> int:
    """Everything the database occupies once compacted (free pages and dead rows are not data)."""
    from sqlalchemy import create_engine, make_url, text

    if make_url(url).get_backend_name() == "sqlite":
        path = Path(make_url(url).database or "")
        engine = create_engine(url)
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.exec_driver_sql("VACUUM")
        engine.dispose()
        return path.stat().st_size
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("VACUUM FULL"))
        size = connection.execute(text(
            "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public'")).scalar()
    engine.dispose()
    return int(size or 0)


# ---------------------------------------------------------------- 1. bytes per document run (a real run)


def bytes_per_document_run(url: str, folder: Path, documents: int, repair: bool) -> tuple[int, int]:
    """(database bytes, document runs) after converting ``documents`` documents through the scripted server."""
    from extractor.contracts import get_contract
    from extractor.engine import AdaptiveLimit, Engine, RunSettings
    from extractor.providers import ProviderSettings, from_string
    from extractor.store import open_store
    from tests.support.llm_server import Reply, ScriptedLLMServer

    good = json.dumps(ANSWER)
    uncovered = json.dumps({**ANSWER, "sentenceCoverage": ANSWER["sentenceCoverage"][:2]})
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(documents):
        (folder / f"leave_{n:05d}.md").write_text(SOURCE.format(n=n), encoding="utf-8")

    def answer(body: dict[str, Any] | None, _number: int) -> Reply:
        is_repair = len((body or {}).get("messages", [])) > 2
        return Reply(uncovered if repair and not is_repair else good)

    with ScriptedLLMServer(answer) as server:
        store = open_store(url)
        limit = AdaptiveLimit(16)
        provider = from_string("openai:bench", base_url=server.base_url, on_rate_limit=limit.on_rate_limit,
                               settings=ProviderSettings(timeout_s=30, max_transport_retries=0, connections=16))
        summary = asyncio.run(Engine(store, provider, RunSettings(contract=get_contract("work_procedure"),
                                                                   concurrency=16), limit=limit).run([str(folder)]))
        assert summary.counts.get("READY_FOR_REVIEW") == documents, dict(summary.counts)
        assert store.integrity_check() == []
        store.close()
    return database_bytes(url), documents


# ---------------------------------------------------------------- 2. a large run log, bulk-inserted


def build(url: str, size: int) -> list[str]:
    """``size`` document runs in runs of ``RUN_SIZE``; returns the run ids, oldest first."""
    from sqlalchemy import bindparam, insert, update

    from extractor.contracts import get_contract
    from extractor.generate.prompt import load_prompt, render_request
    from extractor.store import open_store, tables
    from extractor.store.requests import split
    from extractor.vocab import AttemptKind, AttemptOutcome, DocumentState, ReviewDecision, RunStatus
    from tests.support.runlog import make_document, run_config

    store = open_store(url)
    contract = get_contract("work_procedure")
    prompt = load_prompt(contract)
    request = render_request(prompt, contract, make_document(0))
    template = split(request)  # every attempt sends this request: its fingerprint is every attempt's request_hash
    assert template.part is not None
    sentences = [s.to_json() for s in make_document(0).sentences]
    answer = json.dumps(ANSWER)
    findings_fail = [{"rule_id": "SENTENCE_NOT_ACCOUNTED", "severity": "error", "location": "$.sentenceCoverage",
                      "message": "sentence s3 has no coverage entry"}]
    runs = size // RUN_SIZE
    start = datetime(2026, 1, 1, tzinfo=UTC)
    run_ids = [uuid.uuid4().hex for _ in range(runs)]
    document_run_id = attempt_id = review_id = 0
    with store.engine.begin() as connection:
        connection.execute(insert(tables.request_parts), [{"sha256": template.part[0], "content": template.part[1]}])
        for r, run_id in enumerate(run_ids):
            config = run_config(model=f"model-{r % 2}", prompt_version=f"v{1 + (r // 2) % 2}")
            when = start + timedelta(hours=r)
            connection.execute(insert(tables.runs), [{
                "id": run_id, "started_at": when, "finished_at": when + timedelta(minutes=30),
                "status": RunStatus.finished, "contract": "work_procedure", "contract_version": 1,
                "prompt_version": config.prompt_version, "model": config.model, "provider": "openai",
                "validator_version": "1.0.0", "segmenter": config.segmenter, "judge_model": None,
                "config_hash": config.config_hash, "config": {}, "command": "extract run docs/", "host": "bench",
                "pid": 1, "heartbeat_at": when}])
            decided = r < runs - WAITING_RUNS
            documents, document_runs, claims, attempts, reviews, approved = [], [], [], [], [], []
            for d in range(RUN_SIZE):
                number = r * RUN_SIZE + d + 1
                document_run_id += 1
                sha = hashlib.sha256(f"{r}:{d}".encode()).hexdigest()
                state = (DocumentState.ERROR if d % 20 == 0 else DocumentState.MANUAL_REVIEW if d % 5 == 1
                         else DocumentState.READY_FOR_REVIEW)
                documents.append({"id": number, "sha256": sha, "segmenter": config.segmenter,
                                  "path": f"docs/{r}/{d}.md", "format": "md", "encoding": "utf-8", "char_count": 130,
                                  "sentence_count": 3, "sentences": sentences, "created_at": when})
                final = None
                outcomes = ([AttemptOutcome.transport_error] if state == DocumentState.ERROR else
                            [AttemptOutcome.failed, AttemptOutcome.failed] if state == DocumentState.MANUAL_REVIEW else
                            [AttemptOutcome.failed, AttemptOutcome.passed] if d % 5 == 2 else [AttemptOutcome.passed])
                for n, outcome in enumerate(outcomes, start=1):
                    attempt_id += 1
                    answered = outcome != AttemptOutcome.transport_error
                    attempts.append({
                        "id": attempt_id, "document_run_id": document_run_id, "run_id": run_id, "document_id": number,
                        "number": n, "kind": AttemptKind.generate if n == 1 else AttemptKind.repair,
                        "prompt_version": config.prompt_version, "request": template.own,
                        "request_part": template.part[0], "request_hash": request.fingerprint,
                        "raw_response": answer if answered else None,
                        "parsed": None, "parsed_is_raw": answered,
                        "findings": findings_fail if outcome == AttemptOutcome.failed else [], "fields": None,
                        "sentences": None, "evidence_spans": None, "passed": outcome == AttemptOutcome.passed,
                        "outcome": outcome, "mode": "json_schema", "model": config.model, "prompt_tokens": 900,
                        "completion_tokens": 300, "latency_ms": 800.0, "transport": [], "error": None,
                        "created_at": when, "finished_at": when})
                    final = attempt_id if answered else None
                document_runs.append({"id": document_run_id, "run_id": run_id, "document_id": number,
                                      "path": f"docs/{r}/{d}.md", "config_hash": config.config_hash, "state": state,
                                      "cause": None, "needs_person": [], "final_attempt_id": final,
                                      "tags": [f"team:{d % 4}"], "started_at": when, "finished_at": when,
                                      "decided": decided and state != DocumentState.ERROR})
                claims.append({"config_hash": config.config_hash, "document_id": number,
                               "document_run_id": document_run_id, "run_id": run_id, "state": state,
                               "claimed_at": when, "updated_at": when})
                if decided and state != DocumentState.ERROR:
                    review_id += 1
                    approve = state == DocumentState.READY_FOR_REVIEW
                    reviews.append({"id": review_id, "document_run_id": document_run_id, "reviewer": "kim",
                                    "decision": ReviewDecision.approved if approve else ReviewDecision.rejected,
                                    "note": None if approve else "wrong actor", "created_at": when})
                    if approve:
                        approved.append({"document_sha256": sha, "document_path": f"docs/{r}/{d}.md",
                                         "contract": "work_procedure", "contract_version": 1, "record": ANSWER,
                                         "evidence_spans": None, "attempt_id": final, "run_id": run_id,
                                         "reviewer": "kim", "note": None, "edited": False, "approved_at": when})
            connection.execute(insert(tables.documents), documents)
            connection.execute(insert(tables.document_runs), [{**row, "final_attempt_id": None} for row in document_runs])
            connection.execute(insert(tables.attempts), attempts)
            connection.execute(insert(tables.claims), claims)
            finals = [{"run": row["id"], "final": row["final_attempt_id"]} for row in document_runs
                      if row["final_attempt_id"] is not None]
            connection.execute(update(tables.document_runs).where(tables.document_runs.c.id == bindparam("run"))
                               .values(final_attempt_id=bindparam("final")), finals)
            if reviews:
                connection.execute(insert(tables.reviews), reviews)
            if approved:
                connection.execute(insert(tables.approved_records), approved)
    store.close()
    return run_ids


def timed(command: list[str], env: dict[str, str], expect: Callable[[int], bool]) -> float:
    """The wall time of one ``extract ...`` in a new process."""
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "extractor", *command], capture_output=True, text=True, env=env,
                            cwd=ROOT)
    if not expect(result.returncode):
        raise SystemExit(f"extract {' '.join(command)} exited {result.returncode}: {result.stderr[-2000:]}")
    return time.perf_counter() - began


def commands(run_ids: list[str]) -> dict[str, list[str]]:
    baseline, candidate = run_ids[-3], run_ids[-1]  # the same model, prompt v1 against v2
    return {
        "review": ["review"],
        "stats": ["stats"],
        "compare": ["compare", baseline, candidate],
    }


def scale(workdir: Path, sizes: list[int], postgres: str | None) -> dict[str, dict[int, float]]:
    """Median wall time per command and size. Both run logs are built first, then the sizes take turns
    (small, large, large, small, ...), so a slow minute of a shared machine falls on both alike."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("EXTRACT_APPROVED_DATABASE_URL", None)
    with ExitStack() as stack:
        built: dict[int, tuple[str, dict[str, list[str]]]] = {}
        for size in sizes:
            url = stack.enter_context(fresh_database(workdir, f"scale_{size}", postgres))
            began = time.perf_counter()
            run_ids = build(url, size)
            print(f"built {size:,} document runs in {len(run_ids)} runs in {time.perf_counter() - began:.0f} s",
                  file=sys.stderr)
            built[size] = url, commands(run_ids)
        times: dict[str, dict[int, list[float]]] = {"extract --help (start-up)": {size: [] for size in sizes}}
        for name in built[sizes[0]][1]:
            times[name] = {size: [] for size in sizes}
        for round_ in range(REPEATS):
            order = sizes if round_ % 2 == 0 else sizes[::-1]
            for size in order:
                url, size_commands = built[size]
                times["extract --help (start-up)"][size].append(timed(["--help"], env, lambda code: code == 0))
                for name, command in size_commands.items():
                    times[name][size].append(timed([*command, "--database", url], env,
                                                   lambda code: code in (0, 1, 3, 4)))
    return {name: {size: statistics.median(values) for size, values in by_size.items()}
            for name, by_size in times.items()}


# ---------------------------------------------------------------- main


def main() -> None:
    from installed import as_installed

    as_installed()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs=2, default=[10_000, 100_000])
    parser.add_argument("--documents", type=int, default=2000, help="documents of the real run that measures bytes")
    parser.add_argument("--postgres", help="admin URL: fresh PostgreSQL databases instead of SQLite files")
    parser.add_argument("--skip-bytes", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_store_") as tmp:
        workdir = Path(tmp)
        backend = "PostgreSQL" if args.postgres else "SQLite"
        if not args.skip_bytes:
            print(f"bytes per document run ({backend}, {args.documents:,} 3-sentence documents through the scripted "
                  f"server; target <= {TARGET_BYTES:,})")
            for label, repair in (("passes first time (1 attempt)", False), ("repaired (2 attempts)", True)):
                with fresh_database(workdir, f"bytes_{repair}", args.postgres) as url:
                    total, runs = bytes_per_document_run(url, workdir / f"docs_{repair}", args.documents, repair)
                print(f"  {label:<32} {total:>12,} bytes / {runs:,} = {total / runs:>7,.0f} bytes per document run")
        small, large = args.sizes
        print(f"\ncommand time, median of {REPEATS}, sizes taking turns ({backend}; new process each, start-up included; "
              f"target ratio "
              f"<= {TARGET_RATIO:.2f})")
        print(f"  {'command':<28} {small:>10,} {large:>10,}   ratio")
        for name, times in scale(workdir, args.sizes, args.postgres).items():
            print(f"  {name:<28} {times[small]:>9.2f}s {times[large]:>9.2f}s   {times[large] / times[small]:.2f}")


if __name__ == "__main__":
    main()
