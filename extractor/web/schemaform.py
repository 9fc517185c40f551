"""Edit forms built from a contract's JSON Schema, and the candidate read back from a submitted form.

Why from the schema and not from the candidate: a reviewer must be able to fill what the model left out
(an empty list, a missing optional key) and the form must work for any contract, including contracts
written as files. Every node of the tree has a form name that is its field path (``processSteps[1].action``),
so findings (located by JSON path) land next to the field they point at, and the document page shows the
same tree read-only with its evidence links.

Form encoding (what the browser posts): ``v:<path>`` a leaf's text, ``t:<path>`` a marker that an object or
array (or list item) exists (so an empty list stays an empty list; disabled, so not posted, for an optional
one the candidate does not have until an item is added), ``z:<path>`` "this nullable value is null",
``p:<path>`` "this optional leaf is in the candidate" (so an untouched absent key stays absent and an
explicit null stays null). Array items are posted with whatever indices the page gave them (new ones from a template with the
placeholder ``__N<depth>__``); they are read back in index order and renumbered from 0.

Nothing is coerced silently: text that is not an integer where the schema wants one stays text, so the
validator reports it; an empty leaf is null when the schema allows null, left out when the key is optional,
else the empty string (which the schema's own constraints then judge); an optional key the candidate does
not have stays absent while its field is left empty. Schema shapes the tree does not model
(free-form objects, tuples, unions of several non-null types) are edited as JSON in a text area; JSON that
does not parse stays a string for the validator to refuse.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extractor.evidence.fieldpath import parse, render

MISSING: Any = object()
"""The value of a node whose key the candidate does not have."""

LEAF_TYPES = frozenset({"string", "integer", "number", "boolean"})
LONG_TEXT = 80
"""Strings longer than this (or with a newline) get a text area instead of a one-line input."""


@dataclass
class Node:
    """One field of the form: an object, an array, a typed leaf, an enum or a JSON text area."""

    kind: str  # object | array | string | integer | number | boolean | enum | json
    name: str  # its field path; "" for the root
    key: str  # the property name or the index, for labels
    label: str
    value: Any = MISSING
    description: str | None = None
    required: bool = True
    nullable: bool = False
    depth: int = 0  # how many arrays enclose it (the placeholder of a new item is __N<depth>__)
    children: list[Node] = field(default_factory=list)
    item: Node | None = None  # an array's template for a new item
    options: list[Any] = field(default_factory=list)  # enum values
    extra_keys: list[str] = field(default_factory=list)  # keys of the candidate the schema does not define

    @property
    def present(self) -> bool:
        return self.value is not MISSING

    @property
    def is_null(self) -> bool:
        return self.value is None

    @property
    def text(self) -> str:
        """The value as an input shows it."""
        if self.value is MISSING or self.value is None:
            return ""
        if self.kind == "json":
            return json.dumps(self.value, ensure_ascii=False, indent=2)
        if self.kind == "enum":
            return json.dumps(self.value, ensure_ascii=False)
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        return self.value if isinstance(self.value, str) else json.dumps(self.value, ensure_ascii=False)

    @property
    def multiline(self) -> bool:
        return self.kind == "json" or (isinstance(self.value, str) and (len(self.value) > LONG_TEXT or "\n" in self.value))

    def option_text(self, option: Any) -> str:
        return json.dumps(option, ensure_ascii=False)

    def walk(self) -> Iterable[Node]:
        """This node and every node under it (not the templates)."""
        yield self
        for child in self.children:
            yield from child.walk()


def _label(key: str) -> str:
    """``processSteps`` -> ``process steps``: the property name a person reads (schema titles generated
    from it say "Processsteps"); list items keep their 0-based ``[i]``, as findings and evidence name them."""
    if key.startswith("["):
        return key
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).replace("_", " ").strip()
    return words[:1].upper() + words[1:].lower() if words else key


def _child(name: str, key: str | int) -> str:
    if isinstance(key, int) or key.startswith("__N"):
        return f"{name}[{key}]"
    return f"{name}.{key}" if name else key


class SchemaForm:
    """The form tree of one contract schema; ``tree(candidate)`` fills it, ``read(form)`` reads it back."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.root_schema = schema

    # -- schema shapes -----------------------------------------------------------------------------------

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        seen = 0
        while "$ref" in schema and seen < 32:  # local references only; the contracts are not recursive
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#/"):
                return {}
            target: Any = self.root_schema
            for part in ref[2:].split("/"):
                target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, Mapping) else {}
            merged = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **merged}
            seen += 1
        return schema

    def _shape(self, schema: Mapping[str, Any]) -> tuple[str, Mapping[str, Any], bool]:
        """(kind, the schema of the non-null part, nullable)."""
        schema = self._resolve(schema)
        for union in ("anyOf", "oneOf"):
            if union in schema:
                branches = [self._resolve(b) for b in schema[union] if isinstance(b, Mapping)]
                other = [b for b in branches if b.get("type") != "null"]
                if len(other) == 1 and len(branches) == len(other) + 1:
                    kind, inner, _ = self._shape(other[0])
                    meta = {k: v for k, v in schema.items() if k not in (union,)}
                    return kind, {**inner, **meta}, True
                return "json", schema, any(b.get("type") == "null" for b in branches)
        if "allOf" in schema and len(schema["allOf"]) == 1:
            meta = {k: v for k, v in schema.items() if k != "allOf"}
            kind, inner, nullable = self._shape(schema["allOf"][0])
            return kind, {**inner, **meta}, nullable
        types = schema.get("type")
        nullable = False
        if isinstance(types, list):
            nullable = "null" in types
            rest = [t for t in types if t != "null"]
            if len(rest) != 1:
                return "json", schema, nullable
            types = rest[0]
        if "enum" in schema:
            options = [o for o in schema["enum"] if o is not None]
            return "enum", {**schema, "enum": options}, nullable or None in schema["enum"]
        if types == "object" and isinstance(schema.get("properties"), Mapping) and schema["properties"]:
            return "object", schema, nullable
        if types == "array" and isinstance(schema.get("items"), Mapping):
            return "array", schema, nullable
        if types in LEAF_TYPES:
            return str(types), schema, nullable
        return "json", schema, nullable

    # -- the tree ------------------------------------------------------------------------------------------

    def tree(self, candidate: Any) -> Node:
        """The form tree with the candidate's values (a non-object candidate fills nothing)."""
        return self._node(self.root_schema, "", "record", candidate if isinstance(candidate, dict) else MISSING,
                          required=True, depth=0)

    def _node(self, schema: Mapping[str, Any], name: str, key: str, value: Any, *, required: bool,
              depth: int) -> Node:
        kind, shape, nullable = self._shape(schema)
        node = Node(kind=kind, name=name, key=key, label=_label(key), value=value,
                    description=shape.get("description"), required=required, nullable=nullable, depth=depth)
        if kind == "object":
            properties: Mapping[str, Any] = shape["properties"]
            needed = set(shape.get("required") or ())
            values = value if isinstance(value, dict) else {}
            for prop, sub in properties.items():
                node.children.append(self._node(sub, _child(name, prop), prop, values.get(prop, MISSING),
                                                required=prop in needed, depth=depth))
            node.extra_keys = [k for k in values if k not in properties]
            if value is not MISSING and value is not None and not isinstance(value, dict):
                node.kind = "json"  # the candidate has something else here: edit it as JSON, do not drop it
                node.children = []
        elif kind == "array":
            items = shape["items"]
            if isinstance(value, list):
                node.children = [self._node(items, _child(name, i), f"[{i}]", v, required=True, depth=depth + 1)
                                 for i, v in enumerate(value)]
            elif value is not MISSING and value is not None:
                node.kind = "json"
            node.item = self._node(items, _child(name, f"__N{depth + 1}__"), "new", MISSING, required=True,
                                   depth=depth + 1)
        elif kind == "enum":
            node.options = list(shape["enum"])
        return node

    # -- reading a submitted form --------------------------------------------------------------------------

    def read(self, form: Iterable[tuple[str, str]]) -> Any:
        """The candidate the form describes (see the module docstring for the encoding)."""
        values: dict[str, str] = {}
        for key, text in form:
            values[key] = text
        names = {key[2:] for key in values if key[:2] in ("v:", "t:")}
        result = self._read(self.root_schema, "", values, names)
        return {} if result is MISSING else result

    def _read(self, schema: Mapping[str, Any], name: str, values: dict[str, str], names: set[str],
              required: bool = True) -> Any:
        kind, shape, nullable = self._shape(schema)
        if nullable and f"z:{name}" in values:
            return None
        if kind == "object":
            if name and f"t:{name}" not in values:
                return MISSING
            needed = set(shape.get("required") or ())
            out: dict[str, Any] = {}
            for prop, sub in shape["properties"].items():
                got = self._read(sub, _child(name, prop), values, names, required=prop in needed)
                if got is not MISSING:
                    out[prop] = got
            return out
        if kind == "array":
            if f"t:{name}" not in values:
                return MISSING
            pattern = re.compile(re.escape(name) + r"\[(\d+)\](?=$|[.\[])")
            indices = sorted({int(m.group(1)) for n in names if (m := pattern.match(n))})
            return [self._read(shape["items"], _child(name, i), values, names) for i in indices]
        if f"v:{name}" not in values:
            return MISSING
        text = values[f"v:{name}"]
        if (text == "") if kind == "string" else (text.strip() == ""):
            if not required and f"p:{name}" not in values:
                return MISSING  # an optional key the candidate did not have, left empty: still absent
            if nullable:
                return None
            return text if kind == "string" else MISSING
        return _typed(kind, text)


def _typed(kind: str, text: str) -> Any:
    """The text as the schema's type; text that is not that type stays text (the validator says why)."""
    if kind == "integer" and re.fullmatch(r"[+-]?\d+", text.strip()):
        return int(text.strip())
    if kind == "number":
        try:
            number = float(text.strip())
        except ValueError:
            return text
        return int(number) if re.fullmatch(r"[+-]?\d+", text.strip()) else number
    if kind == "boolean" and text in ("true", "false"):
        return text == "true"
    if kind in ("enum", "json"):
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def finding_anchor(location: str | None, names: set[str]) -> str:
    """The form name a finding belongs beside: its location's field path, or the nearest enclosing field
    the form has ("" for the whole record)."""
    steps = parse((location or "").split(" ", 1)[0])
    if not steps:
        return ""
    while steps:
        name = render(steps)
        if name in names:
            return name
        steps = steps[:-1]
    return ""
