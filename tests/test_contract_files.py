"""Contracts written as files (docs/contracts.md): loading, refusal of broken ones, every declared check type (fires, and
the nearest input does not), near-miss hints, the sequence check's reading of the source, and the
``purchase_order`` sample end to end through real HTTP, the CLI and the run log."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from extractor.contracts.files import load, problems
from extractor.contracts.registry import ALWAYS_NEEDS_PERSON
from extractor.evidence.report import Report
from extractor.rules.lookup import Catalogue
from extractor.store import open_store
from extractor.store.db import compact_json
from extractor.validate import validate
from tests.support.llm_server import Reply, ScriptedLLMServer
from tests.test_rules import one_sentence_per_line

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
PO_CANDIDATES = SAMPLES / "expected" / "purchase_orders"

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["people", "items", "note"],
    "properties": {
        "people": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["id", "name"],
            "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}, "name": {"type": "string"}}}},
        "items": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["line", "code", "qty", "due", "owner"],
            "properties": {"line": {"type": "integer"}, "code": {"type": "string"}, "qty": {"type": "integer"},
                           "due": {"type": "string", "format": "date"},
                           "owner": {"type": "string", "pattern": "^[a-z]+$"}}}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "null when the source has none"},
    },
}
CHECKS = """
[evidence]
text = { items = "code" }

[[check]]
type = "reference"
id = "OWNER_UNKNOWN"
field = "items[].owner"
target = "people[].id"

[[check]]
type = "unique"
id = "NAME_REPEATED"
field = "people[].name"
normalise = "casefold"

[[check]]
type = "sequence"
id = "LINE"
field = "items[].line"
follow_source = "review"

[[check]]
type = "lookup"
id = "CODE_UNKNOWN"
field = "items[].code"
catalogue = "codes.csv"
column = "code"

[[check]]
type = "range"
id = "QTY_RANGE"
field = "items[].qty"
min = 1
max = 100

[[check]]
type = "range"
id = "DUE_WINDOW"
field = "items[].due"
min = "2026-01-01"
max = "2026-12-31"

[[check]]
type = "pattern"
id = "NAME_DIGITS"
field = "people[].name"
forbids = "[0-9]"
severity = "warning"
"""
LINES = ["Order list",
         "Ann Lee and Bo Kim handle it.",
         "Line 1: code AB-1234, 5 units, due 2026-03-01, owner Ann.",
         "Line 2: code 483920, 7 units, due 2026-04-01, owner Bo."]
DOCUMENT = one_sentence_per_line(LINES)
BASE: dict[str, Any] = {
    "people": [{"id": "ann", "name": "Ann Lee"}, {"id": "bo", "name": "Bo Kim"}],
    "items": [{"line": 1, "code": "AB-1234", "qty": 5, "due": "2026-03-01", "owner": "ann"},
              {"line": 2, "code": "483920", "qty": 7, "due": "2026-04-01", "owner": "bo"}],
    "note": None,
    "missingFields": [{"fieldPath": "note", "question": "Is there a note for the supplier?"}],
    "evidence": [{"fieldPath": "people[0]", "sourceExcerpt": "Ann Lee"},
                 {"fieldPath": "people[1]", "sourceExcerpt": "Bo Kim"},
                 {"fieldPath": "items[0]", "sourceExcerpt": "code AB-1234"},
                 {"fieldPath": "items[1]", "sourceExcerpt": "code 483920"}],
    "sentenceCoverage": [{"sentenceId": "s1", "status": "EXCLUDED", "reason": "title"},
                         {"sentenceId": "s2", "status": "MAPPED", "fieldPaths": ["people[0]", "people[1]"]},
                         {"sentenceId": "s3", "status": "MAPPED", "fieldPaths": ["items[0]"]},
                         {"sentenceId": "s4", "status": "MAPPED", "fieldPaths": ["items[1]"]}],
}


def write_contract(root: Path, name: str = "orders", schema: Any = SCHEMA, checks: str = CHECKS,
                   catalogue: str = "code,label\nAB-1234,bolt\n483920,washer\n") -> Path:
    folder = root / name / "v1"
    folder.mkdir(parents=True)
    (folder / "schema.json").write_text(schema if isinstance(schema, str) else json.dumps(schema), encoding="utf-8")
    (folder / "checks.toml").write_text(checks, encoding="utf-8")
    (folder / "codes.csv").write_text(catalogue, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load(write_contract(tmp_path_factory.mktemp("contracts")))


def check(contract: Any, candidate: dict[str, Any], document: Any = DOCUMENT) -> Report:
    return validate(json.dumps(candidate, ensure_ascii=False), document, contract)


def edited(path: list[Any], value: Any) -> dict[str, Any]:
    candidate = copy.deepcopy(BASE)
    target = candidate
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return candidate


def rule_ids(report: Report) -> set[str]:
    return {finding.rule_id for finding in report.findings}


def test_base_candidate_passes_with_generic_states(orders: Any) -> None:
    report = check(orders, BASE)
    assert report.findings == []
    assert report.fields["note"].state == "NEEDS_INPUT"
    assert {path for path, state in report.fields.items() if state.state == "PRESENT"} == {
        "people[0]", "people[1]", "items[0]", "items[1]"}
    assert [s.state for s in report.sentences] == ["EXCLUDED", "MAPPED", "MAPPED", "MAPPED"]


CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # rule id: (candidate that fires it, nearest candidate that does not)
    "OWNER_UNKNOWN": (edited(["items", 1, "owner"], "cy"), edited(["items", 1, "owner"], "ann")),
    "NAME_REPEATED": (edited(["people", 1, "name"], " ann  LEE"), edited(["people", 1, "name"], "Ann Leed")),
    "LINE_DUPLICATE": (edited(["items", 1, "line"], 1), edited(["items", 1, "line"], 2)),
    "LINE_GAP": (edited(["items", 1, "line"], 3), edited(["items", 1, "line"], 2)),
    "CODE_UNKNOWN": (edited(["items", 1, "code"], "483902"), edited(["items", 1, "code"], "483920")),
    "QTY_RANGE": (edited(["items", 1, "qty"], 101), edited(["items", 1, "qty"], 100)),
    "DUE_WINDOW": (edited(["items", 1, "due"], "2027-01-01"), edited(["items", 1, "due"], "2026-12-31")),
    "NAME_DIGITS": (edited(["people", 0, "name"], "Ann Lee 2"), edited(["people", 0, "name"], "Ann Lee II")),
}


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_declared_check_fires_and_nearest_input_does_not(orders: Any, rule_id: str) -> None:
    fire, near = CASES[rule_id]
    fired = check(orders, fire)
    assert rule_id in rule_ids(fired), fired.to_json()["findings"]
    finding = next(f for f in fired.findings if f.rule_id == rule_id)
    assert finding.location.startswith("$.") and finding.message
    assert rule_id not in rule_ids(check(orders, near))


def test_every_declared_rule_has_a_card_and_a_case(orders: Any) -> None:
    declared = {rule.card.rule_id for rule in orders.rules if rule.card.stage in ("references", "order", "values")}
    assert declared == set(CASES) | {"LINE_INVERTED"}  # LINE_INVERTED: its own tests below
    assert all(rule.card.contract == "orders" for rule in orders.rules)
    assert orders.needs_person == {"LINE_INVERTED"} | ALWAYS_NEEDS_PERSON
    by_path = {item.path: item for item in orders.merge.lists}
    assert by_path["items"].order_field == "line" and by_path["people"].id_field == "id"  # the windows' merge
    assert [(r.path, r.field, r.target) for r in orders.merge.references] == [("items", "owner", "people")]


def test_lookup_miss_names_the_nearest_entry_and_the_difference(orders: Any) -> None:
    finding = next(f for f in check(orders, CASES["CODE_UNKNOWN"][0]).findings if f.rule_id == "CODE_UNKNOWN")
    assert finding.message == "code 483902 is not in codes.csv; nearest 483920 (last two digits swapped)"
    assert finding.hint == {"nearest": [{"entry": "483920", "difference": "last two digits swapped"}]}


@pytest.mark.parametrize(("value", "entry", "says"), [
    ("483902", "483920", "last two digits swapped"),
    ("438920", "483920", "digits 2 and 3 swapped"),
    ("483970", "483920", "digit 5 changed (7 -> 2)"),
    ("48392", "483920", "one character missing ('0' at position 6)"),
    ("4839200", "483920", "one extra character ('0' at position 7)"),
    ("SKU-483920", "483920", "same code without the prefix"),
    ("XY-1234", "AB-1234", "same code, different prefix"),
])
def test_near_miss_kinds(value: str, entry: str, says: str) -> None:
    catalogue = Catalogue(["483920", "AB-1234", "551204"], "codes.csv")
    assert value not in catalogue
    assert [(n.entry, n.difference) for n in catalogue.nearest(value)] == [(entry, says)]


def test_far_value_has_no_near_miss() -> None:
    assert Catalogue(["483920", "551204"], "codes.csv").nearest("999111") == []


# ---------------------------------------------------------------- the sequence check reads the source


def _two_items(contract: Any, first: str, second: str, lines: list[str]) -> Report:
    """The base candidate with the two items' excerpts replaced, against a document of ``lines``."""
    document = one_sentence_per_line(lines)
    candidate = copy.deepcopy(BASE)
    candidate["evidence"][2]["sourceExcerpt"] = first
    candidate["evidence"][3]["sourceExcerpt"] = second
    candidate["sentenceCoverage"] = [{"sentenceId": s.id, "status": "UNMAPPED", "reason": "test"}
                                     for s in document.sentences]
    return check(contract, candidate, document)


def test_sequence_fires_when_the_later_item_lies_wholly_before(orders: Any) -> None:
    report = _two_items(orders, "code AB-1234", "code 483920", ["code 483920 first.", "code AB-1234 then."])
    assert "LINE_INVERTED" in rule_ids(report)
    finding = next(f for f in report.findings if f.rule_id == "LINE_INVERTED")
    assert finding.location == "$.items[1]" and finding.severity.value == "warning"


def test_sequence_quiet_when_evidence_overlaps_or_contains_the_previous(orders: Any) -> None:
    # one sentence states both items: the second item's excerpt contains the first's
    report = _two_items(orders, "code AB-1234", "then code AB-1234 and code 483920",
                        ["Begin: then code AB-1234 and code 483920 together."])
    assert "LINE_INVERTED" not in rule_ids(report)
    # overlapping excerpts, the second starting before the first
    report = _two_items(orders, "AB-1234 and code", "then code AB-1234", ["Begin: then code AB-1234 and code 483920."])
    assert "LINE_INVERTED" not in rule_ids(report)


def test_sequence_any_consistent_occurrence_counts(orders: Any) -> None:
    # the second item's excerpt occurs before and after the first item's: the later occurrence is consistent
    lines = ["code 483920 is mentioned early.", "code AB-1234 comes first.", "code 483920 comes second."]
    assert "LINE_INVERTED" not in rule_ids(_two_items(orders, "code AB-1234", "code 483920", lines))


# ---------------------------------------------------------------- bad contracts are refused, one line each


BROKEN: dict[str, tuple[Any, str, str]] = {
    # case: (schema, checks, words of the one line)
    "invalid JSON Schema": ({"type": "object", "properties": {"a": {"type": "strin"}}}, "", "invalid JSON Schema"),
    "root not an object": ({"type": "array", "items": {"type": "string"}}, "", "the root must be an object"),
    "recursive schema": ({"type": "object", "properties": {"tree": {"$ref": "#/$defs/Node"}},
                          "$defs": {"Node": {"type": "object", "properties": {
                              "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}},
                         "", "recursive schema (Node -> Node)"),
    "not TOML": (SCHEMA, "[[check]\n", "not TOML"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_contract_gives_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    schema, checks, words = BROKEN[case]
    folder = write_contract(tmp_path, schema=schema, checks=checks)
    found = problems(folder)
    assert len(found) == 1, found
    assert words in found[0] and str(folder) in found[0] and "\n" not in found[0]


def declared(kind: str, **keys: Any) -> str:
    """One ``[[check]]`` table of ``kind`` with ``keys`` (``None``: left out), as checks.toml writes it."""
    import tomli_w

    return tomli_w.dumps({"check": [{"type": kind, **{key: value for key, value in keys.items() if value is not None}}]})


BAD_CHECKS: dict[str, tuple[str, str]] = {
    # case: (checks.toml, the one line after "<folder>/checks.toml: ")
    "unknown top-level key": ("colour = 1\n", "colour: unknown key"),
    "description not text": ("description = 3\n", "description: Input should be a valid string"),
    "check not a list": ("check = 3\n", "check: Input should be a valid list"),
    "check not a table": ("check = [1]\n", "check[0]: must be a table (an object of keys and values)"),
    "type missing": ('[[check]]\nid = "X"\nfield = "note"\n',
                     "check[0].type: missing (known: reference, unique, sequence, lookup, range, pattern)"),
    "type unknown": (declared("regex", id="X", field="note"),
                     "check[0].type: unknown check type 'regex' (known: reference, unique, sequence, lookup, range, "
                     "pattern)"),
    "key unknown": (declared("pattern", id="X", field="note", matches="a", colour="red"), "check[0].colour: unknown key"),
    "id missing": (declared("pattern", field="note", matches="a"), "check[0].id: missing"),
    "id not UPPER_SNAKE": (declared("pattern", id="x-1", field="note", matches="a"),
                           "check[0].id: 'x-1' must be UPPER_SNAKE_CASE"),
    "id of a rule every contract runs": (declared("pattern", id="SECRET_IN_OUTPUT", field="note", matches="a"),
                                         "check[0].id: rule id SECRET_IN_OUTPUT is taken"),
    "severity unknown": (declared("pattern", id="X", field="note", matches="a", severity="fatal"),
                         "check[0].severity: Input should be 'error', 'warning' or 'review', not 'fatal'"),
    "field not a path": (declared("pattern", id="X", field="items..code", matches="a"),
                         "check[0].field: 'items..code' is not a field path"),
    "field not in the schema": (declared("reference", id="X", field="items[].nope", target="people[].id"),
                                "check[0].field: 'items[].nope' names no field of schema.json"),
    "reference without target": (declared("reference", id="X", field="items[].owner"), "check[0].target: missing"),
    "reference target not in the schema": (declared("reference", id="X", field="items[].owner", target="people[].key"),
                                           "check[0].target: 'people[].key' names no field of schema.json"),
    "unique normalise unknown": (declared("unique", id="X", field="people[].name", normalise="lower"),
                                 "check[0].normalise: Input should be 'none' or 'casefold', not 'lower'"),
    "unique same_item not a sibling": (declared("unique", id="X", field="people[].name", same_item="key"),
                                       "check[0].same_item: 'key' names no field next to people[].name"),
    "sequence of text": (declared("sequence", id="X", field="items[].code"),
                         "check[0].field: 'items[].code' must be an integer field of list items"),
    "sequence start as text": (declared("sequence", id="X", field="items[].line", start="1"),
                               "check[0].start: Input should be a valid integer"),
    "sequence follow_source unknown": (declared("sequence", id="X", field="items[].line", follow_source="maybe"),
                                       "check[0].follow_source: must be true, false or a severity (error, warning, "
                                       "review), not 'maybe'"),
    "lookup without a source": (declared("lookup", id="X", field="items[].code"),
                                "check[0]: needs catalogue + column, or database + query (one of the two)"),
    "lookup with two sources": (declared("lookup", id="X", field="items[].code", catalogue="codes.csv", column="code",
                                         database="sqlite:///c.db", query="SELECT 1"),
                                "check[0]: needs catalogue + column, or database + query (one of the two)"),
    "lookup without column": (declared("lookup", id="X", field="items[].code", catalogue="codes.csv"),
                              "check[0]: needs column too (catalogue + column)"),
    "lookup catalogue not CSV or JSONL": (declared("lookup", id="X", field="items[].code", catalogue="codes.xlsx",
                                                   column="code"),
                                          "check[0].catalogue: 'codes.xlsx' must be a .csv or .jsonl file"),
    "lookup catalogue outside the folder": (declared("lookup", id="X", field="items[].code", catalogue="../codes.csv",
                                                     column="code"),
                                            "check[0].catalogue: '../codes.csv' must be inside the contract folder"),
    "lookup catalogue missing": (declared("lookup", id="X", field="items[].code", catalogue="gone.csv", column="code"),
                                 "check[0].catalogue: gone.csv does not exist in "),
    "lookup column missing": (declared("lookup", id="X", field="items[].code", catalogue="codes.csv", column="sku"),
                              "check[0].column: codes.csv has no column 'sku' (columns: code, label)"),
    "lookup database from an unset variable": (
        declared("lookup", id="X", field="items[].code", database="env:EXTRACT_TEST_UNSET_URL", query="SELECT 1"),
        "check[0].database: 'env:EXTRACT_TEST_UNSET_URL' is empty (is the environment variable set?)"),
    "range without bounds": (declared("range", id="X", field="items[].qty"), "check[0]: needs min, max or both"),
    "range min above max": (declared("range", id="X", field="items[].qty", min=10, max=1),
                            "check[0]: min 10 is above max 1: every value would be out of range"),
    "range bound not a date": (declared("range", id="X", field="items[].due", min="2026-13-01"),
                               "check[0].min: '2026-13-01' is not an ISO date (YYYY-MM-DD)"),
    "range bound a boolean": (declared("range", id="X", field="items[].qty", max=True),
                              "check[0].max: must be a number or an ISO date (YYYY-MM-DD), not true"),
    "range bounds of two kinds": (declared("range", id="X", field="items[].qty", min=1, max="2026-01-01"),
                                  "check[0]: min and max must both be numbers or both be dates"),
    "range of a date with a number": (declared("range", id="X", field="items[].due", max=5),
                                      "check[0].max: 5 is not an ISO date (YYYY-MM-DD): the field is a date"),
    "range of text": (declared("range", id="X", field="items[].code", max=5),
                      "check[0].field: 'items[].code' is neither a number nor a date"),
    "pattern with neither": (declared("pattern", id="X", field="note"), "check[0]: needs exactly one of matches or "
                                                                        "forbids"),
    "pattern with both": (declared("pattern", id="X", field="note", matches="a", forbids="b"),
                          "check[0]: needs exactly one of matches or forbids"),
    "pattern not a regular expression": (declared("pattern", id="X", field="note", forbids="(a"),
                                         "check[0].forbids: '(a' is not a regular expression: missing ), "),
    "modes of a rule the contract lacks": ('[modes]\nrules = { CODE_UNKOWN = "block" }\n',
                                           "modes.rules.CODE_UNKOWN (the name): names no rule of this contract"),
    "modes observe on an error rule": ('[modes]\nrules = { SCHEMA_VIOLATION = "observe" }\n',
                                       "modes.rules.SCHEMA_VIOLATION: observe, but SCHEMA_VIOLATION is an error rule"),
    "modes of an unknown judge metric": ('[modes]\njudge = { suport = "block" }\n',
                                         "modes.judge.suport (the name): 'suport' is not one of support, "),
    "modes unknown": ('[modes]\njudge = { support = "sometimes" }\n',
                      "modes.judge.support: Input should be 'observe', 'review' or 'block', not 'sometimes'"),
    "modes key unknown": ('[modes]\nrule = {}\n', "modes.rule: unknown key"),
    "guards value field not the record's": ('[guards]\nvalue_fields = ["people", "nobody"]\n',
                                            "guards.value_fields[1]: 'nobody' is no field of schema.json's record"),
    "guards forbidden phrase blank": ('[guards]\nforbidden_phrases = ["ok", " "]\n',
                                      "guards.forbidden_phrases[1]: must not be empty"),
    "evidence text not a field": ('[evidence]\ntext = { items = "colour" }\n',
                                  "evidence.text.items: items[].colour names no field of schema.json"),
    "evidence exempt not a field": ('[evidence]\nexempt = ["note", "nobody"]\n',
                                    "evidence.exempt[1]: 'nobody' names no field of schema.json"),
}


@pytest.mark.parametrize("case", sorted(BAD_CHECKS))
def test_a_broken_checks_file_is_one_line_naming_the_file_and_the_key(tmp_path: Path, case: str) -> None:
    """Every key of checks.toml (its tables, every [[check]] type): a wrong value is refused when the contract is
    read, one line naming the file and the key path (``check[0]`` is the first [[check]])."""
    checks, problem = BAD_CHECKS[case]
    folder = write_contract(tmp_path, checks=checks)
    found = problems(folder)
    assert len(found) == 1 and found[0].startswith(f"{folder / 'checks.toml'}: {problem}"), found


def test_every_problem_of_a_checks_file_is_a_line_of_its_own(tmp_path: Path) -> None:
    import tomli_w

    checks = tomli_w.dumps({"check": [{"type": "range", "id": "A", "field": "items[].qty", "min": "soon", "colour": 1},
                                      {"type": "unique", "id": "b", "field": "people[].id"}]})
    folder = write_contract(tmp_path, checks=checks)
    where = folder / "checks.toml"
    assert problems(folder) == [f"{where}: check[0].colour: unknown key",
                                f"{where}: check[0].min: 'soon' is not an ISO date (YYYY-MM-DD)",
                                f"{where}: check[1].id: 'b' must be UPPER_SNAKE_CASE (a capital letter first, then "
                                "capitals, digits, _)"]
    checks = tomli_w.dumps({"check": [{"type": "unique", "id": "A", "field": "people[].id"},
                                      {"type": "unique", "id": "A", "field": "people[].name"}]})
    folder = write_contract(tmp_path / "ids", checks=checks)
    assert problems(folder) == [f"{folder / 'checks.toml'}: check[1].id: rule id A is taken (by a check before this "
                                "one, or a rule every contract runs)"]


def extract(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)


def test_run_refuses_a_broken_contract_before_any_model_call(llm_server: Callable[..., ScriptedLLMServer],
                                                             tmp_path: Path) -> None:
    server = llm_server(lambda request, number: Reply("{}"))
    root = tmp_path / "contracts"
    write_contract(root, schema={"type": "array"}, checks='[[check]]\ntype = "regex"\nid = "X"\nfield = "a"\n')
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/r.db",
           "EXTRACT_CONTRACTS_PATH": str(root)}
    env.pop("OPENAI_API_KEY", None)
    result = extract("run", SAMPLES / "purchase_orders", "--contract", "orders", "--model", "openai:scripted", env=env,
                     cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    folder = root / "orders" / "v1"
    assert lines == [f"error: {folder / 'schema.json'}: the root must be an object with properties (\"type\": "
                     "\"object\"), not 'array'",
                     f"error: {folder / 'checks.toml'}: check[0].type: unknown check type 'regex' (known: reference, "
                     "unique, sequence, lookup, range, pattern)"]
    assert server.chat_requests == [] and not (tmp_path / "r.db").exists()
    lint = extract("contracts", "check", "orders", env=env)
    assert lint.returncode == 1 and lint.stdout.splitlines() == [line.removeprefix("error: ") for line in lines]
    listing = extract("contracts", "--format", "json", env=env)
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    assert rows["orders"]["problems"] and len(rows["work_procedure"]["content_hash"]) == 64


# ---------------------------------------------------------------- the purchase_order sample, files only


@pytest.mark.parametrize(("candidate", "source", "rule_id", "says"), [
    ("en_pass", "en_purchase_order.md", None, None),
    ("ko_pass", "ko_purchase_order.txt", None, None),
    ("ru_pass", "ru_purchase_order.txt", None, None),
    ("en_sku_transposed", "en_purchase_order.md", "SKU_UNKNOWN",
     "sku 483902 is not in skus.csv; nearest 483920 (last two digits swapped)"),
    ("en_quantity_out_of_range", "en_purchase_order.md", "QUANTITY_OUT_OF_RANGE",
     "lineItems[1].quantity is 20000, outside [1, 10000]"),
    ("en_unknown_approver", "en_purchase_order.md", "APPROVER_UNKNOWN",
     'approverId "cfo" is not one of parties[*].id (known: dana, omar)'),
])
def test_purchase_order_candidates(candidate: str, source: str, rule_id: str | None, says: str | None) -> None:
    result = extract("validate", PO_CANDIDATES / f"{candidate}.candidate.json", "--source",
                     SAMPLES / "purchase_orders" / source, "--contract", "purchase_order", "--contracts",
                     SAMPLES / "contracts", "--format", "json")
    report = json.loads(result.stdout)
    findings = [(f["rule_id"], f["message"]) for f in report["findings"]]
    if rule_id is None:
        assert result.returncode == 0 and findings == []
        assert report["fields"]["buyer.taxId"]["state"] == "NEEDS_INPUT"
    else:
        assert result.returncode == 1 and [r for r, _ in findings] == [rule_id]
        assert says is not None and says in findings[0][1]


def _po_answer(request: dict[str, Any] | None, number: int) -> Reply:
    """ko and ru: their passing candidates; en: the transposed SKU, and again after the repair request."""
    text = json.dumps(request or {}, ensure_ascii=False)
    name = ("ko_pass" if "PO-2026-0416" in text else "ru_pass" if "PO-2026-0417" in text
            else "en_sku_transposed")
    return Reply((PO_CANDIDATES / f"{name}.candidate.json").read_text(encoding="utf-8"))


def test_purchase_order_run_through_http_and_show(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server = llm_server(_po_answer)
    contracts = tmp_path / "contracts"
    shutil.copytree(SAMPLES / "contracts", contracts)
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/po.db"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("EXTRACT_CONTRACTS_PATH", None)
    command = ("run", SAMPLES / "purchase_orders", "--contract", "purchase_order", "--contracts", contracts,
               "--model", "openai:scripted", "--format", "json")
    result = extract(*command, env=env, cwd=tmp_path)
    assert result.returncode == 3, result.stderr  # one document needs a person: the run outcome is MANUAL_REVIEW
    summary = json.loads(result.stdout)
    states = {Path(o["path"]).name: o["state"] for o in summary["outcomes"]}
    assert states == {"en_purchase_order.md": "MANUAL_REVIEW", "ko_purchase_order.txt": "READY_FOR_REVIEW",
                      "ru_purchase_order.txt": "READY_FOR_REVIEW"}
    requests = server.chat_requests
    assert len(requests) == 4  # three documents, one repair
    prompt = requests[0].json["messages"][1]["content"]
    assert "lineItems[].sku (string; pattern ^[0-9]{6}$): the six-digit article number exactly as written" in prompt
    repair = next(r.json for r in requests if len(r.json["messages"]) == 4)["messages"][3]["content"]
    assert "SKU_UNKNOWN at $.lineItems[0].sku: sku 483902 is not in skus.csv; nearest 483920" in repair

    shown = extract("show", SAMPLES / "purchase_orders" / "en_purchase_order.md", env={**env, "COLUMNS": "250"},
                    cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "SKU_UNKNOWN" in shown.stdout
    assert "sku 483902 is not in skus.csv; nearest 483920 (last two digits swapped)" in shown.stdout

    # the same configuration again: nothing is redone
    again = json.loads(extract(*command, env=env, cwd=tmp_path).stdout)
    assert {o["state"] for o in again["outcomes"]} == {"SKIPPED"}
    # an edited catalogue is a new configuration: every document is done again, and the fix is seen
    catalogue = contracts / "purchase_order" / "v1" / "skus.csv"
    catalogue.write_text(catalogue.read_text(encoding="utf-8") + "483902,hex bolt M8 x 40 (old number),piece\n",
                         encoding="utf-8")
    redone = json.loads(extract(*command, env=env, cwd=tmp_path).stdout)
    states = {Path(o["path"]).name: o["state"] for o in redone["outcomes"]}
    assert states == {"en_purchase_order.md": "READY_FOR_REVIEW", "ko_purchase_order.txt": "READY_FOR_REVIEW",
                      "ru_purchase_order.txt": "READY_FOR_REVIEW"}
    with open_store(env["EXTRACT_DATABASE_URL"]) as store:
        runs = store.find_runs()  # newest first
    assert len({run.config["contract_hash"] for run in runs}) == 2 and len({run.config_hash for run in runs}) == 2
    assert all(run.config["contract_folder"] == str(catalogue.parent) for run in runs)
    # the contract change is gated like a prompt change: both sides by contract hash
    old, new = runs[-1].config["contract_hash"][:12], runs[0].config["contract_hash"][:12]
    compared = extract("compare", f"contract=purchase_order,contract_hash={old}",
                       f"contract=purchase_order,contract_hash={new}", "--format", "json", env=env, cwd=tmp_path)
    gate = json.loads(compared.stdout)
    assert gate["compared"] == 3 and [Path(d["path"]).name for d in gate["improvements"]] == ["en_purchase_order.md"]
    assert {r["contract_hash"][:12] for r in gate["candidate"]["runs"]} == {new}


# ---------------------------------------------------------------- CSV export of any record


def _csv_rows(rows: list[tuple[Any, tuple[Any, ...]]], explode: str | None = None) -> list[dict[str, str]]:
    import csv
    import io

    from extractor.export import _csv

    stream = io.BytesIO()
    _csv(rows, explode)(stream)
    return list(csv.DictReader(io.StringIO(stream.getvalue().decode("utf-8"), newline="")))


def _origin(path: str) -> tuple[Any, ...]:
    """Provenance as export gives it (a value per column) of a record of ``path`` that lee approved."""
    from extractor.export import PROVENANCE_COLUMNS

    named = {column: None for column in PROVENANCE_COLUMNS} | {"document_path": path, "reviewer": "lee"}
    return tuple(named.values())


def test_csv_flattens_objects_keeps_lists_as_json_and_explodes_on_request() -> None:
    record = json.loads((PO_CANDIDATES / "en_pass.candidate.json").read_text(encoding="utf-8"))
    rows = _csv_rows([(record, _origin("en.md"))])
    assert len(rows) == 1 and rows[0]["supplier.name"] == "Hanbit Fasteners Co., Ltd."
    assert json.loads(rows[0]["lineItems"]) == record["lineItems"] and rows[0]["reviewer"] == "lee"
    exploded = _csv_rows([(record, _origin("en.md")), ({**record, "lineItems": []}, _origin("empty.md"))], "lineItems")
    assert [(r["document_path"], r["lineItems.index"], r["lineItems.sku"]) for r in exploded] == [
        ("en.md", "0", "483920"), ("en.md", "1", "551204"), ("en.md", "2", "600117"), ("empty.md", "", "")]
    assert all(r["supplier.taxId"] == "214-86-12345" and r["reviewer"] == "lee" for r in exploded)
    assert "lineItems" not in exploded[0]


def test_csv_writes_lists_as_the_run_log_stores_them_and_keeps_what_msgspec_refuses() -> None:
    """A record's lists are compact JSON text: cut from the record as the run log stores it (compact), or written again
    from the decoded record when its JSON has spaces (before the run log stored compact JSON); a record msgspec refuses
    (NaN, a lone surrogate: the standard library wrote them) is read and written by the standard library, so nothing
    becomes something else."""
    from extractor.store.cells import RawJSON

    plain = {"items": [{"name": "Ω, ж", "qty": 2}], "memo": "a"}
    odd = '{"items":[NaN,123456789012345678901234567890,"\\ud800"],"memo":"\\ud800b"}'
    rows = _csv_rows([(RawJSON(json.dumps(plain, ensure_ascii=False)), _origin("spaced.md")),
                      (RawJSON(compact_json(plain)), _origin("compact.md")), (RawJSON(odd), _origin("odd.md"))])
    assert rows[0]["items"] == rows[1]["items"] == '[{"name":"Ω, ж","qty":2}]'
    assert rows[0]["memo"] == rows[1]["memo"] == "a"
    assert rows[2]["items"] == '[NaN,123456789012345678901234567890,"\\ud800"]'
    assert rows[2]["memo"] == "\\ud800b"  # UTF-8 cannot hold it: its escape, never a crash


def test_csv_cells_cut_from_stored_json_are_the_cells_of_the_decoded_record() -> None:
    """What the run log stores (``compact_json``) cut into cells without decoding it gives the cells the decoded
    record gives, flattened, for any record; only what msgspec refuses (NaN, infinities, lone surrogates) is left to
    the decoded path."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from extractor.store.cells import cells as _cells
    from extractor.store.cells import flatten
    from extractor.store.cells import stored_cells as _stored_cells

    scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
                        st.sampled_from(["=SUM(A1)", "-1", "a,b", 'say "hi"', "line\nbreak", "\t", "\\", "Ω, 한",
                                         "\ud800", "C:\\udir"]))
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
    keys = st.one_of(st.text(max_size=6), st.sampled_from(["a", "b.c", 'q"', "é", "\\"]))
    cut: list[int] = []

    @settings(max_examples=400, deadline=None)
    @given(st.dictionaries(keys, values, max_size=6))
    def same(record: dict[str, Any]) -> None:
        flat, text = flatten(record), compact_json(record)
        cells = _stored_cells(text)
        if cells is None:  # only what msgspec refuses, or a first key written with escapes (not judged compact)
            first = next(iter(record), "")
            assert any(odd in text for odd in ("NaN", "Infinity", "\\ud")) \
                or json.dumps(first, ensure_ascii=False) != f'"{first}"', record
            return
        assert cells == dict(zip(flat, _cells(flat.values()), strict=True)), record
        cut.append(len(cells))

    same()
    assert len(cut) > 200 and sum(cut) > 400  # most records were cut, not decoded


def test_a_list_of_strings_is_written_as_the_run_log_writes_it_for_every_character() -> None:
    """msgspec writes a list of strings (the approvers in a CSV cell) exactly as ``compact_json`` does, for every
    code point (a lone surrogate as its escape)."""
    from extractor.store.cells import json_bytes as _json_bytes

    for start in range(0, 0x110000, 512):
        strings = [chr(point) for point in range(start, start + 512)]
        assert _json_bytes(strings) == compact_json(strings).encode("utf-8"), hex(start)
        assert _json_bytes([f"a{text}b" for text in strings]) == compact_json([f"a{t}b" for t in strings]).encode()


def test_csv_pads_the_rows_before_a_late_column_and_copies_the_rest_into_a_file(tmp_path: Path) -> None:
    """The header has the columns of the first ``HEADER_AFTER`` rows; a column that appears after them makes the file
    be written again with it, the rows before it padded: the table the csv module writes of the same rows, into a
    file (copied by the kernel) as into memory, and no spool left."""
    import csv
    import io

    from extractor.export import HEADER_AFTER, PROVENANCE_COLUMNS, _csv

    for first in (3, HEADER_AFTER + 2):  # a late column within the first rows, and after them
        rows = [({"a": n, "b": "x,y"}, _origin(f"{n}.md")) for n in range(first)] \
            + [({"a": -1, "late": "z"}, _origin("late.md"))] \
            + [({"a": n, "b": '"q"', "late": "w", "later": "v\nw"}, _origin(f"{n}.md")) for n in range(40)]
        expected = io.StringIO(newline="")
        table = csv.DictWriter(expected, [*PROVENANCE_COLUMNS, "a", "b", "late", "later"], restval="")
        table.writeheader()
        table.writerows(dict(zip(PROVENANCE_COLUMNS, origin, strict=True)) | row for row, origin in rows)
        memory = io.BytesIO()
        _csv(rows)(memory)
        with (tmp_path / "out.csv").open("w+b") as handle:
            _csv(rows, spool=tmp_path)(handle)
        assert (tmp_path / "out.csv").read_bytes() == memory.getvalue() == expected.getvalue().encode(), first
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]  # no spool left


def test_csv_neutralises_cells_a_spreadsheet_would_run() -> None:
    hostile = ["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd"]
    record = {"notes": hostile, **{f"n{i}": text for i, text in enumerate(hostile)}, "count": -5, "plain": "a=b"}
    row = _csv_rows([(record, _origin("=evil.md"))])[0]
    assert [row[f"n{i}"] for i in range(len(hostile))] == ["'" + text for text in hostile]
    assert row["document_path"] == "'=evil.md" and row["count"] == "-5" and row["plain"] == "a=b"
    assert json.loads(row["notes"]) == hostile  # a JSON cell starts with [ and is left as it is


def test_declared_check_has_a_card_in_extract_rules(tmp_path: Path) -> None:
    result = extract("rules", "--contract", "purchase_order", "--contracts", SAMPLES / "contracts", "SKU_UNKNOWN",
                     "--format", "json")
    card = json.loads(result.stdout)
    assert result.returncode == 0 and card["contract"] == "purchase_order" and card["stage"] == "values"
    assert card["inputs"] == "lineItems[*].sku, skus.csv column sku" and "two digits swapped" in card["fires_when"]
    assert "seed" not in json.dumps(card)  # a card cites nothing a reader cannot open
    # the options after the rule id (as the command table writes it), and split around it
    for order in (("SKU_UNKNOWN", "--contract", "purchase_order", "--contracts", SAMPLES / "contracts"),
                  ("--contracts", SAMPLES / "contracts", "SKU_UNKNOWN", "--contract", "purchase_order"),
                  ("--format", "json", "--contract", "purchase_order", "SKU_UNKNOWN", "--contracts", SAMPLES / "contracts")):
        other = extract("rules", *order, *(() if "json" in order else ("--format", "json")))
        assert other.returncode == 0, (order, other.stderr)
        assert json.loads(other.stdout) == card, order
    # a rule every contract has: --contract chooses whose card, in either order
    for order in (("EVIDENCE_NOT_IN_SOURCE", "--contract", "purchase_order"),
                  ("--contract", "purchase_order", "EVIDENCE_NOT_IN_SOURCE")):
        generic = extract("rules", *order, "--contracts", SAMPLES / "contracts", "--format", "json")
        assert generic.returncode == 0 and json.loads(generic.stdout)["contract"] == "purchase_order", generic.stderr
    not_here = extract("rules", "SKU_UNKNOWN", "--contract", "work_procedure")
    assert not_here.returncode == 2 and not_here.stderr == (
        "error: unknown rule id 'SKU_UNKNOWN' in contract work_procedure; `extract rules --contract work_procedure` "
        "lists them\n")
    for order in (("--contract", "purchase_order", "SKU_UNKNOWN"), ("SKU_UNKNOWN", "--contract", "purchase_order")):
        unknown = extract("rules", *order)  # not on the search path
        assert unknown.returncode == 2 and "unknown contract 'purchase_order'" in unknown.stderr, order
    missing = extract("contracts", "--contracts", tmp_path / "nope")
    assert missing.returncode == 2 and missing.stderr == f"error: {tmp_path / 'nope'}: no such contracts folder " \
        "(--contracts takes a folder of <name>/v<N>/ folders)\n"


@pytest.mark.parametrize("source", ["jsonl", "sql"])
def test_lookup_reads_jsonl_columns_and_sql_queries(tmp_path: Path, source: str) -> None:
    import sqlite3

    if source == "jsonl":
        where = 'catalogue = "codes.jsonl"\ncolumn = "code"\n'
    else:
        database = tmp_path / "codes.db"
        with sqlite3.connect(database) as connection:
            connection.execute("CREATE TABLE codes (code TEXT)")
            connection.executemany("INSERT INTO codes VALUES (?)", [("AB-1234",), ("483920",)])
        where = f'database = "sqlite:///{database}"\nquery = "SELECT code FROM codes"\nname = "codes table"\n'
    checks = f'[evidence]\ntext = {{ items = "code" }}\n\n[[check]]\ntype = "lookup"\nid = "CODE_UNKNOWN"\nfield = "items[].code"\n{where}'
    folder = write_contract(tmp_path / "contracts", checks=checks)
    (folder / "codes.jsonl").write_text('{"code": "AB-1234"}\n{"code": "483920"}\n', encoding="utf-8")
    contract = load(folder)
    assert check(contract, BASE).findings == []
    finding = next(f for f in check(contract, CASES["CODE_UNKNOWN"][0]).findings if f.rule_id == "CODE_UNKNOWN")
    assert "nearest 483920 (last two digits swapped)" in finding.message
    assert ("codes.jsonl" if source == "jsonl" else "codes table") in finding.message


def test_csv_rows_are_written_as_the_csv_module_writes_them() -> None:
    import csv
    import io

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from extractor.export import _csv_line
    from extractor.store.cells import FORMULA_STARTS

    cells = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(),
                      st.sampled_from(["", ",", '"', '""', "a,b", 'say "hi"', "line\nbreak", "cr\r", "\r\n", " x ",
                                       "'=SUM(A1)", "=SUM(A1)", "-1", "Ω, ж, 한"]),
                      st.lists(st.text(max_size=5), max_size=3),
                      st.lists(st.one_of(st.integers(-2**53, 2**53), st.booleans(), st.none()), max_size=3))

    def as_written(value: Any) -> Any:
        """The cell the csv module is given: neutralised text, JSON text of a list, true/false, an empty None."""
        if isinstance(value, str) and value.startswith(FORMULA_STARTS):
            return "'" + value
        if isinstance(value, bool):
            return "true" if value else "false"
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")) if isinstance(value, list) else value

    @settings(max_examples=300, deadline=None)
    @given(st.lists(cells, min_size=2, max_size=12))
    def same(row: list[Any]) -> None:
        expected = io.StringIO()
        csv.writer(expected).writerow([as_written(value) for value in row])
        written = expected.getvalue().encode("utf-8", "backslashreplace")
        assert _csv_line(row) == written
        assert _csv_line(row) == written  # short texts' cells now as kept from the first time

    same()


def test_the_cells_kept_of_short_texts_stay_bounded_and_right() -> None:
    """Export keeps the cells of short texts it met (a run's model, reviewer...) and starts again when it has kept
    enough: what it keeps stays bounded however many distinct texts a long export meets, and a text kept or not
    gets the same cell."""
    from extractor.store.cells import _SHORT_CELLS, KEEP_SHORT_CELLS, SHORT_TEXT
    from extractor.store.cells import cells as _cells

    texts = [f"={index}" if index % 3 == 0 else f"r{index},x" for index in range(3 * KEEP_SHORT_CELLS)]
    expected = [b"'=" + text[1:].encode() if text.startswith("=") else b'"' + text.encode() + b'"' for text in texts]
    assert _cells(texts) == expected
    assert len(_SHORT_CELLS) <= KEEP_SHORT_CELLS and texts[-1] in _SHORT_CELLS
    assert _cells(texts[-5:]) == expected[-5:]
    long = "x" * (SHORT_TEXT + 1)
    assert _cells([long]) == [long.encode()] and long not in _SHORT_CELLS
