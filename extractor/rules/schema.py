"""A contract's JSON Schema, compiled once: python-jsonschema reports, jsonschema-rs answers the common case.

python-jsonschema's messages and paths are what ``SCHEMA_VIOLATION`` shows and what the repair call quotes,
but it walks every value in Python: about 1.8 ms for a sample candidate, a third of validating one. Most
candidates are valid, and jsonschema-rs (compiled) says so in microseconds. So a value goes through
python-jsonschema only when jsonschema-rs rejects it, or when the schema could be read more leniently by
jsonschema-rs than by python-jsonschema; the errors reported always come from python-jsonschema.

The fast path is only ever allowed to *accept*, so it is used only where jsonschema-rs cannot accept what
python-jsonschema rejects (checked against both, ``tests/test_schema_check.py``):

- every keyword is one both read the same way (``FAST_KEYWORDS``), and none of them inverts a result
  (``not``, ``oneOf``, ``if``: there a stricter reading elsewhere would become a more lenient one);
- a ``pattern`` uses only constructs that ECMA 262 (jsonschema-rs) matches as strictly as Python's ``re`` or
  more strictly: literals, classes of literals, ``.``, ``^``, ``$``, quantifiers, groups, alternation, ``\\d``
  and ``\\w`` (ASCII in ECMA, Unicode in Python) outside negated classes. ``\\s`` is out: ECMA counts
  U+FEFF as whitespace, Python does not.

Any other schema is validated by python-jsonschema alone, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
                         "readOnly", "writeOnly", "format"})
"""Keywords neither validator asserts (``format`` is an annotation in 2020-12 unless a checker is asked for)."""
FAST_KEYWORDS = ANNOTATIONS | frozenset({
    "type", "required", "enum", "const", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minProperties", "maxProperties",
    "properties", "additionalProperties", "items", "prefixItems", "anyOf", "allOf", "$defs", "pattern",
})
_SCHEMA_MAPS = frozenset({"properties", "$defs"})
_SCHEMA_LISTS = frozenset({"anyOf", "allOf", "prefixItems"})
_SCHEMA_VALUES = frozenset({"items", "additionalProperties"})
_LOOKAROUND = re.compile(r"\(\?<?[=!]")


class SchemaValidator:
    """``iter_errors(value)`` as python-jsonschema gives them, with jsonschema-rs accepting valid values first."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        from jsonschema import Draft202012Validator

        self.schema = schema
        self.python: Draft202012Validator = Draft202012Validator(schema)
        self.fast = _fast_validator(schema)

    def __reduce__(self) -> tuple[type[SchemaValidator], tuple[Mapping[str, Any]]]:
        """Copied and pickled as its schema (a compiled jsonschema-rs validator is neither)."""
        return SchemaValidator, (self.schema,)

    def iter_errors(self, value: Any) -> Iterator[ValidationError]:
        if self.fast is not None and self._fast_accepts(value):
            return iter(())
        errors: Iterator[ValidationError] = self.python.iter_errors(value)
        return errors

    def _fast_accepts(self, value: Any) -> bool:
        try:
            accepted: bool = self.fast.is_valid(value)
        except (ValueError, TypeError, OverflowError):  # a value it cannot convert: python-jsonschema decides
            return False
        return accepted


def _fast_validator(schema: Mapping[str, Any]) -> Any:
    """jsonschema-rs compiled for ``schema``, or None when it may not decide alone (or is not installed)."""
    if not fast_path_safe(schema):
        return None
    try:
        import jsonschema_rs
    except ImportError:
        return None
    return jsonschema_rs.validator_for(dict(schema), validate_formats=False)


def fast_path_safe(schema: Any) -> bool:
    """Whether jsonschema-rs accepting a value means python-jsonschema accepts it too (module docstring)."""
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, Mapping) or not {k for k in schema if not k.startswith("x-")} <= FAST_KEYWORDS:
        return False  # ``x-`` keywords (``x-enum-words``) are ours: both validators ignore unknown keywords
    if "$ref" in schema:  # a reference that was not inlined: keep to python-jsonschema
        return False
    pattern = schema.get("pattern")
    if pattern is not None and not (isinstance(pattern, str) and pattern_no_more_lenient(pattern)):
        return False
    children: list[Any] = []
    for keyword in _SCHEMA_MAPS & schema.keys():
        if not isinstance(schema[keyword], Mapping):
            return False
        children += schema[keyword].values()
    for keyword in _SCHEMA_LISTS & schema.keys():
        if not isinstance(schema[keyword], list):
            return False
        children += schema[keyword]
    children += [schema[keyword] for keyword in _SCHEMA_VALUES & schema.keys()]
    return all(fast_path_safe(child) for child in children)


def pattern_no_more_lenient(pattern: str) -> bool:
    """Whether ECMA 262 matches ``pattern`` at most where Python's ``re.search`` does (module docstring)."""
    if _LOOKAROUND.search(pattern):
        return False
    negated = False  # inside a [^...] class, where a narrower \d or \w would widen the class
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            escaped = pattern[index + 1 : index + 2]
            if not escaped or escaped.isalnum() and not (escaped in "dw" and not negated):
                return False  # \s, \b, \D, \p{..}, \1, \uXXXX...: read differently or not at all
            index += 2
            continue
        if char == "[" and not in_class:
            in_class = True
            negated = pattern[index + 1 : index + 2] == "^"
        elif char == "]" and in_class:
            in_class = negated = False
        index += 1
    return not in_class
