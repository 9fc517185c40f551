"""Run-log rows for store and doctor tests: small segmented documents, run configurations, attempts, and
rows planted with foreign-key checks off (as a careless tool could write them)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event, text

from extractor.document import Block, BlockKind, Sentence
from extractor.document import Document as SourceDocument
from extractor.generate import GenerationRequest
from extractor.store import AttemptRecord, RunConfig, Store
from extractor.store.approved import NewApproval, approve
from extractor.store.db import create_store_engine
from extractor.vocab import DocumentState, GateDecision


def make_document(n: int, segmenter: str = "test-seg/1") -> SourceDocument:
    """A small segmented document whose content (and so sha256) depends on ``n``."""
    first, second = f"Document {n} starts here.", "The requester asks for a review."
    text_ = f"{first} {second}"
    return SourceDocument(
        path=f"docs/{n}.txt",
        text=text_,
        blocks=[Block(0, BlockKind.PARAGRAPH, 0, len(text_), 0)],
        sha256=hashlib.sha256(text_.encode()).hexdigest(),
        format="txt",
        encoding="utf-8",
        sentences=[
            Sentence("s1", first, 0, len(first), 0),
            Sentence("s2", second, len(first) + 1, len(text_), 0),
        ],
        segmenter=segmenter,
    )


def run_config(**overrides: Any) -> RunConfig:
    values: dict[str, Any] = {
        "contract": "work_procedure",
        "contract_version": 1,
        "prompt_version": "v1",
        "model": "gpt-test",
        "provider": "openai",
        "validator_version": "1",
        "segmenter": "test-seg/1",
    }
    return RunConfig(**{**values, **overrides})


REQUEST = GenerationRequest(
    messages=[{"role": "system", "content": "You extract procedures."},
              {"role": "user", "content": "Source document:\n[s1] Document 1 starts here.\nReturn the JSON object."}],
    schema={"type": "object"}, schema_name="test_v1",
    shared=("You extract procedures.", "Source document:\n", "\nReturn the JSON object."),
)
"""A request like the renderer's: what every document repeats is marked shared (stored once as a request part)."""


def record(store: Store, document_run_id: int, number: int = 1, **overrides: Any) -> int:
    """Record an attempt with plausible defaults; ``overrides`` replace any of them."""
    values: dict[str, Any] = {
        "number": number,
        "kind": "generate" if number == 1 else "repair",
        "prompt_version": "v1",
        "request": REQUEST,
        "raw_response": "{}",
        "parsed": {},
        "findings": [],
        "passed": True,
        "outcome": "passed",
    }
    return store.record_attempt(AttemptRecord(document_run_id=document_run_id, **{**values, **overrides}))


def dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def plant(db_url: str, statements: list[str]) -> None:
    """Write rows with foreign-key checks off, as a careless tool could."""
    engine = create_store_engine(db_url)
    try:
        if engine.dialect.name == "sqlite":
            raw = engine.raw_connection()  # PRAGMA foreign_keys only works outside a transaction
            try:
                driver = raw.driver_connection
                assert driver is not None
                driver.execute("PRAGMA foreign_keys = OFF")
                for statement in statements:
                    driver.execute(statement)
            finally:
                raw.close()
        else:
            with engine.begin() as connection:
                connection.execute(text("SET LOCAL session_replication_role = replica"))
                for statement in statements:
                    connection.execute(text(statement))
    finally:
        engine.dispose()


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
    approve(store, NewApproval(document_runs[4], {"rules": []}, "kim", attempt_id=attempts[4], block_override={
        "reviewer": "kim", "reason": "test key from the vendor's manual", "rule_ids": []}))
    store.finish_run(third, "finished", GateDecision.BLOCK)
    return [first, second, third], document_runs, attempts


def query_plans(engine: Engine, call: Callable[[], object]) -> str:
    """The plan of every SELECT ``call`` sends, one ``|``-joined line: SQLite's (``SEARCH t USING INDEX ...``), or
    PostgreSQL's with sequential scans priced out (``Seq Scan on t`` then means no index could answer it)."""
    statements: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    selects = [(s, p) for s, p in statements if s.lstrip().upper().startswith("SELECT")]
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            return " | ".join(row[3] for statement, parameters in selects
                              for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters))
        connection.exec_driver_sql("SET enable_seqscan = off")
        return " | ".join(row[0].strip() for statement, parameters in selects
                          for row in connection.exec_driver_sql(f"EXPLAIN {statement}", parameters))
