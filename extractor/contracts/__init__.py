"""Versioned output contracts: pydantic model, the JSON Schema file generated from it, rule settings.

Files live in ``contracts/<name>/v<version>/`` at the project root (``extractor/_data/contracts`` in an
installed wheel): ``schema.json`` is what the model is shown and what the validator enforces;
``rules.json`` holds the contract's rule settings (thresholds, which warnings need a person).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from extractor.contracts.rag_answer import RagAnswer
from extractor.contracts.work_procedure import WorkProcedure

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_MODELS: dict[tuple[str, int], type[BaseModel]] = {
    ("work_procedure", 1): WorkProcedure,
    ("rag_answer", 1): RagAnswer,
}
LATEST: dict[str, int] = {"work_procedure": 1, "rag_answer": 1}


def data_dir(kind: str) -> Path:
    """Where ``contracts``, ``prompts`` or ``migrations`` live: inside the wheel, else the source tree."""
    packaged = Path(__file__).resolve().parent.parent / "_data" / kind
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / kind


@dataclass(frozen=True, eq=False)
class Contract:
    """One contract version with everything the stages need from it."""

    name: str
    version: int
    model: type[BaseModel]
    schema: dict[str, Any] = field(repr=False)
    settings: dict[str, Any] = field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.name}@v{self.version}"

    @cached_property
    def validator(self) -> Draft202012Validator:
        """The compiled validator for ``schema``, built once per contract.

        Local ``$ref``s are substituted first (the contracts are not recursive): the same schema, and
        about 40% less time per object, which matters for 20,000 coverage entries.
        """
        from jsonschema import Draft202012Validator

        return Draft202012Validator(inline_refs(self.schema))


def generate_schema(name: str, version: int) -> dict[str, Any]:
    """The JSON Schema of a contract, derived from its pydantic model (the single source of truth)."""
    schema = _MODELS[(name, version)].model_json_schema()
    return {"$schema": SCHEMA_DIALECT, "$id": f"extractor:contracts/{name}/v{version}", **schema}


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


def contract_dir(name: str, version: int) -> Path:
    return data_dir("contracts") / name / f"v{version}"


@cache
def get_contract(name: str, version: int | None = None) -> Contract:
    """Load a contract; raises ``KeyError`` naming the known contracts when it does not exist."""
    version = LATEST.get(name) if version is None else version
    if version is None or (name, version) not in _MODELS:
        known = ", ".join(f"{n} v{v}" for n, v in _MODELS)
        raise KeyError(f"unknown contract {name!r}{'' if version is None else f' v{version}'} (known: {known})")
    folder = contract_dir(name, version)
    schema = json.loads((folder / "schema.json").read_text(encoding="utf-8"))
    settings = json.loads((folder / "rules.json").read_text(encoding="utf-8"))
    return Contract(name=name, version=version, model=_MODELS[(name, version)], schema=schema, settings=settings)


def names() -> list[str]:
    return sorted(LATEST)
