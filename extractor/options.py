"""A run's options: the one typed definition of what ``extract run``, a queued batch and the API are given.

``RunOptions`` is the source of each of them (docs/runs.md#options): ``extract run``'s options are made from its
fields (each field's ``description`` is the option's help, its ``Cli`` mark the panel, value placeholder and flag:
``extractor.cli.run``); a queued batch stores the options (``extractor.queue.settings.BatchSettings`` adds only
the contract as the submitter had it) and every worker reads them back; ``PUT /v1/settings`` takes the same model
(``extractor.service.app``). The engine, the providers and the judge read the options the run was given, and the
run log keeps them in the run's configuration.

What is not here is not a run's option but the process's own: the files (``PATHS``), where the run log is
(``--database``), where contracts are looked for (``--contracts``), the broker and its backpressure
(``--queue``, ``--max-pending``, ``--wait``), how many documents this process converts at once
(``--concurrency``: each worker's own on the queue) and the output format.

Importing this module imports pydantic: the commands that only read the run log never import it.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from extractor.vocab import (
    DEFAULT_CONTRACT,
    DEFAULT_JUDGE_CONCURRENCY,
    DEFAULT_JUDGE_QUEUE,
    DEFAULT_JUDGE_THRESHOLD,
    DEFAULT_JUDGE_TIMEOUT,
    DEFAULT_OVERLAP,
    DEFAULT_PROMPT_VERSION,
    DEFAULT_RUBRIC,
    FINAL_STATES,
    RETRYABLE_STATES,
    DocumentState,
    HelpPanel,
    JudgeMode,
    ResponseFormat,
)


class Cli(NamedTuple):
    """How a field is an option of ``extract run``: its help panel, the placeholder of its value, its flag
    (default ``--field-name``) and the environment variable it is read from when not given."""

    panel: HelpPanel
    metavar: str | None = None
    flag: str | None = None
    envvar: str | None = None


NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""A contract's, a prompt's, a rubric's or an endpoint's name: no path, no space."""
URL = r"^https?://\S+$"
MODEL = r"^[^\s\x00-\x1f]{1,500}$"


class RunOptions(BaseModel):
    """What decides a run's results and how its model calls are bounded; see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contract: Annotated[str, Cli(HelpPanel.contract, "NAME")] = Field(
        default=DEFAULT_CONTRACT, pattern=NAME, description="output contract (`extract contracts` lists them)")
    prompt_version: Annotated[str, Cli(HelpPanel.contract, "VERSION")] = Field(
        default=DEFAULT_PROMPT_VERSION, pattern=NAME, description="prompts/<contract>/<version>")

    model: Annotated[str | None, Cli(HelpPanel.model, "MODEL")] = Field(
        default=None, pattern=MODEL, description="openai:<model>, local:<path.gguf> or local [env EXTRACT_MODEL; default: "
        "openai:gpt-4o-mini if OPENAI_API_KEY is set, else local]")
    endpoint: str | None = Field(
        default=None, pattern=NAME, description="the model server by the operator's name for it (`GET /v1/endpoints`), "
        "instead of a base URL: the API's way; each worker finds its URL and key in its own configuration")
    base_url: Annotated[str | None, Cli(HelpPanel.model, "URL")] = Field(
        default=None, pattern=URL, max_length=2000, description="OpenAI-compatible base URL [env OPENAI_BASE_URL]")
    response_format: Annotated[ResponseFormat, Cli(HelpPanel.model, envvar="EXTRACT_RESPONSE_FORMAT")] = Field(
        default=ResponseFormat.auto, description="how an OpenAI-compatible server is asked for JSON: auto tries json_schema, "
        "tools, json_object, plain and keeps the first the server accepts; any other value is used alone")
    timeout: Annotated[float, Cli(HelpPanel.model, "SECONDS")] = Field(
        default=120.0, gt=0, le=3600, description="seconds per model call")
    retries: Annotated[int, Cli(HelpPanel.model)] = Field(
        default=3, ge=0, le=20, description="transport retries per call (timeouts, 429, 5xx)")
    retry_budget: Annotated[float, Cli(HelpPanel.model, "SECONDS")] = Field(
        default=300.0, ge=0, le=86400, description="total seconds of retrying per call")
    max_tokens: Annotated[int | None, Cli(HelpPanel.model)] = Field(
        default=None, ge=1, le=1_000_000, description="cap on generated tokens per call")
    max_input_tokens: Annotated[int | None, Cli(HelpPanel.model)] = Field(
        default=None, ge=1, le=10_000_000, description="tokens a prompt may hold; a longer document is read in windows "
        "[default: the model's limit, see docs/model-servers.md]")
    max_output_tokens: Annotated[int | None, Cli(HelpPanel.model)] = Field(
        default=None, ge=1, le=1_000_000, description="tokens an answer may take; a document whose expected answer is "
        "longer is read in windows [default: as for --max-input-tokens]")
    overlap: Annotated[int, Cli(HelpPanel.model)] = Field(
        default=DEFAULT_OVERLAP, ge=0, le=1000, description="sentences before each window shown to it as context")
    max_cost: Annotated[float | None, Cli(HelpPanel.model, "USD")] = Field(
        default=None, ge=0, le=1_000_000, description="US dollars this run may spend on model calls: each call is sent "
        "with an output limit the rest of the budget pays for, and the run stops cleanly when the next call cannot "
        "be paid (INTERRUPTED, rerun to resume); needs the model's price [env EXTRACT_PRICES]")

    force: Annotated[bool, Cli(HelpPanel.batch, flag="--force")] = Field(
        default=False, description="redo documents this configuration already finished")
    retry_errors: Annotated[bool, Cli(HelpPanel.batch)] = Field(
        default=True, description="retry documents that ended ERROR in an earlier run (the model was never heard)")
    tags: Annotated[tuple[str, ...], Cli(HelpPanel.batch, "TAG", flag="--tag")] = Field(
        default=(), max_length=100, description="tag the documents of this run (categories for `extract compare --by-tag`)")
    ocr_lang: Annotated[str | None, Cli(HelpPanel.batch, "LANGS", envvar="EXTRACT_OCR_LANG")] = Field(
        default=None, pattern=r"^[A-Za-z_]{3,16}(\+[A-Za-z_]{3,16}){0,7}$", description="Tesseract languages for scans "
        "and images, e.g. kor or rus+eng [default: from the document]")

    judge: Annotated[str | None, Cli(HelpPanel.judge, "MODEL", flag="--judge")] = Field(
        default=None, pattern=MODEL, description="judge candidates that passed every rule with this model (as --model); "
        "off by default (docs/judge.md)")
    judge_mode: Annotated[JudgeMode | None, Cli(HelpPanel.judge)] = Field(
        default=None, description="observe: report only; review: a failure goes to MANUAL_REVIEW; block: also marks it "
        "BLOCK (needs an admit-block calibration) [default: the contract's modes, else review]")
    judge_threshold: Annotated[float, Cli(HelpPanel.judge)] = Field(
        default=DEFAULT_JUDGE_THRESHOLD, gt=0, lt=1, description="a link scoring below this is unsupported")
    judge_rubric: Annotated[str, Cli(HelpPanel.judge, "VERSION")] = Field(
        default=DEFAULT_RUBRIC, pattern=NAME, description="judge rubric version (prompts/judge/<version>)")
    judge_endpoint: str | None = Field(
        default=None, pattern=NAME, description="the judge's model server by the operator's name for it, instead of a base "
        "URL [default: endpoint]")
    judge_base_url: Annotated[str | None, Cli(HelpPanel.judge, "URL")] = Field(
        default=None, pattern=URL, max_length=2000, description="base URL of the judge's server [default: --base-url]")
    judge_concurrency: Annotated[int, Cli(HelpPanel.judge)] = Field(
        default=DEFAULT_JUDGE_CONCURRENCY, ge=1, le=256, description="judge calls in flight (its own slots, never "
        "generation's)")
    judge_queue: Annotated[int, Cli(HelpPanel.judge)] = Field(
        default=DEFAULT_JUDGE_QUEUE, ge=1, le=4096, description="documents that may wait for the judge; when full, the "
        "batch slows to the judge's pace")
    judge_timeout: Annotated[float, Cli(HelpPanel.judge, "SECONDS")] = Field(
        default=DEFAULT_JUDGE_TIMEOUT, gt=0, le=3600, description="seconds per judge call")

    PER_BATCH: ClassVar[frozenset[str]] = frozenset({"force", "retry_errors", "tags", "max_cost"})
    """Options that decide which documents a batch converts, how they are tagged and what it may spend, not
    how a document is converted: a worker's engine serves every batch that differs only in these (each task
    brings its batch's), so they are not part of ``conversion_key``."""
    JUDGE_SETTINGS: ClassVar[tuple[str, ...]] = ("judge_mode", "judge_base_url", "judge_endpoint", "judge_threshold",
                                                 "judge_rubric", "judge_concurrency", "judge_queue", "judge_timeout")

    @field_validator("base_url", "judge_base_url")
    @classmethod
    def _one_server(cls, url: str | None, info: ValidationInfo) -> str | None:
        named = "judge_endpoint" if info.field_name == "judge_base_url" else "endpoint"
        if url is not None and info.data.get(named) is not None:
            raise ValueError(f"give the server as `{info.field_name}` or as `{named}`, not both")
        return url

    @model_validator(mode="after")
    def _consistent(self) -> RunOptions:
        if self.judge is None:
            given = [name for name in self.JUDGE_SETTINGS if getattr(self, name) != type(self).model_fields[name].default]
            if given:
                raise ValueError(f"{', '.join(f'`{name}`' for name in given)} {'needs' if len(given) == 1 else 'need'} "
                                 "`judge` MODEL")
        elif self.judge_queue < self.judge_concurrency:
            raise ValueError(f"`judge_queue` ({self.judge_queue}) must be at least `judge_concurrency` "
                             f"({self.judge_concurrency})")
        return self

    @property
    def retry_states(self) -> tuple[DocumentState, ...]:
        """Final states a run takes over instead of skipping (all of them with ``force``)."""
        if self.force:
            return FINAL_STATES
        return RETRYABLE_STATES if self.retry_errors else ()

    def to_json(self) -> dict[str, Any]:
        """The options as stored (with the batch, in the run's configuration): JSON values, every field."""
        return self.model_dump(mode="json")

    def conversion(self) -> dict[str, Any]:
        """The options that decide how a document is converted (every one but ``PER_BATCH``)."""
        return {name: value for name, value in self.to_json().items() if name not in self.PER_BATCH}

    def conversion_key(self) -> str:
        """What makes two runs' conversions differ, as one string: a worker keeps one engine per key."""
        return json.dumps(self.conversion(), sort_keys=True)


def flag_of(name: str) -> str:
    """The ``extract run`` option of a field (``--judge`` for ``judge``), or the field's name when it has none."""
    field = RunOptions.model_fields.get(name)
    if field is None:
        return name
    mark = next((m for m in field.metadata if isinstance(m, Cli)), None)
    if mark is None:
        return name
    return mark.flag or "--" + name.replace("_", "-")


_QUOTED = re.compile(r"`(\w+)`")


def explain(error: ValidationError, name: Any = flag_of) -> str:
    """A ``ValidationError`` of run options as one line: each problem after the option it is about, named by
    ``name`` (the command line's flag; the API's field name)."""
    problems = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        if where and where in RunOptions.model_fields:
            message = f"{name(where)}: {message}"
        elif where:
            message = f"{where}: {message}"
        problems.append(_QUOTED.sub(lambda found: name(found.group(1)), message))  # a check across fields
    return "; ".join(problems)
