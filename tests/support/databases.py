"""Fresh databases for tests: an SQLite file, or a PostgreSQL database created for one test and dropped after.

PostgreSQL comes from ``EXTRACT_TEST_POSTGRES_URL`` (an admin URL, e.g. what ``.ci/postgres.sh`` prints) or,
when that is not set and PostgreSQL's server binaries are installed, from a throwaway cluster this test
session starts itself on a free port, as the Redis tests start their own ``redis-server``: pytest-postgresql's
``PostgreSQLExecutor`` runs ``initdb`` and ``pg_ctl`` (trust authentication on 127.0.0.1, fsync off) in a
temporary folder removed at the end. PostgreSQL refuses to run as root, so under root (CI, this machine) the
cluster runs as the ``postgres`` system user the Debian package creates.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pwd
import shutil
import socket
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text

ADMIN_URL_ENV = "EXTRACT_TEST_POSTGRES_URL"
SYSTEM_USER = "postgres"
_cluster: dict[str, Any] = {}
"""The session's own cluster once started: its executor, folder and admin URL (see ``admin_url``)."""


def pg_ctl() -> str | None:
    """The newest installed ``pg_ctl``: on PATH, else Debian's ``/usr/lib/postgresql/<version>/bin``."""
    found = shutil.which("pg_ctl")
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]) if
                      p.parts[-3].isdigit() else 0)
    return str(versions[-1]) if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_system_user(executable: str, folder: Path) -> str:
    """A ``pg_ctl`` that runs as the ``postgres`` user (for root), and the folder handed to that user."""
    account = pwd.getpwnam(SYSTEM_USER)
    os.chown(folder, account.pw_uid, account.pw_gid)
    wrapper = folder / "pg_ctl"
    wrapper.write_text(f'#!/bin/sh\nexec runuser -u {SYSTEM_USER} -- "{executable}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return str(wrapper)


def admin_url() -> str | None:
    """An admin URL of a PostgreSQL server for the tests, or None when there is none to be had."""
    given = os.environ.get(ADMIN_URL_ENV)
    if given:
        return given
    if "url" in _cluster:
        return str(_cluster["url"])
    executable = pg_ctl()
    if executable is None:
        return None
    from pytest_postgresql.executors import PostgreSQLExecutor

    folder = Path(tempfile.mkdtemp(prefix="extract-test-postgres-"))
    if os.geteuid() == 0:
        executable = _as_system_user(executable, folder)
    port = _free_port()
    executor = PostgreSQLExecutor(executable=executable, host="127.0.0.1", port=port, datadir=str(folder / "data"),
                                  unixsocketdir=str(folder), logfile=str(folder / "postgresql.log"),
                                  startparams="-w", dbname="postgres", user=SYSTEM_USER,
                                  postgres_options="-c max_connections=300")
    _cluster.update(executor=executor, folder=folder)
    executor.start()
    _await_connections(port)
    _cluster["url"] = f"postgresql+psycopg://{SYSTEM_USER}@127.0.0.1:{port}/postgres"
    return str(_cluster["url"])


def _await_connections(port: int, seconds: float = 120.0) -> None:
    """Wait until the new cluster accepts a connection: the executor returns once the port is open, and on a
    busy machine the server then answers "the database system is starting up" for a while."""
    import psycopg

    deadline = time.monotonic() + seconds
    while True:
        try:
            psycopg.connect(host="127.0.0.1", port=port, user=SYSTEM_USER, dbname="postgres", connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def stop_cluster() -> None:
    """Stop the session's own cluster, if one was started, and remove its folder."""
    executor, folder = _cluster.pop("executor", None), _cluster.pop("folder", None)
    _cluster.pop("url", None)
    if executor is not None:
        executor.stop()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """A URL of an empty database on ``backend`` ("sqlite" or "postgresql").

    For PostgreSQL a uniquely named database is created on the server of ``admin_url`` and dropped afterwards,
    so tests never see each other's rows. With no server to be had (no ``EXTRACT_TEST_POSTGRES_URL`` and no
    PostgreSQL binaries) the test is skipped, saying how to get one.
    """
    if backend == "sqlite":
        yield f"sqlite:///{folder}/t.db"
        return
    url = admin_url()
    if url is None:
        pytest.skip(f"no PostgreSQL: install its server binaries (apt-get install postgresql) or set {ADMIN_URL_ENV}")
    name = f"extract_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


SQLITE_DBCONFIG_DEFENSIVE = 1010
"""``sqlite3.SQLITE_DBCONFIG_DEFENSIVE`` (Python 3.12+ names it; the value is SQLite's own)."""


def sqlite_defensive(connection: sqlite3.Connection) -> None:
    """Turn on SQLite's defensive mode for this connection: no writable schema, no edits of ``sqlite_master``
    (what a hardened application or SQLite shell sets, and what a migration must survive).

    Python 3.12 has ``Connection.setconfig``; on 3.11 the same call goes to the SQLite library the ``sqlite3``
    module is linked with, through the connection's handle (the first field after the object header). Either way
    the setting is read back, so a wrong handle fails here rather than leaving the mode off.
    """
    if hasattr(connection, "setconfig"):
        connection.setconfig(SQLITE_DBCONFIG_DEFENSIVE, True)
        enabled = int(connection.getconfig(SQLITE_DBCONFIG_DEFENSIVE))
    else:
        library = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
        handle = ctypes.c_void_p.from_address(id(connection) + object.__basicsize__)
        state = ctypes.c_int(-1)
        library.sqlite3_db_config(handle, ctypes.c_int(SQLITE_DBCONFIG_DEFENSIVE), ctypes.c_int(1), ctypes.byref(state))
        enabled = state.value
    if enabled != 1:
        raise RuntimeError(f"SQLite's defensive mode did not turn on (it reads {enabled})")
