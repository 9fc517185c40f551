"""The edit form built from a contract's JSON Schema: what the browser would post reads back to the candidate.

The form is rendered by the real template and "submitted" the way a browser does (named inputs, the selected
option, checked boxes only, nothing inside a ``<template>``), so a field the template forgets, or a name the
reader does not understand, fails here without a browser.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup, Tag

from extractor.contracts import get_contract
from extractor.web.router import _environment
from extractor.web.schemaform import SchemaForm, finding_anchor

ROOT = Path(__file__).resolve().parents[1]
FORM = '{% from "macros.html" import edit %}<form>{% for child in tree.children %}{{ edit(child, {}, "en") }}{% endfor %}</form>'


def render(schema: dict[str, Any], candidate: Any) -> BeautifulSoup:
    tree = SchemaForm(schema).tree(candidate)
    return BeautifulSoup(_environment().from_string(FORM).render(tree=tree), "html.parser")


def submitted(soup: BeautifulSoup) -> list[tuple[str, str]]:
    """The (name, value) pairs a browser posts for this form."""
    pairs: list[tuple[str, str]] = []
    for element in soup.find_all(["input", "textarea", "select"]):
        if element.find_parent("template") is not None or not element.get("name") or element.has_attr("disabled"):
            continue
        name = str(element["name"])
        if element.name == "textarea":
            pairs.append((name, element.text))
        elif element.name == "select":
            chosen = element.find("option", selected=True) or element.find("option")
            pairs.append((name, str(chosen.get("value", chosen.text)) if isinstance(chosen, Tag) else ""))
        elif element.get("type") == "checkbox":
            if element.has_attr("checked"):
                pairs.append((name, "on"))
        else:
            pairs.append((name, str(element.get("value", ""))))
    return pairs


def add_item(soup: BeautifulSoup, path: str, index: int) -> None:
    """What the page's "add" button does: the list's template, its placeholder replaced by a new index."""
    fieldset = soup.find("fieldset", attrs={"data-path": path})
    assert isinstance(fieldset, Tag)
    template = fieldset.find("template", recursive=False)
    assert isinstance(template, Tag)
    html = template.decode_contents().replace(str(fieldset["data-placeholder"]), str(index))
    items = fieldset.find("ol", recursive=False)
    assert isinstance(items, Tag)
    items.append(BeautifulSoup(html, "html.parser"))


SAMPLES = ["en_purchase_approval", "ko_work_request_review", "ru_vacation_approval"]


@pytest.mark.parametrize("sample", SAMPLES)
def test_work_procedure_candidates_survive_the_form_unchanged(sample: str) -> None:
    schema = get_contract("work_procedure").schema
    candidate = json.loads((ROOT / f"samples/expected/{sample}.candidate.json").read_text(encoding="utf-8"))
    soup = render(schema, candidate)
    assert SchemaForm(schema).read(submitted(soup)) == candidate
    # nested lists are fields too: every coverage entry's fieldPaths list has its own add button
    assert soup.find("fieldset", attrs={"data-path": "sentenceCoverage[2].fieldPaths"}) is not None


def test_a_rag_answer_survives_the_form_and_nested_items_can_be_added() -> None:
    schema = get_contract("rag_answer").schema
    candidate = json.loads((ROOT / "samples/rag_answer/answer.json").read_text(encoding="utf-8"))
    soup = render(schema, candidate)
    assert SchemaForm(schema).read(submitted(soup)) == candidate

    add_item(soup, "claims", 7)  # a new claim (indices are renumbered in order) ...
    add_item(soup, "claims[7].source_ids", 0)  # ... and a source id inside it: a list in a list item
    pairs = [(k, "a new claim" if k == "v:claims[7].text" else "S9" if k == "v:claims[7].source_ids[0]" else v)
             for k, v in submitted(soup)]
    read = SchemaForm(schema).read(pairs)
    assert read["claims"][:-1] == candidate["claims"]
    assert read["claims"][-1] == {"text": "a new claim", "source_ids": ["S9"]}


def test_nothing_is_coerced_and_empty_means_what_the_schema_allows() -> None:
    schema = get_contract("work_procedure").schema
    candidate = json.loads((ROOT / "samples/expected/en_purchase_approval.candidate.json").read_text(encoding="utf-8"))
    pairs = dict(submitted(render(schema, candidate)))
    pairs["v:processSteps[0].order"] = "first"  # not an integer: stays text for the validator to refuse
    pairs["v:documentPurpose"] = ""  # nullable: empty is null
    pairs["v:sentenceCoverage[0].reason"] = ""  # optional and nullable: null
    pairs["v:participants[0].name"] = ""  # required, not nullable: the empty string (minLength says no)
    read = SchemaForm(schema).read(pairs.items())
    assert read["processSteps"][0]["order"] == "first"
    assert read["documentPurpose"] is None
    assert read["sentenceCoverage"][0]["reason"] is None
    assert read["participants"][0]["name"] == ""
    del pairs["t:rules"]  # a list the form does not post at all is missing, not empty
    assert "rules" not in SchemaForm(schema).read(pairs.items())


def test_findings_land_beside_the_nearest_field_the_form_has() -> None:
    names = {"rules", "rules[2]", "processSteps", "processSteps[1]", "processSteps[1].actorId"}
    assert finding_anchor("$.processSteps[1].actorId", names) == "processSteps[1].actorId"
    assert finding_anchor("$.rules[2].deeper", names) == "rules[2]"
    assert finding_anchor("$ (line 3, column 1)", names) == ""
    assert finding_anchor("$.unknown[0]", names) == ""


def test_overlapping_excerpts_each_keep_their_highlight_and_the_page_language_follows_the_script() -> None:
    from extractor.document import language_of as lang_of
    from extractor.review.view import EvidenceMark
    from extractor.web.page import _pieces

    text = "The owner approves the request within three days."
    spans = [EvidenceMark(4, 30, "processSteps[1]", 0), EvidenceMark(10, 48, "rules[0]", 3)]
    pieces = _pieces(text, 0, spans)
    assert "".join(p.text for p in pieces) == text
    assert [(p.text, p.evidence) for p in pieces] == [
        ("The ", ()), ("owner ", (0,)), ("approves the request", (0, 3)), (" within three days", (3,)), (".", ())]
    assert pieces[2].fields == ("processSteps[1]", "rules[0]")
    assert lang_of("요청자가 작업 내용을 작성합니다. (v1)") == "ko"
    assert lang_of("Сотрудник подаёт заявление (HR).") == "ru"
    assert lang_of("The requester submits it.") == "en" and lang_of("2024-01-01") == "und"
