"""Engine, transactions and schema upgrades shared by the run log and the approved-records module.

SQLite is the default (one file in the working directory, WAL so readers never block the writer);
PostgreSQL works through the same URL setting. The schema is always brought to the newest Alembic
revision on open, so users never run a migration tool themselves.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from sqlalchemy import URL, Connection, Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from extractor.errors import StoreError
from extractor.resources import data_dir

if TYPE_CHECKING:  # Alembic is loaded only when a database needs migrating
    from alembic.config import Config

SCHEMA_REVISION = "0016"
"""The newest migration in ``migrations/versions`` (a test checks it against Alembic's head)."""
DATABASE_URL_ENV = "EXTRACT_DATABASE_URL"
DEFAULT_DATABASE_URL = "sqlite:///extract.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Any constant works; it only has to be the same in every process migrating the same PostgreSQL database.
_PG_MIGRATION_LOCK = 0x65787472  # "extr"

T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


def database_url(url: str | None = None) -> str:
    """The explicit URL, else ``EXTRACT_DATABASE_URL``, else an SQLite file in the current directory."""
    return url or os.environ.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL


def sqlite_file(url: str | None = None) -> str | None:
    """The path of the SQLite file ``url`` names (None: another database, or SQLite in memory)."""
    try:
        parsed = make_url(database_url(url))
    except ArgumentError:
        return None  # create_store_engine says what is wrong with it
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return parsed.database if not parsed.database.startswith("file:") else None  # an SQLite URI: as given


def missing_sqlite_file(url: str | None = None) -> str | None:
    """The path of the SQLite file ``url`` names when that file does not exist (else None)."""
    path = sqlite_file(url)
    return None if path is None or Path(path).exists() else path


def read_only_folder(url: str | None = None) -> str | None:
    """The folder of the SQLite file ``url`` names when this process may not write there: SQLite keeps its -wal
    and -shm files beside the database, so a read-only folder (or file system, or a database file this user may
    not write) takes no write at all. None for a folder that can be written, or another kind of database."""
    path = sqlite_file(url)
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return None  # opening says what is missing
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return folder
    return None


def read_only_url(path: str) -> URL:
    """An SQLite file opened read-only (``mode=ro``). Without a -wal file beside it nobody is writing it and
    nothing waits in a WAL, so it is also ``immutable``: SQLite would otherwise need to create the -shm file;
    with one, SQLite reads the WAL's transactions too."""
    absolute = os.path.abspath(path)
    query = {"mode": "ro", "uri": "true"} | ({} if os.path.exists(f"{absolute}-wal") else {"immutable": "1"})
    return URL.create("sqlite", database=f"file:{quote(absolute)}", query=query)


def safe_url(engine: Engine) -> str:
    """The URL as it may appear in messages and logs: never with its password."""
    return engine.url.render_as_string(hide_password=True)


def scrub(engine: Engine, message: str) -> str:
    """A driver message reduced to one line, with the password removed should a driver echo it."""
    line = message.strip().splitlines()[0] if message.strip() else message
    password = engine.url.password
    return line.replace(str(password), "***") if password else line


def compact_json(value: Any) -> str:
    """JSON columns as stored: no spaces, UTF-8 as is (Korean or Russian text takes 2-3 bytes a character, not 6).

    A lone surrogate (a model may send ``"\\ud800"``) cannot be encoded as UTF-8; such a value keeps its escapes.
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"))
    return text


def create_store_engine(url: str | None = None, *, read_only: bool = False) -> Engine:
    """An engine configured for many short transactions from several processes.

    On SQLite, SQLAlchemy emits BEGIN itself (the driver's implicit transactions would let a read
    silently upgrade to a write and fail with "database is locked" under contention); connections from
    ``write_connection`` take the write lock up front with BEGIN IMMEDIATE, which waits for the busy timeout
    instead of failing. ``read_only``: the SQLite file is opened read-only (``read_only_url``).
    """
    path = sqlite_file(url) if read_only else None
    try:
        engine = create_engine(read_only_url(path) if path else database_url(url), json_serializer=compact_json)
    except ArgumentError:
        # The message would echo the URL, password included.
        raise StoreError(
            "invalid database URL (expected e.g. sqlite:///extract.db or postgresql+psycopg://user@host/db)"
        ) from None
    except ImportError as error:
        raise StoreError(
            f"database driver missing ({error.name}): for PostgreSQL install extractor[postgres]"
        ) from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_on_read_only_connect if path else _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    # WAL + NORMAL: a commit is not fsynced (checkpoints are). A killed process loses nothing; a power cut
    # may lose the last commits, never consistency: their documents are simply processed again.
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _sqlite_on_read_only_connect(dbapi_connection: Any, _record: Any) -> None:
    """A read-only file keeps the journal mode it has: changing it is a write."""
    dbapi_connection.isolation_level = None
    dbapi_connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


def _sqlite_on_begin(connection: Any) -> None:
    immediate = connection.get_execution_options().get("store_write", False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def plain(cls: type[T], row: Any, **extra: Any) -> T:
    """Copy a dataclass's fields from a result row, so query results outlive their connection."""
    names = [f.name for f in fields(cls) if f.name not in extra]  # type: ignore[arg-type]
    return cls(**{name: getattr(row, name) for name in names}, **extra)


@contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """One short write transaction: committed on normal exit, rolled back on any exception; SQLite takes its write
    lock up front. Reads use ``engine.connect()``."""
    with engine.connect() as connection:
        connection.execution_options(store_write=True)  # on the connection: no option engine per transaction
        with connection.begin():
            yield connection


def require_one_of(value: str, allowed: Iterable[str], what: str) -> None:
    """Refuse a value outside its vocabulary before it reaches a CHECK constraint (a clearer message)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


def alembic_config() -> Config:
    """The Alembic configuration built in code: users need no alembic.ini."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(data_dir("migrations")))
    return config


def upgrade_schema(engine: Engine, *, read_only: bool = False) -> str:
    """Bring the database to the newest revision this code knows; returns that revision.

    Refuses (``StoreError``) a database stamped with a revision this code does not know, which means a
    newer extractor wrote it: downgrading silently would lose data the newer version relies on. A database
    already at ``SCHEMA_REVISION`` (every open but the first) is recognised with one query, without
    loading Alembic and the migration scripts: a command starts in a fraction of the time.
    """
    try:
        with engine.connect() as connection:
            if inspect(connection).has_table("alembic_version"):
                current = [row[0] for row in connection.execute(text("SELECT version_num FROM alembic_version"))]
                if current == [SCHEMA_REVISION]:
                    return SCHEMA_REVISION
    except SQLAlchemyError as error:
        raise StoreError(f"cannot open database at {safe_url(engine)}: {scrub(engine, str(error))}") from error
    if read_only:
        raise StoreError(f"the run log at {safe_url(engine)} was written by an older extractor and needs its schema "
                         "upgraded, which a read-only folder does not allow: open it once where it can be written")
    return _migrate(engine)


def apply_migrations(engine: Engine, revision: str = "head", *, downgrade: bool = False) -> None:
    """Upgrade (or with ``downgrade``, downgrade) the schema to ``revision``, in one ``migration_connection``.

    A migration that rebuilds tables on SQLite (Alembic's batch mode) names them in its module's ``REBUILDS``;
    their references are checked before it commits.
    """
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = alembic_config()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_heads()
    upper, lower = (current[0] if current else "base", revision) if downgrade else (revision, current[0] if current else "base")
    pending = [] if upper == lower else ScriptDirectory.from_config(config).iterate_revisions(upper, lower)
    rebuilds = {table for script in pending for table in getattr(script.module, "REBUILDS", ())}
    with migration_connection(engine, rebuilds) as connection:
        config.attributes["connection"] = connection
        (command.downgrade if downgrade else command.upgrade)(config, revision)


@contextmanager
def migration_connection(engine: Engine, rebuilds: Iterable[str] = ()) -> Iterator[Connection]:
    """The one write transaction migrations run in, committed only if they all succeed.

    PostgreSQL: an advisory lock, so two processes opening a fresh database at once do not both create the tables.
    SQLite: foreign keys are off while it runs, as SQLite's procedure for schema changes it cannot ALTER requires
    (https://www.sqlite.org/lang_altertable.html#otheralter): Alembic's batch mode rebuilds such a table (new
    table, rows copied, old one dropped, new one renamed), and dropping a table other tables point at would
    otherwise delete through their keys or fail. Before committing, ``PRAGMA foreign_key_check`` of the tables in
    ``rebuilds`` and of every table pointing at them must find no broken reference they did not have before (a
    damaged log keeps what ``extract doctor`` reports; tables nothing rebuilds are not read).
    """
    with engine.connect() as connection:
        if engine.dialect.name != "sqlite":
            with connection.begin():
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
                yield connection
            return
        raw = connection.connection.driver_connection  # outside a transaction: the only place the pragma works
        assert raw is not None
        raw.execute("PRAGMA foreign_keys = OFF")
        try:
            connection.execution_options(store_write=True)
            with connection.begin():
                checked = _pointing_at(connection, set(rebuilds))
                before = _broken_references(connection, checked)
                yield connection
                added = _broken_references(connection, checked) - before
                if added:
                    raise StoreError(f"cannot migrate database at {safe_url(engine)}: it would break references of "
                                     + ", ".join(f"{count} row(s) of {table} to {parent}"
                                                 for (table, parent), count in sorted(added.items())))
        finally:
            raw.execute("PRAGMA foreign_keys = ON")


def _pointing_at(connection: Connection, tables: set[str]) -> set[str]:
    """``tables`` and every table with a foreign key to one of them (SQLite)."""
    if not tables:
        return set()
    names = connection.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'").scalars().all()
    return tables | {name for name in names if any(
        row[2] in tables for row in connection.exec_driver_sql(f'PRAGMA foreign_key_list("{name}")'))}


def _broken_references(connection: Connection, tables: set[str]) -> Counter[tuple[str, str]]:
    """SQLite's ``PRAGMA foreign_key_check`` of these tables (those that exist): rows whose reference names no row,
    counted per table and parent."""
    broken: Counter[tuple[str, str]] = Counter()
    for table in sorted(tables):
        if connection.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).first():
            broken.update((child, parent) for child, _rowid, parent, _key in
                          connection.exec_driver_sql(f'PRAGMA foreign_key_check("{table}")'))
    return broken


def _migrate(engine: Engine) -> str:
    """``upgrade_schema`` through Alembic: a new database, an older one, or one a newer extractor wrote."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    config = alembic_config()
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    if head is None:
        raise StoreError(f"no migrations found in {config.get_main_option('script_location')}")
    known = {revision.revision for revision in script.walk_revisions()}
    where = safe_url(engine)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_heads()
        unknown = [revision for revision in current if revision not in known]
        if unknown:
            raise StoreError(
                f"database at {where} is at revision {', '.join(unknown)}, newer than this extractor "
                f"(head {head}); upgrade extractor"
            )
        if current == (head,):
            return head
        apply_migrations(engine)
    except (SQLAlchemyError, CommandError) as error:
        raise StoreError(
            f"cannot open or migrate database at {where}: {scrub(engine, str(error))}"
        ) from error
    return head
