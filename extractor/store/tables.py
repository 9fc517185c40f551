"""The tables of the run log and of the approved records, as SQLAlchemy Core ``Table`` objects.

They describe the schema the migrations in ``migrations/versions`` build; a test compares the two on every
backend, so a change here without a migration fails loudly. Allowed values of the state columns come from
``extractor.vocab`` and are enforced by CHECK constraints as well, so a typo never becomes data.

Core only, and the store reads and writes them through plain connections: SQLAlchemy's ORM with declarative
classes for these tables cost every command about 0.1 s before it read anything (``extract runs`` included).
"""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
    true,
)

from extractor.store.db import compact_json
from extractor.vocab import (
    REVIEWABLE,
    AttemptKind,
    AttemptOutcome,
    CalibrationVerdict,
    DocumentState,
    GateDecision,
    Outcome,
    ReviewDecision,
    Role,
    RunStatus,
    SignoffState,
    TaskState,
    values_of,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Deterministic constraint names, so later migrations can drop or alter them on every backend."""


def one_of(column: str, values: tuple[str, ...]) -> str:
    """SQL for a CHECK constraint limiting ``column`` to ``values`` (from ``extractor.vocab``)."""
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on every backend.

    PostgreSQL keeps the offset itself; SQLite keeps none, so values are stored as UTC and UTC is
    re-attached on read. Naive datetimes are refused: their meaning depends on the machine's clock zone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware value")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class NulFreeText(TypeDecorator[str]):
    """Text that stores the same on every backend: PostgreSQL text cannot hold NUL, so NUL becomes U+FFFD.

    Everything else (a model's broken output included) is kept exactly; a NUL in a model response is
    garbage either way, and a visible replacement character says where it was.
    """

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else value.replace("\x00", "\ufffd")


class _BytesAsText(TypeDecorator[bytes]):
    """Bytes that are UTF-8 text, kept as text (``UTF8Bytes`` on PostgreSQL)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: bytes | None, dialect: Dialect) -> str | None:  # type: ignore[override]
        return None if value is None else value.decode("utf-8")

    def process_result_value(self, value: str | None, dialect: Dialect) -> bytes | None:  # type: ignore[override]
        return None if value is None else value.encode("utf-8")


UTF8Bytes = LargeBinary().with_variant(_BytesAsText(), "postgresql")
"""Bytes that are UTF-8 text without NUL: a BLOB in SQLite, text in PostgreSQL. psycopg reads a bytea as hex text and
decodes it: 13 µs for the 5 KB of a record's stored CSV cells (measured), more than making them."""


NullableJSON = JSON(none_as_null=True)
"""JSON where Python ``None`` is SQL NULL (the default JSON type would store the JSON text ``null``)."""

PACK_FROM = 160
"""UTF-8 bytes from which SQLite keeps a text compressed (shorter ones stay plain and readable in SQL)."""


def pack(text: str) -> str | bytes:
    """A long text as zlib bytes when that is shorter, else the text itself.

    PostgreSQL compresses long values on its own (TOAST); SQLite does not, and an attempt's answer and
    derived states (about 2.8 KB for a 3-sentence document) would leave one row per 4 KB page. Lossless:
    ``unpack`` gives back the exact text.
    """
    data = text.encode("utf-8", "surrogatepass")
    if len(data) < PACK_FROM:
        return text
    packed = zlib.compress(data, 6)
    return packed if len(packed) < len(data) else text


def unpack(value: str | bytes) -> str:
    """The text ``pack`` was given (a row written before packing, or a short text, is plain already)."""
    return zlib.decompress(value).decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


class PackedText(NulFreeText):
    """``NulFreeText`` that SQLite stores compressed when long (see ``pack``); read back exactly."""

    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | bytes | None:  # type: ignore[override]
        text = super().process_bind_param(value, dialect)
        return pack(text) if text is not None and dialect.name == "sqlite" else text

    def process_result_value(self, value: str | bytes | None, dialect: Dialect) -> str | None:  # type: ignore[override]
        return None if value is None else unpack(value)


class PackedJSON(TypeDecorator[Any]):
    """Nullable JSON that SQLite stores as compact, compressed-when-long text (see ``pack``).

    PostgreSQL keeps its own JSON type (and compresses by itself). In SQLite a value is JSON text or
    zlib bytes of JSON text, so rows written before packing read back unchanged. The schema says JSON
    on both. SQLite's own JSON conversion is bypassed, not chained: it would serialise the bytes again.
    """

    impl = NullableJSON
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Any:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        return lambda value: None if value is None else pack(compact_json(value))

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return lambda value: None if value is None else json.loads(unpack(value))


metadata = MetaData(naming_convention=NAMING_CONVENTION)

runs = Table(
    "runs",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    Column("status", String(16), nullable=False),
    Column("contract", String(100), nullable=False),
    Column("contract_version", Integer, nullable=False),
    Column("prompt_version", String(100), nullable=False),
    Column("model", String(500), nullable=False),
    Column("provider", String(100), nullable=False),
    Column("validator_version", String(100), nullable=False),
    Column("segmenter", String(500), nullable=False),
    Column("judge_model", String(500)),
    Column("config_hash", String(64), nullable=False),
    Column("config", JSON, nullable=False),
    Column("command", NulFreeText, nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("heartbeat_at", UTCDateTime, nullable=False),
    # ``GateDecision`` of the run's documents (``extractor.engine.summary.run_outcome``), set when it ends.
    Column("outcome", String(16)),
    CheckConstraint(one_of("status", values_of(RunStatus)), name="status"),
    CheckConstraint(one_of("outcome", values_of(GateDecision)), name="outcome"),
    Index("ix_runs_started_at", "started_at"),
    Index("ix_runs_config_hash", "config_hash"),
)
"""One invocation of ``extract run``: what decides its results, and whether it is still alive."""

documents = Table(
    "documents",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("sha256", String(64), nullable=False),
    Column("segmenter", String(500), nullable=False),
    Column("path", NulFreeText, nullable=False),
    Column("format", String(20), nullable=False),
    Column("encoding", String(50)),
    Column("char_count", Integer, nullable=False),
    Column("sentence_count", Integer, nullable=False),
    Column("sentences", PackedJSON, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("sha256", "segmenter"),
)
"""A file's content as segmented once: the same bytes and segmenter always give the same sentence ids."""

def file_name(path: str) -> str:
    """What ``document_runs.name`` holds for ``path``: what follows its last ``/`` (the whole path without one).

    ``extract show PATH`` looks a path up by its file name through ``ix_document_runs_name`` (an index answers
    equality, never ``LIKE '%name'``) and then compares whole paths.
    """
    return path.rpartition("/")[2]


def waiting(table: str = "") -> str:
    """SQL: a document run a person may still decide (``table``: its name, in a query that joins others).

    The condition of the partial index ``ix_document_runs_waiting``; the review queue reads only these rows.
    """
    prefix = f"{table}." if table else ""
    return f"NOT {prefix}decided AND {prefix}{one_of('state', values_of(REVIEWABLE))}"


document_runs = Table(
    "document_runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", ForeignKey("runs.id"), nullable=False),
    Column("document_id", ForeignKey("documents.id"), nullable=False),
    Column("path", NulFreeText, nullable=False),
    # ``file_name(path)``: what ``extract show PATH`` looks up (migration 0013 filled it for rows written before)
    Column("name", NulFreeText, nullable=False),
    Column("config_hash", String(64), nullable=False),
    Column("state", String(20), nullable=False),
    Column("cause", NulFreeText),
    Column("needs_person", JSON, default=list, nullable=False),
    Column("final_attempt_id", ForeignKey("attempts.id", use_alter=True)),
    Column("tags", JSON, default=list, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    # A person approved or rejected it (it has a row in ``reviews``): set with that row, never by a run.
    Column("decided", Boolean, default=False, server_default=false(), nullable=False),
    # How many decisions (reviews and sign-offs) were taken on it: a decision is written only if this is still the
    # number its decider saw (compare-and-set), so two people deciding at once cannot both succeed.
    Column("review_version", Integer, server_default=text("0"), nullable=False),
    UniqueConstraint("run_id", "document_id"),
    CheckConstraint(one_of("state", values_of(DocumentState)), name="state"),
    Index("ix_document_runs_document_id", "document_id"),
    Index("ix_document_runs_path", "path"),
    Index("ix_document_runs_name", "name"),
    # Partial on both backends (migrations 0004 and 0005 build it with this condition). Declared for SQLite only:
    # ``postgresql_where`` makes SQLAlchemy import its PostgreSQL dialect to check the argument, in every
    # command, SQLite ones included (about 40 ms of each start); Alembic builds the index and does not compare
    # its condition, so the PostgreSQL side is left to the migrations.
    Index("ix_document_runs_waiting", "started_at", sqlite_where=text(waiting())),
)
"""One document processed by one run, and where it ended up."""

claims = Table(
    "claims",
    metadata,
    Column("config_hash", String(64), primary_key=True),
    Column("document_id", ForeignKey("documents.id"), primary_key=True),
    Column("document_run_id", ForeignKey("document_runs.id"), nullable=False),
    Column("run_id", ForeignKey("runs.id"), nullable=False),
    Column("state", String(20), nullable=False),
    Column("claimed_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    CheckConstraint(one_of("state", values_of(DocumentState)), name="state"),
    Index("ix_claims_run_id", "run_id"),
    Index("ix_claims_document_run_id", "document_run_id"),
)
"""Who processes a document for one configuration: the unit of "processed exactly once"."""

request_parts = Table(
    "request_parts",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("content", Text, nullable=False),
)
"""What the requests of many attempts share (system prompt, template text, schema), stored once.

``content`` is a request template: the request's JSON with each message content cut into shared texts
and holes for the attempt's own texts (``extractor.store.requests``); ``sha256`` is the hash of exactly
this text, so the same template written by any run or process is one row.
"""

attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("document_run_id", ForeignKey("document_runs.id"), nullable=False),
    Column("run_id", ForeignKey("runs.id"), nullable=False),
    Column("document_id", ForeignKey("documents.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("prompt_version", String(100), nullable=False),
    Column("request", PackedJSON, nullable=False),
    Column("request_part", ForeignKey("request_parts.sha256")),
    Column("request_hash", String(64), nullable=False),
    Column("raw_response", PackedText),
    Column("parsed", PackedJSON),
    # True: ``parsed`` is exactly the JSON of ``raw_response`` and is not stored twice (``parsed`` is NULL).
    Column("parsed_is_raw", Boolean, default=False, server_default=false(), nullable=False),
    Column("findings", JSON, default=list, nullable=False),
    Column("fields", PackedJSON),
    Column("sentences", PackedJSON),
    Column("evidence_spans", PackedJSON),
    Column("passed", Boolean),
    Column("outcome", String(20), nullable=False),
    Column("mode", String(50)),
    Column("model", String(500)),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    # Prompt tokens the server served from its prompt cache (included in ``prompt_tokens``).
    Column("cached_tokens", Integer),
    Column("latency_ms", Float),
    Column("transport", JSON, default=list, nullable=False),
    Column("error", NulFreeText),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime),
    # 1-based window of a long document (NULL: the whole document, or the candidate merged from windows).
    Column("window", Integer),
    Column("first_sentence", Integer),
    Column("last_sentence", Integer),
    # An earlier attempt whose answer this one records again (a resumed long document); no call was made.
    Column("reused_from", Integer),
    UniqueConstraint("document_run_id", "kind", "number"),
    CheckConstraint(one_of("kind", values_of(AttemptKind)), name="kind"),
    CheckConstraint(one_of("outcome", values_of(AttemptOutcome)), name="outcome"),
    Index("ix_attempts_run_id", "run_id"),
)
"""One model call (generation, repair or judge) with everything needed to reproduce and audit it.

The request sent is ``request`` alone (rows written before request parts existed, or a request the
store cannot split), or ``request_part``'s template with ``request`` holding this attempt's own texts.
A candidate that is exactly the model's JSON answer is kept once, as ``raw_response`` (``parsed_is_raw``);
in SQL, ``COALESCE(parsed, raw_response)`` is the candidate either way. Read attempts through
``extractor.store`` to get both back as they were.
"""

approved_records = Table(
    "approved_records",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("document_sha256", String(64), nullable=False),
    Column("document_path", NulFreeText, nullable=False),
    Column("contract", String(100), nullable=False),
    Column("contract_version", Integer, nullable=False),
    Column("record", JSON, nullable=False),
    Column("evidence_spans", NullableJSON),
    Column("attempt_id", Integer),
    Column("run_id", String(32)),
    Column("reviewer", String(200), nullable=False),
    Column("note", NulFreeText),
    Column("edited", Boolean, nullable=False),
    Column("approved_at", UTCDateTime, nullable=False),
    # A BLOCKED result approved over its block: who, when, why, and the critical rules overridden (else NULL).
    Column("block_override", NullableJSON),
    # Every person whose approval it needed (``[{"reviewer", "at"}]``, oldest first) when its contract asks for
    # more than one (``[review] approvals``); NULL for a record one person approved (``reviewer``).
    Column("approvals", NullableJSON),
    # The record's CSV cells, made when it was approved (``extractor.store.cells.record_cells``): a CSV export writes
    # its row from them without reading the record. NULL for a record approved before they were kept, or whose cells
    # are made from the decoded record; export makes those.
    Column("record_cells", UTF8Bytes),
    UniqueConstraint("document_sha256", "contract", "contract_version"),
    Index("ix_approved_records_approved_at", "approved_at", "id"),  # export's order, and its ``--since`` range
)
"""A record a person approved: the only data that is exported.

No foreign keys on purpose: this table may live in its own database, apart from the run log.
"""

reviews = Table(
    "reviews",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("document_run_id", ForeignKey("document_runs.id"), nullable=False),
    Column("decision", String(16), nullable=False),
    Column("reviewer", String(200), nullable=False),
    Column("note", NulFreeText),
    Column("created_at", UTCDateTime, nullable=False),
    # For an approval over a BLOCKED result: the reason and the critical rules overridden (else NULL).
    Column("block_override", NullableJSON),
    # For an approval: the field paths whose values the person changed from the model's final candidate
    # (``[]``: approved as produced); NULL for a rejection, and for approvals recorded before this was kept.
    Column("changed_fields", NullableJSON),
    # The run of the reviewed document run (NULL only where that document run is missing).
    Column("run_id", ForeignKey("runs.id")),
    # The newest decision on its document run: the one that counts (unset when a newer one is recorded).
    Column("current", Boolean, default=True, server_default=true(), nullable=False),
    # For an approval: how many field paths it changed (``len(changed_fields)``; NULL where those are NULL).
    Column("changes", Integer),
    CheckConstraint(one_of("decision", values_of(ReviewDecision)), name="decision"),
    Index("ix_reviews_document_run_id", "document_run_id"),
    Index("ix_reviews_current_decision_run_id_changes", "current", "decision", "run_id", "changes"),
)
"""One human decision on one document run; the full history, never overwritten (``current`` and ``changes`` are
kept with it so ``extract stats --corrections`` counts approvals without reading any record)."""

review_fields = Table(
    "review_fields",
    metadata,
    Column("review_id", ForeignKey("reviews.id"), primary_key=True),
    Column("field_path", NulFreeText, primary_key=True),
    Column("run_id", ForeignKey("runs.id"), nullable=False),
    Index("ix_review_fields_run_id_field_path", "run_id", "field_path"),
)
"""The field paths a current approval changed (``reviews.changed_fields`` as rows), with its run: what
``extract stats --corrections`` counts per field. Written with the decision; a newer decision on the same document
run removes them."""

integrity_checks = Table(
    "integrity_checks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=False),
    Column("full", Boolean, nullable=False),
    Column("problems", Integer, nullable=False),
    # The largest id of each table it checked up to (``extractor.store.integrity.Marks``), taken when it started.
    Column("marks", JSON, nullable=False),
)
"""Every ``extract doctor`` check: the next one checks what changed since the newest clean one."""

signoffs = Table(
    "signoffs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("document_run_id", ForeignKey("document_runs.id"), nullable=False),
    Column("reviewer", String(200), nullable=False),
    Column("record", JSON, nullable=False),
    Column("record_sha256", String(64), nullable=False),
    Column("evidence_spans", NullableJSON),
    Column("attempt_id", Integer),
    Column("edited", Boolean, nullable=False),
    Column("note", NulFreeText),
    Column("block_override", NullableJSON),
    Column("changed_fields", NullableJSON),
    Column("created_at", UTCDateTime, nullable=False),
    Column("state", String(16), nullable=False),
    # The approval (``reviews``) this sign-off made with the others of its record; NULL while it waits or after
    # a rejection or another record's sign-off superseded it.
    Column("review_id", ForeignKey("reviews.id")),
    CheckConstraint(one_of("state", values_of(SignoffState)), name="state"),
    Index("ix_signoffs_document_run_id_state", "document_run_id", "state"),
)
"""One person's approval of a record whose contract needs more than one (``[review] approvals = 2``): the record
counts as approved, and is exported, only once that many distinct people signed off the same record."""

review_claims = Table(
    "review_claims",
    metadata,
    Column("document_run_id", ForeignKey("document_runs.id"), primary_key=True),
    Column("reviewer", String(200), nullable=False),
    Column("claimed_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
)
"""Who has a document open to review it, and until when (renewed while the page is open): nobody else decides it
before it is released or expires. A row past ``expires_at`` is no claim."""

judge_calibrations = Table(
    "judge_calibrations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("judge_model", String(500), nullable=False),
    Column("rubric_version", String(100), nullable=False),
    Column("threshold", Float, nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("labels_sha256", String(64), nullable=False),
    Column("n_cases", Integer, nullable=False),
    Column("report", JSON, nullable=False),
    CheckConstraint(one_of("verdict", values_of(CalibrationVerdict)), name="verdict"),
    Index("ix_judge_calibrations_key", "judge_model", "rubric_version", "threshold", "created_at"),
)
"""One calibration report of a judge against human labels (``extract judge calibrate``).

Tied to exactly what it measured: the judge model, the rubric version and the threshold. A judge may
run in block mode only while the latest report for that triple admits it.
"""

uploads = Table(
    "uploads",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("sha256", String(64), nullable=False),
    Column("name", NulFreeText, nullable=False),
    Column("size", Integer, nullable=False),
    Column("content", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_uploads_sha256", "sha256"),
)
"""The bytes of a document submitted to the queue or the API: workers on other machines read them here,
not from the submitter's disk. ``name`` is the document's name (its extension picks the reader): through the
API the base name of the name sent, which the task keeps as sent (``tasks.sent_name``)."""

batches = Table(
    "batches",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("settings", JSON, nullable=False),
    Column("submitted_by", String(200), nullable=False),
    # Whose work it is: the submitting API token's owner (``api_tokens.owner``, else its name). A submitter
    # sees only its owner's batches; NULL (``extract run --queue``): reviewers and admins only.
    Column("owner", String(200)),
    Column("created_at", UTCDateTime, nullable=False),
    # Listings read the newest batches of one owner, or of everyone, from these without sorting the rest.
    Index("ix_batches_owner_created_at", "owner", "created_at"),
    Index("ix_batches_created_at", "created_at"),
)
"""Documents submitted together (one ``extract run --queue``, or API submissions) with the settings
every worker converts them with."""

tasks = Table(
    "tasks",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("batch_id", ForeignKey("batches.id"), nullable=False),
    Column("upload_id", ForeignKey("uploads.id"), nullable=False),
    Column("state", String(16), nullable=False),
    Column("outcome", String(20)),
    Column("cause", NulFreeText),
    Column("tokens", Integer, default=0, server_default=text("0"), nullable=False),
    Column("rule_ids", JSON, default=list, nullable=False),
    Column("deliveries", Integer, default=0, server_default=text("0"), nullable=False),
    Column("run_id", ForeignKey("runs.id")),
    Column("document_run_id", ForeignKey("document_runs.id")),
    Column("enqueued_at", UTCDateTime, nullable=False),
    Column("started_at", UTCDateTime),
    Column("finished_at", UTCDateTime),
    Column("sent_to", String(64)),
    Column("sent_name", NulFreeText),
    CheckConstraint(one_of("state", values_of(TaskState)), name="state"),
    CheckConstraint(f"outcome IS NULL OR {one_of('outcome', values_of(Outcome))}", name="outcome"),
    Index("ix_tasks_batch_id_state", "batch_id", "state"),
    Index("ix_tasks_state", "state"),
    # Who may read a document run (the owners of the tasks that ended in it), and which uploads a content has.
    Index("ix_tasks_document_run_id", "document_run_id"),
    Index("ix_tasks_upload_id", "upload_id"),
)
"""One queued document: the Celery message carries only ``id``; everything else is read from here.

``deliveries`` counts how many times a worker started it: a document whose worker keeps dying ends
ERROR after ``max_deliveries`` instead of looping. ``run_id`` is the worker run that last started it.
``sent_to`` names the broker that took its message (Redis's run id, new at every restart; NULL while
``unsent``): a broker that restarted without its data lost it, and the outbox sends it again
(``extractor.queue.outbox``). ``sent_name`` is the name the document was sent with when its name (the base name
of it) differs: ``../../x.txt`` for ``x.txt``, the submission's provenance.
"""

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    Column("role", String(16), nullable=False),
    Column("token_sha256", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime),
    # Tokens with the same owner see each other's submissions (NULL: the token's name is its owner).
    Column("owner", String(200)),
    # A reviewer that reads and decides every owner's work (``--all-owners``); admins always do.
    Column("all_owners", Boolean, server_default=false(), nullable=False),
    Column("expires_at", UTCDateTime),  # NULL: never (``--expires never``)
    Column("last_used_at", UTCDateTime),  # kept to the minute: a request writes it at most once a minute
    CheckConstraint(one_of("role", values_of(Role)), name="role"),
    UniqueConstraint("name"),
    UniqueConstraint("token_sha256"),
)
"""A bearer token of ``extract serve``: only its SHA-256 is stored, so a copy of the database grants nothing."""

evaluations = Table(
    "evaluations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("selection", NulFreeText, nullable=False),
    Column("gold", NulFreeText, nullable=False),
    Column("gold_sha256", String(64), nullable=False),
    Column("resamples", Integer, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("summary", JSON, nullable=False),
    Column("report", PackedJSON, nullable=False),
    Index("ix_evaluations_created_at", "created_at"),
)
"""One scoring of runs' final candidates against gold records (``extract eval``), kept so ``extract runs``
shows a run's accuracy. ``summary`` holds the headline numbers, ``report`` the whole report as printed
with ``--format json``; ``gold_sha256`` names the gold files exactly (an edited gold set is another score)."""

evaluation_runs = Table(
    "evaluation_runs",
    metadata,
    Column("evaluation_id", ForeignKey("evaluations.id"), primary_key=True),
    Column("run_id", ForeignKey("runs.id"), primary_key=True),
    Index("ix_evaluation_runs_run_id", "run_id"),
)
"""Which runs one evaluation scored (a selection may span several runs, a resumed run for one)."""
