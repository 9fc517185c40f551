"""Field paths as contracts write them (``processSteps[1].actorId``, 0-based) and JSON-path locations.

One grammar for both directions: ``parse`` reads what a model wrote, ``location`` writes what a report
shows (``$.processSteps[1].actorId``). A ``$.`` prefix is accepted on input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

Step = str | int
_PATH = re.compile(r"^(?:\$\.)?[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*)*$")
_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
MISSING = object()  # resolve() result for a path that points at nothing; null is a value
Pattern = tuple[str | None, ...]
"""A field path of a declared check: ``None`` stands for every item of the list at that point."""
_PATTERN_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\])*)")


def parse(path: str) -> tuple[Step, ...] | None:
    """Steps of a field path, or ``None`` when it is not a path at all."""
    path = path.strip()
    if not _PATH.match(path):
        return None
    if path.startswith("$."):
        path = path[2:]
    return tuple(name if name else int(index) for name, index in _STEP.findall(path))


def parse_pattern(text: str) -> Pattern | None:
    """A declared check's path (``[]`` for every item): ``processSteps[].actorId`` -> ``("processSteps", None,
    "actorId")``; ``None`` when it is no path."""
    steps: list[str | None] = []
    for part in text.strip().removeprefix("$.").split("."):
        match = _PATTERN_PART.fullmatch(part)
        if not match:
            return None
        steps.append(match.group(1))
        steps.extend([None] * (len(match.group(2)) // 2))
    return tuple(steps)


def render(steps: Iterable[Step]) -> str:
    """Steps back to the contract's own form: ``processSteps[1].actorId``."""
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def location(*steps: Step) -> str:
    """A report location: ``$`` for the root, else ``$.`` plus the rendered path."""
    return "$." + render(steps) if steps else "$"


def resolve(document: Any, steps: tuple[Step, ...]) -> Any:
    """The value at ``steps``, or ``MISSING``."""
    current = document
    for step in steps:
        if isinstance(step, int) and isinstance(current, list) and step < len(current):
            current = current[step]
        elif isinstance(step, str) and isinstance(current, dict) and step in current:
            current = current[step]
        else:
            return MISSING
    return current


def related(a: tuple[Step, ...], b: tuple[Step, ...]) -> bool:
    """True when one path is the other or contains it (``processSteps[1]`` and ``processSteps[1].action``)."""
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def in_schema(schema: Mapping[str, Any], steps: tuple[Step, ...]) -> bool:
    """Whether the path names a field the contract defines (indices allowed on arrays)."""
    node = deref(schema, schema)
    for step in steps:
        options = [deref(schema, option) for option in node.get("anyOf", [node])]
        if isinstance(step, int):
            arrays = [option for option in options if option.get("type") == "array"]
            if not arrays:
                return False
            node = deref(schema, arrays[0].get("items", {}))
        else:
            objects = [option for option in options if step in option.get("properties", {})]
            if not objects:
                return False
            node = deref(schema, objects[0]["properties"][step])
    return True


def deref(root: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    reference = node.get("$ref")
    if not reference:
        return node
    target: Any = root
    for part in reference.removeprefix("#/").split("/"):
        target = target[part]
    resolved: Mapping[str, Any] = target
    return resolved
