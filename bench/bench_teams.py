"""A big team's reads cost what a reviewer's do: ``GET /v1/submissions/{id}``, ``GET /v1/batches`` and
``GET /v1/batches/{id}`` of a submitter of one team against the same requests of a department-wide reviewer, on a
run log where that team submitted 100,000 batches (one document each), in the same run.

The run log is built with bulk inserts into the store's own tables (SQLite; with ``--postgres`` a database on the
tests' throwaway cluster, or on ``EXTRACT_TEST_POSTGRES_URL``'s server: ``tests/support/databases.py``). The API is
the real app on uvicorn on a free port, asked over keep-alive HTTP. Rounds alternate the two tokens so a busy moment
of the machine weighs on both; the median time per request is printed for each, with the ratio submitter / reviewer
(target <= 1.2x). The store's own look-ups are timed the same way, next to the query the submitter's look-up made
before it became a join (the team's whole list of batches in an ``IN``).

    python bench/bench_teams.py [--batches 100000] [--rounds 7] [--requests 200] [--postgres]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))

TARGET = 1.2
TEAM = "team-a"


def build(url: str, batches: int) -> tuple[list[str], list[str]]:
    """``batches`` batches of one document each, all of ``TEAM``: the batch ids and task ids."""
    from sqlalchemy import insert

    from extractor.store import open_store
    from extractor.store.tables import batches as batch_table
    from extractor.store.tables import tasks as task_table
    from extractor.store.tables import uploads

    store = open_store(url)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    batch_ids = [uuid.uuid4().hex for _ in range(batches)]
    task_ids = [str(uuid.uuid4()) for _ in range(batches)]
    with store.engine.begin() as connection:
        upload = connection.execute(insert(uploads).values(sha256="0" * 64, name="a.md", size=1, content=b"a",
                                                           created_at=start)).inserted_primary_key[0]
        for first in range(0, batches, 5000):
            chunk = range(first, min(batches, first + 5000))
            at = [start + timedelta(seconds=n) for n in chunk]
            connection.execute(insert(batch_table), [{"id": batch_ids[n], "settings": {}, "submitted_by": "a-bot",
                                                      "owner": TEAM, "created_at": at[i]} for i, n in enumerate(chunk)])
            connection.execute(insert(task_table), [
                {"id": task_ids[n], "batch_id": batch_ids[n], "upload_id": upload, "state": "finished",
                 "outcome": "READY_FOR_REVIEW", "tokens": 0, "rule_ids": [], "deliveries": 1, "enqueued_at": at[i],
                 "started_at": at[i], "finished_at": at[i]} for i, n in enumerate(chunk)])
    store.close()
    return batch_ids, task_ids


def serve(url: str) -> tuple[str, Callable[[], None]]:
    import uvicorn

    from extractor.service.app import build_service, create_app
    from extractor.store import open_store
    from tests.support.redis_server import free_port

    service = build_service(open_store(url), broker=None, concurrency=1, model="openai:bench")
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=free_port(),
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)
        service.close()

    return f"http://127.0.0.1:{server.config.port}", stop


def timed(call: Callable[[], Any], count: int) -> float:
    """Seconds per call, over ``count`` calls."""
    began = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - began) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--postgres", action="store_true", help="on PostgreSQL (default: SQLite)")
    arguments = parser.parse_args()

    import httpx
    from sqlalchemy import select

    from extractor.store import open_store, tasks
    from extractor.store.tables import batches as batch_table
    from extractor.store.tables import tasks as task_table
    from extractor.store.tables import uploads
    from extractor.store.tokens import create_token

    with tempfile.TemporaryDirectory(prefix="bench-teams-") as folder, ExitStack() as stack:
        if arguments.postgres:
            from tests.support.databases import fresh_database

            url = stack.enter_context(fresh_database("postgresql", Path(folder)))
        else:
            url = f"sqlite:///{Path(folder) / 'run.db'}"
        began = time.perf_counter()
        batch_ids, task_ids = build(url, arguments.batches)
        print(f"run log: {arguments.batches:,} batches of {TEAM} in {time.perf_counter() - began:.1f} s ({url.split(':')[0]})")
        store = open_store(url)
        tokens = {"submitter": create_token(store.engine, "a-bot", "submitter", TEAM),
                  "reviewer": create_token(store.engine, "audit", "reviewer", all_owners=True)}
        scope = {"submitter": TEAM, "reviewer": None}
        middle = len(task_ids) // 2
        task, batch = task_ids[middle], batch_ids[middle]

        def old_get_task() -> Any:  # the submitter's look-up before: the team's batches in an IN
            query = (select(task_table.c.id, uploads.c.name).join(uploads, uploads.c.id == task_table.c.upload_id)
                     .where(task_table.c.id == task,
                            task_table.c.batch_id.in_(select(batch_table.c.id).where(batch_table.c.owner == TEAM))))
            with store.engine.connect() as connection:
                return connection.execute(query).first()

        store_calls: dict[str, Callable[[str], Any]] = {
            "get_task": lambda who: tasks.get_task(store.engine, task, scope[who]),
            "list_batches": lambda who: tasks.list_batches(store.engine, scope[who], limit=20),
            "tasks_of_batch": lambda who: tasks.tasks_of_batch(store.engine, batch, owner=scope[who]),
        }
        base, stop = serve(url)
        paths = {"GET /v1/submissions/{id}": f"/v1/submissions/{task}", "GET /v1/batches": "/v1/batches",
                 "GET /v1/batches/{id}": f"/v1/batches/{batch}"}
        measured: dict[str, dict[str, list[float]]] = {name: {"submitter": [], "reviewer": []}
                                                       for name in [*store_calls, *paths, "get_task before (IN)"]}
        try:
            with httpx.Client(base_url=base, timeout=60) as client:
                for who in ("submitter", "reviewer"):  # warm: the token's last use is written once
                    assert client.get(paths["GET /v1/batches"], headers={"Authorization": f"Bearer {tokens[who]}"}
                                      ).status_code == 200
                for number in range(arguments.rounds):
                    order = ("submitter", "reviewer") if number % 2 == 0 else ("reviewer", "submitter")
                    for who in order:
                        headers = {"Authorization": f"Bearer {tokens[who]}"}
                        for name, path in paths.items():
                            def ask(path: str = path, headers: dict[str, str] = headers) -> None:
                                response = client.get(path, headers=headers)
                                assert response.status_code == 200, response.text

                            measured[name][who].append(timed(ask, arguments.requests))
                        for name, call in store_calls.items():
                            measured[name][who].append(timed(lambda call=call, who=who: call(who), arguments.requests))
                    measured["get_task before (IN)"]["submitter"].append(timed(old_get_task, max(3, arguments.requests // 20)))
        finally:
            stop()
            store.close()
        print(f"median per request over {arguments.rounds} rounds of {arguments.requests} (target submitter <= "
              f"{TARGET}x reviewer):")
        for name, times in measured.items():
            submitter = statistics.median(times["submitter"]) * 1000
            if not times["reviewer"]:
                print(f"  {name:28} submitter {submitter:8.3f} ms")
                continue
            reviewer = statistics.median(times["reviewer"]) * 1000
            verdict = "ok" if submitter <= TARGET * reviewer else "OVER"
            print(f"  {name:28} submitter {submitter:8.3f} ms  reviewer {reviewer:8.3f} ms  "
                  f"{submitter / reviewer:5.2f}x  {verdict}")


if __name__ == "__main__":
    main()
