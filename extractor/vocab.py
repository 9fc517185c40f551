"""The product's vocabulary: every state, decision, mode and shared default, named once.

Why one module: a state spelled as a literal in twenty places drifts (a typo becomes data, a new state is
missed by one query). Everything here is a ``StrEnum`` (members compare equal to their string values, so
stored rows and JSON stay plain strings) or a constant; the database CHECK constraints are built from
these enums too. Only the standard library is imported: ``extract --help`` imports this module.

Names that mean two things are kept apart: a document *state* ``MANUAL_REVIEW`` (``DocumentState``) is
not the gate *decision* ``MANUAL_REVIEW`` (``GateDecision``); a judge's *verdict* (pass/warn/fail) is not
a calibration's *verdict* (admit-block/admit-review/reject).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class DocumentState(StrEnum):
    """Where one document run is. Only the final states mean "this configuration processed it"."""

    PROCESSING = "PROCESSING"
    READY_FOR_REVIEW = "READY_FOR_REVIEW"  # passed every rule; a person approves or rejects
    MANUAL_REVIEW = "MANUAL_REVIEW"  # failed twice, unparseable, or a warning that needs a person
    BLOCKED = "BLOCKED"  # a critical finding (leaked secret, invented personal data, prompt echo...): never exported
    # unless a person overrides the block with a reason (``extract approve --override-block``)
    ERROR = "ERROR"  # the model was never heard (transport): nothing was decided
    INTERRUPTED = "INTERRUPTED"  # the run stopped before it finished the document; a rerun redoes it
    SKIPPED = "SKIPPED"


FINAL_STATES: tuple[DocumentState, ...] = (
    DocumentState.READY_FOR_REVIEW,
    DocumentState.MANUAL_REVIEW,
    DocumentState.BLOCKED,
    DocumentState.ERROR,
)
"""A document in one of these states was processed for its configuration; later runs skip it unless forced."""

REVIEWABLE: tuple[DocumentState, ...] = (DocumentState.READY_FOR_REVIEW, DocumentState.MANUAL_REVIEW,
                                         DocumentState.BLOCKED)
"""States a person can decide, in queue order. BLOCKED is listed so a person sees it and can reject it; approving
it needs ``--override-block`` with a reason."""


class Outcome(StrEnum):
    """What a batch reports per input: a final document state, or why there is none."""

    READY_FOR_REVIEW = DocumentState.READY_FOR_REVIEW.value
    MANUAL_REVIEW = DocumentState.MANUAL_REVIEW.value
    BLOCKED = DocumentState.BLOCKED.value
    ERROR = DocumentState.ERROR.value
    INTERRUPTED = DocumentState.INTERRUPTED.value
    SKIPPED = DocumentState.SKIPPED.value
    INPUT_ERROR = "INPUT_ERROR"  # the file could not be used (unreadable, empty, binary, too large)


class FieldPresence(StrEnum):
    """A checked field's state in the report; a field with neither has the rule that says why instead."""

    PRESENT = "PRESENT"  # it has a value, and the value's evidence was found in the source
    NEEDS_INPUT = "NEEDS_INPUT"  # empty, and the candidate asks for it (``missingFields``): a person supplies it


class CoverageStatus(StrEnum):
    """How a candidate accounts for one source sentence (``sentenceCoverage[*].status``)."""

    MAPPED = "MAPPED"  # a field holds it (``fieldPaths`` say which)
    UNMAPPED = "UNMAPPED"  # read, but no field holds it (a reason is required)
    EXCLUDED = "EXCLUDED"  # not content: a title, a heading (a reason is required)


class SentenceMark(StrEnum):
    """How review marks a sentence that has no verified ``CoverageStatus``; a claim a rule refused shows as
    ``UNVERIFIED:<rule>``."""

    UNACCOUNTED = "UNACCOUNTED"  # the candidate gave no entry for it
    NOT_EVALUATED = "NOT_EVALUATED"  # no candidate could be checked


class SkipReason(StrEnum):
    """Why a run skipped a document it was given."""

    done = "done"  # this configuration finished it before, in an earlier run (``--force`` redoes it)
    busy = "busy"  # another run that is still alive is processing it right now


RETRYABLE_STATES: tuple[DocumentState, ...] = (DocumentState.ERROR,)
"""Final states a rerun tries again by default (``--no-retry-errors`` keeps them): the model was never
heard, so nothing was decided."""


class RunStatus(StrEnum):
    running = "running"
    finished = "finished"
    interrupted = "interrupted"
    crashed = "crashed"


class AttemptKind(StrEnum):
    """Which model call an attempt is."""

    generate = "generate"
    repair = "repair"
    judge = "judge"


REGENERATE_NUMBER = 3
"""A ``generate`` attempt with this number is the one regeneration after a judge fail (#2 is the repair's)."""


class AttemptOutcome(StrEnum):
    passed = "passed"
    failed = "failed"
    unparseable = "unparseable"
    transport_error = "transport_error"
    interrupted = "interrupted"
    protocol_error = "protocol_error"


class TaskState(StrEnum):
    """Where one queued document (a Celery task) is; ``finished`` tasks carry an ``Outcome``."""

    unsent = "unsent"  # committed, its message not yet taken by the broker (away): the outbox sends it later
    queued = "queued"  # enqueued, no worker has started it yet
    started = "started"  # a worker took it (again, after a worker died: ``deliveries`` counts the starts)
    finished = "finished"


class Role(StrEnum):
    """What an API token may do; each role may do everything the roles before it may."""

    submitter = "submitter"  # submit documents, read their state, candidates and findings
    reviewer = "reviewer"  # also the review actions: approve, reject
    admin = "admin"  # also settings and tokens


class ReviewDecision(StrEnum):
    """A person's decision on one document run."""

    approved = "approved"
    rejected = "rejected"


class SignoffState(StrEnum):
    """Where one person's approval stands on a contract that needs several (``[review] approvals``)."""

    pending = "pending"  # waits for the other approvals of the same record
    approved = "approved"  # made the approval with the others (``signoffs.review_id``)
    superseded = "superseded"  # a rejection, or a sign-off of another record, came after it


class Severity(StrEnum):
    """``critical``: the document is BLOCKED whatever else holds (docs/design.md#states); ``error``: the candidate fails and is
    repaired once; ``warning``: a person's call (some warnings send the document to a person)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"


FAILING = frozenset({Severity.CRITICAL.value, Severity.ERROR.value})
"""Severities (as stored) that make a candidate fail: a critical finding is an error that no repair may hide."""


class GateDecision(StrEnum):
    """The outcome of the regression gate (docs/design.md#regression-gate): what a release decision may be."""

    PROMOTE = "PROMOTE"
    MANUAL_REVIEW = "MANUAL_REVIEW"
    BLOCK = "BLOCK"
    NOT_EVALUABLE = "NOT_EVALUABLE"


class ExitCode(IntEnum):
    """Exit codes of every command. Gate decisions map onto them (``GATE_EXIT_CODES``)."""

    OK = 0
    FAILED = 1  # error findings, a refused decision, a BLOCK
    USAGE = 2  # bad usage or unusable input
    MANUAL_REVIEW = 3
    NOT_EVALUABLE = 4
    INTERRUPTED = 130


GATE_EXIT_CODES: dict[GateDecision, ExitCode] = {
    GateDecision.PROMOTE: ExitCode.OK,
    GateDecision.BLOCK: ExitCode.FAILED,
    GateDecision.MANUAL_REVIEW: ExitCode.MANUAL_REVIEW,
    GateDecision.NOT_EVALUABLE: ExitCode.NOT_EVALUABLE,
}


class PersonalDataPolicy(StrEnum):
    """What personal data in an output value does when the source contains it too (a contract setting).

    Personal data the source does not contain is always invented, and critical.
    """

    allow = "allow"  # a faithful copy: nothing happens
    mask = "mask"  # kept in the run log, masked in what ``extract export`` writes
    critical = "critical"  # the document is BLOCKED like any critical finding


class JudgeMode(StrEnum):
    """What a measured judge failure may do (docs/design.md#judge): report only, send to a person, or block."""

    observe = "observe"
    review = "review"
    block = "block"


JUDGE_METRICS = ("support", "invented_facts", "contradicts_context", "grounded", "verdict")
"""What a judge answer measures, each with its own mode in the contract settings (``modes.judge``):
``support`` a link scored below the threshold, ``invented_facts`` the judge listed invented facts,
``contradicts_context`` a value contradicts its excerpt, ``grounded`` the judge said not grounded,
``verdict`` the judge's own fail or warn."""


class JudgeVerdict(StrEnum):
    """The verdict a judge writes in its answer."""

    passed = "pass"
    warn = "warn"
    fail = "fail"


class JudgeResult(StrEnum):
    """What one judge call came to for a document: a verdict, or why there is none."""

    passed = "pass"
    warn = "warn"
    fail = "fail"
    not_evaluable = "not_evaluable"
    protocol_error = "protocol_error"
    transport_error = "transport_error"


class CalibrationVerdict(StrEnum):
    """What a calibration against human labels admits a judge to do."""

    admit_block = "admit-block"
    admit_review = "admit-review"
    reject = "reject"


class ResponseFormat(StrEnum):
    """How an OpenAI-compatible server is asked for structured output (``--response-format``).

    ``auto`` tries json_schema, tools, json_object, plain in that order, moving on when the server says it
    lacks one, and keeps the first it accepts; any other value is used alone and never falls back.
    """

    auto = "auto"
    json_schema = "json_schema"  # response_format json_schema: the server enforces the contract's schema
    tools = "tools"  # one function whose parameters are the schema, forced by tool_choice
    json_object = "json_object"  # JSON mode: valid JSON, the schema only in the prompt
    plain = "plain"  # no structure requested: the prompt alone asks for JSON


class HelpPanel(StrEnum):
    """The titles ``--help`` groups a command's options under, in this order (``extractor.ui.help``)."""

    contract = "Contract"
    model = "Model"
    batch = "Batch"
    judge = "Judge"
    queue = "Queue"
    output = "Output"


# -- shared defaults ---------------------------------------------------------------------------------------

DEFAULT_CONTRACT = "work_procedure"
DEFAULT_PROMPT_VERSION = "v1"
DEFAULT_RUBRIC = "v2"
DEFAULT_JUDGE_THRESHOLD = 0.8
"""The judge's operating threshold: a link scoring below it is unsupported (docs/design.md#judge)."""
DEFAULT_JUDGE_CONCURRENCY = 2
"""Judge calls in flight at once: the judge has its own slots, so slow judging never holds generation slots."""
DEFAULT_JUDGE_QUEUE = 8
"""Documents that may wait for the judge at once; when full, the batch slows to the judge's pace (backpressure)."""
DEFAULT_JUDGE_TIMEOUT = 60.0
"""Seconds per judge call (its own timeout: a judge behind a proxy that cuts at 100 s must give up first)."""
DEFAULT_CONCURRENCY = 4
DEFAULT_OVERLAP = 2
"""Sentences before a window shown to it as context (``--overlap``, docs/runs.md#long-documents)."""
MIN_ID_PREFIX = 6
"""The fewest characters of a run id or a content sha256 that a command accepts as a prefix (document run
ids are numbers and always whole). Fewer would match by accident: 4 hex characters have 65,536 values."""
MARK_BLOCK = "BLOCK"
"""The mark a document run's ``needs_person`` carries when a rule or judge metric in block mode fired."""
JUDGE_UNEVALUABLE_MARKS = frozenset({"JUDGE_NOT_EVALUABLE", "JUDGE_PROTOCOL_ERROR", "JUDGE_NOT_JUDGED"})
"""Marks of a document the judge did not measure (not_evaluable answer, garbage, outage): it went to a person,
and ``extract compare`` counts it as not evaluable, never as a fail (an outage says nothing about the
generator under test)."""
DEFAULT_REVIEW_PAGE = 50
"""How many waiting documents ``extract review`` lists unless told otherwise (it always says how many wait)."""
DEFAULT_MAX_DELIVERIES = 3
"""A queued document whose worker died this many times ends ERROR instead of being delivered again."""
DEFAULT_MAX_PENDING = 10_000
"""Queued documents not yet started past which ``extract run --queue`` waits (or refuses) and ``extract serve``
answers 429 (``--max-pending``)."""
DEFAULT_TOKEN_DAYS = 90
"""How long an API token lives unless ``extract tokens create --expires`` says otherwise (``rotate`` renews it)."""
REVIEW_CLAIM_S = 300.0
"""How long opening a document to review it holds it for that person; the open page renews it every minute."""
MAX_APPROVALS = 5
"""The most distinct people a contract may require to approve one record (``[review] approvals``)."""
MAX_ROW_ID = 2**31 - 1
"""The largest id a run-log table holds (INTEGER on PostgreSQL): a number past it names no row, and is never sent
to the database as one (PostgreSQL refuses it as out of range)."""


def values_of(values: type[StrEnum] | tuple[StrEnum, ...]) -> tuple[str, ...]:
    """The plain string values of an enum (or of some of its members), e.g. for a CHECK constraint."""
    return tuple(member.value for member in values)
