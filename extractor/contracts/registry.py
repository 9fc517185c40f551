"""The contract registry: every contract the product knows is one ``Contract`` spec, registered once.

A spec carries everything the stages read from a contract: the JSON Schema the model is shown and the
validator enforces, the rule settings (checks.toml, or ``rules.json`` for a code contract, with
``calibration.json``), the content rules in stage order, the evidence model (the rules' shared context, field
and sentence states, judge links, whether there is sentence coverage and what the repair lists as
unaccounted), where its files live, its content hash and its merge spec. Stages look a contract up here by name
and version and never branch on a contract's name.

Built-in contracts register in ``extractor.contracts.builtin``; a contract written as files (a folder
``<dir>/<name>/v<N>/`` with ``schema.json`` and ``checks.toml``) registers through the same
``register`` with a spec built from its folder (``extractor.contracts.files``): the generic evidence model
and rules plus its declared checks, the generic prompt templates unless the folder overrides them. Folders
are found through ``use_dirs`` (``--contracts DIR``) and ``EXTRACT_CONTRACTS_PATH``; ``get_contract`` (in
``files``) loads a name it does not know yet from there; ``lookup`` here only reads what is registered. The
validation worker process gets a file contract's folder with each call and loads it there once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.contracts.envelope import ENVELOPE, inline_refs
from extractor.contracts.merge_spec import MergeSpec
from extractor.contracts.settings import Modes, RuleMode, approvals_required, rule_mode, settings_sha256
from extractor.resources import data_dir
from extractor.rules import EvidenceModel, Rule
from extractor.rules.guards import EXTENT_RULES, Guards
from extractor.rules.merge import MERGE_VALUE_CONFLICT

if TYPE_CHECKING:
    from pydantic import BaseModel

    from extractor.rules.schema import SchemaValidator

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
PATH_ENV = "EXTRACT_CONTRACTS_PATH"
ContractRef = tuple[str, int, str | None, str, tuple[tuple[str, str], ...] | None]
"""Name, version, folder (a contract written as files, else None), content hash and, for a contract written as
files, each file's sha256 by name (so another process can say which files changed since)."""


ALWAYS_NEEDS_PERSON = frozenset({MERGE_VALUE_CONFLICT, *EXTENT_RULES, "EVIDENCE_LOW_OCR_CONFIDENCE"})
"""Warnings that send a document to a person under every contract: two windows evidenced different values;
nothing (or next to nothing) was extracted, which is not a pass; evidence rests on words OCR may have misread."""


def contract_dir(name: str, version: int) -> Path:
    """The folder of a built-in contract's files."""
    return data_dir("contracts") / name / f"v{version}"


@dataclass(frozen=True, eq=False)
class Contract:
    """One contract version with everything the stages need from it."""

    name: str
    version: int
    schema: dict[str, Any] = field(repr=False)
    settings: dict[str, Any] = field(repr=False)
    model: EvidenceModel[Any] = field(repr=False)
    rules: tuple[Rule[Any], ...] = field(repr=False)
    folder: Path  # where schema.json and checks.toml (rules.json for code contracts) are
    prompts: Path  # its prompt versions: <prompts>/<version>/{system,user,repair}.txt
    pydantic: type[BaseModel] | None = field(default=None, repr=False)  # built-ins: the schema's source
    guards: Guards = field(default_factory=Guards, repr=False)  # the built-in critical and extent checks' settings
    prompt_fallback: Path | None = None  # where a part missing from ``prompts`` is read (the generic templates)
    content_hash: str = ""  # sha256 over its files (schema, checks, templates, catalogues): a new one is a new config
    content_files: Mapping[str, str] = field(default_factory=dict, repr=False)  # each file's sha256, by name
    merge: MergeSpec | None = field(default=None, repr=False)  # how windows of a long document merge; None: never split
    from_files: bool = False  # built from a folder by the file loader (the worker loads it from ``folder``)

    @property
    def id(self) -> str:
        return f"{self.name}@v{self.version}"

    @property
    def ref(self) -> ContractRef:
        """What names this contract in another process (the validation worker; ``recorded.resolve``)."""
        if not self.from_files:
            return self.name, self.version, None, self.content_hash, None
        return self.name, self.version, str(self.folder), self.content_hash, tuple(self.content_files.items())

    @property
    def record_schema(self) -> dict[str, Any]:
        """The schema without the standard envelope parts: the user's record alone."""
        return {**self.schema, "properties": {name: value for name, value in self.schema.get("properties", {}).items()
                                              if name not in ENVELOPE}}

    @property
    def needs_person(self) -> frozenset[str]:
        """Warning rule ids that send a document to a person instead of the review queue's normal path (the
        contract's own, and always ``ALWAYS_NEEDS_PERSON``)."""
        return frozenset(self.settings.get("needs_person", ())) | ALWAYS_NEEDS_PERSON

    @cached_property
    def modes(self) -> Modes:
        """Per-rule and per-judge-metric modes from the settings (``extractor.contracts.settings``)."""
        return Modes.parse(self.settings)

    def rule_mode(self, rule_id: str, *, error: bool) -> RuleMode:
        """What a finding of ``rule_id`` may do: observe, review (a person) or block (a person, BLOCK mark)."""
        return rule_mode(self.settings, self.modes, rule_id, error=error, needs_person=self.needs_person)

    @property
    def approvals(self) -> int:
        """How many distinct people must approve a record of this contract before it counts as approved
        (``[review] approvals`` of checks.toml; 1 unless it says otherwise)."""
        return approvals_required(self.settings)

    @cached_property
    def settings_sha256(self) -> str:
        """The settings' digest, part of a run's configuration hash (a recalibrated threshold is a new config)."""
        return settings_sha256(self.settings)

    @property
    def has_coverage(self) -> bool:
        """Whether every source sentence must be accounted for (``sentenceCoverage``)."""
        return self.model.has_coverage

    @cached_property
    def schema_text(self) -> str:
        """The schema as the prompt shows it, encoded once (not once per document)."""
        return json.dumps(self.schema, ensure_ascii=False)

    @cached_property
    def prompt_shingles(self) -> frozenset[tuple[str, ...]]:
        """Runs of words of every prompt template of this contract, for SYSTEM_PROMPT_ECHO (read once)."""
        import re

        from extractor.evidence.sensitive import shingles
        from extractor.rules.guards import PROMPT_ECHO_WORDS

        found: set[tuple[str, ...]] = set()
        for path in sorted(self.prompts.glob("*/*.txt")):
            for piece in re.split(r"\$\{?\w+\}?", path.read_text(encoding="utf-8")):
                found |= shingles(piece, PROMPT_ECHO_WORDS)
        return frozenset(found)

    @cached_property
    def validator(self) -> SchemaValidator:
        """The compiled validator for ``schema``, built once per contract (``extractor.rules.schema``).

        Local ``$ref``s are substituted first (the contracts are not recursive): the same schema, and
        about 40% less time per object in python-jsonschema, which matters for 20,000 coverage entries.
        """
        from extractor.rules.schema import SchemaValidator

        return SchemaValidator(inline_refs(self.schema))

    def generated_schema(self) -> dict[str, Any]:
        """The schema derived from the pydantic model (built-ins only): what ``schema.json`` must hold."""
        if self.pydantic is None:
            raise ValueError(f"contract {self.id} has no model to generate its schema from")
        return {"$schema": SCHEMA_DIALECT, "$id": f"extractor:contracts/{self.name}/v{self.version}",
                **self.pydantic.model_json_schema()}


def read_json(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


_CONTRACTS: dict[tuple[str, int], Contract] = {}


def register(contract: Contract) -> Contract:
    """Make ``contract`` known by name and version; the same name and version twice is a mistake."""
    key = (contract.name, contract.version)
    if key in _CONTRACTS:
        raise ValueError(f"contract {contract.id} registered twice")
    _CONTRACTS[key] = contract
    return contract


def lookup(name: str, version: int | None = None) -> Contract:
    """A registered contract (its latest version by default); ``KeyError`` names the known contracts.
    ``extractor.contracts.get_contract`` looks in the contract folders first for a name not registered yet."""
    versions = [v for n, v in _CONTRACTS if n == name]
    chosen = max(versions, default=None) if version is None else version
    found = None if chosen is None else _CONTRACTS.get((name, chosen))
    if found is None:
        known = ", ".join(f"{n} v{v}" for n, v in sorted(_CONTRACTS))
        raise KeyError(f"unknown contract {name!r}{'' if version is None else f' v{version}'} (known: {known})")
    return found


def contracts() -> Sequence[Contract]:
    """The latest version of every registered contract, by name."""
    return [lookup(name) for name in names()]


def names() -> list[str]:
    return sorted({name for name, _ in _CONTRACTS})


_DIRS: list[Path] = []


def use_dirs(dirs: Iterable[Path | str]) -> None:
    """Add folders to look for file contracts in (``--contracts DIR``), before ``EXTRACT_CONTRACTS_PATH``.

    A folder that holds no ``<name>/v<N>/schema.json`` is refused rather than searched in vain: given one
    level too deep (the contract's own folder, or its version folder), the error names the folder to give. The
    folders given last are searched first: a Python API call's own ``contracts`` win over an earlier call's.
    """
    from extractor.errors import UsageError

    given: list[Path] = []
    for folder in dirs:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise UsageError(f"{folder}: no such contracts folder (--contracts takes a folder of <name>/v<N>/ folders)")
        if not any(path.glob("*/v*/schema.json")):
            parent = next((up for up in (path.parent, path.parent.parent) if any(up.glob("*/v*/schema.json"))), None)
            hint = f"; did you mean --contracts {parent}?" if parent is not None else ""
            raise UsageError(f"{folder}: no contract inside (--contracts takes a folder of <name>/v<N>/schema.json "
                             f"folders){hint}")
        given.append(path)
    _DIRS[:] = [*dict.fromkeys(given), *(path for path in _DIRS if path not in given)]


def search_dirs() -> list[Path]:
    """The contract folders: ``use_dirs`` first, then ``EXTRACT_CONTRACTS_PATH`` (os.pathsep-separated)."""
    from_env = [Path(part).expanduser().resolve() for part in os.environ.get(PATH_ENV, "").split(os.pathsep) if part]
    return list(dict.fromkeys([*_DIRS, *from_env]))


def registered(name: str, version: int) -> Contract | None:
    """The contract registered under ``name`` and ``version``, without looking in folders."""
    return _CONTRACTS.get((name, version))
