"""The schema check's fast path (jsonschema-rs) may only ever accept what python-jsonschema accepts.

Checked on the contracts we ship and on values built to sit where the two libraries read a schema differently
(ECMA 262 against Python regexes, 1 against 1.0 against true, big numbers, odd Unicode).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from extractor.contracts import get_contract, inline_refs
from extractor.rules.schema import SchemaValidator, fast_path_safe, pattern_no_more_lenient
from extractor.validate import validate

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = sorted((ROOT / "samples" / "expected").glob("*.candidate.json"))
SHIPPED = [inline_refs(json.loads(path.read_text(encoding="utf-8"))) for path in
           [*sorted((ROOT / "contracts").glob("*/v*/schema.json")),
            *sorted((ROOT / "samples" / "contracts").glob("*/v*/schema.json"))]]

COMPILED = [SchemaValidator(schema) for schema in SHIPPED]
ODD_STRINGS = ["", "a", "a\n", "abc", "s1", "s0", "s01", "s1\n", "\ufeff", " ", "٣", "é", "e\u0301", "A", "x-y_1",
               "\u2028", "😀", "123456", "12345\n"]
ODD_SCALARS: list[Any] = [None, True, False, 0, 1, 1.0, -0.0, 2.5, 10**30, -1, *ODD_STRINGS]


def json_values() -> st.SearchStrategy[Any]:
    return st.recursive(st.sampled_from(ODD_SCALARS) | st.text(max_size=6),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3),
                        max_leaves=8)


@st.composite
def mutated_candidates(draw: st.DrawFn) -> Any:
    """A shipped sample candidate with a few values replaced, keys dropped or added, anywhere in the tree."""
    value = json.loads(draw(st.sampled_from(CANDIDATES)).read_text(encoding="utf-8"))
    for _ in range(draw(st.integers(1, 4))):
        node, parent, key = value, None, None
        while isinstance(node, dict | list) and node and draw(st.booleans()):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            parent, key = node, draw(st.sampled_from(keys))
            node = node[key]
        if parent is None:
            continue
        action = draw(st.sampled_from(["replace", "drop", "add"]))
        if action == "drop" and isinstance(parent, dict):
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "id", "order", "name"]))] = draw(json_values())
        else:
            parent[key] = draw(json_values())
    return value


def test_the_shipped_schemas_take_the_fast_path() -> None:
    assert SHIPPED, "no schema found"
    for schema in SHIPPED:
        assert fast_path_safe(schema), schema.get("$id")
        assert SchemaValidator(schema).fast is not None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_candidates())
def test_the_fast_path_never_accepts_what_python_jsonschema_rejects(value: Any) -> None:
    for checked in COMPILED:
        python = [error.message for error in checked.python.iter_errors(value)]
        assert [error.message for error in checked.iter_errors(value)] == python
        if checked.fast is not None and checked.fast.is_valid(value):
            assert python == []


@pytest.mark.parametrize(("schema", "value"), [
    ({"not": {"pattern": "^a$"}}, "a\n"),        # Python's $ matches before a final newline, ECMA's does not
    ({"pattern": r"^\s$"}, "\ufeff"),            # ECMA counts U+FEFF as whitespace
    ({"pattern": r"^[^\d]$"}, "٣"),              # a narrower \d widens a negated class
    ({"oneOf": [{"pattern": "^a$"}, {"type": "string"}]}, "a\n"),
])
def test_schemas_read_differently_are_left_to_python_jsonschema(schema: dict[str, Any], value: Any) -> None:
    import jsonschema_rs

    assert jsonschema_rs.validator_for(schema).is_valid(value), "the libraries agree here: the case proves nothing"
    assert not Draft202012Validator(schema).is_valid(value)
    checked = SchemaValidator(schema)
    assert checked.fast is None
    assert list(checked.iter_errors(value)), "the value must be reported"


@pytest.mark.parametrize(("pattern", "safe"), [
    ("^[a-z][a-z0-9_-]*$", True), ("^s[1-9][0-9]*$", True), (r"^\d{6}$", True), (r"^\w+\.\w+$", True),
    (r"^(ab|cd)?.$", True), (r"\s", False), (r"\S+", False), (r"\bword", False), (r"^\D$", False),
    (r"[^\d]", False), (r"[^\w-]", False), (r"[^a-z]", True), ("(?!x)a", False), ("(?<=x)a", False),
    (r"\p{L}", False), (r"(a)\1", False), ("[a-z", False), ("\\", False),
])
def test_which_patterns_the_fast_path_trusts(pattern: str, safe: bool) -> None:
    assert pattern_no_more_lenient(pattern) is safe


def test_copies_and_pickles_compile_again() -> None:
    import copy
    import pickle

    for checked in COMPILED:
        for again in (copy.deepcopy(checked), pickle.loads(pickle.dumps(checked))):
            assert again.schema == checked.schema and again.fast is not None
            assert list(again.iter_errors({})), "an empty object must still be rejected"


def test_a_rejected_candidate_is_reported_with_python_jsonschema_messages() -> None:
    """Through the validator as a run calls it: the fast path rejects, the report names every error and its place."""
    contract = get_contract("work_procedure")
    candidate = json.loads((ROOT / "samples/expected/en_purchase_approval.candidate.json").read_text(encoding="utf-8"))
    candidate["participants"][0]["id"] = "Requester"  # against ^[a-z][a-z0-9_-]*$
    del candidate["processSteps"][0]["order"]
    from extractor.document import Document

    report = validate(json.dumps(candidate), Document("x.md", "x", [], "", "text"), contract)
    found = {(f.rule_id, f.location) for f in report.findings if f.rule_id == "SCHEMA_VIOLATION"}
    assert found == {("SCHEMA_VIOLATION", "$.participants[0].id"), ("SCHEMA_VIOLATION", "$.processSteps[0].order")}
