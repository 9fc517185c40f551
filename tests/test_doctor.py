"""``extract doctor`` on real run logs, as a user runs it: a healthy log, then the same log damaged on purpose
so that every check fires; a damaged SQLite file; and databases it cannot use at all.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import make_url, text, update

from extractor.store import Store, open_store, tables
from extractor.store.approved import approve
from extractor.store.integrity import checks
from extractor.vocab import DocumentState, ExitCode, GateDecision
from tests.support.runlog import dead_pid, make_document, plant, record, run_config


def doctor(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", "doctor", "--database", db_url, *args],
                          capture_output=True, text=True, timeout=120)


def healthy_log(store: Store) -> tuple[list[str], list[int], list[int]]:
    """Three runs: four documents finished, a forced rerun that errored, and two BLOCKED documents (one
    approved over its block); each run with the outcome its documents give."""
    config = run_config()
    first = store.start_run(config)
    document_runs, attempts = [], []
    for n in range(4):
        document_id = store.get_or_create_document(make_document(n))
        document_run = store.claim(first, config.config_hash, document_id, f"docs/{n}.txt").document_run_id
        attempt = record(store, document_run)
        store.finish_document(document_run, DocumentState.READY_FOR_REVIEW, final_attempt_id=attempt)
        document_runs.append(document_run)
        attempts.append(attempt)
    store.finish_run(first, "finished")
    second = store.start_run(config)
    forced = store.claim(second, config.config_hash, store.get_or_create_document(make_document(0)), "docs/0.txt",
                         force=True).document_run_id
    store.finish_document(forced, DocumentState.ERROR, cause="HTTP 503")
    store.finish_run(second, "finished", GateDecision.MANUAL_REVIEW)
    third = store.start_run(run_config(model="leaky"))
    for n in (4, 5):
        document_id = store.get_or_create_document(make_document(n))
        blocked = store.claim(third, run_config(model="leaky").config_hash, document_id, f"docs/{n}.txt").document_run_id
        attempt = record(store, blocked)
        store.finish_document(blocked, DocumentState.BLOCKED, cause="critical finding(s): SECRET_IN_OUTPUT",
                              final_attempt_id=attempt)
        document_runs.append(blocked)
        attempts.append(attempt)
    approve(store, document_runs[4], {"rules": []}, reviewer="kim", attempt_id=attempts[4],
            block_override={"reviewer": "kim", "reason": "test key from the vendor's manual", "rule_ids": []})
    store.finish_run(third, "finished", GateDecision.BLOCK)
    return [first, second, third], document_runs, attempts


def test_a_healthy_log_passes_and_every_check_fires_on_a_log_damaged_on_purpose(db_url: str) -> None:
    with open_store(db_url) as store:
        runs, document_runs, attempts = healthy_log(store)
    healthy = doctor(db_url)
    assert healthy.returncode == ExitCode.OK, healthy.stderr
    assert healthy.stdout.strip().endswith(f"healthy ({len(checks())} checks)") and healthy.stderr == ""
    report = json.loads(doctor(db_url, "--format", "json").stdout)
    assert report["healthy"] is True and report["problems"] == [] and report["checks"] == [c.name for c in checks()]

    with open_store(db_url) as store:
        processing = store.start_run(run_config())  # a document left PROCESSING by a run that says finished
        left = store.claim(processing, run_config().config_hash, store.get_or_create_document(make_document(9)),
                           "docs/9.txt")
        store.finish_run(processing, "finished")
        store.start_run(run_config(pid=dead_pid()))  # a run whose process died unnoticed
        elsewhere = store.start_run(run_config(host="another-host"))  # a run on another machine gone silent
        with store.engine.begin() as connection:
            connection.execute(update(tables.runs).where(tables.runs.c.id == elsewhere)
                               .values(heartbeat_at=datetime.now(UTC) - timedelta(hours=2)))
            connection.execute(text(f"UPDATE claims SET state = 'MANUAL_REVIEW' WHERE document_run_id = {document_runs[1]}"))
            connection.execute(text(f"UPDATE document_runs SET final_attempt_id = {attempts[2]} WHERE id = {document_runs[3]}"))
            connection.execute(text(f"UPDATE document_runs SET final_attempt_id = NULL WHERE id = {document_runs[1]}"))
            connection.execute(text(f"UPDATE attempts SET run_id = '{runs[1]}' WHERE id = {attempts[0]}"))
            connection.execute(text(f"UPDATE attempts SET request = '[\"[s1] Another document.\"]' WHERE id = {attempts[1]}"))
            connection.execute(text("UPDATE request_parts SET content = REPLACE(content, 'You extract', 'You invent')"))
            connection.execute(text(f"UPDATE document_runs SET decided = TRUE WHERE id = {document_runs[2]}"))
            connection.execute(text(f"UPDATE runs SET outcome = 'PROMOTE' WHERE id = '{runs[1]}'"))
            connection.execute(text(f"UPDATE reviews SET block_override = NULL WHERE document_run_id = {document_runs[4]}"))
            connection.execute(text(f"UPDATE document_runs SET final_attempt_id = NULL WHERE id = {document_runs[5]}"))
            connection.execute(text(f"UPDATE attempts SET reused_from = {attempts[0]} WHERE id = {attempts[3]}"))
    planted = [  # one row per foreign key, each naming a row that does not exist
        "INSERT INTO document_runs (id, run_id, document_id, path, config_hash, state, needs_person, tags, "
        "final_attempt_id, started_at) VALUES (800001, 'gone', 888888, 'p', 'x', 'ERROR', '[]', '[]', 999999, "
        "'2026-01-01 00:00:00')",
        "INSERT INTO attempts (id, document_run_id, run_id, document_id, number, kind, prompt_version, request, "
        "request_part, request_hash, findings, transport, outcome, created_at) VALUES (900001, 777777, 'gone', 888888, "
        "1, 'generate', 'v1', '[]', 'gone', 'x', '[]', '[]', 'passed', '2026-01-01 00:00:00')",
        "INSERT INTO claims (config_hash, document_id, document_run_id, run_id, state, claimed_at, updated_at) "
        "VALUES ('planted', 888888, 666666, 'gone', 'ERROR', '2026-01-01 00:00:00', '2026-01-01 00:00:00')",
        "INSERT INTO reviews (id, document_run_id, decision, reviewer, created_at) VALUES (900002, 555555, 'approved', "
        "'kim', '2026-01-01 00:00:00')",
        "INSERT INTO tasks (id, batch_id, upload_id, state, rule_ids, deliveries, run_id, document_run_id, enqueued_at) "
        "VALUES ('planted', 'gone', 444444, 'queued', '[]', 0, 'gone', 333333, '2026-01-01 00:00:00')",
        "INSERT INTO evaluation_runs (evaluation_id, run_id) VALUES (222222, 'gone')",
        "INSERT INTO signoffs (id, document_run_id, reviewer, record, record_sha256, edited, created_at, state, "
        "review_id) VALUES (900003, 111111, 'kim', '{}', 'x', FALSE, '2026-01-01 00:00:00', 'approved', 999998)",
        "INSERT INTO review_claims (document_run_id, reviewer, claimed_at, expires_at) VALUES (111112, 'kim', "
        "'2026-01-01 00:00:00', '2026-01-01 00:05:00')",
    ]
    plant(db_url, planted)

    damaged = doctor(db_url)
    assert damaged.returncode == ExitCode.FAILED, damaged.stderr
    lines = damaged.stdout.splitlines()
    fired = {line.split(":", 1)[0] for line in lines}
    expected = {c.name for c in checks()} - {"database_file"}  # the file itself is damaged in the next test
    assert fired == expected, sorted(expected - fired)
    assert damaged.stderr.strip().endswith(f"{len(lines)} problem(s) ({len(checks())} checks)")
    text_ = damaged.stdout
    assert f"document run {document_runs[1]} in READY_FOR_REVIEW" in text_  # the claim that disagrees
    assert f"document run {left.document_run_id} is PROCESSING but its run {processing} is finished" in text_
    assert "but its process" in text_ and f"run {elsewhere} on another-host" in text_
    assert f"document run {document_runs[3]}: final attempt {attempts[2]} belongs to document run {document_runs[2]}" in text_
    assert f"attempt {attempts[2]} is the final attempt of 2 document runs" in text_
    assert f"document run {document_runs[1]} is READY_FOR_REVIEW without a final attempt" in text_
    assert f"attempt {attempts[0]} disagrees with its document run {document_runs[0]}" in text_
    assert "attempts 900001: document_run_id 777777 refers to a missing document_runs row" in text_
    assert "reviews 900002: document_run_id 555555 refers to a missing document_runs row" in text_
    assert "attempts 900001: request_part gone refers to a missing request_parts row" in text_
    assert "its content no longer hashes to its name (edited or damaged)" in text_
    assert f"attempt {attempts[1]}: its request reads back with fingerprint" in text_
    assert f"document run {document_runs[2]} is marked decided but has no review" in text_
    assert f"run {runs[1]} has outcome PROMOTE but a document run in ERROR" in text_
    assert f"approved BLOCKED document run {document_runs[4]} without a recorded override" in text_
    assert f"document run {document_runs[5]} is BLOCKED without a final attempt" in text_
    assert f"attempt {attempts[3]} reuses attempt {attempts[0]}, which is not the same request's answer" in text_
    report = json.loads(doctor(db_url, "--format", "json").stdout)
    assert report["healthy"] is False and len(report["problems"]) == len(lines)


def test_a_damaged_sqlite_file_is_reported_and_an_unusable_database_exits_2(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path}/runs.db"
    with open_store(db_url) as store:
        healthy_log(store)
    path = tmp_path / "runs.db"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = connection.execute("SELECT rootpage FROM sqlite_master WHERE name = 'ix_document_runs_path'").fetchone()[0]
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    entry = start + data[start:start + page_size].index(b"docs/2.txt")
    data[entry:entry + 10] = b"docs/X.txt"  # the index now names a path no row has
    path.write_bytes(bytes(data))
    damaged = doctor(db_url)
    assert damaged.returncode == ExitCode.FAILED, damaged.stderr
    assert damaged.stdout.splitlines() == [f"database_file: SQLite integrity check: row {n} missing from index "
                                           "ix_document_runs_path" for n in (3, 4, 6, 7)]

    missing = doctor(f"sqlite:///{tmp_path}/nothing.db")
    assert missing.returncode == ExitCode.USAGE and "no run log at" in missing.stderr
    assert not (tmp_path / "nothing.db").exists()  # a check never leaves an empty run log behind
    (tmp_path / "text.db").write_text("not a database at all\n" * 100)
    garbage = doctor(f"sqlite:///{tmp_path}/text.db")
    assert garbage.returncode == ExitCode.USAGE and garbage.stderr.startswith("error: ") and garbage.stderr.count("\n") == 1


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_doctor_needs_no_running_extractor_and_names_the_database_without_its_password(db_url: str, fmt: str) -> None:
    with open_store(db_url) as store:
        healthy_log(store)
    result = doctor(db_url, "--format", fmt)
    assert result.returncode == ExitCode.OK
    password = make_url(db_url).password
    if password:
        assert f":{password}@" not in result.stdout + result.stderr
