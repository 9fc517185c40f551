"""Configuration files read into pydantic models: errors name the file and the key.

The endpoints file, gold manifests, the price file, a contract's ``checks.toml`` (``ChecksFile``: ``[evidence]``,
``[guards]``, ``[modes]`` and every ``[[check]]`` type) and its ``calibration.json``: each file's shape is a pydantic
model at the end of this module. ``read_toml`` and ``read_json`` read a file (bounded in size), validate it, and
turn a problem into one line naming the file and the key: ``endpoints.toml: endpoints.lab.url: ...``,
``checks.toml: check[2].catalogue: ...`` (``problems`` gives every one). Their readers import this module when they
read a file, never at their own import: the commands that only read the run log do not load pydantic
(``tests/test_imports.py``).

The ``[[check]]`` models (``ReferenceCheck`` ... ``PatternCheck``, ``Check``) are also how the Python API declares
checks: one definition, whatever writes the declaration.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    RootModel,
    ValidationError,
    model_validator,
)

from extractor.errors import InputError
from extractor.vocab import JUDGE_METRICS, MAX_APPROVALS, JudgeMode, PersonalDataPolicy

M = TypeVar("M", bound=BaseModel)

MAX_CONFIG_BYTES = 64 * 1024 * 1024
"""A configuration file larger than this is refused before it is parsed (the largest are gold manifests: a few
hundred bytes per document of the set)."""


def read_toml(path: str | Path, model: type[M], what: str) -> M:
    """The TOML file at ``path`` as ``model``; ``InputError`` naming the file (``what`` says which file it is
    meant to be) and the key at fault."""
    text = read_text(path, what)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(str(path), f"the {what} is not TOML: {error}") from None
    return validated(path, data, model)


def read_json(path: str | Path, model: type[M], what: str) -> M:
    """The JSON file at ``path`` as ``model`` (see ``read_toml``)."""
    return parse_json(path, read_bytes(path, what), model, what)


def parse_json(path: str | Path, data: bytes, model: type[M], what: str) -> M:
    """``data``, the bytes of the JSON file at ``path``, as ``model`` (see ``read_toml``)."""
    text = _decoded(path, data, what)
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InputError(str(path), f"the {what} is not JSON ({error})") from None
    return validated(path, data, model)


def validated(path: str | Path, data: Any, model: type[M]) -> M:
    """``data`` (parsed from ``path``) as ``model``, or ``InputError``: ``<key>: <problem>``."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise InputError(str(path), problem(error)) from None


def problem(error: ValidationError) -> str:
    """One error of a pydantic ``ValidationError`` as ``a.b.c: what is wrong`` (the value's key path first;
    "(and N more)" when there are others): an unknown key if there is one, since a misspelt key is also what
    makes the key it meant missing, else the first."""
    found = problems(error)
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{found[0]}{more}"


def problems(error: ValidationError) -> list[str]:
    """Every error of a pydantic ``ValidationError``, one line each (``check[2].catalogue: what is wrong``), unknown
    keys first (``problem``)."""
    errors = sorted(error.errors(include_url=False), key=lambda found: found["type"] != "extra_forbidden")
    return [_line(found) for found in errors]


def _line(error: Mapping[str, Any]) -> str:
    kind, location = error["type"], tuple(error["loc"])
    message = str(error["msg"])
    if kind == "value_error":  # our own validators' messages, without pydantic's "Value error, "
        message = str(error["ctx"]["error"])
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        message = "must be a table (an object of keys and values)"
    elif kind == "extra_forbidden":
        message = "unknown key"
    elif kind == "missing":
        message = "missing"
    elif kind in ("literal_error", "enum"):
        message += f", not {_shown(error['input'])}"
    elif kind in ("union_tag_invalid", "union_tag_not_found"):  # a [[check]]'s type (``Check``)
        location += (error["ctx"]["discriminator"].strip("'"),)
        message = "missing" if kind == "union_tag_not_found" else f"unknown check type {error['ctx']['tag']!r}"
        message += f" (known: {', '.join(CHECK_TYPES)})"
    where, name = _key_path(location)
    return f"{where}{' (the name)' if name else ''}: {message}" if where else message


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key_path(location: tuple[int | str, ...]) -> tuple[str, bool]:
    """``endpoints."lab 2".models[0]`` (keys quoted as TOML quotes them), and whether the fault is the last key
    itself, not its value (pydantic's ``[key]``). The member of a tagged union pydantic names after an item's
    index (``check.2.lookup.column``) is left out: the item's ``type`` says which it is."""
    name = bool(location) and location[-1] == "[key]"
    parts: list[str] = []
    for index, part in enumerate(location[:-1] if name else location):
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif not (index and isinstance(location[index - 1], int) and part in CHECK_TYPES):
            parts.append(("." if parts else "") + (part if _BARE_KEY.fullmatch(part) else json.dumps(part)))
    return "".join(parts), name


def read_bytes(path: str | Path, what: str) -> bytes:
    """The file's bytes, refused past ``MAX_CONFIG_BYTES`` without reading further."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise InputError(str(path), f"cannot read the {what} ({error.strerror or error})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise InputError(str(path), f"the {what} is over {MAX_CONFIG_BYTES // 1024 // 1024} MiB")
    return data


def read_text(path: str | Path, what: str) -> str:
    """The file's text: UTF-8, at most ``MAX_CONFIG_BYTES``; else ``InputError`` naming the file."""
    return _decoded(path, read_bytes(path, what), what)


def _decoded(path: str | Path, data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(str(path), f"the {what} is not UTF-8 text ({error.reason} at byte {error.start})") from None


# -- the files' shapes ----------------------------------------------------------------------------------------

_ENDPOINT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_MODEL_NAME = re.compile(r"[^\s\x00-\x1f]{1,200}")
_BASE_URL = re.compile(r"https?://[^\s/]+(/\S*)?")


def _matching(pattern: re.Pattern[str], message: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.fullmatch(value.strip() if pattern is _BASE_URL else value):
            raise ValueError(message)
        return value

    return check


EndpointName = Annotated[str, AfterValidator(_matching(
    _ENDPOINT_NAME, "an endpoint name is letters, digits, '_', '.', '-' (at most 64)"))]


class EndpointEntry(BaseModel):
    """``[endpoints.NAME]`` of an endpoints file (``extractor.queue.endpoints``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: Annotated[str, AfterValidator(_matching(
        _BASE_URL, "must be the http(s) base URL of an OpenAI-compatible server"))]
    key_env: Annotated[str, AfterValidator(_matching(
        _ENV_NAME, "names the environment variable holding the key (the key itself never goes in this file)"))] | None = None
    models: Annotated[list[Annotated[str, AfterValidator(_matching(
        _MODEL_NAME, "a model name, without spaces or control characters (at most 200)"))]],
        Field(min_length=1)]
    """The model names the server serves (``openai:`` is added where missing)."""


class EndpointsFile(BaseModel):
    """An endpoints file: only ``[endpoints.NAME]`` tables, at least one."""

    model_config = ConfigDict(extra="forbid", strict=True)

    endpoints: Annotated[dict[EndpointName, EndpointEntry], Field(min_length=1)]


class GoldDocument(BaseModel):
    """``[documents."<file>"]`` of a gold manifest: where ``extract gold export`` took the file's record from."""

    model_config = ConfigDict(extra="forbid", strict=True)

    sha256: str | None = None
    path: str | None = None
    reviewer: str | None = None
    approved_at: datetime | None = None
    edited: bool | None = None
    run_id: str | None = None


class GoldManifest(BaseModel):
    """``gold.toml``: the contract the records follow, and per file its provenance."""

    model_config = ConfigDict(extra="forbid", strict=True)

    contract: Annotated[str, Field(min_length=1)]
    version: Annotated[int, Field(ge=1)]
    documents: dict[str, GoldDocument] = {}


MAX_LIMITED_MODELS = 10_000
"""Models a limits file (``EXTRACT_MODEL_LIMITS``) may hold."""
MAX_INPUT_TOKENS = 10_000_000
MAX_OUTPUT_TOKENS = 1_000_000
"""The largest budgets a limits file may set: ``extract run --max-input-tokens`` / ``--max-output-tokens``'s."""

ModelName = Annotated[str, AfterValidator(_matching(
    _MODEL_NAME, "a model name, without spaces or control characters (at most 200)"))]


class ModelLimits(BaseModel):
    """One model of a limits file: the tokens a prompt may hold and an answer may take."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_input_tokens: Annotated[int, Field(ge=1, le=MAX_INPUT_TOKENS)] | None = None
    max_output_tokens: Annotated[int, Field(ge=1, le=MAX_OUTPUT_TOKENS)] | None = None


class ModelLimitsFile(RootModel[Annotated[dict[ModelName, ModelLimits], Field(max_length=MAX_LIMITED_MODELS)]]):
    """A limits file (``extractor.windows.tokens``): ``{"<model>": {"max_input_tokens": N, "max_output_tokens": M}}``."""


USD_PER_MILLION = Field(strict=True, ge=0, allow_inf_nan=False)


class PriceEntry(BaseModel):
    """One model of a price file (``EXTRACT_PRICES``): US dollars per million tokens, and where they come from."""

    model_config = ConfigDict(extra="forbid")

    input: Annotated[float, USD_PER_MILLION]
    output: Annotated[float, USD_PER_MILLION]
    cached_input: Annotated[float, USD_PER_MILLION] | None = None
    as_of: str = ""
    source: str | None = None


class PriceFile(RootModel[dict[str, PriceEntry]]):
    """A price file: a JSON object of model name -> ``PriceEntry``."""


Share = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]


class CalibratedSection(BaseModel):
    """One section of a contract's ``calibration.json`` (written by ``extract rules calibrate``): a fitted
    threshold (``minimum_overlap`` for the claim rule), the lower edge of the judge band, and the record of the
    calibration that fitted them."""

    model_config = ConfigDict(extra="forbid")

    threshold: Share | None = None
    minimum_overlap: Share | None = None
    judge_band_lower: Share | None = None
    min_word_length: Annotated[int, Field(strict=True, ge=0)] | None = None
    calibration: dict[str, Any] | None = None


class CalibrationFile(BaseModel):
    """A contract's ``calibration.json``: a section per calibrated rule (``extractor.contracts.settings.
    CALIBRATED_RULES``), laid over the contract's settings."""

    model_config = ConfigDict(extra="forbid")

    weak_support: CalibratedSection | None = None
    lexical_support: CalibratedSection | None = None
    ocr_confidence: CalibratedSection | None = None


Text = Annotated[str, Field(strict=True)]
Flag = Annotated[bool, Field(strict=True)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Words = Annotated[Text, AfterValidator(_not_blank)]
"""Text with something in it other than white space (kept as written)."""


class GuardsTable(BaseModel):
    """``[guards]`` of a contract's checks.toml (``"guards"`` of a code contract's rules.json): the switches of
    the built-in checks (``extractor.rules.guards.Guards``; a key left out keeps its default there). A ``comment``
    is documentation."""

    model_config = ConfigDict(extra="forbid")

    comment: Text | None = None
    secrets: Flag | None = None
    invented_personal_data: Flag | None = None
    source_personal_data: PersonalDataPolicy | None = None
    pipeline_instructions: Flag | None = None
    system_prompt_echo: Flag | None = None
    forbidden_phrases: list[Words] | None = None
    empty_extraction: Flag | None = None
    max_excluded_share: Share | None = None
    value_fields: list[Text] | None = None


def _normalisation(name: str) -> str:
    from extractor.evidence.text import NORMALISATIONS

    if name not in NORMALISATIONS:
        raise ValueError(f"must be one of {', '.join(NORMALISATIONS)}")
    return name


class EvidenceTable(BaseModel):
    """``[evidence]`` of a contract's checks.toml: how excerpts are compared, and which fields of an object list
    are its text (``text``) or need no evidence (``exempt``); the paths are checked against the schema where the
    contract is read (``extractor.contracts.files``)."""

    model_config = ConfigDict(extra="forbid")

    normalisation: Annotated[Text, AfterValidator(_normalisation)] = "nfc_whitespace"
    max_occurrences_per_excerpt: Annotated[int, Field(strict=True, ge=1)] = 20
    weak_support_threshold: Share = 0.5
    text: dict[str, Annotated[list[Text], BeforeValidator(lambda names: [names] if isinstance(names, str) else names)]] = {}
    """Per object list (``items``), the field or fields holding its text (one name, or a list of them)."""
    exempt: list[Text] = []


def _one_of(names: Iterable[str]) -> Callable[[str], str]:
    known = tuple(names)

    def check(value: str) -> str:
        if value not in known:
            raise ValueError(f"{value!r} is not one of {', '.join(known)}")
        return value

    return check


class ModesTable(BaseModel):
    """``[modes]`` of a contract's checks.toml: observe, review or block per rule id and per judge metric
    (``extractor.contracts.settings``; the rule ids are checked against the contract's rules where it is read). A
    ``comment`` is documentation."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    comment: Text | None = None
    rules: dict[str, JudgeMode] = {}
    judge: dict[Annotated[str, AfterValidator(_one_of(JUDGE_METRICS))], JudgeMode] = {}


class ReviewTable(BaseModel):
    """``[review]`` of a contract's checks.toml: ``approvals``, how many distinct people must approve a record before
    it counts as approved and is exported (four eyes: 2)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    approvals: Annotated[int, Field(ge=1, le=MAX_APPROVALS)] = 1


# -- a contract's [[check]] declarations ---------------------------------------------------------------------------
#
# One model per check type, shared by checks.toml and the Python API (``Contract.from_model(..., checks=...)``): a
# declaration is validated here whatever wrote it, then built into rules by ``extractor.rules.declared`` (which also
# checks what needs the contract: the paths against schema.json, a catalogue's file and column, unique rule ids).

CheckSeverity = Literal["error", "warning", "review"]
"""``review`` is a warning that sends the document to a person."""
SEVERITIES: tuple[CheckSeverity, ...] = ("error", "warning", "review")
_RULE_ID = re.compile(r"[A-Z][A-Z0-9_]*")


def _stripped(value: str) -> str:
    return _not_blank(value).strip()


def _rule_id(value: str) -> str:
    if not _RULE_ID.fullmatch(value):
        raise ValueError(f"{value!r} must be UPPER_SNAKE_CASE (a capital letter first, then capitals, digits, _)")
    return value


def _field_path(value: str) -> str:
    from extractor.evidence.fieldpath import parse_pattern

    if parse_pattern(value) is None:
        raise ValueError(f"{value!r} is not a field path (write the items of a list as name[], e.g. lines[].sku)")
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as error:
        raise ValueError(f"{value!r} is not a regular expression: {error}") from None
    return value


def _path_text(value: Any) -> Any:
    """A catalogue given as a path (the Python API) is its text, as checks.toml writes it."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _catalogue_file(value: str) -> str:
    if Path(value).suffix.lower() not in (".csv", ".jsonl"):
        raise ValueError(f"{value!r} must be a .csv or .jsonl file")
    return value


def _shown(value: Any) -> str:
    """A value as a message quotes it: ``true`` as TOML writes it, else as Python writes it."""
    return json.dumps(value) if isinstance(value, bool) else repr(value)


def _bound(value: Any) -> int | float | date:
    """A range's ``min``/``max``: a number, a TOML date or an ISO date written as text."""
    if isinstance(value, datetime):
        raise ValueError(f"{value.isoformat()} is a date and time; a range bound is a number or a date")
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO date (YYYY-MM-DD)") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"must be a number or an ISO date (YYYY-MM-DD), not {_shown(value)}")
    return value


def _follow(value: Any) -> bool | CheckSeverity:
    if isinstance(value, bool) or value in SEVERITIES:
        return value  # type: ignore[no-any-return]
    raise ValueError(f"must be true, false or a severity ({', '.join(SEVERITIES)}), not {_shown(value)}")


Name = Annotated[str, Field(strict=True), AfterValidator(_stripped)]
RuleId = Annotated[Name, AfterValidator(_rule_id)]
FieldPath = Annotated[Name, AfterValidator(_field_path)]
"""A path to the values checked: ``.`` between names, ``[]`` for every item of a list (``lineItems[].sku``)."""
Regex = Annotated[str, Field(strict=True, min_length=1), AfterValidator(_regex)]
Bound = Annotated[int | float | date, PlainValidator(_bound)]


class CheckBase(BaseModel):
    """What every ``[[check]]`` has: the stable rule ``id`` (run logs, ``extract stats`` and ``extract compare``
    count by it), the ``field`` checked, its ``severity`` and an optional ``description`` (its card says it)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    id: RuleId
    field: FieldPath
    severity: CheckSeverity = "error"
    description: Text | None = None

    def table(self) -> dict[str, Any]:
        """The declaration as a ``[[check]]`` table of checks.toml holds it, ``type`` first (what was left out
        stays out)."""
        data = self.model_dump(exclude_none=True)
        return {"type": data.pop("type"), **data}


class ReferenceCheck(CheckBase):
    """Every value at ``field`` is one of the values at ``target`` (``participants[].id``)."""

    type: Literal["reference"] = "reference"
    target: FieldPath


class UniqueCheck(CheckBase):
    """No two values at ``field`` are equal; ``normalise = "casefold"`` compares them NFC, case folded, whitespace
    collapsed; ``same_item = "id"`` lets a repeat with the same value of that sibling pass (one entity named
    twice)."""

    type: Literal["unique"] = "unique"
    normalise: Literal["none", "casefold"] = "none"
    same_item: Name | None = None


class SequenceCheck(CheckBase):
    """The numbers at ``field`` (an integer field of list items) run ``start..n``: rules ``<id>_DUPLICATE`` and
    ``<id>_GAP``; ``follow_source`` (``true`` is ``review``, or a severity) adds ``<id>_INVERTED``, an item whose
    evidence lies wholly before the previous item's."""

    type: Literal["sequence"] = "sequence"
    start: int = 1
    follow_source: Annotated[bool | CheckSeverity, PlainValidator(_follow)] = False


class LookupCheck(CheckBase):
    """The value is in a catalogue: a CSV or JSONL file in the contract folder (``catalogue`` + ``column``), or a
    database query's first column (``database``, a URL or ``env:VARIABLE``, + ``query``; ``name`` is how messages
    call it). A miss names the nearest entries and how they differ."""

    type: Literal["lookup"] = "lookup"
    catalogue: Annotated[Name, BeforeValidator(_path_text), AfterValidator(_catalogue_file)] | None = None
    column: Name | None = None
    database: Name | None = None
    query: Name | None = None
    name: Name | None = None

    @model_validator(mode="after")
    def _one_source(self) -> LookupCheck:
        by_file = (self.catalogue, self.column) != (None, None)
        by_query = (self.database, self.query, self.name) != (None, None, None)
        if by_file == by_query:
            raise ValueError("needs catalogue + column, or database + query (one of the two)")
        if by_file and None in (self.catalogue, self.column):
            raise ValueError(f"needs {'column' if self.column is None else 'catalogue'} too (catalogue + column)")
        if by_query and None in (self.database, self.query):
            raise ValueError(f"needs {'query' if self.query is None else 'database'} too (database + query)")
        return self


class RangeCheck(CheckBase):
    """A number, or a date (the field's ``format`` is ``date``, or the bounds are dates), within ``min``/``max``
    (either may be left out)."""

    type: Literal["range"] = "range"
    min: Bound | None = None
    max: Bound | None = None

    @model_validator(mode="after")
    def _bounds(self) -> RangeCheck:
        if self.min is None and self.max is None:
            raise ValueError("needs min, max or both")
        if self.min is not None and self.max is not None:
            if isinstance(self.min, date) != isinstance(self.max, date):
                raise ValueError("min and max must both be numbers or both be dates")
            if self.min > self.max:  # type: ignore[operator]
                raise ValueError(f"min {self.min} is above max {self.max}: every value would be out of range")
        return self


class PatternCheck(CheckBase):
    """The value (as text) matches (``matches``) or must not match (``forbids``) a regular expression (``re.search``;
    anchor with ``^...$`` for the whole value)."""

    type: Literal["pattern"] = "pattern"
    matches: Regex | None = None
    forbids: Regex | None = None

    @model_validator(mode="after")
    def _one_expression(self) -> PatternCheck:
        if (self.matches is None) == (self.forbids is None):
            raise ValueError("needs exactly one of matches or forbids")
        return self


Check = Annotated[ReferenceCheck | UniqueCheck | SequenceCheck | LookupCheck | RangeCheck | PatternCheck,
                  Field(discriminator="type")]
"""One ``[[check]]``, by its ``type``."""
CHECK_TYPES: tuple[str, ...] = tuple(model.model_fields["type"].default for model in (
    ReferenceCheck, UniqueCheck, SequenceCheck, LookupCheck, RangeCheck, PatternCheck))


class ChecksFile(BaseModel):
    """A contract's ``checks.toml``: a ``description``, ``[evidence]``, ``[guards]``, ``[modes]``, ``[review]`` and the
    ``[[check]]`` declarations (docs/contracts.md). ``toml()`` writes it (the Python API writes a contract made from
    a model this way)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    description: Text | None = None
    evidence: EvidenceTable = EvidenceTable()
    guards: GuardsTable = GuardsTable()
    modes: ModesTable | None = None
    review: ReviewTable | None = None
    check: list[Check] = []

    def toml(self) -> str:
        """The file's text (tomli-w), which reads back as this model."""
        import tomli_w

        data = self.model_dump(exclude_none=True, exclude={"check"})
        return tomli_w.dumps({**data, "check": [check.table() for check in self.check]} if self.check else data)
