"""Configuration files read into pydantic models: errors name the file and the key.

The endpoints file, gold manifests, the price file, and a contract's ``[evidence]``, ``[guards]`` and
``calibration.json``: each file's shape is a pydantic model at the end of this module. ``read_toml`` and
``read_json`` read a file (bounded in size), validate it, and turn a problem into one line naming the file and
the key: ``endpoints.toml: endpoints.lab.url: ...``. Their readers import this module when they read a file,
never at their own import: the commands that only read the run log do not load pydantic
(``tests/test_imports.py``).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, RootModel, ValidationError

from extractor.errors import InputError
from extractor.vocab import PersonalDataPolicy

M = TypeVar("M", bound=BaseModel)

MAX_CONFIG_BYTES = 64 * 1024 * 1024
"""A configuration file larger than this is refused before it is parsed (the largest are gold manifests: a few
hundred bytes per document of the set)."""


def read_toml(path: str | Path, model: type[M], what: str) -> M:
    """The TOML file at ``path`` as ``model``; ``InputError`` naming the file (``what`` says which file it is
    meant to be) and the key at fault."""
    text = _read(path, what)
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
    errors = error.errors(include_url=False)
    first = min(errors, key=lambda found: found["type"] != "extra_forbidden")  # a misspelt key, before what it left missing
    where, name = _key_path(first["loc"])
    message = str(first["msg"])
    if first["type"] == "value_error":  # our own validators' messages, without pydantic's "Value error, "
        message = str(first["ctx"]["error"])
    elif first["type"] in ("model_type", "dict_type"):
        message = "must be a table (an object of keys and values)"
    elif first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "missing"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}{' (the name)' if name else ''}: {message}{more}" if where else f"{message}{more}"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key_path(location: tuple[int | str, ...]) -> tuple[str, bool]:
    """``endpoints."lab 2".models[0]`` (keys quoted as TOML quotes them), and whether the fault is the last key
    itself, not its value (pydantic's ``[key]``)."""
    name = bool(location) and location[-1] == "[key]"
    parts: list[str] = []
    for part in location[:-1] if name else location:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
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


def _read(path: str | Path, what: str) -> str:
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
    forbidden_phrases: list[Text] | None = None
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
