"""Runs: start, heartbeat, finish, and what happens to the documents of a run that stopped or died.

A run is alive while its status is ``running``, its heartbeat is recent and (on this machine) its process
exists; ``is_alive`` is the one place that decides it, for the claims of ``extractor.store.claims``.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, insert, select, update

from extractor.redact import redact_config, redact_text
from extractor.store.db import require_one_of, utcnow, write_connection
from extractor.store.info import RunConfig
from extractor.store.tables import claims, document_runs, runs
from extractor.vocab import DocumentState, GateDecision, RunStatus, values_of

STALE_AFTER_S = 60.0
"""A run whose heartbeat is older than this is considered dead and its documents may be taken over."""


def start_run(engine: Engine, config: RunConfig) -> str:
    """Record a new running run and return its id; secrets in the command and config are never stored."""
    run_id = uuid.uuid4().hex
    now = utcnow()
    with write_connection(engine) as connection:
        # only the columns a starting run sets (the outcome is set when the run ends)
        connection.execute(
            insert(runs).values(
                id=run_id,
                started_at=now,
                status=RunStatus.running,
                contract=config.contract,
                contract_version=config.contract_version,
                prompt_version=config.prompt_version,
                model=config.model,
                provider=config.provider,
                validator_version=config.validator_version,
                segmenter=config.segmenter,
                judge_model=config.judge_model,
                config_hash=config.config_hash,
                config=redact_config(config.config),
                command=redact_text(config.command),
                host=config.host,
                pid=config.pid,
                heartbeat_at=now,
            )
        )
    return run_id


def heartbeat(engine: Engine, run_id: str) -> None:
    """Tell other processes this run is alive (call well within ``STALE_AFTER_S``)."""
    with write_connection(engine) as connection:
        connection.execute(update(runs).where(runs.c.id == run_id).values(heartbeat_at=utcnow()))


def finish_run(engine: Engine, run_id: str, status: RunStatus, outcome: GateDecision | None = None) -> None:
    """Record how the run ended and, when known, its outcome (``extractor.engine.summary.run_outcome``)."""
    require_one_of(status, (s for s in values_of(RunStatus) if s != RunStatus.running), "run status")
    if outcome is not None:
        require_one_of(outcome, values_of(GateDecision), "run outcome")
    now = utcnow()
    with write_connection(engine) as connection:
        connection.execute(update(runs).where(runs.c.id == run_id)
                           .values(status=status, finished_at=now, heartbeat_at=now, outcome=outcome))


def mark_interrupted(engine: Engine, run_id: str) -> int:
    """Every document this run was still processing becomes INTERRUPTED (resumable); returns how many."""
    with write_connection(engine) as connection:
        return _interrupt_documents(connection, run_id, utcnow())


def _interrupt_documents(connection: Connection, run_id: str, now: datetime, cause: str | None = None) -> int:
    """The run's PROCESSING document runs and their claims become INTERRUPTED (free for a rerun to take)."""
    values = {"state": DocumentState.INTERRUPTED, "finished_at": now} | ({"cause": cause} if cause else {})
    interrupted = connection.execute(
        update(document_runs)
        .where(document_runs.c.run_id == run_id, document_runs.c.state == DocumentState.PROCESSING)
        .values(**values)
    )
    connection.execute(
        update(claims)
        .where(claims.c.run_id == run_id, claims.c.state == DocumentState.PROCESSING)
        .values(state=DocumentState.INTERRUPTED, updated_at=now)
    )
    return interrupted.rowcount


def reap_dead_runs(engine: Engine) -> list[str]:
    """Runs of this machine still marked running whose process is gone (killed, crashed) become
    ``crashed``, their unfinished documents INTERRUPTED; returns their ids.

    Only a missing process counts as dead here (a stale heartbeat may be a suspended laptop); claims
    of runs on other machines are still taken over once their heartbeat is stale (see ``is_alive``).
    """
    with engine.connect() as connection:
        running = connection.execute(
            select(runs.c.id, runs.c.pid).where(runs.c.status == RunStatus.running, runs.c.host == socket.gethostname())
        ).all()
    dead = [run_id for run_id, pid in running if pid != os.getpid() and not pid_exists(pid)]
    for run_id in dead:
        now = utcnow()
        with write_connection(engine) as connection:
            _interrupt_documents(connection, run_id, now, "its run ended without finishing (process killed or crashed)")
            connection.execute(
                update(runs)
                .where(runs.c.id == run_id, runs.c.status == RunStatus.running)
                .values(status=RunStatus.crashed, finished_at=now)
            )
    return dead


def is_alive(status: str, host: str, pid: int, heartbeat_at: datetime, stale_after_s: float) -> bool:
    """Whether a run holding a claim may still be working on it."""
    if status != RunStatus.running:
        return False
    if utcnow() - heartbeat_at > timedelta(seconds=stale_after_s):
        return False
    return host != socket.gethostname() or pid_exists(pid)


def pid_exists(pid: int) -> bool:
    """Whether a process with this id exists on this machine (POSIX only: elsewhere rely on heartbeats)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
