"""samples/formats/ through the CLI: each sample is converted by ``extract run`` against a scripted model server,
``extract show`` prints the page of every excerpt, and a hostile file in the same batch ends INPUT_ERROR while
the rest is converted.

The server answers every document with a candidate built from the sentences the request shows it: the first
sentence of over 15 characters is the document's purpose and the next one a rule, both quoted as evidence,
every other sentence UNMAPPED with a reason; a candidate the rules pass, so each run is PROMOTE.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support.batch import ROOT, cli_env, request_text, run_cli
from tests.support.llm_server import Reply, ScriptedLLMServer

SAMPLES = ROOT / "samples" / "formats"
LINE = re.compile(r"^\[(s\d+)\] (.+)$", re.MULTILINE)


def candidate_for(request: Mapping[str, Any] | None) -> str:
    """A candidate every rule passes for the document the request shows (see the module's docstring)."""
    sentences = LINE.findall(request_text(request))
    long = [(sid, text) for sid, text in sentences if len(text) > 15] or sentences[:2]
    (purpose_id, purpose), (rule_id, rule) = long[0], long[1] if len(long) > 1 else long[0]
    coverage = []
    for sid, _ in sentences:
        if sid == purpose_id:
            coverage.append({"sentenceId": sid, "status": "MAPPED", "fieldPaths": ["documentPurpose"]})
        elif sid == rule_id:
            coverage.append({"sentenceId": sid, "status": "MAPPED", "fieldPaths": ["rules[0]"]})
        else:
            coverage.append({"sentenceId": sid, "status": "UNMAPPED", "reason": "not a field of this contract"})
    return json.dumps({
        "documentPurpose": purpose, "participants": [], "processSteps": [], "rules": [rule], "assignmentRule": None,
        "missingFields": [{"fieldPath": "assignmentRule", "question": "Who assigns the work?"}],
        "evidence": [{"fieldPath": "documentPurpose", "sourceExcerpt": purpose},
                     {"fieldPath": "rules[0]", "sourceExcerpt": rule}],
        "sentenceCoverage": coverage,
    }, ensure_ascii=False)


@pytest.fixture
def server(llm_server: Callable[..., ScriptedLLMServer]) -> ScriptedLLMServer:
    return llm_server(lambda request, number: Reply(candidate_for(request)))


def convert(paths: list[str], server: ScriptedLLMServer, db_url: str, tmp_path: Path) -> dict[str, Any]:
    env = cli_env(server.base_url, db_url, EXTRACT_OCR_CACHE=str(tmp_path / "ocr"))
    done = run_cli("run", *paths, "--model", "openai:scripted", "--format", "json", env=env, cwd=ROOT)
    assert done.returncode in (0, 2, 3), done.stderr  # 2: a file could not be used; 3: a person must look
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def show(document_run_id: int, server: ScriptedLLMServer, db_url: str, tmp_path: Path) -> str:
    env = cli_env(server.base_url, db_url, EXTRACT_OCR_CACHE=str(tmp_path / "ocr"), COLUMNS="200")
    done = run_cli("show", str(document_run_id), env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("name", ["ko_purchase_order.pdf", "ko_work_request_review.hwpx", "ko_purchase_order.xlsx"])
def test_each_sample_is_converted_through_the_cli(name: str, server: ScriptedLLMServer, db_url: str,
                                                  tmp_path: Path) -> None:
    summary = convert([f"samples/formats/{name}"], server, db_url, tmp_path)
    assert summary["counts"] == {"READY_FOR_REVIEW": 1}, summary
    assert summary["outcome"] == "PROMOTE"
    if name.endswith(".xlsx"):  # every cell is shown with its address
        printed = show(summary["outcomes"][0]["document_run_id"], server, db_url, tmp_path)
        assert "[주문!A1] ⟨s1 MAPPED⟩[[품목]]" in printed and "[주문!C3] ⟨s11 UNMAPPED⟩89000" in printed


def test_the_scanned_page_goes_to_a_person_for_a_word_ocr_was_unsure_of(server: ScriptedLLMServer, db_url: str,
                                                                        tmp_path: Path) -> None:
    """The scan is black and white at 300 dpi: Tesseract reads 요청에 as 요정에 (confidence 0.39); the candidate's
    rule quotes that sentence, so the document waits for a person, and ``extract show`` says which word and page."""
    summary = convert(["samples/formats/ko_scanned_procedure.pdf"], server, db_url, tmp_path)
    outcome = summary["outcomes"][0]
    assert outcome["state"] == "MANUAL_REVIEW" and outcome["rule_ids"] == ["EVIDENCE_LOW_OCR_CONFIDENCE"], outcome
    printed = show(outcome["document_run_id"], server, db_url, tmp_path)
    assert "[page 1]" in printed
    assert "evidence on the pages" in printed
    rows = [line for line in printed.splitlines() if "documentPurpose" in line and "│ 1 " in line]
    assert rows and "이 절차는 부서 간 작업" in rows[0]
    flat = " ".join(printed.split())
    assert "EVIDENCE_LOW_OCR_CONFIDENCE" in flat and "'요정에' 0.39 (page 1)" in flat


def test_the_email_and_its_attachment_are_two_documents(server: ScriptedLLMServer, db_url: str, tmp_path: Path) -> None:
    summary = convert(["samples/formats/ko_purchase_request.eml"], server, db_url, tmp_path)
    assert sorted(o["path"] for o in summary["outcomes"]) == [
        "samples/formats/ko_purchase_request.eml",
        "samples/formats/ko_purchase_request.eml#attachment1/ko_purchase_order.xlsx"]
    assert summary["counts"] == {"READY_FOR_REVIEW": 2}


def test_a_hostile_file_ends_input_error_and_the_batch_goes_on(server: ScriptedLLMServer, db_url: str,
                                                               tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.xlsx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("xl/worksheets/sheet1.xml", b"<x>" + b" " * 300_000_000 + b"</x>")
    summary = convert([str(bomb), "samples/formats/ko_purchase_order.xlsx"], server, db_url, tmp_path)
    states = {Path(o["path"]).name: (o["state"], o["cause"]) for o in summary["outcomes"]}
    assert states["bomb.xlsx"][0] == "INPUT_ERROR" and "refused as a zip bomb" in states["bomb.xlsx"][1]
    assert states["ko_purchase_order.xlsx"] == ("READY_FOR_REVIEW", None)


def test_evidence_from_a_footnote_says_where_it_came_from(server: ScriptedLLMServer, db_url: str,
                                                          tmp_path: Path) -> None:
    """A rule written in a footnote is read, quoted as evidence, and ``extract show`` prints the footnote's place
    before it."""
    from hwpx import HwpxDocument

    document = HwpxDocument.new()
    body = document.add_paragraph("이 절차는 구매 요청을 검토하고 승인하는 방법을 정한다.")
    document.notes.add_footnote("구매 금액이 500만원을 넘으면 대표이사가 직접 승인한다.", body)
    document.save_to_path(str(tmp_path / "footnote.hwpx"))
    summary = convert([str(tmp_path / "footnote.hwpx")], server, db_url, tmp_path)
    assert summary["counts"] == {"READY_FOR_REVIEW": 1}, summary
    printed = show(summary["outcomes"][0]["document_run_id"], server, db_url, tmp_path)
    assert "[footnote 1] ⟨s2 MAPPED⟩[[구매 금액이 500만원을 넘으면 대표이사가 직접 승인한다.]]" in printed
