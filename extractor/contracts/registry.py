"""The contract registry: every contract the product knows is one ``Contract`` spec, registered once.

A spec carries everything the stages read from a contract: the JSON Schema the model is shown and the
validator enforces, the rule settings (``rules.json``), the content rules in stage order, the evidence model
(the rules' shared context, field and sentence states, judge links, whether there is sentence coverage and
what the repair lists as unaccounted), and where its files live. Stages look a contract up here by name
and version and never branch on a contract's name.

Built-in contracts register in ``extractor.contracts.builtin``; a contract written as files (a folder with
``schema.json`` and a checks file, issue 11) registers through the same ``register`` with a spec built from
its folder: a generic evidence model and declarative rules instead of Python ones, its own prompt folder.
The validation worker process looks contracts up here by name and version, so file contracts must be
registered there too (from the same search path, passed to the worker like ingest's settings).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.contracts.settings import Modes, RuleMode, rule_mode, settings_sha256
from extractor.resources import data_dir
from extractor.rules import EvidenceModel, Rule

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from pydantic import BaseModel

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


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
    folder: Path  # where schema.json and rules.json are
    prompts: Path  # its prompt versions: <prompts>/<version>/{system,user,repair}.txt
    pydantic: type[BaseModel] | None = field(default=None, repr=False)  # built-ins: the schema's source

    @property
    def id(self) -> str:
        return f"{self.name}@v{self.version}"

    @property
    def needs_person(self) -> frozenset[str]:
        """Warning rule ids that send a document to a person instead of the review queue's normal path."""
        return frozenset(self.settings.get("needs_person", ()))

    @cached_property
    def modes(self) -> Modes:
        """Per-rule and per-judge-metric modes from the settings (``extractor.contracts.settings``)."""
        return Modes.parse(self.settings)

    def rule_mode(self, rule_id: str, *, error: bool) -> RuleMode:
        """What a finding of ``rule_id`` may do: observe, review (a person) or block (a person, BLOCK mark)."""
        return rule_mode(self.settings, self.modes, rule_id, error=error, needs_person=self.needs_person)

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
    def validator(self) -> Draft202012Validator:
        """The compiled validator for ``schema``, built once per contract.

        Local ``$ref``s are substituted first (the contracts are not recursive): the same schema, and
        about 40% less time per object, which matters for 20,000 coverage entries.
        """
        from jsonschema import Draft202012Validator

        return Draft202012Validator(inline_refs(self.schema))

    def generated_schema(self) -> dict[str, Any]:
        """The schema derived from the pydantic model (built-ins only): what ``schema.json`` must hold."""
        if self.pydantic is None:
            raise ValueError(f"contract {self.id} has no model to generate its schema from")
        return {"$schema": SCHEMA_DIALECT, "$id": f"extractor:contracts/{self.name}/v{self.version}",
                **self.pydantic.model_json_schema()}


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``#/$defs/...`` reference replaced by its definition, ``$defs`` dropped."""
    definitions = schema.get("$defs", {})

    def substitute(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return substitute(definitions[node["$ref"].removeprefix("#/$defs/")])
            return {key: substitute(value) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [substitute(value) for value in node]
        return node

    return substitute(schema)


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


def get_contract(name: str, version: int | None = None) -> Contract:
    """A registered contract (its latest version by default); ``KeyError`` names the known contracts."""
    versions = [v for n, v in _CONTRACTS if n == name]
    chosen = max(versions, default=None) if version is None else version
    found = None if chosen is None else _CONTRACTS.get((name, chosen))
    if found is None:
        known = ", ".join(f"{n} v{v}" for n, v in sorted(_CONTRACTS))
        raise KeyError(f"unknown contract {name!r}{'' if version is None else f' v{version}'} (known: {known})")
    return found


def contracts() -> Sequence[Contract]:
    """The latest version of every registered contract, by name."""
    return [get_contract(name) for name in names()]


def names() -> list[str]:
    return sorted({name for name, _ in _CONTRACTS})
