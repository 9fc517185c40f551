"""The run-log store on real databases: SQLite and PostgreSQL (a throwaway cluster, ``tests.support.databases``).

Every test gets a fresh database from the ``db_url`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import random
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, column, event, insert, inspect, make_url, table, text, update
from sqlalchemy.exc import IntegrityError, OperationalError
from typer.testing import CliRunner

from extractor.cli import app as cli_app
from extractor.contracts import get_contract
from extractor.generate import GenerationRequest
from extractor.generate.prompt import load_prompt, render_request
from extractor.ingest import load
from extractor.repair import render_repair
from extractor.segment import segment
from extractor.stats import correction_stats, rule_stats
from extractor.store import RunConfig, RunQuery, Store, StoreError, open_store, requests, tables
from extractor.store import tasks as store_tasks
from extractor.store.approved import NewApproval, approve, approved_records, reject, reviews_for
from extractor.store.db import (
    SCHEMA_REVISION,
    alembic_config,
    apply_migrations,
    create_store_engine,
    migration_connection,
)
from extractor.store.integrity import problems
from extractor.validate import validate
from extractor.vocab import DocumentState, GateDecision, Outcome, RunStatus
from tests.support.corpus import GOOD, invented, script, write_documents
from tests.support.corpus import run as corpus_run
from tests.support.databases import sqlite_defensive
from tests.support.llm_server import ScriptedLLMServer
from tests.support.runlog import REQUEST, dead_pid, healthy_log, make_document, plant, query_plans, record, run_config

HEAD = "0016"
RACE_DOCUMENTS = 50
RACE_TIMEOUT_S = 180


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    with open_store(db_url) as opened:
        yield opened


# -- schema and migrations ---------------------------------------------------------------------------------


def test_empty_database_is_migrated_to_head_and_matches_the_tables(store: Store) -> None:
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD == SCHEMA_REVISION
    with store.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert context.get_current_heads() == (HEAD,)
        assert compare_metadata(context, tables.metadata) == []
    names = set(inspect(store.engine).get_table_names())
    assert {
        "runs",
        "documents",
        "document_runs",
        "claims",
        "attempts",
        "approved_records",
        "reviews",
    } <= names


def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(store: Store) -> None:
    if store.engine.dialect.name != "sqlite":
        pytest.skip("SQLite settings")
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000


def database_at(db_url: str, revision: str) -> Engine:
    """The database migrated to ``revision`` only, as an older extractor left it."""
    engine = create_store_engine(db_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return engine


def test_database_at_revision_0001_is_upgraded_on_open(db_url: str) -> None:
    engine = database_at(db_url, "0001")
    assert "approved_records" not in inspect(engine).get_table_names()
    run_id = Store(engine).start_run(run_config())  # the run log of 0001 is in use
    engine.dispose()

    with open_store(db_url) as store:
        with store.engine.connect() as connection:
            assert MigrationContext.configure(connection).get_current_heads() == (HEAD,)
        assert {"approved_records", "reviews"} <= set(inspect(store.engine).get_table_names())
        run = store.get_run(run_id)
        assert run is not None and run.status == "running"


def test_a_log_of_revision_0004_in_use_is_upgraded_to_allow_blocked_and_run_outcomes(db_url: str) -> None:
    engine = database_at(db_url, "0004")
    old = Store(engine)
    run_id = old.start_run(run_config())
    document_id = old.get_or_create_document(make_document(1))
    with engine.begin() as connection:  # a document run as 0004 wrote it (the store writes columns added since)
        document_run = connection.execute(text(
            "INSERT INTO document_runs (run_id, document_id, path, config_hash, state, needs_person, tags, started_at) "
            f"VALUES ('{run_id}', {document_id}, 'docs/1.txt', '{run_config().config_hash}', 'PROCESSING', '[]', '[]', "
            "'2026-01-01 00:00:00') RETURNING id")).scalar_one()
        connection.execute(text(
            "INSERT INTO claims (config_hash, document_id, document_run_id, run_id, state, claimed_at, updated_at) "
            f"VALUES ('{run_config().config_hash}', {document_id}, {document_run}, '{run_id}', 'PROCESSING', "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"))
    with pytest.raises(IntegrityError):  # 0004 knows no BLOCKED state
        old.finish_document(document_run, DocumentState.BLOCKED)
    engine.dispose()

    with open_store(db_url) as store:
        attempt = record(store, document_run)  # attempts gained window columns later (0006): written after the upgrade
        assert store.finish_document(document_run, DocumentState.BLOCKED, cause="critical finding(s): SECRET_IN_OUTPUT",
                                     final_attempt_id=attempt)
        store.finish_run(run_id, RunStatus.finished, GateDecision.BLOCK)
        assert store.get_run(run_id).outcome == "BLOCK" and store.get_run(run_id).counts == {"BLOCKED": 1}
        with pytest.raises(IntegrityError), store.engine.begin() as connection:  # the CHECK still holds
            connection.execute(text(f"UPDATE document_runs SET state = 'APPROVED' WHERE id = {document_run}"))
        with pytest.raises(IntegrityError), store.engine.begin() as connection:
            connection.execute(text(f"UPDATE runs SET outcome = 'SHIP' WHERE id = '{run_id}'"))
        assert [d.id for d in store.undecided_document_runs([DocumentState.BLOCKED])] == [document_run]
        assert store.integrity_check() == []


def test_a_log_of_revision_0012_with_queued_tasks_is_upgraded_to_know_unsent_tasks_and_back(db_url: str) -> None:
    """0014 widens the tasks' CHECK in batch mode (a table copy on SQLite) and adds the broker a message went to and
    the name an upload was sent with: queued tasks of an older service keep their rows, and the outbox sends them
    once (their broker is unknown); downgraded, unsent tasks are queued again."""
    from extractor.store import tasks
    from extractor.vocab import TaskState

    engine = database_at(db_url, "0012")
    legacy, _ = tasks_of_0012(engine)
    engine.dispose()
    with open_store(db_url) as store:
        found = tasks.get_task(store.engine, legacy)
        assert found is not None and (found.state, found.name, found.sent_name) == ("queued", "a.md", None)
        batch, (unsent,) = tasks.add_batch(store.engine, {}, "sam", [tasks.Upload("b.md", b"# B", "../b.md")])
        assert tasks.get_task(store.engine, unsent).state == TaskState.unsent  # type: ignore[union-attr]
        due = tasks.to_send(store.engine, "broker-1", unsent_before=datetime.now(UTC) + timedelta(seconds=1),
                            stale_after_s=60, limit=10)
        assert sorted(due) == sorted([legacy, unsent])
        tasks.mark_sent(store.engine, due, "broker-1")
        assert tasks.to_send(store.engine, "broker-1", unsent_before=datetime.now(UTC) + timedelta(seconds=1),
                             stale_after_s=60, limit=10) == []
        assert tasks.to_send(store.engine, "broker-2", unsent_before=datetime.now(UTC) + timedelta(seconds=1),
                             stale_after_s=60, limit=10) == due  # a broker that restarted lost them
        assert tasks.to_send(store.engine, "broker-2", unsent_before=datetime.now(UTC), stale_after_s=60, limit=10,
                             batch_id=batch) == [unsent]
        with pytest.raises(IntegrityError), store.engine.begin() as connection:  # the CHECK still holds
            connection.execute(text("UPDATE tasks SET state = 'lost'"))
        assert store.integrity_check() == []
        with store.engine.begin() as connection:
            connection.execute(text("UPDATE tasks SET state = 'unsent' WHERE id = :id"), {"id": unsent})
    engine = create_store_engine(db_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0012")
    with engine.connect() as connection:
        assert sorted(connection.execute(text("SELECT state FROM tasks")).scalars()) == ["queued", "queued"]
    engine.dispose()


def tasks_of_0012(engine: Engine) -> tuple[str, int]:
    """A batch of one queued task as a service of revision 0012 wrote it: the task's id and its upload's."""
    now = datetime.now(UTC).isoformat()
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO batches (id, settings, submitted_by, created_at) "
                                "VALUES ('b1', '{}', 'sam', :now)"), {"now": now})
        connection.execute(text("INSERT INTO uploads (sha256, name, size, content, created_at) "
                                "VALUES (:sha, 'a.md', 3, :content, :now)"),
                           {"sha": hashlib.sha256(b"# A").hexdigest(), "content": b"# A", "now": now})
        upload = int(connection.execute(text("SELECT MAX(id) FROM uploads")).scalar_one())
        connection.execute(text("INSERT INTO tasks (id, batch_id, upload_id, state, tokens, rule_ids, deliveries, "
                                "enqueued_at) VALUES ('t1', 'b1', :upload, 'queued', 0, '[]', 0, :now)"),
                           {"upload": upload, "now": now})
    return "t1", upload


def test_migrations_downgrade_to_empty_and_upgrade_again(db_url: str) -> None:
    open_store(db_url).close()
    engine = create_store_engine(db_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    with open_store(db_url) as store:
        assert store.integrity_check() == []


@pytest.fixture
def defensive_sqlite() -> Iterator[None]:
    """Every SQLite connection opened during the test runs in SQLite's defensive mode (no schema edits)."""

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            sqlite_defensive(dbapi_connection)

    event.listen(Engine, "connect", on_connect)
    yield
    event.remove(Engine, "connect", on_connect)


def sound(engine: Engine) -> list[str]:
    """What SQLite's own checks say is wrong with the file (pages, indexes against tables, dangling keys)."""
    if engine.dialect.name != "sqlite":
        return []
    with engine.connect() as connection:
        pages = [line for (line,) in connection.exec_driver_sql("PRAGMA integrity_check") if line != "ok"]
        keys = [f"{table} row {rowid}: no {parent} row" for table, rowid, parent, _ in
                connection.exec_driver_sql("PRAGMA foreign_key_check")]
    return pages + keys


def test_migrations_round_trip_from_head_to_base_and_back_with_a_log_in_use(db_url: str, defensive_sqlite: None) -> None:
    """Down and up again through every constraint change (batch mode: SQLite rebuilds the tables) with rows in
    them, in SQLite's defensive mode, which refuses edits of the stored schema."""
    with open_store(db_url) as store:
        runs, document_runs, _ = healthy_log(store)  # BLOCKED document runs (0005) and an approval over a block
        _, [task] = store_tasks.add_batch(store.engine, {}, "kim", [("a.txt", b"text")])
        store_tasks.finish_task(store.engine, task, Outcome.BLOCKED, "critical finding", document_runs[4])  # (0012)
    engine = create_store_engine(db_url)
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:  # the mode is on: the way 0005 and 0012 used to widen a CHECK fails
            connection.exec_driver_sql("PRAGMA writable_schema = ON")
            with pytest.raises(OperationalError, match="may not be modified"):
                connection.exec_driver_sql("UPDATE sqlite_master SET sql = sql WHERE name = 'tasks'")
    assert sound(engine) == []

    apply_migrations(engine, "0011", downgrade=True)  # through 0012: tasks rebuilt
    assert sound(engine) == []
    with engine.connect() as connection:
        assert connection.execute(text("SELECT outcome FROM tasks")).scalar_one() == "MANUAL_REVIEW"
    apply_migrations(engine, "0004", downgrade=True)  # through 0005: document_runs and claims rebuilt
    assert sound(engine) == []
    with engine.connect() as connection:
        states = dict(connection.execute(text("SELECT id, state FROM document_runs")).all())
        assert connection.execute(text("SELECT count(*) FROM attempts")).scalar_one() == 6
        assert connection.execute(text("SELECT count(*) FROM reviews")).scalar_one() == 1
    assert [states[d] for d in document_runs] == ["READY_FOR_REVIEW"] * 4 + ["MANUAL_REVIEW"] * 2
    with pytest.raises(IntegrityError), engine.begin() as connection:  # 0004's constraint, as 0004 had it
        connection.execute(text(f"UPDATE document_runs SET state = 'BLOCKED' WHERE id = {document_runs[0]}"))

    apply_migrations(engine)  # up again, the same tables rebuilt with their rows
    assert sound(engine) == []
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert context.get_current_heads() == (HEAD,)
        assert compare_metadata(context, tables.metadata) == []
    with Store(engine) as store:
        assert [d.state for d in store.find_document_runs(ids=document_runs)][::-1] == (
            ["READY_FOR_REVIEW"] * 4 + ["MANUAL_REVIEW"] * 2)
        assert store.get_run(runs[0]).counts == {"READY_FOR_REVIEW": 4}
        assert store.integrity_check() == []
        store.finish_document(document_runs[5], DocumentState.BLOCKED, final_attempt_id=None)  # allowed again
        _, [again] = store_tasks.add_batch(store.engine, {}, "kim", [("b.txt", b"b")])  # 0007's tables came back empty
        assert store_tasks.finish_task(store.engine, again, Outcome.BLOCKED, None, None)

    apply_migrations(engine, "base", downgrade=True)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"} and sound(engine) == []
    apply_migrations(engine)
    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection, opts={"compare_type": True}),
                                tables.metadata) == []
    assert sound(engine) == []
    engine.dispose()


def test_a_migration_that_would_break_references_is_rolled_back_and_old_damage_does_not_block_one(db_url: str) -> None:
    """SQLite migrates with foreign keys off (batch mode rebuilds tables): the references of what a migration
    rebuilds are checked before it commits, against what they were before it started."""
    if not db_url.startswith("sqlite"):
        pytest.skip("SQLite migrates with foreign keys off; PostgreSQL keeps them on")
    with open_store(db_url) as store:
        _, document_runs, _ = healthy_log(store)
    plant(db_url, ["INSERT INTO reviews (id, document_run_id, decision, reviewer, created_at) VALUES (900, 777777, "
                   "'rejected', 'kim', '2026-01-01 00:00:00')"])  # damage from before: it does not block a migration
    engine = create_store_engine(db_url)
    with migration_connection(engine, {"document_runs"}) as connection:
        connection.execute(text("UPDATE runs SET status = 'finished'"))
    with pytest.raises(StoreError, match=r"break references of 1 row\(s\) of attempts to document_runs"):
        with migration_connection(engine, {"document_runs"}) as connection:
            connection.execute(text(f"DELETE FROM document_runs WHERE id = {document_runs[1]}"))
    with engine.connect() as connection:  # rolled back, and foreign keys are on again
        assert connection.execute(text(f"SELECT count(*) FROM document_runs WHERE id = {document_runs[1]}")).scalar() == 1
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_decisions_recorded_before_0013_are_counted_by_stats_corrections_after_the_upgrade(db_url: str) -> None:
    """0013 fills what ``stats --corrections`` reads (reviews.run_id, current, changes; review_fields) and the file
    name ``show PATH`` looks up, from what a log of 0012 holds: only the newest decision on a document run counts,
    an approval recorded before 0009 (no changed fields) is counted apart."""
    with open_store(db_url) as store:
        first, second = store.start_run(run_config()), store.start_run(run_config(model="other"))
        document_runs = [store.claim(run_id, run_config(model=model).config_hash,
                                     store.get_or_create_document(make_document(n)), f"in/box/{n}.txt").document_run_id
                         for n, (run_id, model) in enumerate([(first, "gpt-test")] * 4 + [(second, "other")] * 2)]
    engine = create_store_engine(db_url)
    apply_migrations(engine, "0012", downgrade=True)
    decisions = [  # (document run, decision, changed fields) in the order they were made
        (0, "approved", '["rules[]", "processSteps[].actorId"]'), (1, "approved", "[]"), (2, "approved", None),
        (3, "approved", '["rules[]"]'), (3, "rejected", None),  # superseded: counts as a rejection
        (4, "rejected", None), (4, "approved", '["rules[]"]'), (5, "approved", '["documentPurpose"]')]
    with engine.begin() as connection:
        for n, (index, decision, changed) in enumerate(decisions):
            connection.execute(text("INSERT INTO reviews (document_run_id, decision, reviewer, created_at, changed_fields) "
                                    "VALUES (:d, :decision, 'kim', :at, :changed)"),
                               {"d": document_runs[index], "decision": decision, "changed": changed,
                                "at": datetime(2026, 1, 1, 12, n)})
        connection.execute(text("UPDATE document_runs SET decided = TRUE"))
    apply_migrations(engine)
    with engine.connect() as connection:
        current = connection.execute(text("SELECT document_run_id, decision, run_id, changes FROM reviews "
                                          "WHERE current ORDER BY document_run_id")).all()
        fields = connection.execute(text("SELECT field_path, run_id FROM review_fields ORDER BY field_path, run_id")).all()
        names = {name for (name,) in connection.execute(text("SELECT name FROM document_runs"))}
    engine.dispose()
    assert [(d, decision, run_id, changes) for d, decision, run_id, changes in current] == [
        (document_runs[0], "approved", first, 2), (document_runs[1], "approved", first, 0),
        (document_runs[2], "approved", first, None), (document_runs[3], "rejected", first, None),
        (document_runs[4], "approved", second, 1), (document_runs[5], "approved", second, 1)]
    assert sorted(tuple(row) for row in fields) == sorted([("documentPurpose", second), ("processSteps[].actorId", first),
                                                           ("rules[]", first), ("rules[]", second)])
    assert names == {f"{n}.txt" for n in range(6)}
    with open_store(db_url) as store:
        groups = {group.model: group.to_json() for group in correction_stats(store)}
        assert groups["gpt-test"] == {"model": "gpt-test", "prompt_version": "v1", "contract": "work_procedure@v1",
                                      "approved": 2, "approved_unrecorded": 1, "approved_as_produced": 1,
                                      "fields": {"processSteps[].actorId": {"edited": 1, "share": 0.5},
                                                 "rules[]": {"edited": 1, "share": 0.5}}}
        assert groups["other"]["approved"] == 2 and groups["other"]["fields"] == {
            "documentPurpose": {"edited": 1, "share": 0.5}, "rules[]": {"edited": 1, "share": 0.5}}
        assert [group.model for group in correction_stats(store, [second])] == ["other"]
        assert [d.id for d in store.find_document_runs(same_file_name="elsewhere/3.txt")] == [document_runs[3]]
        assert store.integrity_check() == []


def test_database_from_a_newer_extractor_is_refused_with_one_line(db_url: str) -> None:
    open_store(db_url).close()
    engine = create_store_engine(db_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()

    with pytest.raises(StoreError) as refused:
        open_store(db_url)
    message = str(refused.value)
    assert f"revision 0099, newer than this extractor (head {HEAD}); upgrade extractor" in message
    assert "\n" not in message
    password = make_url(db_url).password
    if password:
        assert f":{password}@" not in message and ":***@" in message


def test_unreachable_or_invalid_database_messages_never_show_the_password() -> None:
    with pytest.raises(StoreError) as unreachable:
        open_store("postgresql+psycopg://extract:s3cret-pw@127.0.0.1:9/extract")
    assert "s3cret-pw" not in str(unreachable.value)
    assert "postgresql+psycopg://extract:***@127.0.0.1:9/extract" in str(unreachable.value)
    with pytest.raises(StoreError) as invalid:
        open_store("not a url :s3cret-pw@")
    assert "s3cret-pw" not in str(invalid.value)


# -- runs ---------------------------------------------------------------------------------------------------


def test_runs_store_config_without_secrets_and_timestamps_in_utc(store: Store) -> None:
    config = run_config(
        config={
            "concurrency": 4,
            "max_tokens": 800,
            "api_key": "sk-live-abcdefghijkl",
            "base_url": "http://u:pw@h/v1",
        },
        command="extract run docs --api-key sk-live-abcdefghijkl --max-tokens 800",
    )
    run_id = store.start_run(config)
    run = store.get_run(run_id)
    assert run is not None
    assert run.config == {
        "concurrency": 4,
        "max_tokens": 800,
        "api_key": "***",
        "base_url": "http://u:***@h/v1",
    }
    assert run.command == "extract run docs --api-key *** --max-tokens 800"
    assert run.config_hash == config.config_hash
    assert run.started_at.tzinfo is UTC and abs(run.started_at - datetime.now(UTC)) < timedelta(minutes=1)
    assert run.finished_at is None and run.counts == {}

    store.finish_run(run_id, "finished")
    finished = store.get_run(run_id)
    assert finished is not None and finished.status == "finished" and finished.finished_at is not None
    with pytest.raises(ValueError):
        store.finish_run(run_id, "running")


def test_config_hash_covers_exactly_the_result_deciding_fields() -> None:
    base = run_config()
    assert run_config(config={"concurrency": 99}, command="other", pid=1).config_hash == base.config_hash
    for changed in (
        {"model": "other"},
        {"prompt_version": "v2"},
        {"judge_model": "judge"},
        {"segmenter": "s2"},
    ):
        assert run_config(**changed).config_hash != base.config_hash


# -- documents and claims -----------------------------------------------------------------------------------


def test_document_is_stored_once_per_content_and_segmenter(store: Store) -> None:
    first = store.get_or_create_document(make_document(1))
    assert store.get_or_create_document(make_document(1)) == first
    assert store.get_or_create_document(make_document(1, segmenter="test-seg/2")) != first
    document = store.get_document(first)
    assert document is not None
    assert document.sentence_count == 2 and document.sentences[1]["id"] == "s2"
    assert document.char_count == len(make_document(1).text)


def test_claim_done_busy_and_force(store: Store) -> None:
    config = run_config()
    digest = config.config_hash
    first = store.start_run(config)
    document_id = store.get_or_create_document(make_document(1))
    claimed = store.claim(first, digest, document_id, "docs/1.txt")
    assert claimed.status == "claimed"

    second = store.start_run(config)
    assert store.claim(second, digest, document_id, "docs/1.txt") == ("busy", first)  # the holder is alive
    assert store.claim(first, digest, document_id, "docs/1.txt") == ("busy", first)  # same file given twice

    other = run_config(prompt_version="v2")
    other_run = store.start_run(other)
    assert store.claim(other_run, other.config_hash, document_id, "docs/1.txt").status == "claimed"

    attempt_id = record(store, claimed.document_run_id)
    assert store.finish_document(claimed.document_run_id, "READY_FOR_REVIEW", final_attempt_id=attempt_id)
    assert store.claim(second, digest, document_id, "docs/1.txt") == ("done", claimed.document_run_id)

    forced = store.claim(second, digest, document_id, "docs/1.txt", force=True)
    assert forced.status == "claimed" and forced.document_run_id != claimed.document_run_id
    earlier = store.latest_document_run(claimed.document_run_id)
    assert earlier is not None and earlier.state == "READY_FOR_REVIEW"  # forcing keeps the earlier result
    assert store.claim(first, digest, document_id, "docs/1.txt") == ("done", claimed.document_run_id)
    assert store.integrity_check() == []


@pytest.mark.parametrize("how", ["interrupted", "dead_pid", "stale_heartbeat", "crashed"])
def test_claim_of_a_stopped_run_is_taken_over(store: Store, db_url: str, how: str) -> None:
    config = run_config()
    holder = store.start_run(run_config(pid=dead_pid()) if how == "dead_pid" else config)
    document_id = store.get_or_create_document(make_document(1))
    held = store.claim(holder, config.config_hash, document_id, "docs/1.txt")
    newcomer = store.start_run(config)
    if how != "dead_pid":  # still alive until stopped below
        assert store.claim(newcomer, config.config_hash, document_id, "docs/1.txt") == ("busy", holder)

    if how == "interrupted":
        assert store.mark_interrupted(holder) == 1
    elif how == "stale_heartbeat":
        with store.engine.begin() as connection:
            old = datetime.now(UTC) - timedelta(seconds=store.stale_after_s + 5)
            connection.execute(update(tables.runs).where(tables.runs.c.id == holder).values(heartbeat_at=old))
    elif how == "crashed":
        store.finish_run(holder, "crashed")

    taken = store.claim(newcomer, config.config_hash, document_id, "docs/1.txt")
    assert taken.status == "claimed" and taken.document_run_id != held.document_run_id
    previous = store.latest_document_run(held.document_run_id)
    assert previous is not None and previous.state == "INTERRUPTED"
    # The stopped run coming back to finish its copy records it, but no longer owns the claim.
    assert store.finish_document(held.document_run_id, "MANUAL_REVIEW", cause="late") is False
    with store.engine.connect() as connection:
        owner = connection.execute(tables.claims.select()).one()
    assert owner.run_id == newcomer and owner.document_run_id == taken.document_run_id


def test_heartbeat_keeps_a_claim_on_another_host_alive(store: Store) -> None:
    config = run_config()
    elsewhere = store.start_run(run_config(host="another-host", pid=dead_pid()))
    document_id = store.get_or_create_document(make_document(1))
    store.claim(elsewhere, config.config_hash, document_id, "docs/1.txt")
    newcomer = store.start_run(config)
    # A pid is only meaningful on its own host: the heartbeat decides.
    assert store.claim(newcomer, config.config_hash, document_id, "docs/1.txt") == ("busy", elsewhere)
    with store.engine.begin() as connection:
        old = datetime.now(UTC) - timedelta(hours=1)
        connection.execute(update(tables.runs).where(tables.runs.c.id == elsewhere).values(heartbeat_at=old))
    store.heartbeat(elsewhere)
    assert store.claim(newcomer, config.config_hash, document_id, "docs/1.txt") == ("busy", elsewhere)


def test_claim_of_an_unknown_document_fails_instead_of_looping(store: Store) -> None:
    run_id = store.start_run(run_config())
    with pytest.raises(IntegrityError):
        store.claim(run_id, run_config().config_hash, 987654, "missing.txt")


def _race(url: str, seed: int, start: Any, done: Any, results: Any, finish: bool) -> None:
    """One OS process: a run claiming every race document as fast as it can (finishing them if asked).

    Each process walks the documents in its own shuffled order, so the two collide all over the list
    (in the same order, the leader would simply stay ahead).
    """
    store = open_store(url)
    config = run_config()
    run_id = store.start_run(config)
    order = random.Random(seed).sample(range(RACE_DOCUMENTS), RACE_DOCUMENTS)
    start.wait(RACE_TIMEOUT_S)
    outcomes = []
    for n in order:
        document_id = store.get_or_create_document(make_document(n))
        claim = store.claim(run_id, config.config_hash, document_id, f"docs/{n}.txt")
        outcomes.append((document_id, claim.status, claim.ref))
        if finish and claim.status == "claimed":
            attempt_id = record(store, claim.document_run_id)
            store.finish_document(claim.document_run_id, "READY_FOR_REVIEW", final_attempt_id=attempt_id)
    results.put((run_id, outcomes))
    done.wait(RACE_TIMEOUT_S)  # stay alive until the other process has decided every claim
    store.close()


def _race_round(url: str, finish: bool) -> dict[str, list[tuple[int, str, int | str]]]:
    context = multiprocessing.get_context("spawn")
    start, done, results = context.Barrier(2), context.Barrier(2), context.Queue()
    workers = [
        context.Process(target=_race, args=(url, seed, start, done, results, finish)) for seed in range(2)
    ]
    for worker in workers:
        worker.start()
    collected = dict(results.get(timeout=RACE_TIMEOUT_S) for _ in workers)
    for worker in workers:
        worker.join(RACE_TIMEOUT_S)
        assert worker.exitcode == 0
    return collected


def test_two_processes_racing_claim_each_document_exactly_once(store: Store, db_url: str) -> None:
    # Round 1: both claim, neither finishes, then both exit: their claims are left to dead processes.
    first = _race_round(db_url, finish=False)
    winners = _claimed_by(first)
    assert sorted(winners) == sorted({d for outcomes in first.values() for d, _, _ in outcomes})
    assert len(winners) == RACE_DOCUMENTS
    for run_id, outcomes in first.items():
        others = {ref for _, status, ref in outcomes if status != "claimed"}
        assert others <= set(first) - {run_id}  # the loser saw the winner as busy

    # Round 2: two new processes race to take over the dead claims, finishing what they take.
    second = _race_round(db_url, finish=True)
    assert len(_claimed_by(second)) == RACE_DOCUMENTS
    for outcomes in second.values():
        assert {status for _, status, _ in outcomes} <= {"claimed", "busy", "done"}

    with store.engine.connect() as connection:
        claims = connection.execute(tables.claims.select()).all()
    assert len(claims) == RACE_DOCUMENTS
    assert {claim.state for claim in claims} == {"READY_FOR_REVIEW"} and {c.run_id for c in claims} <= set(
        second
    )
    assert sum(sum(run.counts.values()) for run in store.find_runs()) == 2 * RACE_DOCUMENTS  # no stray rows
    assert len(store.reap_dead_runs()) == 4  # the racing processes exited without finishing their runs
    assert store.integrity_check() == []


def _claimed_by(round_: dict[str, list[tuple[int, str, int | str]]]) -> dict[int, str]:
    """document id -> the one run that claimed it; fails if two runs claimed the same document."""
    owners: dict[int, str] = {}
    for run_id, outcomes in round_.items():
        for document_id, status, _ in outcomes:
            if status == "claimed":
                assert document_id not in owners, f"document {document_id} claimed twice"
                owners[document_id] = run_id
    return owners


# -- attempts -----------------------------------------------------------------------------------------------


@pytest.fixture
def document_run(store: Store) -> int:
    config = run_config()
    run_id = store.start_run(config)
    document_id = store.get_or_create_document(make_document(1))
    return store.claim(run_id, config.config_hash, document_id, "docs/1.txt").document_run_id


def test_attempt_keeps_raw_response_that_is_not_json(store: Store, document_run: int) -> None:
    raw = 'Sure! Here is the JSON:\n```json\n{"participants": [\n' + "참여자 \x00 ✓"
    attempt_id = record(
        store,
        document_run,
        raw_response=raw,
        parsed=None,
        passed=False,
        outcome="unparseable",
        findings=[
            {"rule_id": "OUTPUT_NOT_JSON", "severity": "error", "location": "$", "message": "not JSON"}
        ],
        transport=[{"number": 1, "outcome": "ok", "latency_ms": 12.5}],
        prompt_tokens=10,
        completion_tokens=20,
        latency_ms=12.5,
        mode="json_schema",
        model="gpt-test-2025",
    )
    [attempt] = store.attempts_for(document_run)
    assert attempt.id == attempt_id
    assert attempt.raw_response == raw.replace("\x00", "\ufffd")  # PostgreSQL text cannot hold NUL
    assert attempt.parsed is None and attempt.outcome == "unparseable" and attempt.passed is False
    assert attempt.findings[0]["rule_id"] == "OUTPUT_NOT_JSON"
    assert attempt.transport == [{"number": 1, "outcome": "ok", "latency_ms": 12.5}]
    assert attempt.created_at.tzinfo is UTC and attempt.finished_at is not None
    assert attempt.request == REQUEST.to_json() and attempt.request_hash == REQUEST.fingerprint
    owner = store.latest_document_run(document_run)
    assert owner is not None and (attempt.run_id, attempt.document_id) == (owner.run_id, owner.document_id)
    with store.engine.connect() as connection:  # SQL NULL, not the JSON text 'null'
        assert connection.execute(text("SELECT COUNT(*) FROM attempts WHERE parsed IS NULL")).scalar() == 1

    repaired = record(
        store, document_run, number=2, raw_response='{"rules": ["a\\u0000b"]}', parsed={"rules": ["a\x00b"]}
    )
    assert store.attempts_for(document_run)[1].parsed == {"rules": ["a\x00b"]}  # JSON keeps it escaped
    assert repaired > attempt_id


def test_duplicate_or_inconsistent_attempt_is_rejected(store: Store, document_run: int) -> None:
    record(store, document_run, number=1)
    with pytest.raises(IntegrityError):
        record(store, document_run, number=1)
    record(store, document_run, number=1, kind="judge")  # a judge attempt has its own numbering
    with pytest.raises(ValueError):
        record(store, document_run, number=2, outcome="maybe")
    with pytest.raises(StoreError):
        record(store, 987654)
    assert [(a.kind, a.number) for a in store.attempts_for(document_run)] == [("generate", 1), ("judge", 1)]


def test_transport_error_attempt_needs_no_response(store: Store, document_run: int) -> None:
    record(
        store, document_run, raw_response=None, parsed=None, outcome="transport_error", error="HTTP 503 x3"
    )
    assert store.finish_document(document_run, "ERROR", cause="HTTP 503 x3")
    [attempt] = store.attempts_for(document_run)
    assert attempt.raw_response is None and attempt.error == "HTTP 503 x3"
    assert store.integrity_check() == []


# -- queries ------------------------------------------------------------------------------------------------


def test_queries_for_the_cli(store: Store) -> None:
    config = run_config()
    run_id = store.start_run(config)
    other_id = store.start_run(run_config(model="other-model"))
    findings = [
        [
            {"rule_id": "ACTOR_UNKNOWN", "severity": "error"},
            {"rule_id": "STEP_ORDER_INVERTED", "severity": "warning"},
        ],
        [
            {"rule_id": "ACTOR_UNKNOWN", "severity": "error"},
            {"rule_id": "ACTOR_UNKNOWN", "severity": "error"},
            {"rule_id": "EVIDENCE_NOT_IN_SOURCE", "severity": "error"},
        ],
        [],
    ]
    document_runs = []
    for n, found in enumerate(findings):
        document_id = store.get_or_create_document(make_document(n))
        document_run = store.claim(run_id, config.config_hash, document_id, f"docs/{n}.txt").document_run_id
        first = record(
            store, document_run, findings=found, passed=not found, outcome="failed" if found else "passed"
        )
        state: DocumentState = "MANUAL_REVIEW" if found else "READY_FOR_REVIEW"
        store.finish_document(
            document_run, state, needs_person=[f["rule_id"] for f in found], final_attempt_id=first
        )
        document_runs.append(document_run)
    errored = store.claim(
        run_id, config.config_hash, store.get_or_create_document(make_document(9)), "docs/9.txt"
    )
    store.finish_document(errored.document_run_id, "ERROR", cause="timeout")

    run = store.get_run(run_id)
    assert run is not None
    [rates] = rule_stats(store, [run])
    assert {rule: (rates.rule(rule)["final"].failed, rates.rule(rule)["final"].evaluated) for rule in rates.final} == {
        "ACTOR_UNKNOWN": (2, 3),
        "EVIDENCE_NOT_IN_SOURCE": (1, 3),
    }
    assert rates.rule("ACTOR_UNKNOWN")["final"].rate == pytest.approx(2 / 3)

    assert run is not None and run.counts == {"MANUAL_REVIEW": 2, "READY_FOR_REVIEW": 1, "ERROR": 1}
    assert [r.id for r in store.find_runs()] == [other_id, run_id]
    assert [r.id for r in store.find_runs(RunQuery(model="gpt-test"))] == [run_id]
    assert [r.id for r in store.find_runs(limit=1)] == [other_id]
    assert store.find_runs(RunQuery(prompt_version="v9")) == [] and store.find_runs(RunQuery(contract="rag_answer")) == []
    assert store.find_runs(RunQuery(since=datetime.now(UTC) + timedelta(minutes=1))) == []
    assert len(store.find_runs(RunQuery(since=datetime.now(UTC) - timedelta(minutes=1)))) == 2

    listed = store.document_runs_for(run_id)
    assert [d.id for d in listed] == [*document_runs, errored.document_run_id]
    assert listed[0].needs_person == ["ACTOR_UNKNOWN", "STEP_ORDER_INVERTED"] and listed[0].tags == []
    sha = make_document(1).sha256
    assert store.latest_document_run(sha) == listed[1]
    assert store.latest_document_run("docs/1.txt") == listed[1]
    assert store.latest_document_run(str(document_runs[1])) == listed[1]
    assert store.latest_document_run("docs/unknown.txt") is None

    forced = store.claim(other_id, config.config_hash, listed[1].document_id, "docs/1.txt", force=True)
    latest = store.latest_document_run(sha)
    assert latest is not None and latest.id == forced.document_run_id and latest.state == "PROCESSING"


def test_a_run_id_prefix_finds_exactly_its_runs_through_the_primary_key(store: Store) -> None:
    ids = ["ab9" + "0" * 29, "ab9f" + "1" * 28, "aba" + "2" * 29, "abf" + "3" * 29, "ac0" + "4" * 29, "9" * 32]
    for wanted in ids:  # ids whose last prefix digit is 9 or f: the range's upper end is the next hex digit
        started = store.start_run(run_config())
        with store.engine.begin() as connection:
            connection.execute(update(tables.runs).where(tables.runs.c.id == started).values(id=wanted))
    for prefix in ("ab9", "ab9f", "aba", "abf", "ab", "a", "9", "99999999", "ac0", "ffffff", *ids, "ab9" + "0" * 28 + "1"):
        assert sorted(r.id for r in store.find_runs(RunQuery(id_prefix=prefix))) == [i for i in sorted(ids) if i.startswith(prefix)], prefix
    if store.engine.dialect.name != "sqlite":
        return
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        store.find_runs(RunQuery(id_prefix=ids[1][:8]))
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    statement, parameters = next((s, p) for s, p in statements if "FROM runs" in s)
    with store.engine.connect() as connection:
        plan = " | ".join(row[3] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
    assert "SEARCH runs USING INDEX sqlite_autoindex_runs_1" in plan, plan  # not every run read (SCAN runs)


def test_what_grows_with_the_log_is_looked_up_through_an_index(store: Store) -> None:
    """``show PATH`` and ``show SHA-PREFIX``, ``stats --corrections`` and ``export --since`` read an index range (or
    a covering index), never every document run, document, review or approved record."""
    config = run_config()
    run_id = store.start_run(config)
    for n in range(3):
        document_run = store.claim(run_id, config.config_hash, store.get_or_create_document(make_document(n)),
                                   f"in/{n}/same.txt").document_run_id
        store.finish_document(document_run, DocumentState.READY_FOR_REVIEW, final_attempt_id=record(store, document_run))
        approve(store, NewApproval(document_run, {"rules": []}, "kim", changed_fields=["rules[]"] if n else []))
    sha = make_document(1).sha256
    assert [d.sha256 for d in store.find_document_runs(sha_prefix=sha[:10].upper())] == [sha]
    assert {d.path for d in store.find_document_runs(same_file_name="x/same.txt")} == {f"in/{n}/same.txt" for n in range(3)}
    assert store.find_document_runs(same_file_name="in/0/same") == []
    if store.engine.dialect.name != "sqlite":
        return
    plan = query_plans(store.engine, lambda: store.find_document_runs(same_file_name="in/0/same.txt"))
    assert "SEARCH document_runs USING INDEX ix_document_runs_name" in plan, plan
    plan = query_plans(store.engine, lambda: store.find_document_runs(sha_prefix=sha[:10]))
    assert "SEARCH documents USING COVERING INDEX sqlite_autoindex_documents_1 (sha256>? AND sha256<?)" in plan, plan
    plan = query_plans(store.engine, lambda: store.finished_run_of(config.config_hash, sha))  # extract run's skip
    assert "SEARCH claims USING INDEX sqlite_autoindex_claims_1 (config_hash=? AND document_id=?)" in plan, plan
    plan = query_plans(store.engine, lambda: correction_stats(store))
    assert "SEARCH reviews USING COVERING INDEX ix_reviews_current_decision_run_id_changes (current=? AND decision=?)" \
        in plan, plan
    assert "SCAN review_fields USING COVERING INDEX ix_review_fields_run_id_field_path" in plan, plan
    assert "TEMP B-TREE" not in plan.split("runs")[0], plan  # each count in index order, no sort of what it read


# -- integrity ----------------------------------------------------------------------------------------------


def test_integrity_check_passes_a_clean_log_and_finds_planted_problems(store: Store, db_url: str) -> None:
    config = run_config()
    run_id = store.start_run(config)
    ids = [store.get_or_create_document(make_document(n)) for n in range(3)]
    runs = [
        store.claim(run_id, config.config_hash, d, f"docs/{n}.txt").document_run_id for n, d in enumerate(ids)
    ]
    attempts = [record(store, document_run) for document_run in runs]
    store.finish_document(runs[0], "READY_FOR_REVIEW", final_attempt_id=attempts[0])
    store.finish_document(runs[1], "READY_FOR_REVIEW", final_attempt_id=attempts[1])
    assert store.integrity_check() == []

    store.finish_run(run_id, "finished")  # runs[2] is still PROCESSING
    with store.engine.begin() as connection:  # runs[1] now points at another document run's attempt
        connection.execute(
            text(f"UPDATE document_runs SET final_attempt_id = {attempts[0]} WHERE id = {runs[1]}")
        )
    plant(
        db_url,
        [
            "INSERT INTO attempts (id, document_run_id, run_id, document_id, number, kind, prompt_version, "
            "request, request_hash, findings, transport, outcome, created_at) VALUES (900001, 777777, "
            "'gone', 888888, 1, 'generate', 'v1', '{}', 'x', '[]', '[]', 'passed', '2026-01-01 00:00:00')",
            "INSERT INTO claims (config_hash, document_id, document_run_id, run_id, state, claimed_at, "
            f"updated_at) VALUES ('planted', {ids[0]}, 666666, '{run_id}', 'PROCESSING', "
            "'2026-01-01 00:00:00', '2026-01-01 00:00:00')",
        ],
    )
    problems = "\n".join(store.integrity_check())
    assert f"document run {runs[2]} is PROCESSING but its run {run_id} is finished" in problems
    assert (
        f"document run {runs[1]}: final attempt {attempts[0]} belongs to document run {runs[0]}" in problems
    )
    assert f"attempt {attempts[0]} is the final attempt of 2 document runs" in problems
    assert "attempts 900001: document_run_id 777777 refers to a missing document_runs row" in problems
    assert "attempts 900001: run_id gone refers to a missing runs row" in problems
    assert "attempts 900001: document_id 888888 refers to a missing documents row" in problems
    assert (
        f"claims planted/{ids[0]}: document_run_id 666666 refers to a missing document_runs row" in problems
    )


def test_mark_interrupted_moves_processing_documents_and_their_claims(store: Store) -> None:
    config = run_config()
    run_id = store.start_run(config)
    claims = [
        store.claim(
            run_id, config.config_hash, store.get_or_create_document(make_document(n)), f"docs/{n}.txt"
        )
        for n in range(3)
    ]
    store.finish_document(claims[0].document_run_id, "ERROR", cause="HTTP 500")
    assert store.mark_interrupted(run_id) == 2
    store.finish_run(run_id, "interrupted")
    run = store.get_run(run_id)
    assert run is not None and run.counts == {"ERROR": 1, "INTERRUPTED": 2}
    assert store.integrity_check() == []


# -- approved records ---------------------------------------------------------------------------------------


def test_approve_and_reject_keep_the_decision_history(store: Store, document_run: int) -> None:
    attempt_id = record(store, document_run, parsed={"rules": ["a"]})
    store.finish_document(document_run, "READY_FOR_REVIEW", final_attempt_id=attempt_id)
    reject(store, document_run, reviewer="kim", reason="wrong actor")
    first = approve(store, NewApproval(document_run, {"rules": ["a"]}, "lee", attempt_id=attempt_id))
    again = approve(store, NewApproval(document_run, {"rules": ["b"]}, "park", note="fixed", edited=True))
    assert again[0] == first[0]  # one approved record per content and contract version: the newest decision
    assert (first[1].approved_by, again[1].approved_by, again[1].given) == (("lee",), ("park",), 1)

    [approved] = approved_records(store, contract="work_procedure")
    assert approved.record == {"rules": ["b"]} and approved.edited and approved.reviewer == "park"
    assert approved.document_sha256 == make_document(1).sha256 and approved.contract_version == 1
    assert approved.approved_at.tzinfo is UTC
    history = reviews_for(store, document_run)
    assert [(r.decision, r.reviewer) for r in history] == [
        ("rejected", "kim"),
        ("approved", "lee"),
        ("approved", "park"),
    ]
    with pytest.raises(ValueError):
        reject(store, document_run, reviewer="kim", reason="")
    with pytest.raises(StoreError):
        approve(store, NewApproval(987654, {}, "kim"))


def test_export_writes_the_approval_time_as_the_typed_column_reads_it(store: Store, document_run: int) -> None:
    """Export reads the approval time as text (SQLite's as stored, PostgreSQL's written by the server in that form)
    and writes it as reading it as a UTC datetime would, on both backends, whatever offset it was given with; SQLite
    text in another form than SQLAlchemy's (another tool wrote it) is read as SQLAlchemy reads it."""
    from extractor.export import PROVENANCE_COLUMNS, provenance
    from extractor.store.approved import approved_after, approved_batches

    attempt_id = record(store, document_run, parsed={"rules": ["a"]})
    store.finish_document(document_run, "READY_FOR_REVIEW", final_attempt_id=attempt_id)
    approve(store, NewApproval(document_run, {"rules": ["a"]}, "lee", attempt_id=attempt_id))
    seoul = timezone(timedelta(hours=9))
    times = {datetime(2026, 3, 4, 14, 6, 7, tzinfo=seoul): "2026-03-04T05:06:07.000000+00:00",
             datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=UTC): "2026-03-04T05:06:07.000089+00:00"}
    if store.engine.dialect.name == "sqlite":
        times |= {"2026-03-04T05:06:07": "2026-03-04T05:06:07.000000+00:00",
                  "2026-03-04 05:06:07.5": "2026-03-04T05:06:07.500000+00:00"}
    for when, expected in times.items():
        with store.engine.begin() as connection:
            if isinstance(when, str):
                connection.exec_driver_sql("UPDATE approved_records SET approved_at = ?", (when,))
            else:
                connection.execute(update(tables.approved_records).values(approved_at=when))
        [typed] = approved_records(store)
        assert typed.approved_at.isoformat(timespec="microseconds") == expected
        [[streamed]] = list(approved_batches(store))
        [paged] = approved_after(store, None, 10)
        assert streamed.approved_at == paged.approved_at == expected
        assert provenance(streamed, None)[PROVENANCE_COLUMNS.index("approved_at")] == expected


def test_export_keeps_the_runs_of_a_batch_when_it_forgets_older_ones(store: Store) -> None:
    """Export keeps the runs of its records a few hundred at a time; a batch that brings more forgets the older
    ones, and a record of the new batch whose run was among them still gets its run (its model, its policy)."""
    from extractor.export import PROVENANCE_COLUMNS, Rows
    from extractor.store.approved import approved_batches

    approved = {}
    for n, model in enumerate(("model-a", "model-b", "model-c"), start=1):
        config = run_config(model=model)
        run_id = store.start_run(config)
        claimed = store.claim(run_id, config.config_hash, store.get_or_create_document(make_document(n)),
                              f"docs/{n}.txt").document_run_id
        attempt_id = record(store, claimed, parsed={"rules": [model]})
        store.finish_document(claimed, "READY_FOR_REVIEW", final_attempt_id=attempt_id)
        approve(store, NewApproval(claimed, {"rules": [model]}, "lee", attempt_id=attempt_id))
        approved[model] = run_id
    [[a, b, c]] = list(approved_batches(store))
    rows = Rows(store)
    rows.runs.KEEP = 2  # a bound of two runs: the second batch brings a third and forgets the first two
    models = [origin[PROVENANCE_COLUMNS.index("model")] for batch in ([a, b], [c, a]) for _, origin in rows.of(batch)]
    assert models == ["model-a", "model-b", "model-c", "model-a"]


def test_run_log_functions_never_touch_approved_records(store: Store, document_run: int) -> None:
    attempt_id = record(store, document_run)
    store.finish_document(document_run, "READY_FOR_REVIEW", final_attempt_id=attempt_id)
    approve(store, NewApproval(document_run, {"rules": ["a"]}, "lee", attempt_id=attempt_id))
    before, reviews_before = approved_records(store), reviews_for(store, document_run)

    statements: list[str] = []

    def capture(_connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", capture)
    _exercise_run_log(store)
    event.remove(store.engine, "before_cursor_execute", capture)

    writes = [s for s in statements if re.match(r"\s*(INSERT|UPDATE|DELETE)", s, re.IGNORECASE)]
    assert writes and not [s for s in writes if re.search(r"approved_records|reviews", s)]
    assert approved_records(store) == before and reviews_for(store, document_run) == reviews_before

    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, extractor.store; print('extractor.store.approved' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == "False"


def _exercise_run_log(store: Store) -> None:
    """Every writing run-log function, on the document that has an approved record."""
    config = run_config()
    run_id = store.start_run(config)
    document_id = store.get_or_create_document(make_document(1))
    forced = store.claim(run_id, config.config_hash, document_id, "docs/1.txt", force=True)
    store.heartbeat(run_id)
    attempt_id = record(
        store, forced.document_run_id, raw_response="not json", parsed=None, outcome="unparseable"
    )
    store.finish_document(
        forced.document_run_id, "MANUAL_REVIEW", cause="unparseable", final_attempt_id=attempt_id
    )
    store.mark_interrupted(run_id)
    store.finish_run(run_id, "finished")
    store.integrity_check()


def test_judge_mode_threshold_and_rubric_are_part_of_the_configuration() -> None:
    """Changing how a judge routes must redo documents, just as changing the judge model does."""
    base = dict(contract="work_procedure", contract_version=1, prompt_version="v1", model="m", provider="openai",
                validator_version="1.0.0", segmenter="seg", judge_model="openai:judge")
    judge = {"rubric_version": "v1", "threshold": 0.8, "mode": "review", "downgrade_reason": None}
    hashes = {
        RunConfig(**base, config={"judge": judge}).config_hash,
        RunConfig(**base, config={"judge": {**judge, "mode": "block"}}).config_hash,
        RunConfig(**base, config={"judge": {**judge, "threshold": 0.7}}).config_hash,
        RunConfig(**base, config={"judge": {**judge, "rubric_version": "v2"}}).config_hash,
    }
    assert len(hashes) == 4
    unrelated = RunConfig(**base, config={"judge": {**judge, "downgrade_reason": "x"}, "concurrency": 64})
    assert unrelated.config_hash == RunConfig(**base, config={"judge": judge}).config_hash


# -- requests: shared parts stored once, every request read back exactly -------------------------------------


def canonical_sha(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def test_what_every_request_repeats_is_stored_once_and_each_request_reads_back_exactly(store: Store) -> None:
    contract, prompt = get_contract("work_procedure"), load_prompt(get_contract("work_procedure"))
    config = run_config()
    run_id = store.start_run(config)
    sent = {}
    for n in range(20):
        document_id = store.get_or_create_document(make_document(n))
        document_run = store.claim(run_id, config.config_hash, document_id, f"docs/{n}.txt").document_run_id
        request = render_request(prompt, contract, make_document(n), max_tokens=800)
        sent[record(store, document_run, request=request)] = request
    with store.engine.connect() as connection:
        parts = connection.execute(text("SELECT sha256, content FROM request_parts")).all()
        own = [json.loads(value) if isinstance(value, str) else value
               for (value,) in connection.execute(text("SELECT request FROM attempts"))]
    assert len(parts) == 1  # the system prompt, the template text and the schema, once for 20 attempts
    assert hashlib.sha256(parts[0].content.encode()).hexdigest() == parts[0].sha256
    assert all(len(texts) == 1 and texts[0].startswith("[s1] Document ") for texts in own)  # only the sentences
    for attempt_id, request in sent.items():
        attempt = store.get_attempt(attempt_id)
        assert attempt is not None
        assert json.dumps(attempt.request, ensure_ascii=False) == json.dumps(request.to_json(), ensure_ascii=False)
        assert attempt.request_hash == request.fingerprint == canonical_sha(attempt.request)


@pytest.mark.parametrize("max_tokens", [None, 800])
def test_a_stored_request_reads_back_with_the_fingerprint_it_was_sent_with(max_tokens: int | None) -> None:
    """``extract doctor`` hashes a template's shared text once and each request's own texts after it; that must be
    the fingerprint of the whole request, whatever the texts hold (quotes, escapes, control characters, Korean)."""
    shared = ['System: answer in JSON "exactly".\n\t\\', "스키마 \u2028 {}"]
    own = ['[s1] He said "no" \\ then\nleft.', "[s2] \x01\x1f 결재 \ud7a3", "", "[s3] tail"]
    request = GenerationRequest(
        messages=[{"role": "system", "content": shared[0]},
                  {"role": "user", "content": own[0] + shared[1] + own[1] + shared[0] + own[3] + own[2]}],
        schema={"type": "object", "title": "Ü \"q\""}, schema_name="s", max_tokens=max_tokens, shared=tuple(shared),
        schema_at=(1, 3, 9))
    stored = requests.split(request)
    assert stored.part is not None and len(stored.own) >= 3
    assert requests.fingerprint(stored.part[1], stored.own, "attempt 1") == request.fingerprint
    assert requests.fingerprint(None, request.to_json(), "attempt 1") == request.fingerprint
    assert requests.fingerprint(stored.part[1], [*stored.own[:-1], stored.own[-1] + "."], "attempt 1") != \
        request.fingerprint
    with pytest.raises(StoreError, match="attempt 1: fewer own request texts"):
        requests.fingerprint(stored.part[1], stored.own[:-1], "attempt 1")
    with pytest.raises(TypeError):
        requests.fingerprint(stored.part[1], [*stored.own[:-1], 7], "attempt 1")


def test_requests_recorded_before_request_parts_still_read_back(db_url: str) -> None:
    engine = database_at(db_url, "0003")
    document, run = make_document(1), run_config()
    request = render_request(load_prompt(get_contract("work_procedure")), get_contract("work_procedure"), document)
    raw, now = json.dumps(GOOD), datetime.now(UTC)
    rows = {  # what 0003 wrote: the whole request inline, the parsed candidate beside its raw answer
        "runs": {"id": "r" * 32, "started_at": now, "status": "finished", "contract": run.contract,
                 "contract_version": 1, "prompt_version": "v1", "model": run.model, "provider": run.provider,
                 "validator_version": "1", "segmenter": run.segmenter, "config_hash": run.config_hash, "config": "{}",
                 "command": "", "host": "h", "pid": 1, "heartbeat_at": now},
        "documents": {"id": 1, "sha256": document.sha256, "segmenter": run.segmenter, "path": "docs/1.txt",
                      "format": "txt", "char_count": 10, "sentence_count": 2, "sentences": "[]", "created_at": now},
        "document_runs": {"id": 1, "run_id": "r" * 32, "document_id": 1, "path": "docs/1.txt",
                          "config_hash": run.config_hash, "state": "READY_FOR_REVIEW", "needs_person": "[]",
                          "tags": "[]", "started_at": now},
        "attempts": {"id": 1, "document_run_id": 1, "run_id": "r" * 32, "document_id": 1, "number": 1,
                     "kind": "generate", "prompt_version": "v1", "request": json.dumps(request.to_json()),
                     "request_hash": request.fingerprint, "raw_response": raw, "parsed": raw, "findings": "[]",
                     "transport": "[]", "outcome": "passed", "created_at": now},
    }
    with engine.begin() as connection:
        for name, values in rows.items():
            connection.execute(insert(table(name, *(column(key) for key in values))).values(values))
        connection.execute(text("UPDATE document_runs SET final_attempt_id = 1"))
    engine.dispose()
    with open_store(db_url) as store:
        [attempt] = store.attempts_for(1)
        assert json.dumps(attempt.request, ensure_ascii=False) == json.dumps(request.to_json(), ensure_ascii=False)
        assert attempt.parsed == GOOD and attempt.raw_response == raw
        assert [p for p in store.problems() if p.check.startswith("request")] == []


def test_show_prints_the_exact_requests_of_a_generation_and_its_repair(db_url: str, tmp_path: Path,
                                                                      llm_server: Callable[..., ScriptedLLMServer]) -> None:
    server = llm_server(script({"m": lambda n: "repaired"}))  # fails, then passes after the repair
    [path] = write_documents(tmp_path / "docs", [7])
    summary = corpus_run(db_url, server, [path], "m")
    [outcome] = summary.outcomes
    assert outcome.state == "READY_FOR_REVIEW"
    shown = CliRunner().invoke(cli_app, ["show", str(outcome.document_run_id), "--database", db_url, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    first, repair = json.loads(shown.stdout)["attempts"]
    assert (first["kind"], repair["kind"]) == ("generate", "repair")
    received = [recorded.json for recorded in server.requests]
    assert [first["sent_messages"], repair["sent_messages"]] == [r["messages"] for r in received]
    assert repair["request"]["messages"][:2] == first["request"]["messages"]  # the repair repeats the conversation

    document = segment(load(path))
    contract, prompt = get_contract("work_procedure"), load_prompt(get_contract("work_procedure"))
    expected_first = render_request(prompt, contract, document)
    raw = json.dumps(invented())  # what the scripted server answered first
    expected_repair = render_repair(prompt, expected_first, raw, validate(raw, document, contract), document, contract)
    for shown_request, expected in ((first, expected_first), (repair, expected_repair)):
        assert json.dumps(shown_request["request"], ensure_ascii=False) == json.dumps(expected.to_json(),
                                                                                      ensure_ascii=False)
        assert shown_request["request_hash"] == expected.fingerprint == canonical_sha(shown_request["request"])
    text_view = CliRunner().invoke(cli_app, ["show", str(outcome.document_run_id), "--requests", "--database", db_url],
                                   env={"COLUMNS": "200"})
    assert text_view.exit_code == 0 and text_view.stdout.count("--- system ---") == 2
    assert expected_repair.messages[-1]["content"].splitlines()[0] in text_view.stdout
    with open_store(db_url) as store, store.engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM request_parts")).scalar() == 2  # first + repair shape
        assert store.problems() == []


def test_a_candidate_that_is_exactly_the_raw_answer_is_stored_once(store: Store, document_run: int) -> None:
    same = record(store, document_run, raw_response=' {"rules": ["a", 1], "n": null}\n', parsed={"rules": ["a", 1], "n": None})
    judged = record(store, document_run, kind="judge", raw_response='{"verdict": "pass", "score": 1.0}',
                    parsed={"verdict": {"verdict": "pass"}, "score": 1.0})  # a judge keeps its own reading
    typed = record(store, document_run, number=2, raw_response='{"score": 1.0}', parsed={"score": 1})  # 1.0 is not 1
    with store.engine.connect() as connection:
        stored = dict(connection.execute(text("SELECT id, parsed FROM attempts WHERE parsed IS NOT NULL")).all())
    assert set(stored) == {judged, typed}
    attempts = {a.id: a for a in store.attempts_for(document_run)}
    assert attempts[same].parsed == {"rules": ["a", 1], "n": None}
    assert attempts[judged].parsed == {"verdict": {"verdict": "pass"}, "score": 1.0}
    assert attempts[typed].parsed == {"score": 1} and isinstance(attempts[typed].parsed["score"], int)


def test_long_answers_and_states_are_kept_compressed_in_sqlite_and_read_back_exactly(store: Store, document_run: int,
                                                                                     db_url: str) -> None:
    """SQLite has no TOAST: a 3-sentence document's answer and derived states would leave one attempt per 4 KB
    page. Long values are zlib-compressed there and read back exactly; rows written plain still read."""
    answer = json.dumps({"participants": [{"id": f"p{n}", "name": f"참여자 {n} Участник"} for n in range(30)]},
                        ensure_ascii=False, indent=2)
    states = {f"participants[{n}]": {"state": "PRESENT", "rule_id": None} for n in range(30)}
    long_id = record(store, document_run, raw_response=answer, parsed=json.loads(answer), fields=states,
                     sentences=[{"id": "s1", "state": "MAPPED", "fieldPaths": ["participants[0]"]}])
    short_id = record(store, document_run, number=2, raw_response='{"rules": []}', parsed={"rules": []},
                      fields={"rules": {"state": "PRESENT", "rule_id": None}})
    with store.engine.connect() as connection:
        stored = {row.id: row for row in connection.execute(
            text("SELECT id, raw_response, fields, sentences FROM attempts"))}
    if store.engine.dialect.name == "sqlite":
        kept = stored[long_id]
        assert isinstance(kept.raw_response, bytes) and len(kept.raw_response) < len(answer.encode()) / 3
        assert isinstance(kept.fields, bytes) and isinstance(kept.sentences, str)  # one short sentence stays text
        assert stored[short_id].raw_response == '{"rules": []}'  # short values stay readable in SQL
        assert stored[short_id].fields == '{"rules":{"state":"PRESENT","rule_id":null}}'
    attempts = {a.id: a for a in store.attempts_for(document_run)}
    assert attempts[long_id].raw_response == answer and attempts[long_id].parsed == json.loads(answer)
    assert attempts[long_id].fields == states and attempts[short_id].raw_response == '{"rules": []}'

    with store.engine.begin() as connection:  # as a run log written before compression holds it
        connection.execute(text("UPDATE attempts SET raw_response = :raw, fields = :fields WHERE id = :id"),
                           {"raw": answer, "fields": json.dumps(states), "id": long_id})
    [again] = [a for a in store.attempts_for(document_run) if a.id == long_id]
    assert again.raw_response == answer and again.fields == states
    reused = record(store, document_run, number=3, raw_response=answer, parsed=json.loads(answer), reused_from=long_id)
    assert reused and [p for p in problems(store.engine) if p.check == "reused_answer_matches"] == []
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE attempts SET raw_response = :raw WHERE id = :id"),
                           {"raw": answer.replace("p7", "p8"), "id": long_id})
    assert [p.check for p in problems(store.engine)] == ["reused_answer_matches"]
