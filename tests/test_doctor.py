"""``extract doctor`` on real run logs, as a user runs it: a healthy log, then the same log damaged on purpose
so that every check fires; a damaged SQLite file; and databases it cannot use at all.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import make_url, text, update

from extractor.store import open_store, tables
from extractor.store.approved import NewApproval, approve
from extractor.store.integrity import checks
from extractor.store.integrity import doctor as check_log
from extractor.vocab import DocumentState, ExitCode
from tests.support.processes import on_terminal
from tests.support.runlog import dead_pid, healthy_log, make_document, plant, query_plans, record, run_config


def doctor(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", "doctor", "--database", db_url, *args],
                          capture_output=True, text=True, timeout=120)


def test_a_healthy_log_passes_and_every_check_fires_on_a_log_damaged_on_purpose(db_url: str) -> None:
    with open_store(db_url) as store:
        runs, document_runs, attempts = healthy_log(store)
    healthy = doctor(db_url)  # the first check reads the whole log
    assert healthy.returncode == ExitCode.OK, healthy.stderr
    assert healthy.stdout.strip().endswith(f"healthy ({len(checks())} checks of the whole log)") and healthy.stderr == ""
    report = json.loads(doctor(db_url, "--format", "json").stdout)
    assert report["healthy"] is True and report["problems"] == [] and report["checks"] == [c.name for c in checks()]
    # then what changed since: the three runs finished less than CLOCK_SKEW_S before it, so they are read again
    assert report["full"] is False and report["scope"] == {"runs": 3, "reviews": 0, "evaluations": 0}

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
            connection.execute(text(f"UPDATE document_runs SET name = 'other.txt' WHERE id = {document_runs[0]}"))
            connection.execute(text(f"UPDATE reviews SET changes = 3 WHERE document_run_id = {document_runs[4]}"))
            connection.execute(text("""UPDATE approved_records SET record = '{"rules":["not what was approved"]}'"""))
    planted = [  # one row per foreign key, each naming a row that does not exist
        "INSERT INTO document_runs (id, run_id, document_id, path, name, config_hash, state, needs_person, tags, "
        "final_attempt_id, started_at) VALUES (800001, 'gone', 888888, 'p', 'p', 'x', 'ERROR', '[]', '[]', 999999, "
        "'2026-01-01 00:00:00')",
        "INSERT INTO attempts (id, document_run_id, run_id, document_id, number, kind, prompt_version, request, "
        "request_part, request_hash, findings, transport, outcome, created_at) VALUES (900001, 777777, 'gone', 888888, "
        "1, 'generate', 'v1', '[]', 'gone', 'x', '[]', '[]', 'passed', '2026-01-01 00:00:00')",
        "INSERT INTO claims (config_hash, document_id, document_run_id, run_id, state, claimed_at, updated_at) "
        "VALUES ('planted', 888888, 666666, 'gone', 'ERROR', '2026-01-01 00:00:00', '2026-01-01 00:00:00')",
        "INSERT INTO reviews (id, document_run_id, decision, reviewer, created_at, run_id) VALUES (900002, 555555, "
        "'approved', 'kim', '2026-01-01 00:00:00', 'gone')",
        "INSERT INTO review_fields (review_id, field_path, run_id) VALUES (900003, 'rules[]', 'gone')",
        "INSERT INTO tasks (id, batch_id, upload_id, state, rule_ids, deliveries, run_id, document_run_id, enqueued_at) "
        "VALUES ('planted', 'gone', 444444, 'queued', '[]', 0, 'gone', 333333, '2026-01-01 00:00:00')",
        "INSERT INTO evaluation_runs (evaluation_id, run_id) VALUES (222222, 'gone')",
        "INSERT INTO signoffs (id, document_run_id, reviewer, record, record_sha256, edited, created_at, state, "
        "review_id) VALUES (900003, 111111, 'kim', '{}', 'x', FALSE, '2026-01-01 00:00:00', 'approved', 999998)",
        "INSERT INTO review_claims (document_run_id, reviewer, claimed_at, expires_at) VALUES (111112, 'kim', "
        "'2026-01-01 00:00:00', '2026-01-01 00:05:00')",
    ]
    plant(db_url, planted)

    damaged = doctor(db_url, "--full")  # most of the damage is to rows written before the last clean check
    assert damaged.returncode == ExitCode.FAILED, damaged.stderr
    lines = damaged.stdout.splitlines()
    fired = {line.split(":", 1)[0] for line in lines}
    expected = {c.name for c in checks()} - {"database_file"}  # the file itself is damaged in the next test
    assert fired == expected, sorted(expected - fired)
    assert damaged.stderr.strip().endswith(f"{len(lines)} problem(s) ({len(checks())} checks of the whole log)")
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
    assert f"document run {document_runs[0]}: its name 'other.txt' is not the file name of its path 'docs/0.txt'" in text_
    assert "review 1 records 3 changed field(s), its changed fields say None" in text_
    assert "reviews 900002: run_id gone refers to a missing runs row" in text_
    assert "its stored CSV cells are not those of its record (a CSV export would write them)" in text_
    assert "review_fields 900003/rules[]: review_id 900003 refers to a missing reviews row" in text_
    report = json.loads(doctor(db_url, "--format", "json").stdout)  # after a full check with problems: full again
    assert report["healthy"] is False and len(report["problems"]) == len(lines) and report["full"] is True


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


def test_doctor_checks_what_changed_since_its_last_clean_check_and_everything_with_full(db_url: str) -> None:
    """By default only what changed since the last clean check is read, and checked as a full check checks it;
    an old row edited in place is found by --full, and after that every check is full until one is clean."""
    with open_store(db_url) as store:
        runs, document_runs, _ = healthy_log(store)
    first = json.loads(doctor(db_url, "--format", "json").stdout)
    assert first["healthy"] and first["full"] is True and first["last_full"] is None
    with open_store(db_url) as store:  # a new run, damaged in its own rows, and a decision on an old document run
        config = run_config(model="newer")
        newer = store.start_run(config)
        fresh = store.claim(newer, config.config_hash, store.get_or_create_document(make_document(7)), "docs/7.txt")
        store.finish_document(fresh.document_run_id, DocumentState.READY_FOR_REVIEW, final_attempt_id=record(
            store, fresh.document_run_id))
        store.finish_run(newer, "finished")
        approve(store, NewApproval(document_runs[0], {"rules": []}, "kim", changed_fields=["rules[]"]))
    new_damage = [f"UPDATE document_runs SET final_attempt_id = NULL WHERE id = {fresh.document_run_id}",
                  f"UPDATE review_fields SET field_path = 'participants[]' WHERE review_id IN (SELECT id FROM reviews "
                  f"WHERE document_run_id = {document_runs[0]})"]
    old_damage = [f"UPDATE claims SET state = 'MANUAL_REVIEW' WHERE document_run_id = {document_runs[1]}"]
    plant(db_url, new_damage + old_damage)
    with open_store(db_url) as store:  # the old run is long finished (its heartbeat before the last check)
        with store.engine.begin() as connection:
            connection.execute(update(tables.runs).where(tables.runs.c.id.in_(runs))
                               .values(heartbeat_at=datetime.now(UTC) - timedelta(hours=1),
                                       finished_at=datetime.now(UTC) - timedelta(hours=1),
                                       started_at=datetime.now(UTC) - timedelta(hours=2)))

    changed = doctor(db_url)
    assert changed.returncode == ExitCode.FAILED
    assert "of what changed since the clean check of" in changed.stderr and "1 run(s), 1 decision(s)" in changed.stderr
    new_problems = sorted(changed.stdout.splitlines())
    assert new_problems == sorted([
        f"ready_has_final_attempt: document run {fresh.document_run_id} is READY_FOR_REVIEW without a final attempt",
        "decisions_recorded: review 2: its recorded field paths (participants[]) are not the ones it changed (rules[])",
    ]), new_problems
    everything = doctor(db_url, "--full")
    assert everything.returncode == ExitCode.FAILED and "of the whole log" in everything.stderr
    found = everything.stdout.splitlines()
    assert set(new_problems) < set(found)  # the same checks on the same rows, and the old row's edit
    assert [line for line in found if line not in new_problems] == [
        f"claim_matches_document_run: claim ({run_config().config_hash[:12]}, document 2) in MANUAL_REVIEW disagrees "
        f"with document run {document_runs[1]} in READY_FOR_REVIEW"]
    again = doctor(db_url)  # the last check was full and found problems: full again until one is clean
    assert again.stdout.splitlines() == found and "of the whole log" in again.stderr

    plant(db_url, [f"UPDATE claims SET state = 'READY_FOR_REVIEW' WHERE document_run_id = {document_runs[1]}",
                   "UPDATE review_fields SET field_path = 'rules[]'",
                   f"UPDATE document_runs SET final_attempt_id = (SELECT max(id) FROM attempts WHERE document_run_id = "
                   f"{fresh.document_run_id}) WHERE id = {fresh.document_run_id}"])
    assert doctor(db_url).returncode == ExitCode.OK  # full, clean
    report = json.loads(doctor(db_url, "--format", "json").stdout)
    assert report["healthy"] and report["full"] is False and report["last_full"] is not None


GROWING = ("documents", "document_runs", "in_scope", "claims", "attempts", "reviews", "review_fields",
           "approved_records")
"""The tables that grow with every document run (``in_scope``: the scope's own read of document runs)."""


def test_a_default_check_reads_what_changed_through_indexes(db_url: str) -> None:
    """What a check since the last clean one reads is found through an index on both databases: a default
    ``doctor`` reads none of the growing tables whole, whatever the log's size (docs/runs.md)."""
    with open_store(db_url) as store:
        _, document_runs, _ = healthy_log(store)
        assert check_log(store.engine).scope is None  # the first check reads everything
        config = run_config(model="newer")
        newer = store.start_run(config)
        fresh = store.claim(newer, config.config_hash, store.get_or_create_document(make_document(7)), "docs/7.txt")
        store.finish_document(fresh.document_run_id, DocumentState.READY_FOR_REVIEW, final_attempt_id=record(
            store, fresh.document_run_id))
        store.finish_run(newer, "finished")
        approve(store, NewApproval(document_runs[0], {"rules": []}, "kim", changed_fields=["rules[]"]))
        checked: list[object] = []
        plan = query_plans(store.engine, lambda: checked.append(check_log(store.engine)))
    [result] = checked
    assert result.scope is not None and newer in result.scope.run_ids and result.problems == []  # type: ignore[attr-defined]
    scans = ("SCAN {}" if db_url.startswith("sqlite") else "Seq Scan on {}").format
    steps = [step.removeprefix("->").strip() for step in plan.split(" | ")]
    read_whole = [table for table in GROWING if any(f"{step} ".startswith(f"{scans(table)} ") for step in steps)]
    assert read_whole == [], plan


def test_doctor_full_shows_its_progress_on_a_terminal(db_url: str) -> None:
    with open_store(db_url) as store:
        healthy_log(store)
    code, stdout, terminal = on_terminal([sys.executable, "-m", "extractor", "doctor", "--full", "--database", db_url])
    assert code == ExitCode.OK and "healthy" in stdout
    assert "extract doctor" in terminal and re.search(rf"\d+/{len(checks())}", terminal), terminal  # checks done of all
    assert any(f" {check.name} " in terminal for check in checks()), terminal  # and the one it is at
    piped = doctor(db_url, "--full")
    assert "extract doctor" not in piped.stderr + piped.stdout  # no bar in a pipe or a log
