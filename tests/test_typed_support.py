"""Dates, numbers, units and enum codes as evidence: correct values written another way are supported, wrong ones
are not (extractor.evidence.values, extractor.evidence.support, the schema keyword x-enum-words)."""

from __future__ import annotations

import json
import shutil
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from extractor.contracts.files import load, problems
from extractor.evidence.support import support_score
from extractor.evidence.values import typed
from extractor.offload import read_here as load_document
from extractor.validate import validate

CORPUS = Path(__file__).resolve().parent / "corpus" / "typed_support"
CONTRACT = CORPUS / "contracts" / "service_order" / "v1"
GOLD = sorted((CORPUS / "gold").glob("*.candidate.json"))
NAMES = [path.name.removesuffix(".candidate.json") for path in GOLD]


@pytest.mark.parametrize(("value", "excerpt"), [
    ("2026-03-14", "완료 기한: 2026년 3월 14일"),
    ("2026-04-02", "완료 기한: 2026. 4. 2."),
    ("2026-03-14", "3월 14일까지 완료한다."),  # no year in the text: the day and month are stated
    ("2026-04-17", "Срок выполнения: 17.04.2026"),
    ("2026-03-20", "Работы завершить до 20 марта 2026 г."),
    ("2026-05-01", "в срок до 1 мая 2026 года"),
    ("2026-03-20", "Due date: March 20, 2026"),
    ("2026-04-14", "Complete by: 14 April 2026"),
    ("2026-04-30", "Due: 04/30/2026"),
    ("2026-04-03", "Due: 04/03/2026"),  # day or month first: both readings
    ("2026-03-04", "Due: 04/03/2026"),
    ("12500", "Approved budget: USD 12,500"),
    ("3200.5", "Budget: $3,200.50"),
    ("1250000", "승인 예산: 1,250,000원"),
    ("3000000", "예산: 300만 원"),
    ("85000", "Утверждённый бюджет: 85 000 руб."),
    ("1200000", "Бюджет: 1,2 млн руб."),
    ("12500", "Бюджет: 12 500,00 руб."),
    ("Заменяет подшипник 2.5", "Слесарь заменяет подшипник (2,5 ч)."),
    ("2.5 hours", "2,5 ч"),
    ("USD", "Any request above USD 10,000 needs two quotes."),
])
def test_a_correct_value_written_another_way_is_fully_supported(value: str, excerpt: str) -> None:
    assert support_score(value, excerpt, 3) == 1.0


@pytest.mark.parametrize(("value", "excerpt"), [
    ("2026-03-15", "완료 기한: 2026년 3월 14일"),
    ("2025-03-14", "완료 기한: 2026년 3월 14일"),
    ("2026-03-14", "3월 15일까지 완료한다."),
    ("2026-04-18", "Срок выполнения: 17.04.2026"),
    ("2026-04-17", "Срок выполнения: 17.05.2026"),
    ("2026-03-21", "Работы завершить до 20 марта 2026 г."),
    ("2026-03-20", "Due date: March 21, 2026"),
    ("2026-04-14", "Complete by: 14 May 2026"),
    ("2026-05-04", "Due: 04/03/2026"),
    ("125000", "Approved budget: USD 12,500"),
    ("3200", "Budget: $3,200.50"),
    ("125000", "승인 예산: 1,250,000원"),
    ("300", "예산: 300만 원"),
    ("8500", "Утверждённый бюджет: 85 000 руб."),
    ("1.2", "Бюджет: 1,2 млн руб."),
    ("Заменяет подшипник 3.5", "Слесарь заменяет подшипник (2,5 ч)."),
    ("2.5 hours", "2,5 кг"),
])
def test_a_wrong_date_number_or_unit_is_not(value: str, excerpt: str) -> None:
    score = support_score(value, excerpt, 3)
    assert score is not None and score <= 0.5, score


def test_the_may_of_a_sentence_is_no_date_and_dates_are_not_numbers() -> None:
    assert [sorted(f.readings) for f in typed("the clerk may 5 times check it").facts] == [["n:5"]]
    assert [sorted(f.readings) for f in typed("до 2026-03-14 и 14 маяков").facts] == [["d:2026-03-14"], ["n:14"]]
    assert not any(r.startswith("d:") for f in typed("31.02.2026").facts for r in f.readings)  # no such day


# --- the service order gold: nine documents in three languages ---------------------------------------------------


def _check(name: str, candidate: dict[str, Any]) -> list[tuple[str, str]]:
    document = load_document(CORPUS / "documents" / f"{name}.txt")
    report = validate(json.dumps(candidate, ensure_ascii=False), document, load(CONTRACT))
    return [(finding.rule_id, finding.location) for finding in report.findings]


def _gold(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CORPUS / "gold" / f"{name}.candidate.json").read_text(encoding="utf-8"))
    return loaded


def test_the_corpus_has_nine_documents_in_three_languages() -> None:
    assert len(NAMES) == 9 and sorted({name[:2] for name in NAMES}) == ["en", "ko", "ru"]


@pytest.mark.parametrize("name", NAMES)
def test_no_finding_on_gold(name: str) -> None:
    """Due dates in the document's own form, budgets with separators and 만/млн, hours with units, priorities in
    words: all supported, nothing exempt."""
    assert _check(name, _gold(name)) == []


def _next_day(iso: str) -> str:
    return (date.fromisoformat(iso) + timedelta(days=1)).isoformat()


def _next_month(iso: str) -> str:
    day = date.fromisoformat(iso)
    return day.replace(month=day.month % 12 + 1).isoformat()


DEFECTS = {
    "due date a day late": ("dueDate", lambda c: c.update(dueDate=_next_day(c["dueDate"]))),
    "due date a month late": ("dueDate", lambda c: c.update(dueDate=_next_month(c["dueDate"]))),
    "due date a year early": ("dueDate", lambda c: c.update(dueDate=str(int(c["dueDate"][:4]) - 1) + c["dueDate"][4:])),
    "budget tenfold": ("budget", lambda c: c.update(budget=c["budget"] * 10)),
    "budget without its last digit": ("budget", lambda c: c.update(budget=int(c["budget"]) // 10)),
    "hours of the first task": ("tasks[0]", lambda c: c["tasks"][0].update(hours=c["tasks"][0]["hours"] + 1)),
    "another priority": ("priority", lambda c: c.update(priority="LOW")),
}


@pytest.mark.parametrize("defect", list(DEFECTS))
@pytest.mark.parametrize("name", NAMES)
def test_an_injected_wrong_value_is_caught(name: str, defect: str) -> None:
    path, change = DEFECTS[defect]
    candidate = _gold(name)
    change(candidate)
    assert ("EVIDENCE_WEAK_SUPPORT", f"$.{path}") in _check(name, candidate)


@pytest.mark.parametrize("name", NAMES)
def test_harmless_variants_of_the_values_pass(name: str) -> None:
    """The same facts typed differently in the candidate: a float budget, hours as text-free numbers."""
    candidate = _gold(name)
    candidate["budget"] = float(candidate["budget"])
    for task in candidate["tasks"]:
        task["hours"] = float(task["hours"])
    assert _check(name, candidate) == []


# --- the schema keyword ---------------------------------------------------------------------------------------


def test_without_the_enum_words_a_priority_in_korean_or_russian_is_flagged(tmp_path: Path) -> None:
    folder = tmp_path / "service_order" / "v1"
    shutil.copytree(CONTRACT, folder)
    schema = json.loads((folder / "schema.json").read_text(encoding="utf-8"))
    del schema["properties"]["priority"]["x-enum-words"]
    (folder / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
    plain = load(folder)
    for name in ("ko_conveyor", "ru_conveyor"):
        document = load_document(CORPUS / "documents" / f"{name}.txt")
        report = validate(json.dumps(_gold(name), ensure_ascii=False), document, plain)
        assert [(f.rule_id, f.location) for f in report.findings] == [("EVIDENCE_WEAK_SUPPORT", "$.priority")]


@pytest.mark.parametrize(("words", "problem"), [
    ({"HIGHEST": {"en": ["highest"]}}, "'HIGHEST' is not one of its enum values"),
    ({"HIGH": {"de": ["hoch"]}}, "has language 'de' (known: en, ko, ru)"),
    ({"HIGH": {"en": []}}, "'HIGH' en must be a list of non-empty strings"),
    ({"HIGH": ["high"]}, "'HIGH' must map languages to word lists"),
    ("high", "must be an object on a node with an enum"),
])
def test_a_broken_enum_words_keyword_is_refused_with_one_line(tmp_path: Path, words: Any, problem: str) -> None:
    folder = tmp_path / "service_order" / "v1"
    shutil.copytree(CONTRACT, folder)
    schema = json.loads((folder / "schema.json").read_text(encoding="utf-8"))
    schema["properties"]["priority"]["x-enum-words"] = words
    (folder / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
    found = problems(folder)
    assert len(found) == 1 and problem in found[0] and "schema.json" in found[0] and "/properties/priority" in found[0]
