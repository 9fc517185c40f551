"""Every rule of the catalogue: an input that fires it and the nearest input that does not."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from extractor.contracts import catalogue, get_contract
from extractor.document import Document, Sentence
from extractor.evidence.report import Report
from extractor.validate import validate

LINES = [
    "작업 요청 검토 절차",
    "배경",
    "현재 작업 요청을 메일과 메신저로 전달하고 있어 요청 상태와 처리 이력을 일관되게 확인하기 어렵습니다.",
    "요청자가 작업 내용을 작성합니다.",
    "요청자가 검토를 요청합니다.",
    "검토자는 요청을 승인하거나 보완을 요청합니다.",
    "검토 결과에는 처리자와 처리 시각이 포함되어야 합니다.",
]


def one_sentence_per_line(lines: list[str]) -> Document:
    """A document whose sentences are its lines: rule tests do not depend on a segmenter version."""
    sentences, position = [], 0
    for number, line in enumerate(lines, 1):
        sentences.append(Sentence(f"s{number}", line, position, position + len(line), number - 1))
        position += len(line) + 1
    return Document("rules.txt", "\n".join(lines), [], "0" * 64, "txt", sentences=sentences, segmenter="lines")


BASE: dict[str, Any] = {
    "documentPurpose": "요청 상태와 처리 이력을 일관되게 확인한다.",
    "participants": [{"id": "requester", "name": "요청자"}, {"id": "reviewer", "name": "검토자"}],
    "processSteps": [
        {"order": 1, "actorId": "requester", "action": "작업 내용을 작성한다."},
        {"order": 2, "actorId": "requester", "action": "검토를 요청한다."},
        {"order": 3, "actorId": "reviewer", "action": "요청을 승인하거나 보완을 요청한다."},
    ],
    "rules": ["검토 결과에는 처리자와 처리 시각이 포함되어야 한다."],
    "assignmentRule": None,
    "missingFields": [{"fieldPath": "assignmentRule", "question": "여러 검토자 중 담당자는 어떤 기준으로 정합니까?"}],
    "evidence": [
        {"fieldPath": "documentPurpose", "sourceExcerpt": "요청 상태와 처리 이력을 일관되게 확인하기 어렵습니다."},
        {"fieldPath": "participants[0]", "sourceExcerpt": "요청자가 작업 내용을 작성합니다."},
        {"fieldPath": "participants[1]", "sourceExcerpt": "검토자는 요청을 승인하거나 보완을 요청합니다."},
        {"fieldPath": "processSteps[0]", "sourceExcerpt": "요청자가 작업 내용을 작성합니다."},
        {"fieldPath": "processSteps[1]", "sourceExcerpt": "요청자가 검토를 요청합니다."},
        {"fieldPath": "processSteps[2]", "sourceExcerpt": "검토자는 요청을 승인하거나 보완을 요청합니다."},
        {"fieldPath": "rules[0]", "sourceExcerpt": "검토 결과에는 처리자와 처리 시각이 포함되어야 합니다."},
    ],
    "sentenceCoverage": [
        {"sentenceId": "s1", "status": "EXCLUDED", "reason": "document title"},
        {"sentenceId": "s2", "status": "EXCLUDED", "reason": "section heading"},
        {"sentenceId": "s3", "status": "MAPPED", "fieldPaths": ["documentPurpose"]},
        {"sentenceId": "s4", "status": "MAPPED", "fieldPaths": ["participants[0]", "processSteps[0]"]},
        {"sentenceId": "s5", "status": "MAPPED", "fieldPaths": ["processSteps[1]"]},
        {"sentenceId": "s6", "status": "MAPPED", "fieldPaths": ["participants[1]", "processSteps[2]"]},
        {"sentenceId": "s7", "status": "MAPPED", "fieldPaths": ["rules[0]"]},
    ],
}

DOCUMENT = one_sentence_per_line(LINES)
WORK_PROCEDURE = get_contract("work_procedure")


def check(candidate: Any, document: Document = DOCUMENT) -> Report:
    raw = candidate if isinstance(candidate, str) else json.dumps(candidate, ensure_ascii=False)
    return validate(raw, document, WORK_PROCEDURE)


def rule_ids(report: Report) -> set[str]:
    return {finding.rule_id for finding in report.findings}


def edit(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    candidate = copy.deepcopy(BASE)
    change(candidate)
    return candidate


def test_base_candidate_passes_with_no_finding_and_full_states() -> None:
    report = check(BASE)
    assert report.findings == []
    assert report.passed
    assert report.fields["documentPurpose"].state == "PRESENT"
    assert report.fields["assignmentRule"].state == "NEEDS_INPUT"
    assert {path for path, state in report.fields.items() if state.state == "PRESENT"} >= {
        "participants[0]", "participants[1]", "processSteps[0]", "processSteps[1]", "processSteps[2]", "rules[0]"}
    assert [s.state for s in report.sentences] == ["EXCLUDED", "EXCLUDED"] + ["MAPPED"] * 5
    span = report.evidence_spans[4]
    (start, end), = span.spans
    assert DOCUMENT.text[start:end] == "요청자가 검토를 요청합니다."
    assert span.sentence_ids == ("s5",)


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(candidate: dict[str, Any]) -> None:
        target = candidate
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    return change


def _append(name: str, item: Any) -> Callable[[dict[str, Any]], None]:
    return lambda candidate: candidate[name].append(item)


def _drop(name: str, index: int) -> Callable[[dict[str, Any]], None]:
    return lambda candidate: candidate[name].pop(index)


def _steps(change: Callable[[list[dict[str, Any]]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda candidate: change(candidate["processSteps"])


CASES: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], None]]] = {
    # rule_id: (change that fires it, nearest change that does not)
    "PARTICIPANT_ID_DUPLICATE": (_set(["participants", 1, "id"], "requester"), _set(["participants", 1, "id"], "requester2")),
    "PARTICIPANT_NAME_DUPLICATE": (_set(["participants", 1, "name"], "요청자"), _set(["participants", 1, "name"], "요청자들")),
    "ACTOR_UNKNOWN": (_set(["processSteps", 2, "actorId"], "approver"), _set(["processSteps", 2, "actorId"], "requester")),
    "STEP_ORDER_DUPLICATE": (_set(["processSteps", 2, "order"], 2), _set(["processSteps", 2, "order"], 3)),
    "STEP_ORDER_GAP": (_set(["processSteps", 2, "order"], 4), _set(["processSteps", 2, "order"], 3)),
    "STEP_ORDER_INVERTED": (
        _steps(lambda steps: (steps[0].update(order=2), steps[1].update(order=1))),
        _steps(lambda steps: (steps[0].update(order=1), steps[1].update(order=2))),
    ),
    "EVIDENCE_NOT_IN_SOURCE": (
        _set(["evidence", 5, "sourceExcerpt"], "검토자는 모든 요청의 최종 처리 결과를 결정합니다."),
        _set(["evidence", 5, "sourceExcerpt"], "검토자는  요청을 승인하거나\n보완을 요청합니다."),
    ),
    "EVIDENCE_FIELD_PATH_INVALID": (_set(["evidence", 4, "fieldPath"], "processSteps[3]"),
                                    _set(["evidence", 4, "fieldPath"], "processSteps[1].action")),
    "VALUE_WITHOUT_EVIDENCE": (
        _append("rules", "검토자는 요청을 승인한다."),
        lambda c: (c["rules"].append("검토자는 요청을 승인한다."),
                   c["evidence"].append({"fieldPath": "rules[1]", "sourceExcerpt": "검토자는 요청을 승인하거나"})),
    ),
    "EVIDENCE_WEAK_SUPPORT": (_set(["processSteps", 1, "action"], "최종 결재를 진행한다."), _set(["processSteps", 1, "action"], "검토를 요청한다.")),
    "SENTENCE_NOT_ACCOUNTED": (_drop("sentenceCoverage", 1), _set(["sentenceCoverage", 1, "status"], "UNMAPPED")),
    "SENTENCE_ID_UNKNOWN": (_set(["sentenceCoverage", 1, "sentenceId"], "s8"), _set(["sentenceCoverage", 1, "sentenceId"], "s2")),
    "SENTENCE_COVERAGE_DUPLICATE": (_append("sentenceCoverage", {"sentenceId": "s2", "status": "UNMAPPED", "reason": "x"}),
                                    _set(["sentenceCoverage", 1, "reason"], "heading, again")),
    "COVERAGE_MAPPED_WITHOUT_EVIDENCE": (_set(["sentenceCoverage", 4, "fieldPaths"], ["processSteps[0]"]),
                                         _set(["sentenceCoverage", 4, "fieldPaths"], ["processSteps[1].action"])),
    "COVERAGE_REASON_MISSING": (_set(["sentenceCoverage", 1, "reason"], "  "), _set(["sentenceCoverage", 1, "reason"], "heading")),
    "NULL_WITHOUT_QUESTION": (_set(["missingFields"], []), _set(["missingFields", 0, "fieldPath"], "$.assignmentRule")),
    "QUESTION_FOR_PRESENT_VALUE": (_append("missingFields", {"fieldPath": "documentPurpose", "question": "목적은?"}),
                                   _append("missingFields", {"fieldPath": "participants", "question": "다른 참여자가 있습니까?"})),
    "MISSING_FIELD_PATH_INVALID": (_append("missingFields", {"fieldPath": "approvalDeadline", "question": "기한은?"}),
                                   _append("missingFields", {"fieldPath": "processSteps[0].actorId", "question": "누가?"})),
}


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fires_and_nearest_input_does_not(rule_id: str) -> None:
    fire, near = CASES[rule_id]
    fired = check(edit(fire))
    assert rule_id in rule_ids(fired), fired.to_json()["findings"]
    finding = next(f for f in fired.findings if f.rule_id == rule_id)
    assert finding.location.startswith("$.") and finding.message
    assert rule_id not in rule_ids(check(edit(near)))


TESTED_ELSEWHERE = {"EVIDENCE_LOW_OCR_CONFIDENCE": "tests/test_scans.py: it reads a document OCR read"}


def test_every_work_procedure_content_rule_is_tested() -> None:
    content = {card.rule_id for card in catalogue("work_procedure") if card.contract == "work_procedure"}
    assert content == set(CASES) | set(TESTED_ELSEWHERE)


def test_locations_name_the_offending_value() -> None:
    report = check(edit(_set(["processSteps", 2, "actorId"], "approver")))
    assert [f.location for f in report.findings] == ["$.processSteps[2].actorId"]
    assert "approver" in report.findings[0].message and "requester" in report.findings[0].message


def test_evidence_not_in_source_gives_nearest_sentence_hint() -> None:
    report = check(edit(_set(["evidence", 5, "sourceExcerpt"], "검토자는 요청을 승인하거나 보완을 요청한다.")))
    finding = next(f for f in report.findings if f.rule_id == "EVIDENCE_NOT_IN_SOURCE")
    assert finding.hint is not None
    assert finding.hint["nearest_sentence_id"] == "s6"
    assert 0.8 < finding.hint["similarity"] < 1.0


@pytest.mark.parametrize(("excerpt", "why"), [
    ("Line 1501: the requester files form 1501,", "a mark changed"),
    ("Line 1501; the requester filed form 1501", "every word but the numbers is in 3,000 sentences"),
    ("line 1501 the requester files form", "case and punctuation differ"),
    ("Line 1501: the requester quietly files form 1501.", "a word added"),
])
def test_the_nearest_sentence_is_found_among_3000_that_share_its_words(excerpt: str, why: str) -> None:
    """More than 25 sentences share every word but the number; the shortlist used to stop at 25 in document order."""
    from extractor.evidence.source import Source

    document = one_sentence_per_line([f"Line {n}: the requester files form {n}." for n in range(1, 3001)])
    nearest = Source(document).nearest_sentence(excerpt, "nfc_whitespace")
    assert nearest is not None and nearest[0] == "s1501", (why, nearest)


def test_a_shorter_sentence_the_excerpt_merely_contains_is_not_the_nearest() -> None:
    from extractor.evidence.source import Source

    document = one_sentence_per_line(["P 160 The clerk files the order.",
                                      "P 160 The clerk files the order and tells the supplier by phone."])
    nearest = Source(document).nearest_sentence("P 160 The clerk files the order and tells the supplier by mail.",
                                                "nfc_whitespace")
    assert nearest is not None and nearest[0] == "s2"


def test_case_punctuation_and_negation_stay_significant() -> None:
    document = one_sentence_per_line(["The manager approves the request.", "Nobody may skip review."])
    contract_candidate = {
        **{key: [] for key in ("participants", "processSteps", "rules", "missingFields", "sentenceCoverage")},
        "documentPurpose": None, "assignmentRule": None,
        "evidence": [{"fieldPath": "documentPurpose", "sourceExcerpt": x} for x in
                     ("the manager approves the request.", "The manager approves the request", "Anybody may skip review.")],
    }
    report = check(contract_candidate, document)
    found = [span.found for span in report.evidence_spans]
    assert found == [False, True, False]


def test_sentence_state_names_the_rule_when_none_applies() -> None:
    report = check(edit(_set(["sentenceCoverage", 4, "fieldPaths"], ["processSteps[0]"])))
    s5 = next(s for s in report.sentences if s.id == "s5")
    assert s5.state is None and s5.rule_id == "COVERAGE_MAPPED_WITHOUT_EVIDENCE"


def test_field_state_without_question_is_reported() -> None:
    report = check(edit(_set(["missingFields"], [])))
    assert report.fields["assignmentRule"].state is None
    assert report.fields["assignmentRule"].rule_id == "NULL_WITHOUT_QUESTION"


# ---------------------------------------------------------------- structure


@pytest.mark.parametrize("raw, words", [
    ("", "empty"),
    ('{"documentPurpose": "x", "participants": [', "truncated"),
    ("Here is the JSON: {}", "not JSON"),
    ("```json\n{}\n```", "code fence"),
    ('{"rules": [], "rules": []}', "duplicate key"),
    ('{"documentPurpose": NaN}', "NaN"),
    ("[" * 100_000 + "]" * 100_000, "nested"),
    ("[" * 70 + "]" * 70, "nested 70 levels"),
])
def test_output_not_json(raw: str, words: str) -> None:
    report = check(raw)
    assert [f.rule_id for f in report.findings] == ["OUTPUT_NOT_JSON"]
    assert words in report.findings[0].message
    assert not report.passed and report.fields == {} and report.sentences == []


def test_schema_violation_stops_content_rules() -> None:
    broken = edit(lambda c: (c["processSteps"][0].update(order="1"), c["processSteps"][2].update(actorId="approver"),
                             c.pop("sentenceCoverage")))
    report = check(broken)
    assert rule_ids(report) == {"SCHEMA_VIOLATION"}
    assert {f.location for f in report.findings} == {"$.processSteps[0].order", "$.sentenceCoverage"}


def test_schema_violation_nearest_input_passes_schema() -> None:
    assert "SCHEMA_VIOLATION" in rule_ids(check(edit(_set(["participants", 0, "id"], "Requester"))))
    assert "SCHEMA_VIOLATION" not in rule_ids(check(edit(_set(["participants", 0, "id"], "requester"))))
    assert "SCHEMA_VIOLATION" in rule_ids(check(edit(_set(["extra"], 1))))


def test_validation_is_repeatable() -> None:
    broken = edit(_set(["evidence", 5, "sourceExcerpt"], "검토자는 모든 요청을 결정합니다."))
    assert check(broken).to_json() == check(broken).to_json()


# ---------------------------------------------------------------- rag_answer

RAG = get_contract("rag_answer")
RAG_SOURCE = Document(
    "source.json", "Повторяющиеся структурные ошибки следует проверять до запуска модели-судьи.\n"
    "Отчёт о проверке хранится вместе с версией контракта.", [], "0" * 64, "blocks",
    sentences=[Sentence("s1", "Повторяющиеся структурные ошибки следует проверять до запуска модели-судьи.", 0, 75, 0),
               Sentence("s2", "Отчёт о проверке хранится вместе с версией контракта.", 76, 129, 1)],
    segmenter="source-blocks/1",
)
RAG_BASE: dict[str, Any] = {
    "summary": "Структурные проверки выполняются раньше модельной оценки.",
    "claims": [{"text": "Структурные ошибки проверяются до запуска модели-судьи.", "source_ids": ["s1"]}],
    "citations": [{"source_id": "s1", "quote": "структурные ошибки следует проверять до запуска модели-судьи"}],
}


def rag_check(change: Callable[[dict[str, Any]], None]) -> set[str]:
    candidate = copy.deepcopy(RAG_BASE)
    change(candidate)
    return rule_ids(validate(json.dumps(candidate, ensure_ascii=False), RAG_SOURCE, RAG))


RAG_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[dict[str, Any]], None]]] = {
    "SOURCE_ID_UNKNOWN": (_set(["citations", 0, "source_id"], "s3"), _set(["citations", 0, "source_id"], "s1")),
    "CLAIM_SOURCE_UNKNOWN": (_set(["claims", 0, "source_ids"], ["s1", "s9"]), _set(["claims", 0, "source_ids"], ["s1", "s2"])),
    "CITATION_NOT_FOUND": (
        _set(["citations", 0, "quote"], "структурные ошибки нужно проверять до запуска модели-судьи"),
        _set(["citations", 0, "quote"], "СТРУКТУРНЫЕ   ошибки следует проверять до запуска модели-судьи"),
    ),
    "CLAIM_NOT_CHECKABLE": (_set(["claims", 0, "text"], "Да, это так."), _set(["claims", 0, "text"], "Да, это ошибки.")),
    "CLAIM_LOW_LEXICAL_SUPPORT": (
        _set(["claims", 0, "text"], "Модели-судьи часто ошибаются в оценке стиля ответов."),
        _set(["claims", 0, "text"], "Структурные ошибки проверяются до запуска модели-судьи всегда."),
    ),
}


@pytest.mark.parametrize("rule_id", sorted(RAG_CASES))
def test_rag_rule_fires_and_nearest_input_does_not(rule_id: str) -> None:
    fire, near = RAG_CASES[rule_id]
    assert rule_id in rag_check(fire)
    assert rag_check(near) == set()


def test_every_rag_rule_is_tested() -> None:
    assert {card.rule_id for card in catalogue("rag_answer") if card.contract == "rag_answer"} == set(RAG_CASES)


def test_rag_quote_must_be_in_the_named_block() -> None:
    moved = rag_check(_set(["citations", 0, "quote"], "хранится вместе с версией контракта"))
    assert moved == {"CITATION_NOT_FOUND"}
    assert rag_check(lambda c: c["citations"][0].update(source_id="s2", quote="хранится вместе с версией контракта")) == set()


def test_rag_judge_band_is_a_warning_not_an_error() -> None:
    banded = copy.deepcopy(RAG)
    object.__setattr__(banded, "settings", {**RAG.settings, "lexical_support": {
        **RAG.settings["lexical_support"], "judge_band_lower": 0.3, "minimum_overlap": 0.9}})
    candidate = copy.deepcopy(RAG_BASE)
    candidate["claims"][0]["text"] = "Структурные ошибки проверяются раньше."  # 2 of 3 words supported
    report = validate(json.dumps(candidate, ensure_ascii=False), RAG_SOURCE, banded)
    [finding] = report.findings
    assert finding.rule_id == "CLAIM_LOW_LEXICAL_SUPPORT" and finding.severity.value == "warning"
    assert report.passed


def test_output_not_json_nearest_input_parses() -> None:
    assert rule_ids(check('{"documentPurpose": "x"')) == {"OUTPUT_NOT_JSON"}
    assert "OUTPUT_NOT_JSON" not in rule_ids(check('{"documentPurpose": "x"}'))


@pytest.mark.parametrize(("text", "message"), [
    ('{"documentPurpose": "x\n", "rules": []}', "not JSON: Invalid control character at line 1 column 23"),
    ('{"documentPurpose": "abc, "rules": [}', "not JSON: Expecting ',' delimiter at line 1 column 28"),
    ('{"documentPurpose": "unterminated', "not JSON: Unterminated string starting at line 1 column 21"),
])
def test_output_not_json_says_where_once(text: str, message: str) -> None:
    """The parser's own words and the place, said once ("starting at line 1", never "starting at at line 1")."""
    [finding] = [f for f in check(text).findings if f.rule_id == "OUTPUT_NOT_JSON"]
    assert finding.message == message and " at at " not in finding.message
