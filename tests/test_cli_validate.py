"""``extract validate / split / rules`` as a user runs them: real files, real subprocesses, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
EXPECTED = SAMPLES / "expected"
DOCUMENTS = {
    "ko_work_request_review": SAMPLES / "ko_work_request_review.txt",
    "en_purchase_approval": SAMPLES / "en_purchase_approval.md",
    "ru_vacation_approval": SAMPLES / "ru_vacation_approval.txt",
}


def extract(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def validate_json(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``extract validate ARGS --format json`` (text is the default)."""
    return extract("validate", *args, "--format", "json")


def report_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_sample_candidate_passes(name: str) -> None:
    result = validate_json(EXPECTED / f"{name}.candidate.json", "--source", DOCUMENTS[name])
    report = report_of(result)
    assert result.returncode == 0, report["findings"]
    assert report["passed"] is True and report["findings"] == []
    assert report["contract"] == "work_procedure" and report["contract_version"] == 1
    assert all(s["state"] in ("MAPPED", "UNMAPPED", "EXCLUDED") for s in report["sentences"])
    assert report["fields"]["assignmentRule"]["state"] == "NEEDS_INPUT"
    text = DOCUMENTS[name].read_text(encoding="utf-8")
    for span in report["evidence_spans"]:
        assert span["found"]
        start, end = span["spans"][0]
        assert " ".join(text[start:end].split())  # a real, non-empty slice of the canonical text


def test_article_candidate_fails_on_structure_only() -> None:
    result = validate_json(EXPECTED / "ko_work_request_review.article.json", "--source",
                     DOCUMENTS["ko_work_request_review"])
    report = report_of(result)
    assert result.returncode == 1
    assert [(f["rule_id"], f["location"]) for f in report["findings"]] == [("SCHEMA_VIOLATION", "$.sentenceCoverage")]


def test_article_candidate_with_coverage_shows_its_evidence_gaps(tmp_path: Path) -> None:
    """Give the article's candidate the coverage it lacks: its single evidence entry leaves most values bare."""
    article = json.loads((EXPECTED / "ko_work_request_review.article.json").read_text(encoding="utf-8"))
    correct = json.loads((EXPECTED / "ko_work_request_review.candidate.json").read_text(encoding="utf-8"))
    article["sentenceCoverage"] = correct["sentenceCoverage"]
    path = tmp_path / "article_with_coverage.json"
    path.write_text(json.dumps(article, ensure_ascii=False), encoding="utf-8")
    report = report_of(validate_json(path, "--source", DOCUMENTS["ko_work_request_review"]))
    unsupported = {f["location"] for f in report["findings"] if f["rule_id"] == "VALUE_WITHOUT_EVIDENCE"}
    assert "$.processSteps[1]" not in unsupported  # the one value the article backed with an excerpt
    assert {"$.documentPurpose", "$.participants[0]", "$.processSteps[0]", "$.rules[0]"} <= unsupported
    assert report["fields"]["processSteps[1]"]["state"] == "PRESENT"


# ---------------------------------------------------------------- rag_answer: four controlled runs

RAG = SAMPLES / "rag_answer"


def _rag(tmp_path: Path, change: Any) -> subprocess.CompletedProcess[str]:
    answer = json.loads((RAG / "answer.json").read_text(encoding="utf-8"))
    change(answer)
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(answer, ensure_ascii=False), encoding="utf-8")
    return validate_json(path, "--source", RAG / "source.json", "--contract", "rag_answer")


def test_rag_run_1_correct_example_passes(tmp_path: Path) -> None:
    result = _rag(tmp_path, lambda a: None)
    assert result.returncode == 0 and report_of(result)["passed"] is True


def test_rag_run_2_unknown_source_id(tmp_path: Path) -> None:
    def change(answer: dict[str, Any]) -> None:
        answer["claims"][0]["source_ids"] = ["s404"]
        answer["citations"][0]["source_id"] = "s404"

    result = _rag(tmp_path, change)
    ids = {f["rule_id"] for f in report_of(result)["findings"]}
    assert result.returncode == 1 and ids == {"SOURCE_ID_UNKNOWN", "CLAIM_SOURCE_UNKNOWN"}


def test_rag_run_3_one_changed_word_in_quote(tmp_path: Path) -> None:
    result = _rag(tmp_path, lambda a: a["citations"][0].update(
        quote=a["citations"][0]["quote"].replace("проверять", "исправлять")))
    findings = report_of(result)["findings"]
    assert result.returncode == 1
    assert [(f["rule_id"], f["location"]) for f in findings] == [("CITATION_NOT_FOUND", "$.citations[0].quote")]


def test_rag_run_4_missing_claims_is_structure_and_nothing_else(tmp_path: Path) -> None:
    result = _rag(tmp_path, lambda a: a.pop("claims"))
    findings = report_of(result)["findings"]
    assert result.returncode == 1
    assert [(f["rule_id"], f["location"]) for f in findings] == [("SCHEMA_VIOLATION", "$.claims")]


def test_rag_quote_from_another_block_is_not_found(tmp_path: Path) -> None:
    source = tmp_path / "source.json"
    source.write_text(json.dumps({"blocks": [{"id": "a", "text": "Отчёт сдаётся в пятницу до полудня."},
                                             {"id": "b", "text": "Ошибки проверяются до запуска судьи."}]},
                                 ensure_ascii=False), encoding="utf-8")
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"summary": "x", "claims": [{"text": "Отчёт сдаётся в пятницу.", "source_ids": ["a"]}],
                                  "citations": [{"source_id": "a", "quote": "ошибки проверяются"}]},
                                 ensure_ascii=False), encoding="utf-8")
    result = validate_json(answer, "--source", source, "--contract", "rag_answer")
    assert [f["rule_id"] for f in report_of(result)["findings"]] == ["CITATION_NOT_FOUND"]


def test_rag_low_lexical_support_and_not_checkable(tmp_path: Path) -> None:
    def change(answer: dict[str, Any]) -> None:
        answer["claims"] = [{"text": "Судьи всегда ошибаются в оценке стиля ответа.", "source_ids": ["s1"]},
                            {"text": "Да, так.", "source_ids": ["s1"]}]

    findings = report_of(_rag(tmp_path, change))["findings"]
    assert {(f["rule_id"], f["location"]) for f in findings} == {
        ("CLAIM_LOW_LEXICAL_SUPPORT", "$.claims[0]"), ("CLAIM_NOT_CHECKABLE", "$.claims[1].text")}


# ---------------------------------------------------------------- unusable input


def test_non_json_candidate_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"documentPurpose": "truncated', encoding="utf-8")
    result = validate_json(path, "--source", DOCUMENTS["en_purchase_approval"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert [f["rule_id"] for f in report_of(result)["findings"]] == ["OUTPUT_NOT_JSON"]


def test_absurdly_deep_candidate_is_output_not_json(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    result = validate_json(path, "--source", DOCUMENTS["en_purchase_approval"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert [f["rule_id"] for f in report_of(result)["findings"]] == ["OUTPUT_NOT_JSON"]


def test_huge_candidate_is_refused_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as stream:  # sparse: 200 MB on paper, nothing on disk
        stream.truncate(200_000_000)
    result = validate_json(path, "--source", DOCUMENTS["en_purchase_approval"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr and "MB" in result.stderr


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10), "binary"),
    (lambda p: p.write_text("   \n\t\n", encoding="utf-8"), "empty"),
    (lambda p: None, "not found"),
])
def test_unusable_source_exits_2_with_one_line(tmp_path: Path, make: Any, problem: str) -> None:
    source = tmp_path / "source.txt"
    make(source)
    result = validate_json(EXPECTED / "en_purchase_approval.candidate.json", "--source", source)
    assert result.returncode == 2
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert str(source) in result.stderr and problem in result.stderr


def test_missing_candidate_file_exits_2(tmp_path: Path) -> None:
    result = validate_json(tmp_path / "nope.json", "--source", DOCUMENTS["en_purchase_approval"])
    assert result.returncode == 2 and "nope.json" in result.stderr and "Traceback" not in result.stderr


def test_usage_error_exits_2() -> None:
    assert validate_json("x.json").returncode == 2  # --source missing


def test_text_is_the_default_format_and_a_table() -> None:
    result = extract("validate", EXPECTED / "ko_work_request_review.article.json", "--source",
                     DOCUMENTS["ko_work_request_review"])
    assert result.returncode == 1
    assert "FAILED" in result.stdout and "SCHEMA_VIOLATION" in result.stdout and "┃" in result.stdout


# ---------------------------------------------------------------- split and rules


def test_split_json_offsets_are_exact() -> None:
    result = extract("split", DOCUMENTS["ko_work_request_review"], "--format", "json")
    units = json.loads(result.stdout)
    text = DOCUMENTS["ko_work_request_review"].read_text(encoding="utf-8")
    assert result.returncode == 0 and len(units) == 17
    assert [u["id"] for u in units] == [f"s{i}" for i in range(1, 18)]
    for unit in units:
        assert set(unit) == {"id", "text", "start", "end", "block"}
        assert text[unit["start"]:unit["end"]] == unit["text"]
    assert units[1]["text"] == "배경" and units[2]["text"].endswith("어렵습니다.")


def test_rules_catalogue_and_card() -> None:
    listing = extract("rules", "--format", "json")
    ids = {card["rule_id"] for card in json.loads(listing.stdout)}
    spec = {"OUTPUT_NOT_JSON", "SCHEMA_VIOLATION", "PARTICIPANT_ID_DUPLICATE", "PARTICIPANT_NAME_DUPLICATE",
            "ACTOR_UNKNOWN", "STEP_ORDER_DUPLICATE", "STEP_ORDER_GAP", "STEP_ORDER_INVERTED", "EVIDENCE_NOT_IN_SOURCE",
            "EVIDENCE_FIELD_PATH_INVALID", "VALUE_WITHOUT_EVIDENCE", "NULL_WITHOUT_QUESTION",
            "QUESTION_FOR_PRESENT_VALUE", "MISSING_FIELD_PATH_INVALID", "SENTENCE_NOT_ACCOUNTED", "SENTENCE_ID_UNKNOWN",
            "COVERAGE_MAPPED_WITHOUT_EVIDENCE", "COVERAGE_REASON_MISSING", "EVIDENCE_WEAK_SUPPORT", "SOURCE_ID_UNKNOWN",
            "CITATION_NOT_FOUND", "CLAIM_SOURCE_UNKNOWN", "CLAIM_NOT_CHECKABLE", "CLAIM_LOW_LEXICAL_SUPPORT"}
    assert spec <= ids
    card = extract("rules", "CITATION_NOT_FOUND")
    assert card.returncode == 0
    for label in ("inputs", "normalisation", "passes", "location", "judge needed after failure"):
        assert label in card.stdout
    assert extract("rules", "NO_SUCH_RULE").returncode == 2


def test_help_does_not_import_heavy_stacks() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['extract', '--help']\n"
        "from extractor import cli\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "heavy = {'openai', 'instructor', 'llama_cpp', 'sqlalchemy', 'alembic', 'jsonschema', 'httpx',"
        " 'pysbd', 'razdel', 'rapidfuzz', 'docx', 'pypdf', 'bs4'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "Usage" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"
