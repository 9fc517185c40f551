"""The schema shown to the model and the schema the validator enforces are one and the same."""

from __future__ import annotations

import json

import pytest

from extractor.contracts import contract_dir, get_contract, inline_refs, names
from extractor.generate.prompt import load_prompt, render_request
from extractor.ingest import from_text
from extractor.segment import segment


@pytest.mark.parametrize("name", names())
def test_schema_file_is_generated_from_the_model(name: str) -> None:
    contract = get_contract(name)
    on_disk = json.loads((contract_dir(name, contract.version) / "schema.json").read_text(encoding="utf-8"))
    assert on_disk == contract.generated_schema(), "run `extract contracts --write`"
    assert contract.schema == on_disk


@pytest.mark.parametrize("name", names())
def test_request_schema_is_the_validation_schema(name: str) -> None:
    contract = get_contract(name)
    document = segment(from_text("Title\n\nThe manager approves the request."))
    request = render_request(load_prompt(contract), contract, document)
    assert request.schema == contract.schema
    assert contract.validator.schema == inline_refs(contract.schema)
    assert json.dumps(contract.schema, ensure_ascii=False) in request.messages[1]["content"]
    assert "[s2] The manager approves the request." in request.messages[1]["content"]


def test_additional_properties_forbidden_everywhere() -> None:
    for name in names():
        schema = get_contract(name).schema
        objects = [schema, *[d for d in schema["$defs"].values() if d.get("type") == "object"]]
        assert all(o.get("additionalProperties") is False for o in objects)


def test_work_procedure_field_names_match_the_spec() -> None:
    schema = get_contract("work_procedure").schema
    assert list(schema["required"]) == ["documentPurpose", "participants", "processSteps", "rules", "assignmentRule",
                                        "missingFields", "evidence", "sentenceCoverage"]
    defs = schema["$defs"]
    assert set(defs["Participant"]["properties"]) == {"id", "name"}
    assert set(defs["ProcessStep"]["properties"]) == {"order", "actorId", "action"}
    assert set(defs["MissingField"]["properties"]) == {"fieldPath", "question"}
    assert set(defs["Evidence"]["properties"]) == {"fieldPath", "sourceExcerpt"}
    assert set(defs["SentenceCoverage"]["properties"]) == {"sentenceId", "status", "fieldPaths", "reason"}
    rag = get_contract("rag_answer").schema
    assert rag["required"] == ["summary", "claims", "citations"]


def test_unknown_contract_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="work_procedure"):
        get_contract("invoice")


@pytest.mark.parametrize("name", names())
def test_inlining_refs_only_substitutes_definitions(name: str) -> None:
    schema = get_contract(name).schema
    flat = inline_refs(schema)
    assert "$ref" not in json.dumps(flat) and "$defs" not in flat
    assert {key: value for key, value in schema.items() if key not in ("$defs", "properties")} == \
        {key: value for key, value in flat.items() if key != "properties"}
    for definition in schema["$defs"].values():  # every definition appears verbatim (inlined) somewhere
        assert json.dumps(inline_refs({**definition, "$defs": schema["$defs"]}), sort_keys=True) in \
            json.dumps(flat, sort_keys=True)
