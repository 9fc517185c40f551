"""Long documents end to end (docs/runs.md#long-documents): windows answered separately by the scripted model server over real
HTTP, merged, validated against the whole document, repaired per window, resumed after SIGKILL."""

from __future__ import annotations

import asyncio
import io
import json
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from extractor.contracts import get_contract
from extractor.engine import AdaptiveLimit, Engine, RunSettings, RunSummary
from extractor.engine.summary import Progress
from extractor.offload import read_here as load_document
from extractor.options import RunOptions
from extractor.providers import ProviderSettings, from_string
from extractor.review.view import document_view
from extractor.store import AttemptInfo, Store, open_store
from extractor.ui.review import print_document_view
from extractor.windows.plan import costs
from tests.support.batch import cli_env, extract_command, run_cli, scalar, summary_of
from tests.support.llm_server import Action, Hang, Reply, ScriptedLLMServer
from tests.support.longdocs import Answer, is_repair, long_document, own_sentences, rules_answer, window_answer
from tests.test_crash_resume import wait_until

FAST = ProviderSettings(timeout_s=10, max_transport_retries=0, retry_budget_s=5)
BUDGET = {"max_input_tokens": 40_000, "max_output_tokens": 30_000}  # about 300 sentences a window


class Windows(Progress):
    """What a front end is told about a long document's windows."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []

    def window(self, path: str, done: int, total: int) -> None:
        self.seen.append((path, done, total))


def run(path: Path, server: ScriptedLLMServer, db_url: str, *, progress: Progress | None = None,
        **settings: Any) -> tuple[RunSummary, Store]:
    store = open_store(db_url)
    limit = AdaptiveLimit(4)
    provider = from_string("openai:scripted", base_url=server.base_url, settings=FAST)
    engine = Engine(store, provider, RunSettings(contract=get_contract("work_procedure"),
                                                 options=RunOptions(**(BUDGET | settings))),
                    limit=limit, progress=progress)
    return asyncio.run(engine.run([str(path)])), store


def document_run_id(summary: RunSummary) -> int:
    [outcome] = summary.outcomes
    assert outcome.document_run_id is not None, outcome
    return outcome.document_run_id


def document_run(store: Store, summary: RunSummary) -> Any:
    [found] = store.find_document_runs(ids=[document_run_id(summary)])
    return found


def split(store: Store, summary: RunSummary) -> tuple[list[AttemptInfo], list[AttemptInfo]]:
    """(window attempts, whole-document attempts) of the only document."""
    attempts = store.attempts_for(document_run_id(summary))
    return [a for a in attempts if a.window is not None], [a for a in attempts if a.window is None]


@pytest.mark.parametrize("language", ["ko", "en", "ru"])
def test_a_3000_sentence_document_is_read_in_windows_merged_and_validated_whole(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str, language: str) -> None:
    path = long_document(tmp_path / f"{language}.txt", language, 3000)
    server = llm_server(lambda request, number: Reply(window_answer(request)))
    summary, store = run(path, server, db_url)
    [outcome] = summary.outcomes
    assert outcome.state == "READY_FOR_REVIEW", outcome
    asked = [own_sentences(r.json) for r in server.chat_requests]
    windows, whole = split(store, summary)
    assert len(asked) == len(windows) > 1
    ids = [sentence_id for sentences in asked for sentence_id, _ in sentences]
    assert sorted(ids, key=lambda i: int(i[1:])) == [f"s{n}" for n in range(1, 3001)]  # each sentence once
    assert [(a.window, a.first_sentence, a.last_sentence) for a in sorted(windows, key=lambda a: a.window or 0)] == [
        (n, int(s[0][0][1:]), int(s[-1][0][1:])) for n, s in enumerate(sorted(asked, key=lambda s: int(s[0][0][1:])),
                                                                       start=1)]
    [merged] = whole
    assert (merged.kind, merged.number, merged.passed) == ("generate", 1, True)
    assert document_run(store, summary).final_attempt_id == merged.id
    assert len(merged.parsed["sentenceCoverage"]) == 3000 and len(merged.parsed["rules"]) == 3000
    later = [r for r in server.chat_requests if "(context only" in (r.json or {})["messages"][1]["content"]]
    assert len(later) == len(windows) - 1  # every window after the first sees its overlap, marked as context


def three_window_document(tmp_path: Path) -> Path:
    lines = [f"Line {n}: the requester files form {n}." for n in range(1, 31)]
    path = tmp_path / "forms.txt"
    path.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    return path


SMALL: dict[str, Any] = {"max_input_tokens": 4_000, "max_output_tokens": 1_400, "overlap": 1}  # 30 short sentences -> 3 windows


def test_one_participant_under_two_ids_in_windows_1_and_3_is_merged_and_its_references_rewritten(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    def with_requester(participant_id: str, name: str) -> Callable[[list[tuple[str, str]], Answer], None]:
        def change(sentences: list[tuple[str, str]], answer: Answer) -> None:
            sentence_id, text = sentences[0]
            answer["participants"] = [{"id": participant_id, "name": name}]
            answer["processSteps"] = [{"order": 1, "actorId": participant_id, "action": text}]
            answer["evidence"] += [{"fieldPath": "participants[0]", "sourceExcerpt": text},
                                   {"fieldPath": "processSteps[0]", "sourceExcerpt": text}]
            answer["sentenceCoverage"][0]["fieldPaths"] = ["participants[0]", "processSteps[0]", "rules[0]"]
        return change

    def script(request: dict[str, Any] | None, number: int) -> Action:
        first = int(own_sentences(request)[0][0][1:])
        change = (with_requester("requester", "Requester") if first == 1 else
                  with_requester("filer", "requester") if first > 20 else None)
        return Reply(window_answer(request, change))

    server = llm_server(script)
    progress = Windows()
    summary, store = run(three_window_document(tmp_path), server, db_url, progress=progress, **SMALL)
    windows, [merged] = split(store, summary)
    assert len(windows) == 3 and summary.outcomes[0].state == "READY_FOR_REVIEW", summary.outcomes[0]
    assert [(done, total) for _, done, total in progress.seen] == [(1, 3), (2, 3), (3, 3)]
    candidate = merged.parsed
    assert candidate["participants"] == [{"id": "requester", "name": "Requester"}]
    assert [(s["order"], s["actorId"]) for s in candidate["processSteps"]] == [(1, "requester"), (2, "requester")]
    assert "filer" not in json.dumps(candidate)


def test_two_evidenced_values_for_one_scalar_become_a_finding_that_needs_a_person(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    def purpose(sentences: list[tuple[str, str]], answer: Answer) -> None:
        sentence_id, text = sentences[-1]
        answer["documentPurpose"] = text
        answer["missingFields"] = [m for m in answer["missingFields"] if m["fieldPath"] != "documentPurpose"]
        answer["evidence"].append({"fieldPath": "documentPurpose", "sourceExcerpt": text})
        answer["sentenceCoverage"][-1]["fieldPaths"].append("documentPurpose")

    server = llm_server(lambda request, number: Reply(window_answer(
        request, purpose if int(own_sentences(request)[0][0][1:]) <= 20 else None)))
    summary, store = run(three_window_document(tmp_path), server, db_url, **SMALL)
    [outcome] = summary.outcomes
    _, [merged] = split(store, summary)
    assert outcome.state == "MANUAL_REVIEW" and "MERGE_VALUE_CONFLICT" in (outcome.cause or ""), outcome
    assert document_run(store, summary).needs_person == ["MERGE_VALUE_CONFLICT"]
    [conflict] = [f for f in merged.findings if f["rule_id"] == "MERGE_VALUE_CONFLICT"]
    kept, other = conflict["hint"]["excerpts"]
    assert merged.parsed["documentPurpose"] == kept and kept != other
    assert kept in conflict["message"] and other in conflict["message"]
    assert all(m["fieldPath"] != "documentPurpose" for m in merged.parsed["missingFields"])


def test_the_repair_round_goes_only_to_the_window_that_owns_the_findings(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    def script(request: dict[str, Any] | None, number: int) -> Action:
        sentences = own_sentences(request)
        if int(sentences[0][0][1:]) > 20 and not is_repair(request):  # window 3 forgets a sentence at first
            return Reply(json.dumps(rules_answer(sentences, skip=frozenset({sentences[1][0]}))))
        return Reply(window_answer(request))

    server = llm_server(script)
    summary, store = run(three_window_document(tmp_path), server, db_url, **SMALL)
    windows, whole = split(store, summary)
    assert summary.outcomes[0].state == "READY_FOR_REVIEW", summary.outcomes[0]
    assert [(a.kind, a.number, a.passed) for a in whole] == [("generate", 1, False), ("repair", 2, True)]
    assert {f["rule_id"] for f in whole[0].findings} == {"SENTENCE_NOT_ACCOUNTED"}
    repairs = [a for a in windows if a.kind == "repair"]
    assert [(a.window, a.outcome) for a in repairs] == [(3, "passed")]
    repair_text = repairs[0].request["messages"][-1]["content"]
    missing = own_sentences(server.chat_requests[-1].json)[1][0]
    assert f"[{missing}]" in repair_text and "s1]" not in repair_text
    assert len(server.chat_requests) == 4


def test_a_document_just_under_the_budget_is_one_call_and_just_over_it_is_windows(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    path = three_window_document(tmp_path)
    server = llm_server(lambda request, number: Reply(window_answer(request)))
    store = open_store(db_url)
    provider = from_string("openai:scripted", base_url=server.base_url, settings=FAST)
    probe = Engine(store, provider, RunSettings(contract=get_contract("work_procedure")))
    document = load_document(path)
    needed = costs(document, probe.calls.counter, probe.calls.fixed_input)
    exact = needed.fixed_input + sum(needed.inputs)
    summary, _ = run(path, server, db_url, max_input_tokens=exact, force=True)
    assert summary.outcomes[0].state == "READY_FOR_REVIEW" and len(server.chat_requests) == 1
    assert "read in parts" not in (server.chat_requests[0].json or {})["messages"][1]["content"]
    summary, store = run(path, server, db_url, max_input_tokens=exact - 1, force=True)
    windows, _ = split(store, summary)
    assert summary.outcomes[0].state == "READY_FOR_REVIEW" and len(windows) == 2
    assert len(server.chat_requests) == 3


def windows_recorded(db_url: str) -> int:
    """Window attempts in the run log (0 until the run created its tables)."""
    try:
        return int(scalar(db_url, 'SELECT COUNT(*) FROM attempts WHERE "window" IS NOT NULL') or 0)
    except Exception:  # noqa: BLE001 - the run has not created its tables yet
        return 0


def test_sigkill_mid_document_then_the_rerun_calls_only_the_unfinished_windows(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    path = long_document(tmp_path / "docs" / "en.txt", "en", 600)
    killed = threading.Event()
    answered = 3

    def script(request: dict[str, Any] | None, number: int) -> Action:
        if number <= answered or killed.is_set():
            return Reply(window_answer(request))
        return Hang(120)

    server = llm_server(script)
    env = cli_env(server.base_url, db_url)
    args = ["run", str(path.parent), "--model", "openai:scripted", "--concurrency", "1", "--max-output-tokens",
            "6000", "--timeout", "200", "--retries", "0", "--format", "json"]
    process = subprocess.Popen(extract_command(*args), env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(server.chat_requests) > answered and windows_recorded(db_url) == answered, process)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    killed.set()
    first_requests = len(server.chat_requests)
    result = run_cli(*args, env=env, cwd=tmp_path)
    summary = summary_of(result)
    assert result.returncode == 0, result.stderr
    assert summary["counts"] == {"READY_FOR_REVIEW": 1}, summary
    with open_store(db_url) as store:
        [resumed] = store.find_document_runs(run_ids=[summary["run_id"]])
        attempts = store.attempts_for(resumed.id)
        assert store.integrity_check() == []
        view = document_view(store, store, resumed)
    windows = [a for a in attempts if a.window is not None]
    reused = [a for a in windows if a.reused_from is not None]
    assert len(reused) == answered
    assert len(server.chat_requests) - first_requests == len(windows) - answered  # only the unfinished ones
    # extract show --format json names each window and the answer it reused; the text names them in the titles
    shown = {a["id"]: a for a in view.to_json()["attempts"]}
    for attempt in reused:
        assert shown[attempt.id]["window"] == {"index": attempt.window, "first_sentence": attempt.first_sentence,
                                               "last_sentence": attempt.last_sentence,
                                               "reused_from": attempt.reused_from}
    assert [a["id"] for a in shown.values() if a["merged"]] and all(
        a["window"] is None for a in shown.values() if a["merged"])
    console = Console(record=True, width=250, color_system=None, file=io.StringIO())
    print_document_view(view, console)
    text = console.export_text()
    first = reused[0]
    with open_store(db_url) as store:  # the reused answer is named by its place in its own document run
        earlier = store.get_attempt(first.reused_from)
        assert earlier is not None and earlier.document_run_id != resumed.id
        position = [a.id for a in store.attempts_for(earlier.document_run_id)].index(earlier.id) + 1
    assert shown[first.id]["reused"] == {"document_run_id": earlier.document_run_id, "attempt": position}
    assert (f"window {first.window} s{first.first_sentence}-s{first.last_sentence}, answer of attempt "
            f"{position} of document run {earlier.document_run_id} reused") in text
    assert "merged from the windows" in text


def test_a_window_repair_speaks_in_that_windows_numbering_ids_and_sentences(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path, db_url: str) -> None:
    """Every window names its participants p1 and its own lead and has three steps, so the merged candidate numbers
    steps across the document and knows every window's lead. The window holding s1501 answers at first with an
    excerpt of s1501 with one word changed, a sentence MAPPED to a step that does not quote it, and a step by
    an unknown actor; its repair must name s1501 as the nearest sentence (the document repeats its words in
    every copy), its own step numbers and only its own ids."""
    path = long_document(tmp_path / "en.txt", "en", 3000)
    target = "s1501"
    first_of: dict[str, int] = {}

    def script(request: dict[str, Any] | None, number: int) -> Action:
        sentences = own_sentences(request)
        first = int(sentences[0][0][1:])
        broken = any(sentence_id == target for sentence_id, _ in sentences) and not is_repair(request)

        def change(sentences: list[tuple[str, str]], answer: Answer) -> None:
            answer["participants"] = [{"id": "p1", "name": "Clerk"}, {"id": f"lead{first}", "name": f"Lead {first}"}]
            answer["evidence"] += [{"fieldPath": f"participants[{i}]", "sourceExcerpt": sentences[0][1]} for i in (0, 1)]
            for index, (_, text) in enumerate(sentences[:3]):
                answer["processSteps"].append({"order": index + 1, "actorId": "p1", "action": text})
                answer["evidence"].append({"fieldPath": f"processSteps[{index}]", "sourceExcerpt": text})
                answer["sentenceCoverage"][index]["fieldPaths"].append(f"processSteps[{index}]")
            if broken:
                first_of["target"] = first
                entry = next(e for e in answer["evidence"] if e["sourceExcerpt"] == dict(sentences)[target])
                words = entry["sourceExcerpt"].split()
                entry["sourceExcerpt"] = " ".join([*words[:3], "quietly", *words[4:]])
                answer["sentenceCoverage"][1]["fieldPaths"] = ["processSteps[2]"]
                answer["processSteps"][0]["actorId"] = "p9"

        return Reply(window_answer(request, change))

    server = llm_server(script)
    summary, store = run(path, server, db_url)
    windows, whole = split(store, summary)
    assert len(windows) > 4 and [(a.kind, a.passed) for a in whole] == [("generate", False), ("repair", True)]
    merged = "\n".join(f"{f['rule_id']}: {f['message']}" for f in whole[0].findings)
    assert "lead1," in merged  # the whole document knows every window's lead, and numbers steps across it
    assert max(map(int, re.findall(r"processSteps\[(\d+)\]", merged))) >= 3, merged

    [repair] = [a for a in windows if a.kind == "repair"]
    assert repair.first_sentence is not None and repair.first_sentence == first_of["target"]
    text = repair.request["messages"][-1]["content"]
    findings = text.split("Findings (rule_id at location: message):")[1].split("Sentences not yet accounted")[0]
    assert f"nearest source sentence [{target}]" in findings, findings
    assert {int(n) for n in re.findall(r"processSteps\[(\d+)\]", findings)} <= {0, 1, 2}, findings
    own = repair.last_sentence - repair.first_sentence + 1 if repair.last_sentence else 0
    assert all(int(n) < own for n in re.findall(r"(?:rules|evidence|sentenceCoverage)\[(\d+)\]", findings)), findings
    lead = f"lead{first_of['target']}"
    assert f'actorId "p9" is not one of participants[*].id (known: p1, {lead})' in findings, findings
    assert set(re.findall(r"lead\d+", findings)) == {lead}
    window_range = range(repair.first_sentence - 2, (repair.last_sentence or 0) + 1)  # its context and own sentences
    assert all(int(n) in window_range for n in re.findall(r"\bs(\d+)\b", findings)), findings
