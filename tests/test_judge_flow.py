"""The judge as docs/design.md#judge describes it, through real HTTP to scripted generator and judge servers and a real run log.

One regeneration with stronger context after a fail; a judge that cannot answer (5xx, timeout, garbage) is
not evaluable, goes to a person and is never counted as a fail by ``extract compare``; a judge warning stays
READY_FOR_REVIEW and is shown first; slow judging never holds generation slots; modes per judge metric and
per rule come from the contract settings, which are hashed into the run's configuration.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from extractor.contracts import get_contract
from extractor.contracts.settings import Modes, SettingsError, rule_mode
from extractor.engine import AdaptiveLimit, Engine, RunSettings, RunSummary
from extractor.engine.route import route
from extractor.gate import Category, decide_release
from extractor.judge.modes import Judge, JudgeQueue, resolve_policy
from extractor.judge.stage import load_rubric, model_id
from extractor.offload import read_here as load_document
from extractor.providers import ProviderSettings, from_string
from extractor.store import DocumentRunInfo, RunConfig, Store, open_store
from extractor.validate import validate
from extractor.vocab import GateDecision, JudgeMode
from tests.support.calibration import stored_report
from tests.support.corpus import GOOD, invented, script, write_documents
from tests.support.corpus import run as corpus_run
from tests.support.llm_server import Hang, Reply, ScriptedLLMServer, Status

ROOT = Path(__file__).resolve().parents[1]
GOOD_EN = json.dumps(GOOD)
FAST = ProviderSettings(timeout_s=5.0, max_transport_retries=1, retry_budget_s=5, backoff_base_s=0.01, backoff_max_s=0.05)
LINK = re.compile(r"^\[(\d+)\] field: ", re.MULTILINE)


def verdict(request: dict[str, Any] | None, *, verdict: str = "pass", score: float = 1.0,
            invented_facts: list[str] | None = None, contradicts: bool = False) -> str:
    """A valid rubric-v2 answer for every link the request asks about."""
    indices = [int(i) for i in LINK.findall((request or {})["messages"][1]["content"])]
    return json.dumps({"status": "ok", "grounded": not invented_facts and not contradicts,
                       "invented_facts": invented_facts or [], "contradicts_context": contradicts,
                       "links": [{"index": i, "supported": score} for i in indices], "verdict": verdict, "comment": ""})


def show_text(store: Store, document_run: DocumentRunInfo) -> str:
    """What ``extract show DOC`` prints for this document run (rendered in process, without colours)."""
    from rich.console import Console

    from extractor.review.view import document_view
    from extractor.ui.review import print_document_view

    console = Console(record=True, width=250, color_system=None, file=io.StringIO())
    print_document_view(document_view(store, store, document_run), console)
    return console.export_text()


def judged(paths: list[Path], generator: ScriptedLLMServer, judge: ScriptedLLMServer, db_url: str, *,
           judge_name: str = "judge", concurrency: int = 2, queue: JudgeQueue | None = None,
           judge_settings: ProviderSettings = FAST, mode: JudgeMode = JudgeMode.review) -> tuple[RunSummary, Store]:
    """One run in process: the real engine, real HTTP, the real store."""
    store = open_store(db_url)
    limit = AdaptiveLimit(concurrency)
    provider = from_string("openai:base", base_url=generator.base_url, settings=FAST, on_rate_limit=limit.on_rate_limit)
    judge_queue = queue or JudgeQueue()
    judge_provider = from_string(f"openai:{judge_name}", base_url=judge.base_url, settings=judge_settings,
                                 on_rate_limit=judge_queue.limit.on_rate_limit, on_timeout=judge_queue.limit.on_timeout)
    policy = resolve_policy(store, model_id(judge_provider), "v2", 0.8, mode)
    run_judge = Judge(judge_provider, policy, load_rubric("v2"), queue=judge_queue)
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"), concurrency=concurrency),
                    limit=limit, judge=run_judge)
    return asyncio.run(engine.run([str(p) for p in paths])), store


def attempts(store: Store, summary: RunSummary) -> list[Any]:
    [outcome] = summary.outcomes
    return store.attempts_for(outcome.document_run_id)


# ---------------------------------------------------------------- regeneration


def test_a_judge_fail_gets_one_regeneration_with_the_findings_and_the_sentences_around_every_excerpt(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    [path] = write_documents(tmp_path / "docs", [1])
    generator = llm_server(lambda request, number: Reply(GOOD_EN))
    judge = llm_server(lambda request, number: Reply(
        verdict(request, verdict="pass", invented_facts=["within three business days"]) if number == 1
        else verdict(request)))
    summary, store = judged([path], generator, judge, db_url)
    [outcome] = summary.outcomes
    assert outcome.state == "READY_FOR_REVIEW" and outcome.cause is None
    made = attempts(store, summary)
    assert [(a.kind, a.number, a.outcome) for a in made] == [
        ("generate", 1, "passed"), ("judge", 1, "failed"), ("generate", 3, "passed"), ("judge", 2, "passed")]
    first_judge = made[1].parsed["verdict"]
    assert (first_judge["model_verdict"], first_judge["verdict"], first_judge["override_reason"]) == (
        "pass", "fail", "1 invented fact(s) listed")
    [document_run] = store.document_runs_for(summary.run_id)
    assert document_run.final_attempt_id == made[2].id and document_run.needs_person == []
    shown = show_text(store, document_run)  # extract show names the regeneration for what it is
    assert "attempt 3 (regeneration after a judge fail, final)" in shown and "attempt 2 (judge)" in shown
    assert "attempt 1 (generate)" in shown

    first, regeneration = generator.chat_requests[0].json, generator.chat_requests[1].json
    assert regeneration["messages"][:2] == first["messages"]  # the same conversation, then the failed answer
    assert regeneration["messages"][2] == {"role": "assistant", "content": GOOD_EN}
    asked = regeneration["messages"][3]["content"]
    assert "- invented fact: 'within three business days'" in asked
    assert "Answer only from the attached text" in asked and "leave it null" in asked and "missingFields" in asked
    sentences = {s.id: " ".join(s.text.split()) for s in load_document(path).sentences}
    shown = dict(re.findall(r"^\[(s\d+)\] (.*)$", asked, re.MULTILINE))
    assert shown and all(sentences[sid] == text for sid, text in shown.items())  # full sentences, verbatim
    quoted = {s for e in GOOD["evidence"] for s, text in sentences.items() if e["sourceExcerpt"] in text}
    assert quoted <= set(shown)  # every sentence an excerpt comes from is there
    assert outcome.tokens == 4 * 15


def test_a_regeneration_that_breaks_the_rules_goes_to_a_person_with_the_judged_candidate(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    [path] = write_documents(tmp_path / "docs", [2])
    generator = llm_server([Reply(GOOD_EN), Reply(json.dumps(invented()))])
    judge = llm_server(lambda request, number: Reply(verdict(request, verdict="fail", contradicts=True)))
    summary, store = judged([path], generator, judge, db_url)
    [outcome] = summary.outcomes
    assert outcome.state == "MANUAL_REVIEW"
    assert outcome.cause.startswith("judge fail (review mode") and "contradicts the context" in outcome.cause
    assert outcome.cause.endswith("the regeneration failed validation: 1 error(s)")
    made = attempts(store, summary)
    assert [(a.kind, a.number, a.outcome) for a in made] == [
        ("generate", 1, "passed"), ("judge", 1, "failed"), ("generate", 3, "failed")]
    [document_run] = store.document_runs_for(summary.run_id)
    assert document_run.final_attempt_id == made[0].id and document_run.needs_person == ["JUDGE_FAIL"]
    assert len(judge.chat_requests) == 1 and generator.remaining == 0  # bounded: no second judge, no more calls


def test_observe_mode_never_regenerates(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path,
                                        db_url: str) -> None:
    [path] = write_documents(tmp_path / "docs", [3])
    generator = llm_server([Reply(GOOD_EN)])
    judge = llm_server(lambda request, number: Reply(verdict(request, verdict="fail", score=0.1)))
    summary, store = judged([path], generator, judge, db_url, mode=JudgeMode.observe)
    assert [o.state for o in summary.outcomes] == ["READY_FOR_REVIEW"]
    assert [(a.kind, a.number) for a in attempts(store, summary)] == [("generate", 1), ("judge", 1)]


# ---------------------------------------------------------------- a judge that cannot answer


@pytest.mark.parametrize(("script", "mark", "cause"), [
    ([Status(500), Status(500)], "JUDGE_NOT_JUDGED", "judge call failed: HTTP 500"),
    ([Hang(5), Hang(5)], "JUDGE_NOT_JUDGED", "judge call failed: timeout"),
    ([Reply("The answer looks grounded to me.")], "JUDGE_PROTOCOL_ERROR", "judge protocol error: not JSON"),
])
def test_a_judge_that_cannot_answer_is_not_evaluable_and_goes_to_a_person(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str, script: list[Any], mark: str,
        cause: str) -> None:
    [path] = write_documents(tmp_path / "docs", [4])
    generator = llm_server([Reply(GOOD_EN)])
    judge = llm_server(script)
    timeout = ProviderSettings(timeout_s=0.5, max_transport_retries=1, retry_budget_s=5, backoff_base_s=0.01,
                               backoff_max_s=0.05)
    summary, store = judged([path], generator, judge, db_url, judge_settings=timeout)
    [outcome] = summary.outcomes
    assert outcome.state == "MANUAL_REVIEW" and outcome.cause.startswith(cause)
    [document_run] = store.document_runs_for(summary.run_id)
    assert document_run.needs_person == [mark]
    made = attempts(store, summary)
    assert [(a.kind, a.parsed, a.passed) for a in made[1:]] == [("judge", None, None)]  # never a score, never a fail
    assert judge.remaining == 0 and len(generator.chat_requests) == 1  # no regeneration without a measurement


def compare_cli(db_url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"EXTRACT_DATABASE_URL": db_url, "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "extractor", "compare", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def test_compare_counts_a_judge_outage_as_not_evaluable_never_as_a_fail(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    """The reported bug: the same generator and prompt, the judge down for 3 of 10 documents on the candidate
    side. Counted as fails that is 10/10 against 7/10, a BLOCK; counted as not evaluable it is 7 against 7."""
    counted_as_fails = decide_release([Category("all", 10, 10, 7, 10, 1.0)])
    assert counted_as_fails.decision is GateDecision.BLOCK  # what compare said before

    paths = write_documents(tmp_path / "docs", range(10))
    generator = llm_server(lambda request, number: Reply(GOOD_EN))
    healthy = llm_server(lambda request, number: Reply(verdict(request)))
    baseline, _ = judged(paths, generator, healthy, db_url, judge_name="judge-a")
    # one judge call at a time: calls 1-6 are the first three documents' two tries each, all HTTP 500
    down = llm_server(lambda request, number: Status(500) if number <= 6 else Reply(verdict(request)))
    candidate, store = judged(paths, generator, down, db_url, judge_name="judge-b", queue=JudgeQueue(1, 4))
    assert sorted(o.state for o in candidate.outcomes) == ["MANUAL_REVIEW"] * 3 + ["READY_FOR_REVIEW"] * 7
    assert sum(d.needs_person == ["JUDGE_NOT_JUDGED"] for d in store.document_runs_for(candidate.run_id)) == 3

    result = compare_cli(db_url, tmp_path, baseline.run_id, candidate.run_id, "--format", "json")
    assert result.returncode == 3, result.stderr  # MANUAL_REVIEW for the gap, not 1 (BLOCK)
    report = json.loads(result.stdout)
    assert report["decision"] == "MANUAL_REVIEW" and report["compared"] == 7 and report["matched"] == 10
    [category] = report["categories"]
    assert (category["a"]["passed"], category["a"]["n"], category["b"]["passed"], category["b"]["n"]) == (7, 7, 7, 7)
    assert report["rho"] < 0.5 and "3 of 10 matched documents are not evaluable" in report["reason"]
    assert {d["candidate"] for d in report["not_evaluable"]} == {"judge not evaluable (JUDGE_NOT_JUDGED)"}
    assert report["regressions"] == []
    allowed = compare_cli(db_url, tmp_path, baseline.run_id, candidate.run_id, "--max-unevaluable", "0.5")
    assert allowed.returncode == 0 and "decision: PROMOTE" in allowed.stdout
    assert "candidate judge not evaluable (JUDGE_NOT_JUDGED)" in allowed.stdout


# ---------------------------------------------------------------- warn, queue


def test_a_judge_warning_stays_ready_for_review_and_is_shown_first(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    [path] = write_documents(tmp_path / "docs", [5])
    generator = llm_server([Reply(GOOD_EN)])
    judge = llm_server(lambda request, number: Reply(verdict(request, verdict="warn")))
    summary, store = judged([path], generator, judge, db_url)
    [outcome] = summary.outcomes
    assert outcome.state == "READY_FOR_REVIEW" and outcome.cause.startswith("judge warn (review mode")
    assert len(generator.chat_requests) == 1  # a warning is not regenerated
    env = {"EXTRACT_DATABASE_URL": db_url, "COLUMNS": "250", "PATH": "/usr/bin:/bin"}
    queue = subprocess.run([sys.executable, "-m", "extractor", "review"], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert queue.returncode == 0 and "JUDGE WARNING judge warn (review mode" in queue.stdout, queue.stdout
    shown = subprocess.run([sys.executable, "-m", "extractor", "show", str(outcome.document_run_id)],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert shown.returncode == 0, shown.stderr
    first = shown.stdout.lstrip().splitlines()[0]
    assert "judge: JUDGE_WARN" in first  # before the document header, the source and the candidate
    assert shown.stdout.index("judge warn (review mode") < shown.stdout.index("document run")


def test_slow_judging_never_holds_generation_slots(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path,
                                                   db_url: str) -> None:
    """One generation slot; the judge answers its first call only once the generator has seen all three
    documents. If the judge took the generation slot, the generator could not see them: the wait times out."""
    paths = write_documents(tmp_path / "docs", [11, 12, 13])
    events: list[str] = []
    all_generated = threading.Event()
    lock = threading.Lock()

    def generate(request: dict[str, Any] | None, number: int) -> Reply:
        with lock:
            events.append("generate")
            if events.count("generate") == 3:
                all_generated.set()
        return Reply(GOOD_EN)

    def slow_judge(request: dict[str, Any] | None, number: int) -> Reply:
        with lock:
            events.append("judge starts")
        waited = all_generated.wait(timeout=20)
        with lock:
            events.append("judge answers" if waited else "judge gave up waiting")
        return Reply(verdict(request))

    generator = llm_server(generate)
    judge = llm_server(slow_judge)
    summary, _ = judged(paths, generator, judge, db_url, concurrency=1, queue=JudgeQueue(1, 3),
                        judge_settings=ProviderSettings(timeout_s=30, max_transport_retries=0))
    assert [o.state for o in summary.outcomes] == ["READY_FOR_REVIEW"] * 3
    assert "judge gave up waiting" not in events
    first_answer = events.index("judge answers")
    assert events.index("judge starts") < first_answer and events[:first_answer].count("generate") == 3
    assert judge.peak_in_flight == 1 and generator.peak_in_flight == 1


# ---------------------------------------------------------------- modes in the contract settings


def with_settings(**changes: Any) -> Any:
    contract = copy.copy(get_contract("work_procedure"))
    object.__setattr__(contract, "settings", {**contract.settings, **changes})
    contract.__dict__.pop("modes", None)
    contract.__dict__.pop("settings_sha256", None)
    return contract


def test_modes_per_judge_metric_come_from_the_contract_settings(db_url: str) -> None:
    with open_store(db_url) as store:
        contract = with_settings(modes={"judge": {"support": "observe", "invented_facts": "block"}})
        assert contract.modes.judge == {"support": JudgeMode.observe, "invented_facts": JudgeMode.block}
        policy = resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.review, contract.modes.judge)
        # block needs an admitting calibration: without one it is review, and the reason says why
        assert policy.mode_for("invented_facts") is JudgeMode.review and "none is on record" in policy.reason
        assert policy.mode_for("support") is JudgeMode.observe and policy.mode_for("grounded") is JudgeMode.review
        store.save_calibration(stored_report("openai:judge", "admit-block", 0.8))
        admitted = resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.review, contract.modes.judge)
        assert admitted.mode_for("invented_facts") is JudgeMode.block and admitted.reason is None
        assert admitted.to_json()["metric_modes"]["support"] == "observe"
        with pytest.raises(ValueError, match="unknown judge metric"):
            resolve_policy(store, "openai:judge", "v2", 0.8, JudgeMode.review, {"tone": JudgeMode.block})
    with pytest.raises(SettingsError, match="modes.judge.support is 'strict'"):
        Modes.parse({"modes": {"judge": {"support": "strict"}}})


def test_modes_per_rule_route_findings_and_block_needs_a_calibration() -> None:
    document = load_document(ROOT / "samples/en_purchase_approval.md")
    weak = copy.deepcopy(GOOD)
    weak["rules"][0] = "Every purchase needs approval by the board of directors."  # excerpt: two quotes
    plain = with_settings()
    report = validate(json.dumps(weak), document, plain)
    assert [f.rule_id for f in report.warnings] == ["EVIDENCE_WEAK_SUPPORT"] and report.passed
    settings = RunSettings(contract=plain)
    assert route(report, None, settings).state == "READY_FOR_REVIEW"  # a warning is observed by default

    review = with_settings(modes={"rules": {"EVIDENCE_WEAK_SUPPORT": "review"}})
    routed = route(report, None, RunSettings(contract=review))
    assert routed.state == "MANUAL_REVIEW" and routed.needs_person == ("EVIDENCE_WEAK_SUPPORT",)

    wanted_block = with_settings(modes={"rules": {"EVIDENCE_WEAK_SUPPORT": "block"}})
    lowered = wanted_block.rule_mode("EVIDENCE_WEAK_SUPPORT", error=False)
    assert lowered.mode is JudgeMode.review and "needs an admit-block calibration" in lowered.reason
    admitted = with_settings(modes={"rules": {"EVIDENCE_WEAK_SUPPORT": "block"}},
                             weak_support={"threshold": 0.5, "calibration": {"verdict": "admit-block"}})
    routed = route(report, None, RunSettings(contract=admitted))
    assert routed.state == "BLOCKED" and routed.needs_person == ("BLOCK", "EVIDENCE_WEAK_SUPPORT")

    deterministic = with_settings(modes={"rules": {"VALUE_WITHOUT_EVIDENCE": "block"}})
    failed = validate(json.dumps(invented()), document, deterministic)
    routed = route(failed, None, RunSettings(contract=deterministic), earlier=failed)
    assert routed.state == "BLOCKED" and routed.needs_person == ("BLOCK", "VALUE_WITHOUT_EVIDENCE")
    assert routed.cause.startswith("BLOCK (VALUE_WITHOUT_EVIDENCE in block mode)")
    with pytest.raises(SettingsError, match="is an error rule"):
        rule_mode(plain.settings, Modes.parse({"modes": {"rules": {"VALUE_WITHOUT_EVIDENCE": "observe"}}}),
                  "VALUE_WITHOUT_EVIDENCE", error=True, needs_person=plain.needs_person)


def test_contract_settings_are_part_of_the_configuration_hash() -> None:
    base = dict(contract="work_procedure", contract_version=1, prompt_version="v1", model="m", provider="openai",
                validator_version="x", segmenter="y")
    plain, tuned = with_settings(), with_settings(weak_support={"threshold": 0.42, "judge_band_lower": 0.2})
    assert plain.settings_sha256 != tuned.settings_sha256
    hashes = {RunConfig(**base, config={"contract_settings_sha256": c.settings_sha256}).config_hash
              for c in (plain, tuned)}
    assert len(hashes) == 2


# ---------------------------------------------------------------- extract judge run


def test_extract_judge_run_judges_a_finished_run_afterwards(llm_server: Callable[..., ScriptedLLMServer],
                                                            tmp_path: Path, db_url: str) -> None:
    paths = write_documents(tmp_path / "docs", [0, 1, 2])
    generator = llm_server(script({"base": lambda n: "fail" if n == 0 else "pass"}))
    finished = corpus_run(db_url, generator, paths, "base")
    assert sorted(o.state for o in finished.outcomes) == ["MANUAL_REVIEW", "READY_FOR_REVIEW", "READY_FOR_REVIEW"]
    warn = llm_server(lambda request, number: Reply(verdict(request, verdict="warn")))
    env = {"EXTRACT_DATABASE_URL": db_url, "COLUMNS": "200", "PATH": "/usr/bin:/bin"}

    def judge_run(server: ScriptedLLMServer, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "extractor", "judge", "run", finished.run_id[:10], "--judge",
                               "openai:late-judge", "--judge-base-url", server.base_url, "--judge-timeout", "5",
                               "--format", "json", *extra], capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=120)

    first = judge_run(warn)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    by_name = {Path(d["path"]).name: d for d in report["documents"]}
    assert by_name["purchase_00.md"]["result"] is None and "fails the rules" in by_name["purchase_00.md"]["cause"]
    for name in ("purchase_01.md", "purchase_02.md"):
        assert (by_name[name]["result"], by_name[name]["state"]) == ("warn", "READY_FOR_REVIEW")
        assert by_name[name]["cause"].startswith("judge warn (review mode")
    assert len(warn.chat_requests) == 2 and report["judge"]["results"] == {"warn": 2}
    again = judge_run(warn)
    assert {d["result"] for d in json.loads(again.stdout)["documents"]} == {None}  # judged before: skipped
    assert "judged before (1 judge attempt(s))" in again.stdout and len(warn.chat_requests) == 2

    down = llm_server(lambda request, number: Status(503))
    forced = judge_run(down, "--force")
    assert forced.returncode == 3, forced.stderr  # documents now need a person
    with open_store(db_url) as store:
        for document_run in store.document_runs_for(finished.run_id):
            if document_run.path.endswith("purchase_00.md"):
                continue
            assert document_run.state == "MANUAL_REVIEW" and document_run.needs_person == ["JUDGE_NOT_JUDGED"]
            made = [(a.kind, a.number, a.outcome) for a in store.attempts_for(document_run.id)]
            assert made == [("generate", 1, "passed"), ("judge", 1, "failed"), ("judge", 2, "transport_error")]
            assert document_run.cause.endswith("(judged afterwards by extract judge run)")
