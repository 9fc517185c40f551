"""The standard envelope every contract's answer carries around the user's record.

What the model is asked for is the record a contract's ``schema.json`` declares plus three standard
parts with the names the product has always used: ``missingFields`` (questions for values the source
leaves open), ``evidence`` (verbatim excerpts per 0-based field path) and ``sentenceCoverage`` (every
sentence accounted for). A record schema that already declares these parts (the built-in
``work_procedure`` keeps its long-standing file byte for byte) must declare them with the standard
item fields; otherwise they are added here.
"""

from __future__ import annotations

import copy
from typing import Any

from extractor.vocab import CoverageStatus

ENVELOPE = ("missingFields", "evidence", "sentenceCoverage")

_DEFS: dict[str, dict[str, Any]] = {
    "CoverageStatus": {"enum": [status.value for status in CoverageStatus], "title": "CoverageStatus", "type": "string"},
    "Evidence": {
        "additionalProperties": False,
        "properties": {
            "fieldPath": {"description": "0-based path of the value this excerpt supports, e.g. '$example_list[1]'",
                          "minLength": 1, "title": "Fieldpath", "type": "string"},
            "sourceExcerpt": {"description": "copied verbatim from the source text", "minLength": 1,
                              "title": "Sourceexcerpt", "type": "string"},
        },
        "required": ["fieldPath", "sourceExcerpt"], "title": "Evidence", "type": "object",
    },
    "MissingField": {
        "additionalProperties": False,
        "properties": {
            "fieldPath": {"description": "0-based path of the field the source does not state, e.g. '$example_field'",
                          "minLength": 1, "title": "Fieldpath", "type": "string"},
            "question": {"minLength": 1, "title": "Question", "type": "string"},
        },
        "required": ["fieldPath", "question"], "title": "MissingField", "type": "object",
    },
    "SentenceCoverage": {
        "additionalProperties": False,
        "properties": {
            "sentenceId": {"pattern": "^s[1-9][0-9]*$", "title": "Sentenceid", "type": "string"},
            "status": {"$ref": "#/$defs/CoverageStatus"},
            "fieldPaths": {"description": "the fields holding this sentence; needed for MAPPED",
                           "items": {"minLength": 1, "type": "string"}, "title": "Fieldpaths", "type": "array"},
            "reason": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
                       "description": "why no field holds it; needed for UNMAPPED and EXCLUDED", "title": "Reason"},
        },
        "required": ["sentenceId", "status"], "title": "SentenceCoverage", "type": "object",
    },
}
_PARTS = {"missingFields": "MissingField", "evidence": "Evidence", "sentenceCoverage": "SentenceCoverage"}
ITEM_FIELDS = {part: frozenset(_DEFS[name]["properties"]) for part, name in _PARTS.items()}


def with_envelope(record: dict[str, Any], example_field: str, example_list: str) -> dict[str, Any]:
    """The full answer schema: ``record`` plus the envelope parts it does not declare itself.

    ``example_field``/``example_list`` name one of the contract's own fields in the parts' descriptions, so the
    model sees a path it can actually write.
    """
    schema = copy.deepcopy(record)
    declared = [part for part in ENVELOPE if part in schema.get("properties", {})]
    if declared:
        return schema
    definitions = schema.setdefault("$defs", {})
    for name, definition in _DEFS.items():
        text = _fill(copy.deepcopy(definition), example_field, example_list)
        definitions.setdefault(name, text)
    properties = schema.setdefault("properties", {})
    required = schema.setdefault("required", [])
    for part, name in _PARTS.items():
        properties[part] = {"items": {"$ref": f"#/$defs/{name}"}, "title": part[0].upper() + part[1:].lower(),
                            "type": "array"}
        if part not in required:
            required.append(part)
    return schema


def envelope_problems(schema: dict[str, Any]) -> list[str]:
    """Why the envelope parts a record schema declares itself are not the standard ones (empty when fine)."""
    properties = inline_refs(schema).get("properties", {})
    declared = [part for part in ENVELOPE if part in properties]
    if not declared:
        return []
    problems = [f"declares {', '.join(declared)} but not {part}" for part in ENVELOPE if part not in declared]
    for part in declared:
        items = properties[part].get("items", {})
        if properties[part].get("type") != "array" or set(items.get("properties", {})) != ITEM_FIELDS[part]:
            problems.append(f"{part} must be a list of objects with exactly {', '.join(sorted(ITEM_FIELDS[part]))}")
    return problems


def _fill(node: Any, example_field: str, example_list: str) -> Any:
    if isinstance(node, dict):
        return {key: _fill(value, example_field, example_list) for key, value in node.items()}
    if isinstance(node, str):
        return node.replace("$example_field", example_field).replace("$example_list", example_list)
    return node


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

    inlined: dict[str, Any] = substitute(schema)
    return inlined
