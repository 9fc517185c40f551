"""The judge's answer, parsed strictly into a typed verdict or refused as a protocol error.

Why strict: a judge that answers garbage must never become a score. A string ``"0.9"``, ``1.2``,
``NaN``, a boolean, a missing or an extra key, a duplicated key, a link the request did not ask about or
a link left out all raise ``ProtocolError`` with the reason; the caller stores the raw text and sends the
document to a person. Nothing is coerced, rounded, clipped or defaulted.

The answer carries the fields docs/design.md#judge lists: ``grounded`` (every value is supported by its excerpt),
``invented_facts`` (what the candidate states that no excerpt says), ``contradicts_context`` (some value says
the opposite of its excerpt), per-link ``supported`` scores and ``verdict`` pass/warn/fail.

The one change code makes to a valid answer is the deterministic override (docs/design.md#judge): a non-empty
``invented_facts`` or ``contradicts_context: true`` make the verdict ``fail`` whatever the judge wrote
(``pass`` or ``warn``), recorded as overridden with the reason. Rules are above the model's opinion.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from extractor.vocab import JudgeVerdict, values_of

Status = Literal["ok", "not_evaluable"]

STATUSES: tuple[Status, ...] = ("ok", "not_evaluable")
TOP_KEYS = ("status", "grounded", "invented_facts", "contradicts_context", "links", "verdict", "comment")
LINK_KEYS = ("index", "supported")
MAX_COMMENT_CHARS = 2000

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": list(TOP_KEYS),
    "properties": {
        "status": {"type": "string", "enum": list(STATUSES)},
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": list(LINK_KEYS),
                "properties": {
                    "index": {"type": "integer", "minimum": 0},
                    "supported": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                },
            },
        },
        "grounded": {"type": ["boolean", "null"]},
        "invented_facts": {"type": "array", "items": {"type": "string"}},
        "contradicts_context": {"type": ["boolean", "null"]},
        "verdict": {"type": ["string", "null"], "enum": [*values_of(JudgeVerdict), None]},
        "comment": {"type": "string"},
    },
}
"""Sent as the structured-output schema where the provider can constrain decoding; ``parse_verdict`` checks
everything again, because servers differ in how much of a schema they enforce."""


class ProtocolError(Exception):
    """The judge's answer breaks the protocol; ``reason`` is one line saying where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class LinkScore:
    index: int
    supported: float | None
    """In [0, 1]; ``None`` when the judge said this link cannot be judged (never read as 0)."""


@dataclass(frozen=True)
class ParsedVerdict:
    status: Status
    links: tuple[LinkScore, ...]
    grounded: bool | None
    invented_facts: tuple[str, ...]
    contradicts_context: bool | None
    verdict: JudgeVerdict | None
    """After the override; ``None`` only with status ``not_evaluable``."""
    comment: str
    model_verdict: JudgeVerdict | None
    """What the judge itself said, kept when the override changed it."""

    @property
    def overridden(self) -> bool:
        return self.verdict != self.model_verdict

    @property
    def override_reason(self) -> str | None:
        """Why the override changed the judge's verdict (None when it did not)."""
        if not self.overridden:
            return None
        return override_reason(self.invented_facts, self.contradicts_context)

    def score(self, index: int) -> float | None:
        for link in self.links:
            if link.index == index:
                return link.supported
        raise KeyError(index)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "links": [{"index": link.index, "supported": link.supported} for link in self.links],
            "grounded": self.grounded,
            "invented_facts": list(self.invented_facts),
            "contradicts_context": self.contradicts_context,
            "verdict": self.verdict,
            "model_verdict": self.model_verdict,
            "overridden": self.overridden,
            "override_reason": self.override_reason,
            "comment": self.comment,
        }


def _refuse_constant(name: str) -> float:
    raise ProtocolError(f"{name} is not a JSON number (scores are numbers from 0 to 1)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ProtocolError(f"key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def _exact_keys(value: Any, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} is {type(value).__name__}, expected an object")
    missing = [key for key in keys if key not in value]
    if missing:
        raise ProtocolError(f"{where} misses {', '.join(missing)}")
    extra = sorted(set(value) - set(keys))
    if extra:
        raise ProtocolError(f"{where} has unexpected key(s) {', '.join(extra)}")
    return value


def _score(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"{where} is {json.dumps(value, ensure_ascii=False)[:40]}, expected a number from 0 to 1 or null")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ProtocolError(f"{where} is {value!r}, outside [0, 1]")
    return float(value)


def parse_verdict(raw: str, expected_indices: Iterable[int]) -> ParsedVerdict:
    """The verdict in ``raw`` for a request that asked about exactly ``expected_indices``; else ``ProtocolError``."""
    expected = list(expected_indices)
    if not raw.strip():
        raise ProtocolError("empty answer")
    try:
        data = json.loads(raw, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise ProtocolError(f"not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    data = _exact_keys(data, TOP_KEYS, "the answer")

    status = data["status"]
    if status not in STATUSES:
        raise ProtocolError(f"status is {json.dumps(status, ensure_ascii=False)[:40]}, expected ok or not_evaluable")

    links_value = data["links"]
    if not isinstance(links_value, list):
        raise ProtocolError("links is not a list")
    links: list[LinkScore] = []
    seen: set[int] = set()
    for position, item in enumerate(links_value):
        item = _exact_keys(item, LINK_KEYS, f"links[{position}]")
        index = item["index"]
        if isinstance(index, bool) or not isinstance(index, int):
            raise ProtocolError(f"links[{position}].index is {json.dumps(index)[:40]}, expected an integer")
        if index not in expected:
            raise ProtocolError(f"links[{position}].index {index} was not asked about")
        if index in seen:
            raise ProtocolError(f"link {index} is scored twice")
        seen.add(index)
        links.append(LinkScore(index, _score(item["supported"], f"links[{position}].supported")))
    left_out = [index for index in expected if index not in seen]
    if left_out:
        raise ProtocolError(f"link(s) {', '.join(map(str, left_out))} not scored")

    invented = data["invented_facts"]
    if not isinstance(invented, list) or not all(isinstance(v, str) and v.strip() for v in invented):
        raise ProtocolError("invented_facts is not a list of non-empty strings")
    flags = {name: data[name] for name in ("grounded", "contradicts_context")}
    for name, flag in flags.items():
        if status == "ok" and not isinstance(flag, bool):
            raise ProtocolError(f"{name} is {json.dumps(flag)[:40]}, expected true or false")

    verdict = data["verdict"]
    if status == "ok" and verdict not in values_of(JudgeVerdict):
        raise ProtocolError(f"verdict is {json.dumps(verdict, ensure_ascii=False)[:40]}, expected pass, warn or fail")
    if status == "not_evaluable":
        if verdict is not None:
            raise ProtocolError("status not_evaluable with a verdict (expected null)")
        judged = [name for name, flag in flags.items() if flag is not None]
        if judged or invented:
            raise ProtocolError(f"status not_evaluable but {', '.join(judged or ['invented_facts'])} judged "
                                "(expected null and [])")
        scored = [link.index for link in links if link.supported is not None]
        if scored:
            raise ProtocolError(f"status not_evaluable but link(s) {', '.join(map(str, scored))} have a score")

    comment = data["comment"]
    if not isinstance(comment, str):
        raise ProtocolError("comment is not a string")
    if len(comment) > MAX_COMMENT_CHARS:
        raise ProtocolError(f"comment is {len(comment)} characters (limit {MAX_COMMENT_CHARS})")

    said = None if verdict is None else JudgeVerdict(verdict)
    final = override(said, invented, flags["contradicts_context"])
    return ParsedVerdict(status, tuple(sorted(links, key=lambda link: link.index)), flags["grounded"],
                         tuple(invented), flags["contradicts_context"], final, comment, said)


def override_reason(invented_facts: list[str] | tuple[str, ...], contradicts_context: bool | None) -> str | None:
    """What in the answer forces ``fail``: invented facts listed, or a contradiction of the context."""
    reasons = []
    if invented_facts:
        reasons.append(f"{len(invented_facts)} invented fact(s) listed")
    if contradicts_context is True:
        reasons.append("contradicts_context is true")
    return " and ".join(reasons) or None


def override(verdict: JudgeVerdict | None, invented_facts: list[str] | tuple[str, ...],
             contradicts_context: bool | None) -> JudgeVerdict | None:
    """Rules above the model's opinion: invented facts or a contradiction make any verdict ``fail``."""
    if verdict is not None and override_reason(invented_facts, contradicts_context):
        return JudgeVerdict.fail
    return verdict
