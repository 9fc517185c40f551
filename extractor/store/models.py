"""The tables of the run log and of the approved records (SQLAlchemy 2 typed declarative models).

These models describe the schema the migrations in ``migrations/versions`` build; a test compares the
two on every backend, so a change here without a migration fails loudly. Allowed values of the state
columns come from ``extractor.vocab`` and are enforced by CHECK constraints as well, so a typo never becomes data.
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
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Run(Base):
    """One invocation of ``extract run``: what decides its results, and whether it is still alive."""

    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(one_of("status", values_of(RunStatus)), name="status"),
        CheckConstraint(one_of("outcome", values_of(GateDecision)), name="outcome"),
        Index("ix_runs_started_at", "started_at"),
        Index("ix_runs_config_hash", "config_hash"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(String(16))
    contract: Mapped[str] = mapped_column(String(100))
    contract_version: Mapped[int] = mapped_column(Integer)
    prompt_version: Mapped[str] = mapped_column(String(100))
    model: Mapped[str] = mapped_column(String(500))
    provider: Mapped[str] = mapped_column(String(100))
    validator_version: Mapped[str] = mapped_column(String(100))
    segmenter: Mapped[str] = mapped_column(String(500))
    judge_model: Mapped[str | None] = mapped_column(String(500))
    config_hash: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    command: Mapped[str] = mapped_column(NulFreeText)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    outcome: Mapped[str | None] = mapped_column(String(16))
    """``GateDecision`` of the run's documents (``extractor.engine.summary.run_outcome``), set when it ends."""


class Document(Base):
    """A file's content as segmented once: the same bytes and segmenter always give the same sentence ids."""

    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("sha256", "segmenter"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    segmenter: Mapped[str] = mapped_column(String(500))
    path: Mapped[str] = mapped_column(NulFreeText)
    format: Mapped[str] = mapped_column(String(20))
    encoding: Mapped[str | None] = mapped_column(String(50))
    char_count: Mapped[int] = mapped_column(Integer)
    sentence_count: Mapped[int] = mapped_column(Integer)
    sentences: Mapped[list[dict[str, Any]]] = mapped_column(PackedJSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


def waiting(table: str = "") -> str:
    """SQL: a document run a person may still decide (``table``: its name, in a query that joins others).

    The condition of the partial index ``ix_document_runs_waiting``; the review queue reads only these rows.
    """
    prefix = f"{table}." if table else ""
    return f"NOT {prefix}decided AND {prefix}{one_of('state', values_of(REVIEWABLE))}"


class DocumentRun(Base):
    """One document processed by one run, and where it ended up."""

    __tablename__ = "document_runs"
    __table_args__ = (
        UniqueConstraint("run_id", "document_id"),
        CheckConstraint(one_of("state", values_of(DocumentState)), name="state"),
        Index("ix_document_runs_document_id", "document_id"),
        Index("ix_document_runs_path", "path"),
        # Partial on both backends (migrations 0004 and 0005 build it with this condition). Declared for SQLite only:
        # ``postgresql_where`` makes SQLAlchemy import its PostgreSQL dialect to check the argument, in every
        # command, SQLite ones included (about 40 ms of each start); Alembic builds the index and does not compare
        # its condition, so the PostgreSQL side is left to the migrations.
        Index("ix_document_runs_waiting", "started_at", sqlite_where=text(waiting())),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id"))
    path: Mapped[str] = mapped_column(NulFreeText)
    config_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(20))
    cause: Mapped[str | None] = mapped_column(NulFreeText)
    needs_person: Mapped[list[str]] = mapped_column(JSON, default=list)
    final_attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id", use_alter=True))
    tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    decided: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """A person approved or rejected it (it has a row in ``reviews``): set with that row, never by a run."""


class Claim(Base):
    """Who processes a document for one configuration: the unit of "processed exactly once"."""

    __tablename__ = "claims"
    __table_args__ = (
        CheckConstraint(one_of("state", values_of(DocumentState)), name="state"),
        Index("ix_claims_run_id", "run_id"),
        Index("ix_claims_document_run_id", "document_run_id"),
    )

    config_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id"), primary_key=True)
    document_run_id: Mapped[int] = mapped_column(ForeignKey("document_runs.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    state: Mapped[str] = mapped_column(String(20))
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RequestPart(Base):
    """What the requests of many attempts share (system prompt, template text, schema), stored once.

    ``content`` is a request template: the request's JSON with each message content cut into shared texts
    and holes for the attempt's own texts (``extractor.store.requests``); ``sha256`` is the hash of exactly
    this text, so the same template written by any run or process is one row.
    """

    __tablename__ = "request_parts"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    content: Mapped[str] = mapped_column(Text)


class Attempt(Base):
    """One model call (generation, repair or judge) with everything needed to reproduce and audit it.

    The request sent is ``request`` alone (rows written before request parts existed, or a request the
    store cannot split), or ``request_part``'s template with ``request`` holding this attempt's own texts.
    A candidate that is exactly the model's JSON answer is kept once, as ``raw_response`` (``parsed_is_raw``);
    in SQL, ``COALESCE(parsed, raw_response)`` is the candidate either way. Read attempts through
    ``extractor.store`` to get both back as they were.
    """

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("document_run_id", "kind", "number"),
        CheckConstraint(one_of("kind", values_of(AttemptKind)), name="kind"),
        CheckConstraint(one_of("outcome", values_of(AttemptOutcome)), name="outcome"),
        Index("ix_attempts_run_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_run_id: Mapped[int] = mapped_column(ForeignKey("document_runs.id"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id"))
    number: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    prompt_version: Mapped[str] = mapped_column(String(100))
    request: Mapped[Any] = mapped_column(PackedJSON)
    request_part: Mapped[str | None] = mapped_column(ForeignKey("request_parts.sha256"))
    request_hash: Mapped[str] = mapped_column(String(64))
    raw_response: Mapped[str | None] = mapped_column(PackedText)
    parsed: Mapped[Any | None] = mapped_column(PackedJSON)
    parsed_is_raw: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """True: ``parsed`` is exactly the JSON of ``raw_response`` and is not stored twice (``parsed`` is NULL)."""
    findings: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    fields: Mapped[Any | None] = mapped_column(PackedJSON)
    sentences: Mapped[Any | None] = mapped_column(PackedJSON)
    evidence_spans: Mapped[Any | None] = mapped_column(PackedJSON)
    passed: Mapped[bool | None] = mapped_column(Boolean)
    outcome: Mapped[str] = mapped_column(String(20))
    mode: Mapped[str | None] = mapped_column(String(50))
    model: Mapped[str | None] = mapped_column(String(500))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    """Prompt tokens the server served from its prompt cache (included in ``prompt_tokens``)."""
    latency_ms: Mapped[float | None] = mapped_column(Float)
    transport: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    error: Mapped[str | None] = mapped_column(NulFreeText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    window: Mapped[int | None] = mapped_column(Integer)
    """1-based window of a long document (NULL: the whole document, or the candidate merged from windows)."""
    first_sentence: Mapped[int | None] = mapped_column(Integer)
    last_sentence: Mapped[int | None] = mapped_column(Integer)
    reused_from: Mapped[int | None] = mapped_column(Integer)
    """An earlier attempt whose answer this one records again (a resumed long document); no call was made."""


class ApprovedRecord(Base):
    """A record a person approved: the only data that is exported.

    No foreign keys on purpose: this table may live in its own database, apart from the run log.
    """

    __tablename__ = "approved_records"
    __table_args__ = (UniqueConstraint("document_sha256", "contract", "contract_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_sha256: Mapped[str] = mapped_column(String(64))
    document_path: Mapped[str] = mapped_column(NulFreeText)
    contract: Mapped[str] = mapped_column(String(100))
    contract_version: Mapped[int] = mapped_column(Integer)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    evidence_spans: Mapped[Any | None] = mapped_column(NullableJSON)
    attempt_id: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(String(32))
    reviewer: Mapped[str] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(NulFreeText)
    edited: Mapped[bool] = mapped_column(Boolean)
    approved_at: Mapped[datetime] = mapped_column(UTCDateTime)
    block_override: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    """A BLOCKED result approved over its block: who, when, why, and the critical rules overridden (else NULL)."""


class Review(Base):
    """One human decision on one document run; the full history, never overwritten."""

    __tablename__ = "reviews"
    __table_args__ = (
        CheckConstraint(one_of("decision", values_of(ReviewDecision)), name="decision"),
        Index("ix_reviews_document_run_id", "document_run_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    document_run_id: Mapped[int] = mapped_column(ForeignKey("document_runs.id"))
    decision: Mapped[str] = mapped_column(String(16))
    reviewer: Mapped[str] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(NulFreeText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    block_override: Mapped[dict[str, Any] | None] = mapped_column(NullableJSON)
    """For an approval over a BLOCKED result: the reason and the critical rules overridden (else NULL)."""
    changed_fields: Mapped[list[str] | None] = mapped_column(NullableJSON)
    """For an approval: the field paths whose values the person changed from the model's final candidate
    (``[]``: approved as produced); NULL for a rejection, and for approvals recorded before this was kept."""


class JudgeCalibration(Base):
    """One calibration report of a judge against human labels (``extract judge calibrate``).

    Tied to exactly what it measured: the judge model, the rubric version and the threshold. A judge may
    run in block mode only while the latest report for that triple admits it.
    """

    __tablename__ = "judge_calibrations"
    __table_args__ = (
        CheckConstraint(one_of("verdict", values_of(CalibrationVerdict)), name="verdict"),
        Index("ix_judge_calibrations_key", "judge_model", "rubric_version", "threshold", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    judge_model: Mapped[str] = mapped_column(String(500))
    rubric_version: Mapped[str] = mapped_column(String(100))
    threshold: Mapped[float] = mapped_column(Float)
    verdict: Mapped[str] = mapped_column(String(16))
    labels_sha256: Mapped[str] = mapped_column(String(64))
    n_cases: Mapped[int] = mapped_column(Integer)
    report: Mapped[dict[str, Any]] = mapped_column(JSON)


class Upload(Base):
    """The bytes of a document submitted to the queue or the API: workers on other machines read them here,
    not from the submitter's disk. ``name`` is the file name as submitted (its extension picks the reader)."""

    __tablename__ = "uploads"
    __table_args__ = (Index("ix_uploads_sha256", "sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(NulFreeText)
    size: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Batch(Base):
    """Documents submitted together (one ``extract run --queue``, or API submissions) with the settings
    every worker converts them with."""

    __tablename__ = "batches"
    __table_args__ = (Index("ix_batches_owner", "owner"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON)
    submitted_by: Mapped[str] = mapped_column(String(200))
    owner: Mapped[str | None] = mapped_column(String(200))
    """Whose work it is: the submitting API token's owner (``api_tokens.owner``, else its name). A submitter
    sees only its owner's batches; NULL (``extract run --queue``): reviewers and admins only."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Task(Base):
    """One queued document: the Celery message carries only ``id``; everything else is read from here.

    ``deliveries`` counts how many times a worker started it: a document whose worker keeps dying ends
    ERROR after ``max_deliveries`` instead of looping. ``run_id`` is the worker run that last started it.
    """

    __tablename__ = "tasks"
    __table_args__ = (
        CheckConstraint(one_of("state", values_of(TaskState)), name="state"),
        CheckConstraint(f"outcome IS NULL OR {one_of('outcome', values_of(Outcome))}", name="outcome"),
        Index("ix_tasks_batch_id_state", "batch_id", "state"),
        Index("ix_tasks_state", "state"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    batch_id: Mapped[str] = mapped_column(ForeignKey("batches.id"))
    upload_id: Mapped[int] = mapped_column(ForeignKey("uploads.id"))
    state: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str | None] = mapped_column(String(20))
    cause: Mapped[str | None] = mapped_column(NulFreeText)
    tokens: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    rule_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    deliveries: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id"))
    document_run_id: Mapped[int | None] = mapped_column(ForeignKey("document_runs.id"))
    enqueued_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ApiToken(Base):
    """A bearer token of ``extract serve``: only its SHA-256 is stored, so a copy of the database grants nothing."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint(one_of("role", values_of(Role)), name="role"),
        UniqueConstraint("name"),
        UniqueConstraint("token_sha256"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    owner: Mapped[str | None] = mapped_column(String(200))
    """Tokens with the same owner see each other's submissions (NULL: the token's name is its owner)."""


class Evaluation(Base):
    """One scoring of runs' final candidates against gold records (``extract eval``), kept so ``extract runs``
    shows a run's accuracy. ``summary`` holds the headline numbers, ``report`` the whole report as printed
    with ``--format json``; ``gold_sha256`` names the gold files exactly (an edited gold set is another score)."""

    __tablename__ = "evaluations"
    __table_args__ = (Index("ix_evaluations_created_at", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    selection: Mapped[str] = mapped_column(NulFreeText)
    gold: Mapped[str] = mapped_column(NulFreeText)
    gold_sha256: Mapped[str] = mapped_column(String(64))
    resamples: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(Integer)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    report: Mapped[dict[str, Any]] = mapped_column(PackedJSON)


class EvaluationRun(Base):
    """Which runs one evaluation scored (a selection may span several runs, a resumed run for one)."""

    __tablename__ = "evaluation_runs"
    __table_args__ = (Index("ix_evaluation_runs_run_id", "run_id"),)

    evaluation_id: Mapped[int] = mapped_column(ForeignKey("evaluations.id"), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)

