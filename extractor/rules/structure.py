"""Structure rules: the candidate must be JSON and must match the contract's schema.

If either fires, no content rule runs: a content rule reading a malformed candidate would raise a
secondary error that hides the real one (docs/design.md#rules).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from extractor.evidence.fieldpath import location
from extractor.rules import Hit, rule

if TYPE_CHECKING:
    from extractor.rules.schema import SchemaValidator

MAX_CANDIDATE_CHARS = 20_000_000
MAX_DEPTH = 64


@dataclass(frozen=True)
class Parsed:
    """A response read as JSON: its ``value``, or the ``problem`` that keeps it from being one JSON document."""

    value: Any = None
    problem: str | None = None


class _Unparseable(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicate = next(key for key in keys if keys.count(key) > 1)
        raise _Unparseable(f'duplicate key "{duplicate}" in one object (JSON would silently keep the last)')
    return dict(pairs)


def _reject_constant(name: str) -> Any:
    raise _Unparseable(f"{name} is not valid JSON")


def _depth(value: Any) -> int:
    """Nesting depth, iteratively (a recursive walk is what deep input is built to break)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return deepest


@rule(
    "OUTPUT_NOT_JSON",
    contract="*",
    stage="structure",
    fires_when="the response is not one JSON document: empty, truncated, text around the JSON, a Markdown "
    "code fence, duplicate keys, NaN/Infinity, nested deeper than 64 levels, or over 20,000,000 characters",
    inputs="the raw response text",
    normalisation="none (leading/trailing whitespace is allowed)",
    passes="json.loads accepts the whole text with no duplicate keys and no NaN/Infinity, depth <= 64",
    location="$ (the message names line and column of the parse error)",
    judge_needed_after_failure="no: repair once, then manual review with the raw text kept",
)
def output_not_json(parsed: Parsed) -> Iterator[Hit]:
    if parsed.problem is not None:
        yield Hit("$", parsed.problem)


def parse_candidate(text: str) -> Parsed:
    """Read a raw response as one JSON document; the validator parses first, then runs the rules."""
    if len(text) > MAX_CANDIDATE_CHARS:
        return Parsed(problem=f"response is {len(text):,} characters, over the {MAX_CANDIDATE_CHARS:,} limit")
    stripped = text.strip()
    if not stripped:
        return Parsed(problem="response is empty")
    if stripped.startswith("```"):
        return Parsed(problem="response wraps the JSON in a Markdown code fence; return the bare JSON object")
    try:
        value = json.loads(stripped, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        truncated = error.pos >= len(stripped) - 1 and error.msg.startswith(("Expecting", "Unterminated"))
        # the standard library's "Unterminated string starting at" names a place itself: "at" once, not twice
        what = "truncated JSON" if truncated else error.msg.removesuffix(" at")
        return Parsed(problem=f"not JSON: {what} at line {error.lineno} column {error.colno}")
    except _Unparseable as error:
        return Parsed(problem=f"not usable JSON: {error}")
    except RecursionError:
        return Parsed(problem=f"not usable JSON: nested deeper than the parser allows (limit {MAX_DEPTH})")
    depth = _depth(value)
    if depth > MAX_DEPTH:
        return Parsed(problem=f"not usable JSON: nested {depth} levels deep (limit {MAX_DEPTH})")
    return Parsed(value)


@dataclass(frozen=True)
class SchemaInput:
    value: Any
    validator: SchemaValidator


@rule(
    "SCHEMA_VIOLATION",
    contract="*",
    stage="structure",
    fires_when="the parsed JSON does not match the contract's JSON Schema (missing or extra keys, wrong types, "
    "bad enum values, empty strings where text is required, malformed ids)",
    inputs="the parsed response and contracts/<name>/v<version>/schema.json",
    normalisation="none",
    passes="python-jsonschema (Draft 2020-12) reports no error (jsonschema-rs may say so first: extractor.rules.schema)",
    location="JSON path of the offending value, e.g. $.processSteps[2].actorId (of the missing key for a "
    "required property)",
    judge_needed_after_failure="no: repair once, then manual review",
)
def schema_violation(candidate: SchemaInput) -> Iterator[Hit]:
    errors = sorted(candidate.validator.iter_errors(candidate.value), key=lambda e: [str(p) for p in e.absolute_path])
    for error in errors:
        steps = list(error.absolute_path)
        if error.validator == "required":
            # point at the missing key itself: "$.claims" says more than "$" plus a sentence
            steps += [name for name in error.validator_value if error.message == f"{name!r} is a required property"]
        where = location(*steps)
        yield Hit(where, error.message if len(error.message) <= 300 else error.message[:297] + "...")
