"""The judge stage: strict verdicts, routing by mode, block admission, and the calibration numbers.

Judge calls go over real HTTP to the scripted OpenAI-compatible server; storage is a real database
(SQLite, and PostgreSQL when configured); calibration numbers are checked against scikit-learn.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score, matthews_corrcoef, roc_auc_score

from extractor.calibration_report import CalibrationReport
from extractor.contracts import get_contract
from extractor.engine import AdaptiveLimit, Engine, RunSettings, RunSummary
from extractor.judge.calibration import (
    CalibrationInput,
    Case,
    VerdictPolicy,
    agreement_rows,
    auroc_rows,
    bootstrap_indices,
    calibrate,
    kappa_rows,
    mcc_rows,
)
from extractor.judge.labels import LabelsError, read_labels
from extractor.judge.modes import Judge, JudgeMode, resolve_policy, same_model
from extractor.judge.stage import JudgeLink, links_for, load_rubric, model_id, run_judge
from extractor.judge.verdict import ProtocolError, parse_verdict
from extractor.offload import read_here as load_document
from extractor.providers import ProviderSettings, from_string
from extractor.store import Store, open_store
from extractor.validate import validate
from extractor.vocab import ExitCode
from tests.support.calibration import STORED_REPORT, stored_report
from tests.support.llm_server import Hang, Reply, ScriptedLLMServer, Status

ROOT = Path(__file__).resolve().parents[1]
GOOD_EN = (ROOT / "samples/expected/en_purchase_approval.candidate.json").read_text(encoding="utf-8")
SAMPLE_LABELS = ROOT / "samples/judge/labels.csv"
FAST = ProviderSettings(timeout_s=2.0, max_transport_retries=1, retry_budget_s=5, backoff_base_s=0.01, backoff_max_s=0.05)
LinkIndex = re.compile(r"^\[(\d+)\] field: ", re.MULTILINE)


# ---------------------------------------------------------------- verdict parsing


def answer(**changes: Any) -> str:
    base: dict[str, Any] = {"status": "ok", "grounded": True, "invented_facts": [], "contradicts_context": False,
                            "links": [{"index": 0, "supported": 1.0}, {"index": 1, "supported": 0.9}],
                            "verdict": "pass", "comment": ""}
    base.update(changes)
    return json.dumps(base)


def test_a_valid_verdict_is_typed_and_kept_as_said() -> None:
    verdict = parse_verdict(answer(links=[{"index": 1, "supported": 0}, {"index": 0, "supported": None}],
                                   verdict="warn", comment="step 1 is partly supported"), [0, 1])
    assert verdict.status == "ok" and verdict.verdict == "warn" and not verdict.overridden
    assert [(link.index, link.supported) for link in verdict.links] == [(0, None), (1, 0.0)]
    assert verdict.score(1) == 0.0 and isinstance(verdict.score(1), float)


def test_invented_facts_or_a_contradiction_override_any_verdict_to_fail() -> None:
    verdict = parse_verdict(answer(invented_facts=["The CFO signs every request."]), [0, 1])
    assert (verdict.model_verdict, verdict.verdict, verdict.overridden) == ("pass", "fail", True)
    assert verdict.to_json()["overridden"] is True and verdict.override_reason == "1 invented fact(s) listed"
    warned = parse_verdict(answer(verdict="warn", invented_facts=["x"]), [0, 1])
    assert (warned.model_verdict, warned.verdict) == ("warn", "fail")  # warn with invented facts is no warn
    contradicted = parse_verdict(answer(contradicts_context=True), [0, 1])
    assert contradicted.verdict == "fail" and contradicted.override_reason == "contradicts_context is true"
    both = parse_verdict(answer(verdict="warn", invented_facts=["a", "b"], contradicts_context=True), [0, 1])
    assert both.override_reason == "2 invented fact(s) listed and contradicts_context is true"
    kept = parse_verdict(answer(verdict="warn", grounded=False), [0, 1])
    assert kept.verdict == "warn" and not kept.overridden and kept.grounded is False
    assert kept.to_json()["invented_facts"] == [] and kept.to_json()["contradicts_context"] is False


@pytest.mark.parametrize(("raw", "reason"), [
    ("", "empty answer"),
    ("Sure! The excerpt supports the value.", "not JSON"),
    ("```json\n" + answer() + "\n```", "not JSON"),
    ("[]", "expected an object"),
    (answer(links=[{"index": 0, "supported": "0.9"}, {"index": 1, "supported": 1}]), "expected a number"),
    (answer(links=[{"index": 0, "supported": 1.2}, {"index": 1, "supported": 1}]), "outside [0, 1]"),
    (answer(links=[{"index": 0, "supported": -0.1}, {"index": 1, "supported": 1}]), "outside [0, 1]"),
    (answer().replace('"supported": 1.0', '"supported": NaN'), "NaN is not a JSON number"),
    (answer().replace('"supported": 1.0', '"supported": Infinity'), "Infinity is not a JSON number"),
    (answer(links=[{"index": 0, "supported": True}, {"index": 1, "supported": 1}]), "expected a number"),
    (answer(links=[{"index": 0}, {"index": 1, "supported": 1}]), "links[0] misses supported"),
    (answer(links=[{"index": 0, "supported": 1, "why": "x"}, {"index": 1, "supported": 1}]), "unexpected key(s) why"),
    (answer(links=[{"index": 0, "supported": 1}]), "link(s) 1 not scored"),
    (answer(links=[{"index": 0, "supported": 1}, {"index": 0, "supported": 1}]), "scored twice"),
    (answer(links=[{"index": 0, "supported": 1}, {"index": 7, "supported": 1}]), "7 was not asked about"),
    (answer(links=[{"index": "0", "supported": 1}, {"index": 1, "supported": 1}]), "expected an integer"),
    (answer(links={"0": 1}), "links is not a list"),
    (json.dumps({"status": "ok", "grounded": True, "invented_facts": [], "contradicts_context": False, "links": [],
                 "verdict": "pass"}), "misses comment"),
    (json.dumps({"status": "ok", "links": [], "unsupported_values": [], "verdict": "pass", "comment": ""}),
     "misses grounded, invented_facts, contradicts_context"),
    (answer(sku_valid=True), "unexpected key(s) sku_valid"),
    (answer(grounded="yes"), "grounded is \"yes\", expected true or false"),
    (answer(contradicts_context=None), "contradicts_context is null, expected true or false"),
    (answer()[:-1] + ', "verdict": "fail"}', "appears twice"),
    (answer(status="maybe"), "expected ok or not_evaluable"),
    (answer(verdict="PASS"), "expected pass, warn or fail"),
    (answer(verdict=None), "expected pass, warn or fail"),
    (answer(invented_facts="none"), "invented_facts"),
    (answer(invented_facts=[""]), "invented_facts"),
    (answer(comment=None), "comment is not a string"),
    (answer(status="not_evaluable", verdict=None, grounded=None, contradicts_context=None), "have a score"),
    (answer(status="not_evaluable", verdict="pass", links=[{"index": 0, "supported": None},
                                                            {"index": 1, "supported": None}]), "with a verdict"),
    (answer(status="not_evaluable", verdict=None, contradicts_context=None,
            links=[{"index": 0, "supported": None}, {"index": 1, "supported": None}]), "but grounded judged"),
])
def test_every_protocol_break_is_refused_with_its_reason(raw: str, reason: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        parse_verdict(raw, [0, 1])
    assert reason in refused.value.reason and "\n" not in refused.value.reason


def test_not_evaluable_needs_null_scores_and_no_verdict() -> None:
    verdict = parse_verdict(answer(status="not_evaluable", verdict=None, grounded=None, contradicts_context=None,
                                   links=[{"index": 0, "supported": None}, {"index": 1, "supported": None}]), [0, 1])
    assert verdict.status == "not_evaluable" and verdict.verdict is None


# ---------------------------------------------------------------- the stage


def en_report() -> Any:
    document = load_document(ROOT / "samples/en_purchase_approval.md")
    return validate(GOOD_EN, document, get_contract("work_procedure"))


def test_links_are_the_found_excerpts_with_values_stated_as_a_person_would() -> None:
    links = links_for(en_report())
    assert [link.index for link in links] == list(range(10))
    step = next(link for link in links if link.field_path == "processSteps[1]")
    assert step.value == "Budget owner: Approve or reject the request within three business days."
    assert step.excerpt == "The budget owner approves or rejects the request within three business days."
    assert next(link for link in links if link.field_path == "participants[0]").value == "Requester"


def test_empty_context_is_not_evaluable_without_a_call(llm_server: Callable[..., ScriptedLLMServer]) -> None:
    server = llm_server([])
    provider = from_string("openai:judge", base_url=server.base_url, settings=FAST)

    async def go() -> Any:
        try:
            return await run_judge(provider, load_rubric(), "work_procedure", [])
        finally:
            await provider.aclose()

    outcome = asyncio.run(go())
    assert outcome.kind == "not_evaluable" and outcome.verdict is None and outcome.request is None
    assert server.chat_requests == []


def test_judge_request_is_one_call_at_temperature_zero_with_the_rubric(
        llm_server: Callable[..., ScriptedLLMServer]) -> None:
    server = llm_server([Reply(answer())])
    provider = from_string("openai:judge", base_url=server.base_url, settings=FAST)
    links = [JudgeLink(0, "rules[0]", "요청만 검토한다.", "검토를 요청한 작업만 검토할 수 있습니다.", "evidence[3]"),
             JudgeLink(1, "rules[1]", "Two quotes.", "Requests above USD 10,000 need two quotes.", "evidence[4]")]

    async def go() -> Any:
        try:
            return await run_judge(provider, load_rubric("v2"), "work_procedure", links)
        finally:
            await provider.aclose()

    outcome = asyncio.run(go())
    assert outcome.kind == "judged" and outcome.verdict is not None and outcome.verdict.verdict == "pass"
    [request] = server.chat_requests
    assert request.json["temperature"] == 0
    system, user = request.json["messages"]
    assert "strict checker of evidence links" in system["content"]
    assert "[0] field: rules[0]\nvalue: 요청만 검토한다.\nexcerpt: 검토를 요청한 작업만 검토할 수 있습니다." in user["content"]
    assert request.json["response_format"]["json_schema"]["name"] == "judge_verdict_v2"


# ---------------------------------------------------------------- in the pipeline


def verdict_for(request: dict[str, Any] | None, *, score: float = 1.0, low: dict[int, float] | None = None,
                verdict: str = "pass", invented: list[str] | None = None, contradicts: bool = False,
                grounded: bool = True) -> str:
    """A valid judge answer for whatever links the request asks about."""
    indices = [int(i) for i in LinkIndex.findall((request or {})["messages"][1]["content"])]
    low = low or {}
    return json.dumps({"status": "ok", "grounded": grounded, "invented_facts": invented or [],
                       "contradicts_context": contradicts,
                       "links": [{"index": i, "supported": low.get(i, score)} for i in indices],
                       "verdict": verdict, "comment": ""})


@pytest.fixture
def en_doc(tmp_path: Path) -> Path:
    target = tmp_path / "docs" / "purchase.md"
    target.parent.mkdir()
    target.write_bytes((ROOT / "samples/en_purchase_approval.md").read_bytes())
    return target


def judged_run(paths: list[Path], generator: ScriptedLLMServer, judge: ScriptedLLMServer, db_url: str, *,
               mode: str = "review", threshold: float = 0.8, judge_name: str = "judge",
               generator_name: str = "generator") -> tuple[RunSummary, Store, Judge]:
    store = open_store(db_url)
    limit = AdaptiveLimit(2)
    provider = from_string(f"openai:{generator_name}", base_url=generator.base_url, settings=FAST)
    judge_provider = from_string(f"openai:{judge_name}", base_url=judge.base_url, settings=FAST)
    policy = resolve_policy(store, model_id(judge_provider), "v2", threshold, JudgeMode(mode))
    run_judge_ = Judge(judge_provider, policy, load_rubric("v2"), same_model_as_generator=same_model(provider, judge_provider))
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"), concurrency=2),
                        limit=limit, judge=run_judge_)

    return asyncio.run(engine.run([str(p) for p in paths])), store, run_judge_


def single(summary: RunSummary) -> Any:
    assert len(summary.outcomes) == 1, summary.to_json()
    return summary.outcomes[0]


def judge_attempts(store: Store, summary: RunSummary) -> list[Any]:
    return [a for a in store.attempts_for(single(summary).document_run_id) if a.kind == "judge"]


def judge_attempt(store: Store, summary: RunSummary) -> Any:
    judged = judge_attempts(store, summary)
    assert len(judged) == 1, [(a.kind, a.outcome) for a in judged]
    return judged[0]


def test_garbage_from_the_judge_goes_to_manual_review_raw_and_never_as_a_score(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    generator = llm_server([Reply(GOOD_EN)])
    garbage = '{"status": "ok", "links": [{"index": 0, "supported": "0.9"}], "verdict": "pass"} thanks!'
    judge = llm_server([Reply(garbage)])
    summary, store, _ = judged_run([en_doc], generator, judge, db_url)
    outcome = single(summary)
    assert outcome.state == "MANUAL_REVIEW" and outcome.cause.startswith("judge protocol error: not JSON")
    attempt = judge_attempt(store, summary)
    assert attempt.outcome == "protocol_error" and attempt.raw_response == garbage
    assert attempt.parsed is None and attempt.passed is None and attempt.prompt_version == "judge/v2"
    assert attempt.request["temperature"] == 0.0 and attempt.error.startswith("not JSON")
    document_run = store.document_runs_for(summary.run_id)[0]
    assert document_run.needs_person == ["JUDGE_PROTOCOL_ERROR"]
    generate = store.attempts_for(outcome.document_run_id)[0]
    assert generate.kind == "generate" and document_run.final_attempt_id == generate.id  # the candidate stays final
    assert store.integrity_check() == []


def test_a_string_score_is_a_protocol_error_not_a_number(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path,
                                                           db_url: str) -> None:
    generator = llm_server([Reply(GOOD_EN)])
    judge = llm_server(lambda request, number: Reply(verdict_for(request).replace('"supported": 1.0', '"supported": "1.0"', 1)))
    summary, store, run_judge_ = judged_run([en_doc], generator, judge, db_url, mode="observe")
    assert single(summary).state == "MANUAL_REVIEW"  # even in observe mode: no measurement is not a pass
    assert "links[0].supported" in single(summary).cause and judge_attempt(store, summary).parsed is None
    assert run_judge_.counts == {"protocol_error": 1}


def test_judge_is_called_only_for_candidates_that_passed_every_rule(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    bad = json.loads(GOOD_EN)
    bad["rules"].append("Every purchase needs the CFO's signature.")  # no evidence: fails twice
    (en_doc.parent / "other.md").write_bytes(en_doc.read_bytes() + b"\nOne more closing sentence.\n")
    generator = llm_server(lambda request, number: Reply(
        GOOD_EN if "One more closing sentence" not in json.dumps(request, ensure_ascii=False) else json.dumps(bad)))
    judge = llm_server(lambda request, number: Reply(verdict_for(request)))
    summary, store, _ = judged_run([en_doc.parent], generator, judge, db_url)
    states = {Path(o.path).name: o.state for o in summary.outcomes}
    assert states == {"purchase.md": "READY_FOR_REVIEW", "other.md": "MANUAL_REVIEW"}
    assert len(generator.chat_requests) == 3 and len(judge.chat_requests) == 1
    failed = next(o for o in summary.outcomes if o.path.endswith("other.md"))
    assert [a.kind for a in store.attempts_for(failed.document_run_id)] == ["generate", "repair"]
    passed = next(o for o in summary.outcomes if o.path.endswith("purchase.md"))
    attempt = judge_attempt(store, summary=RunSummary(summary.run_id, [passed]))
    assert attempt.outcome == "passed" and attempt.passed is True
    assert attempt.parsed["verdict"]["verdict"] == "pass" and len(attempt.parsed["links"]) == 10
    assert passed.tokens == 30  # generation 15 + judge 15


@pytest.mark.parametrize(("mode", "reply", "state", "marks", "cause_start", "result"), [
    ("observe", {"low": {5: 0.3}, "verdict": "fail"}, "READY_FOR_REVIEW", [], None, "fail"),
    ("review", {"low": {5: 0.3}, "verdict": "fail"}, "MANUAL_REVIEW", ["JUDGE_FAIL"], "judge fail (review mode", "fail"),
    ("review", {"low": {5: 0.79}, "verdict": "pass"}, "MANUAL_REVIEW", ["JUDGE_FAIL"], "judge fail (review mode", "fail"),
    # the model's verdict alone, every link supported and no reason given: the cause says there was none
    ("review", {"verdict": "fail"}, "MANUAL_REVIEW", ["JUDGE_FAIL"], "judge fail (review mode, threshold 0.8): verdict "
     "fail, no reason given", "fail"),
    # warn: the reviewer's queue, not back to the model, with the warning shown first
    ("review", {"verdict": "warn"}, "READY_FOR_REVIEW", ["JUDGE_WARN"], "judge warn (review mode", "warn"),
    ("review", {"invented": ["Approve or reject"], "verdict": "pass"}, "MANUAL_REVIEW", ["JUDGE_FAIL"],
     "judge fail (review mode", "fail"),
    ("review", {"invented": ["within two days"], "verdict": "warn"}, "MANUAL_REVIEW", ["JUDGE_FAIL"],
     "judge fail (review mode", "fail"),
    ("review", {"contradicts": True, "verdict": "pass"}, "MANUAL_REVIEW", ["JUDGE_FAIL"], "judge fail (review mode",
     "fail"),
    ("review", {"score": 0.8}, "READY_FOR_REVIEW", [], None, "pass"),
    # block without an admitting calibration on record is downgraded to review
    ("block", {"low": {5: 0.3}, "verdict": "fail"}, "MANUAL_REVIEW", ["JUDGE_FAIL"], "judge fail (review mode", "fail"),
])
def test_modes_decide_what_a_judge_failure_does(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str,
                                               mode: str, reply: dict[str, Any], state: str, marks: list[str],
                                               cause_start: str | None, result: str) -> None:
    generator = llm_server(lambda request, number: Reply(GOOD_EN))
    judge = llm_server(lambda request, number: Reply(verdict_for(request, **reply)))
    summary, store, run_judge_ = judged_run([en_doc], generator, judge, db_url, mode=mode)
    outcome = single(summary)
    assert outcome.state == state
    assert store.document_runs_for(summary.run_id)[0].needs_person == marks
    if cause_start is None:
        assert outcome.cause is None
    else:
        assert outcome.cause.startswith(cause_start)
    # a measured fail in review or block mode is regenerated once and judged again (here: failed again)
    regenerated = result == "fail" and mode != "observe"
    judged = judge_attempts(store, summary)
    assert len(judged) == (2 if regenerated else 1) and [a.number for a in judged] == list(range(1, len(judged) + 1))
    attempt = judged[0]
    assert attempt.parsed["decision"]["result"] == result and run_judge_.counts == {result: len(judged)}
    assert (attempt.outcome, attempt.passed) == (("passed", True) if result == "pass" else ("failed", False))
    kinds = [(a.kind, a.number) for a in store.attempts_for(outcome.document_run_id) if a.kind != "judge"]
    assert kinds == ([("generate", 1), ("generate", 3)] if regenerated else [("generate", 1)])
    if regenerated:
        assert outcome.cause.endswith("(the judge failed it twice; regenerated once)") and run_judge_.regenerations == 1
    if "invented" in reply or "contradicts" in reply:
        assert attempt.parsed["verdict"]["overridden"] and attempt.parsed["verdict"]["model_verdict"] == reply["verdict"]
        assert "overridden to fail" in outcome.cause
    if "low" in reply and mode != "observe":
        assert f"processSteps[1] supported {reply['low'][5]:.2f} < 0.8" in outcome.cause
    if mode == "block":
        assert run_judge_.policy.mode is JudgeMode.review and "none is on record" in run_judge_.policy.reason
    config = store.get_run(summary.run_id).config["judge"]
    assert config["mode"] == run_judge_.policy.mode.value and config["requested_mode"] == mode
    assert config["threshold"] == 0.8 and config["rubric_version"] == "v2"


def save(store: Store, verdict: str, model: str = "openai:judge", threshold: float = 0.8) -> int:
    return store.save_calibration(stored_report(model, verdict, threshold))


def test_block_needs_an_admitting_calibration_for_exactly_this_model_rubric_and_threshold(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    with open_store(db_url) as store:
        save(store, "admit-block", model="openai:other-judge")
        save(store, "admit-block", threshold=0.7)
        save(store, "admit-review")
        assert resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.block).mode is JudgeMode.review
        assert "says admit-review" in resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.block).reason
        admitted = save(store, "admit-block")
        policy = resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.block)
        assert policy.mode is JudgeMode.block and policy.reason is None and policy.calibration_id == admitted
        assert resolve_policy(store, "openai:judge", "v3", 0.8, JudgeMode.block).mode is JudgeMode.review
        assert store.latest_calibration("openai:judge", "v2", 0.8).id == admitted

    generator = llm_server(lambda request, number: Reply(GOOD_EN))
    judge = llm_server(lambda request, number: Reply(verdict_for(request, low={5: 0.2}, verdict="fail")))
    summary, store, _ = judged_run([en_doc], generator, judge, db_url, mode="block")
    outcome = single(summary)
    assert outcome.state == "BLOCKED" and outcome.cause.startswith("BLOCK: judge fail (block mode")
    assert outcome.cause.endswith("(the judge failed it twice; regenerated once)")
    assert f"calibration #{admitted}" in outcome.cause and "processSteps[1] supported 0.20 < 0.8" in outcome.cause
    assert store.document_runs_for(summary.run_id)[0].needs_person == ["BLOCK", "JUDGE_FAIL"]

    save(store, "reject")  # a newer report withdraws the admission
    assert resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.block).mode is JudgeMode.review
    assert store.latest_calibration("openai:judge", "v2", 0.8).verdict == "reject"


def test_judge_transport_failure_goes_to_a_person_not_to_error(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    generator = llm_server([Reply(GOOD_EN)])
    judge = llm_server([Status(500), Status(500)])
    summary, store, _ = judged_run([en_doc], generator, judge, db_url)
    outcome = single(summary)
    assert outcome.state == "MANUAL_REVIEW"
    assert outcome.cause.startswith("judge call failed: HTTP 500") and "passed the rules but was not judged" in outcome.cause
    attempt = judge_attempt(store, summary)
    assert attempt.outcome == "transport_error" and attempt.raw_response is None
    assert [t["outcome"] for t in attempt.transport] == ["http_500", "http_500"]


def test_interrupted_while_the_judge_thinks_is_recorded_and_resumable(
        llm_server: Callable[..., ScriptedLLMServer], en_doc: Path, db_url: str) -> None:
    generator = llm_server([Reply(GOOD_EN)])
    judge = llm_server([Hang(10)])
    store = open_store(db_url)
    provider = from_string("openai:generator", base_url=generator.base_url, settings=FAST)
    judge_provider = from_string("openai:judge", base_url=judge.base_url, settings=FAST)
    policy = resolve_policy(store, model_id(judge_provider), "v2", 0.8, JudgeMode.review)
    run_judge_ = Judge(judge_provider, policy, load_rubric("v2"))
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure")), judge=run_judge_)

    async def go() -> RunSummary:
        task = asyncio.create_task(engine.run([str(en_doc)]))
        while not judge.chat_requests:
            await asyncio.sleep(0.02)
        task.cancel()
        try:
            return await task
        finally:
            await run_judge_.aclose()

    summary = asyncio.run(go())
    assert summary.interrupted and single(summary).state == "INTERRUPTED"
    [document_run] = store.document_runs_for(summary.run_id)
    attempts = store.attempts_for(document_run.id)
    assert [(a.kind, a.outcome) for a in attempts] == [("generate", "passed"), ("judge", "interrupted")]
    assert attempts[1].request["temperature"] == 0.0 and document_run.state == "INTERRUPTED"


def test_a_candidate_with_nothing_to_judge_is_not_evaluable_and_no_call_is_made(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("Meeting notes\n\nThe room was booked for Tuesday.\n", encoding="utf-8")
    sentences = [s.id for s in load_document(path).sentences]
    empty = {"documentPurpose": None, "participants": [], "processSteps": [], "rules": [], "assignmentRule": None,
             "missingFields": [{"fieldPath": "documentPurpose", "question": "What is this procedure for?"},
                               {"fieldPath": "assignmentRule", "question": "Who is assigned?"}],
             "evidence": [], "sentenceCoverage": [{"sentenceId": s, "status": "EXCLUDED", "reason": "not a procedure"}
                                                  for s in sentences]}
    generator = llm_server([Reply(json.dumps(empty))])
    judge = llm_server([])
    summary, store, _ = judged_run([path], generator, judge, db_url)
    outcome = single(summary)
    assert outcome.state == "MANUAL_REVIEW" and "judge not evaluable: no evidence link" in outcome.cause
    assert "EXTRACTION_EMPTY" in outcome.cause  # nothing extracted is not a pass either
    assert judge.chat_requests == [] and [a.kind for a in store.attempts_for(outcome.document_run_id)] == ["generate"]


def test_judge_model_is_part_of_the_config_hash(llm_server: Callable[..., ScriptedLLMServer], en_doc: Path,
                                                db_url: str) -> None:
    generator = llm_server(lambda request, number: Reply(GOOD_EN))
    judge = llm_server(lambda request, number: Reply(verdict_for(request)))
    first, store, _ = judged_run([en_doc], generator, judge, db_url, judge_name="judge-a")
    second, _, _ = judged_run([en_doc], generator, judge, db_url, judge_name="judge-b")
    again, _, _ = judged_run([en_doc], generator, judge, db_url, judge_name="judge-b")
    assert [single(s).state for s in (first, second, again)] == ["READY_FOR_REVIEW", "READY_FOR_REVIEW", "SKIPPED"]
    runs = [store.get_run(s.run_id) for s in (first, second)]
    assert [r.judge_model for r in runs] == ["openai:judge-a", "openai:judge-b"]
    assert runs[0].config_hash != runs[1].config_hash


# ---------------------------------------------------------------- calibration numbers against scikit-learn


def fixed_data(n: int = 90, seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    gold = (rng.random(n) < 0.55).astype(int)
    other = np.where(rng.random(n) < 0.85, gold, 1 - gold)
    scores = np.clip(np.round(gold * 0.35 + rng.random(n) * 0.65, 1), 0, 1)  # rounded: many ties
    return gold, other, scores


def test_point_metrics_match_scikit_learn() -> None:
    gold, other, scores = fixed_data()
    assert kappa_rows(gold, other)[0] == pytest.approx(cohen_kappa_score(gold, other), abs=1e-12)
    assert auroc_rows(gold, scores)[0] == pytest.approx(roc_auc_score(gold, scores), abs=1e-12)
    for threshold in (0.1, 0.5, 0.8, 0.9):
        predicted = scores >= threshold
        assert mcc_rows(gold, predicted)[0] == pytest.approx(matthews_corrcoef(gold, predicted), abs=1e-12)
        assert agreement_rows(gold, predicted)[0] == pytest.approx(float(np.mean(gold == predicted)))
    everything_supported = np.ones_like(gold, dtype=bool)
    assert mcc_rows(gold, everything_supported)[0] == matthews_corrcoef(gold, everything_supported) == 0.0


def test_every_resample_matches_scikit_learn() -> None:
    gold, other, scores = fixed_data(40)
    idx = bootstrap_indices(len(gold), 200, 42)
    ours_auc, ours_kappa = auroc_rows(gold[idx], scores[idx]), kappa_rows(gold[idx], other[idx])
    ours_mcc = mcc_rows(gold[idx], scores[idx] >= 0.8)
    for row, sample in enumerate(idx):
        y = gold[sample]
        if len(set(y)) == 2:
            assert ours_auc[row] == pytest.approx(roc_auc_score(y, scores[sample]), abs=1e-12)
        else:
            assert math.isnan(ours_auc[row])
        assert ours_mcc[row] == pytest.approx(matthews_corrcoef(y, scores[sample] >= 0.8), abs=1e-12)
        if len(set(y) | set(other[sample])) == 2:
            assert ours_kappa[row] == pytest.approx(cohen_kappa_score(y, other[sample]), abs=1e-12)


def reference_interval(metric: Callable[[np.ndarray], float | None], n: int) -> tuple[float, float]:
    """The plain way: loop over the resamples, scikit-learn per resample, percentiles of the defined ones."""
    values = []
    for sample in bootstrap_indices(n, 1000, 42):
        value = metric(sample)
        if value is not None:
            values.append(value)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def cases_from(gold: np.ndarray, other: np.ndarray, scores: np.ndarray) -> list[Case]:
    return [Case(f"c{i}", int(a), int(b), None, float(s)) for i, (a, b, s) in enumerate(zip(gold, other, scores))]


def test_report_and_bootstrap_intervals_match_a_reference_built_on_scikit_learn() -> None:
    gold, other, scores = fixed_data()
    report = calibrate(CalibrationInput(cases_from(gold, other, scores), "openai:j", "v1", "x.csv", "0" * 64, "test"))
    used = gold == other  # disagreements are left out of the judge's metrics
    y, s = gold[used], scores[used]
    assert report.cases.used == int(used.sum()) and report.cases.disagreements == int((~used).sum())

    def auc(sample: np.ndarray) -> float | None:
        return roc_auc_score(y[sample], s[sample]) if len(set(y[sample])) == 2 else None

    auroc, mcc = report.judge.auroc, report.judge.mcc
    assert auroc is not None and mcc is not None
    assert auroc.value == pytest.approx(roc_auc_score(y, s))
    assert (auroc.low, auroc.high) == pytest.approx(reference_interval(auc, len(y)))
    assert mcc.value == pytest.approx(matthews_corrcoef(y, s >= 0.8))
    assert (mcc.low, mcc.high) == pytest.approx(
        reference_interval(lambda i: matthews_corrcoef(y[i], s[i] >= 0.8), len(y)))
    sweep = {point.threshold: point for point in report.judge.sweep}
    assert list(sweep) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert (sweep[0.3].agreement.low, sweep[0.3].agreement.high) == pytest.approx(
        reference_interval(lambda i: float(np.mean(y[i] == (s[i] >= 0.3))), len(y)))

    def kappa(sample: np.ndarray) -> float | None:
        a, b = gold[sample], other[sample]
        return cohen_kappa_score(a, b) if len(set(a) | set(b)) == 2 else None

    annotators = report.annotators
    assert annotators.kappa.value == pytest.approx(cohen_kappa_score(gold, other))
    assert (annotators.kappa.low, annotators.kappa.high) == pytest.approx(reference_interval(kappa, len(gold)))
    assert annotators.raw_agreement.value == pytest.approx(float(np.mean(gold == other)))
    misses = {m.case_id for m in report.confident_misses}
    assert misses == {f"c{i}" for i in np.flatnonzero(used & (gold == 0) & (scores >= 0.9))}
    assert report.bootstrap.resamples == 1000 and report.bootstrap.seed == 42
    again = calibrate(CalibrationInput(cases_from(gold, other, scores), "openai:j", "v1", "x.csv", "0" * 64, "test"))
    assert again == report  # fixed seed: reproducible
    assert CalibrationReport.from_json(json.loads(json.dumps(report.to_json()))) == report  # what is stored reads back


def test_a_report_stored_before_the_typed_report_still_loads_and_prints_the_same_json() -> None:
    stored = json.loads(STORED_REPORT.read_text(encoding="utf-8"))
    report = CalibrationReport.from_json(stored)
    assert json.dumps(report.to_json()) == json.dumps(stored)  # the same keys, values and order, nested too
    assert report.verdict == "admit-review" and report.judge.auroc is not None and report.judge.auroc.value > 0.85
    assert report.summary == stored["summary"] and report.threshold == 0.8
    with pytest.raises(ValueError, match="schema 'judge-calibration/2'"):
        CalibrationReport.from_json({**stored, "schema": "judge-calibration/2"})


def test_kappa_is_undefined_for_one_class_never_a_number() -> None:
    ones = np.ones(40, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert math.isnan(cohen_kappa_score(ones, ones))
    report = calibrate(CalibrationInput(cases_from(ones, ones, np.linspace(0.5, 1, 40)), "m", "v1", "x", "0" * 64, "t"))
    kappa = report.annotators.kappa
    assert kappa.value is None and kappa.low is None and "only label 1" in (kappa.undefined_reason or "")
    assert report.judge.auroc is not None and report.judge.auroc.value is None and report.verdict == "reject"
    assert "undefined" in report.reasons[0]
    assert (report.balance.warning or "").startswith("class balance: the minority class is 0%")
    assert CalibrationReport.from_json(report.to_json()) == report


def test_class_balance_warning_under_30_percent_and_verdicts() -> None:
    rng = np.random.default_rng(3)
    gold = (rng.random(200) < 0.2).astype(int)
    scores = np.where(gold == 1, rng.uniform(0.7, 1, 200), rng.uniform(0, 0.6, 200))
    lopsided = calibrate(CalibrationInput(cases_from(gold, gold, scores), "m", "v1", "x", "0" * 64, "t"))
    assert not lopsided.balance.ok and "(< 30%)" in (lopsided.balance.warning or "")
    assert lopsided.verdict == "admit-review" and any("minority class" in r for r in lopsided.reasons)

    gold = np.array([1, 0] * 75)
    strong = np.where(gold == 1, rng.uniform(0.82, 1, 150), rng.uniform(0, 0.5, 150))
    assert calibrate(CalibrationInput(cases_from(gold, gold, strong), "m", "v1", "x", "0" * 64, "t")).verdict == "admit-block"
    few = calibrate(CalibrationInput(cases_from(gold[:50], gold[:50], strong[:50]), "m", "v1", "x", "0" * 64, "t"))
    assert few.verdict == "admit-review" and "50 usable cases < 100" in " ".join(few.reasons)
    chance = calibrate(CalibrationInput(cases_from(gold, gold, rng.random(150)), "m", "v1", "x", "0" * 64, "t"))
    assert chance.verdict == "reject" and "near 0.5" in chance.reasons[0]
    strict = VerdictPolicy(block_min_cases=200, resamples=200)
    assert calibrate(CalibrationInput(cases_from(gold, gold, strong), "m", "v1", "x", "0" * 64, "t"), strict).verdict == "admit-review"


# ---------------------------------------------------------------- labels files


@pytest.mark.parametrize(("content", "problem"), [
    ("", "empty file"),
    ("case_id,human_label_1,human_label_2,judge_score\n", "no cases"),
    ("case_id,human_label_1,judge_score\na,1,0.5\n", "missing column(s) human_label_2"),
    ("case_id,human_label_1,human_label_2\na,1,0\n", "missing column(s) judge_score"),
    ("case_id,human_label_1,human_label_2,judge_score\na,1,yes,0.5\n", "row 2: human_label_2 is 'yes', expected 0 or 1"),
    ("case_id,human_label_1,human_label_2,judge_score\na,1,,0.5\n", "human_label_2 is empty"),
    ("case_id,human_label_1,human_label_2,judge_score\na,1,1,0.5\na,0,0,0.2\n", "case_id 'a' repeats row 2"),
    ("case_id,human_label_1,human_label_2,judge_score\na,1,1,1.5\n", "judge_score is '1.5', outside [0, 1]"),
    ("case_id,human_label_1,human_label_2,judge_score\na,1,1,nan\n", "outside [0, 1]"),
    ("case_id,human_label_1,human_label_2,judge_score\na,1,1,high\n", "expected a number from 0 to 1"),
])
def test_bad_labels_files_are_refused_with_one_line(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "labels.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(LabelsError) as refused:
        read_labels(path, "judge_score")
    assert str(refused.value).startswith(f"{path}: ") and problem in str(refused.value)


def test_sample_labels_file_reads() -> None:
    cases, model = read_labels(SAMPLE_LABELS, "judge_score")
    assert 40 <= len(cases) <= 60 and model is None
    assert {c.source.split("_")[0] for c in cases} == {"ko", "en", "ru"}
    assert sum(c.label_1 != c.label_2 for c in cases) >= 3 and all(c.score is not None for c in cases)


# ---------------------------------------------------------------- the command line


def extract(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "extractor", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


def test_cli_calibrate_the_sample_prints_the_table_writes_the_plot_and_stores_the_report(
        tmp_path: Path, db_url: str) -> None:
    env = {**os.environ, "EXTRACT_DATABASE_URL": db_url, "COLUMNS": "200"}
    labels = tmp_path / "labels.csv"
    labels.write_bytes(SAMPLE_LABELS.read_bytes())
    result = extract("judge", "calibrate", str(labels), "--scores-column", "judge_score", "--model-id",
                     "openai:sample-judge", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("Cohen's kappa", "AUROC (raw scores)", "MCC at 0.8", "threshold sweep", "confident misses",
                     "disagreements for adjudication", "verdict: admit-review", "stored as calibration #1"):
        assert expected in out, out
    assert out.index("class balance") < out.index("Cohen's kappa") < out.index("AUROC")
    plot = tmp_path / "labels.sweep.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open_store(db_url) as store:
        [stored] = store.calibrations()
        assert (stored.judge_model, stored.rubric_version, stored.threshold, stored.verdict) == (
            "openai:sample-judge", "v2", 0.8, "admit-review")
        assert stored.report.judge.auroc is not None and stored.report.judge.auroc.value > 0.85 and stored.n_cases == 48

    listed = extract("judge", "reports", "--format", "json", env=env, cwd=tmp_path)
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["verdict"] == "admit-review"

    broken = tmp_path / "broken.csv"
    broken.write_text("case_id,human_label_1\na,1\n", encoding="utf-8")
    result = extract("judge", "calibrate", str(broken), "--scores-column", "judge_score", env=env, cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and str(broken) in result.stderr


LINK = re.compile(r"^\[(\d+)\] field: .*\nvalue: (.*)$", re.MULTILINE)


def scripted_judge(request: dict[str, Any] | None, number: int) -> Reply:
    """Scores each link by its value's marker ("yes ..." is supported); one marker answers garbage."""
    user = (request or {})["messages"][1]["content"]
    if "GARBAGE" in user:
        return Reply("I think it is supported.")
    links = [(int(index), value) for index, value in LINK.findall(user)]
    scores = {index: 0.95 if value.startswith("yes") else 0.05 for index, value in links}
    unsupported = [value for index, value in links if scores[index] < 0.5]
    return Reply(json.dumps({"status": "ok", "grounded": not unsupported, "invented_facts": unsupported,
                             "contradicts_context": False,
                             "links": [{"index": i, "supported": s} for i, s in scores.items()],
                             "verdict": "fail" if unsupported else "pass", "comment": ""}))


def test_cli_calibrate_with_a_judge_admits_block_and_run_then_blocks(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, en_doc: Path, db_url: str) -> None:
    judge = llm_server(scripted_judge)
    labels = tmp_path / "judged.csv"
    with labels.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["case_id", "value", "excerpt", "human_label_1", "human_label_2"])
        for i in range(120):
            label = i % 2
            writer.writerow([f"c{i}", f"{'yes' if label else 'no'} value {i}", f"excerpt {i}", label, label])
        writer.writerow(["broken", "GARBAGE", "excerpt", 1, 1])
    env = {**os.environ, "EXTRACT_DATABASE_URL": db_url, "OPENAI_BASE_URL": judge.base_url, "COLUMNS": "200"}
    env.pop("OPENAI_API_KEY", None)
    result = extract("judge", "calibrate", str(labels), "--judge", "openai:scripted-judge", "--format", "json",
                     "--plot", str(tmp_path / "plot.png"), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "admit-block" and report["judge_model"] == "openai:scripted-judge"
    assert report["cases"]["protocol_errors"] == 1 and report["cases"]["used"] == 120
    assert report["judge_problems"] == [{"case_id": "broken", "status": "protocol_error",
                                         "error": "not JSON (Expecting value at line 1 column 1)"}]
    assert len(judge.chat_requests) == 121

    generator = llm_server(lambda request, number: Reply(GOOD_EN))
    result = extract("run", str(en_doc), "--model", "openai:generator", "--base-url", generator.base_url,
                     "--judge", "openai:scripted-judge", "--judge-base-url", judge.base_url, "--judge-mode", "block",
                     "--judge-concurrency", "3", "--judge-queue", "5", "--judge-timeout", "7.5",
                     "--format", "json", env=env, cwd=tmp_path)
    assert result.returncode == ExitCode.FAILED, result.stderr  # a BLOCKED document makes the run BLOCK
    assert "note: judge runs in" not in result.stderr and "warning" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["judge"]["mode"] == "block" and summary["judge"]["calibration_id"] == report["id"]
    assert (summary["judge"]["concurrency"], summary["judge"]["queue"], summary["judge"]["timeout_s"]) == (3, 5, 7.5)
    # the scripted judge scores values not starting with "yes" at 0.05: the candidate is blocked
    [outcome] = summary["outcomes"]
    assert outcome["state"] == "BLOCKED" and outcome["cause"].startswith("BLOCK: judge fail (block mode")
    assert summary["judge"]["results"] == {"fail": 2} and summary["judge"]["regenerations"] == 1


def test_cli_run_warns_when_the_judge_is_the_generator_and_says_why_block_is_refused(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, en_doc: Path, db_url: str) -> None:
    server = llm_server(lambda request, number: Reply(
        verdict_for(request) if "evidence links" in json.dumps(request) else GOOD_EN))
    env = {**os.environ, "EXTRACT_DATABASE_URL": db_url, "OPENAI_BASE_URL": server.base_url}
    env.pop("OPENAI_API_KEY", None)
    result = extract("run", str(en_doc), "--model", "openai:same", "--judge", "openai:same", "--judge-mode", "block",
                     "--format", "json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning: the judge (openai:same) is the generator's own model" in result.stderr
    assert "note: judge runs in review mode: block mode needs an admit-block calibration for openai:same + rubric v2 " \
           "+ threshold 0.8; none is on record" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["counts"] == {"READY_FOR_REVIEW": 1} and summary["judge"]["same_model_as_generator"] is True
    with open_store(db_url) as store:
        run = store.get_run(summary["run_id"])
        assert run.judge_model == "openai:same" and run.config["judge"]["same_model_as_generator"] is True
        assert run.config["judge"]["mode"] == "review" and run.config["judge"]["requested_mode"] == "block"
    refused = extract("run", str(en_doc), "--model", "openai:same", "--judge-mode", "block", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "error: --judge-mode needs --judge MODEL" in refused.stderr


def test_judge_help_does_not_import_heavy_stacks() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['extract', 'judge', 'calibrate', '--help']\n"
        "from extractor import cli\n"
        "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
        "heavy = {'numpy', 'matplotlib', 'openai', 'sqlalchemy', 'rich_table'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "--scores-column" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"
