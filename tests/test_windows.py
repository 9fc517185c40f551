"""Token budgets, windowing and the merge of long documents (docs/runs.md#long-documents): the pure parts, no model, no I/O."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extractor.configfile import MAX_CONFIG_BYTES
from extractor.contracts import get_contract
from extractor.contracts.merge_spec import EVIDENCE_KEY, ListMerge, MergeSpec, Reference
from extractor.document import Block, BlockKind, Document, Sentence
from extractor.errors import InputError
from extractor.windows.merge import Partial, merge
from extractor.windows.plan import ANSWER_SKELETON_TOKENS, BudgetError, Costs, Window, costs, plan, window_lines
from extractor.windows.tokens import Budget, EstimateCounter, budget_for, configured_budget, counter_for
from tests.support.batch import ROOT
from tests.support.extras import needs_local_extra
from tests.support.longdocs import SAMPLE_FILES

WORK_PROCEDURE_MERGE = MergeSpec(
    lists=(ListMerge("participants", identity=("~name",), id_field="id"),
           ListMerge("processSteps", identity=(EVIDENCE_KEY,), order_field="order"),
           ListMerge("rules", identity=("~",))),
    scalars=("documentPurpose", "assignmentRule"),
    references=(Reference("processSteps", "actorId", "participants"),),
)
"""Participants are one when their names match (normalised), whatever ids the windows gave them; steps
when their evidence starts at the same place in the source; rules when their text matches."""


def test_work_procedure_merge_spec_is_read_from_its_declared_checks() -> None:
    assert get_contract("work_procedure").merge == WORK_PROCEDURE_MERGE


def document(blocks: list[list[str]]) -> Document:
    """A segmented document: each inner list is one block's sentences."""
    text, block_list, sentences = "", [], list[Sentence]()
    for index, block in enumerate(blocks):
        start = len(text)
        for sentence in block:
            sentences.append(Sentence(f"s{len(sentences) + 1}", sentence, len(text), len(text) + len(sentence), index))
            text += sentence + " "
        block_list.append(Block(index, BlockKind.PARAGRAPH, start, len(text) - 1, start))
        text = text[:-1] + "\n"
    return Document("doc.txt", text, block_list, "0" * 64, "text", sentences=sentences, segmenter="test")


# ---------------------------------------------------------------- tokens and budgets


def test_the_estimate_never_counts_fewer_tokens_than_utf8_bytes_allow() -> None:
    counter = EstimateCounter()
    assert counter.count("abcd") == 2
    assert counter.count("요청") == 3  # 6 bytes
    assert counter.count("отпуск") == 6  # 12 bytes


@needs_local_extra
def test_a_local_model_is_counted_with_its_gguf_tokenizer_and_the_estimate_never_counts_less() -> None:
    from extractor.providers import from_string

    provider = from_string("local")
    counter = counter_for(provider)
    assert counter.name.startswith("gguf:")
    for language in ("en", "ko", "ru"):
        text = (ROOT / "samples" / SAMPLE_FILES[language]).read_text(encoding="utf-8")
        exact = counter.count(text)
        assert 0 < exact <= EstimateCounter().count(text), language
    assert budget_for(provider) == Budget(4096, 4096)  # half the bundled model's context each


def test_budgets_come_from_the_options_then_the_model_file_then_the_provider(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    class Local:
        name, model, n_ctx = "local", "tiny.gguf", 8192

    class Remote:
        name, model = "openai", "big-model"

    limits = tmp_path / "limits.json"
    limits.write_text(json.dumps({"big-model": {"max_input_tokens": 30000}}), encoding="utf-8")
    monkeypatch.setenv("EXTRACT_MODEL_LIMITS", str(limits))
    assert budget_for(Local()) == Budget(4096, 4096)
    assert budget_for(Remote()) == Budget(30000, 16384)
    assert budget_for(Remote(), 500, 300) == Budget(500, 300)
    for table, says in (({"big-model": {"max_input_tokens": "lots"}}, "big-model.max_input_tokens: Input should be a "
                                                                          "valid integer"),
                        ({"big-model": {"max_input_tokens": True}}, "big-model.max_input_tokens: Input should be a "
                                                                    "valid integer"),
                        ({"big-model": {"max_output_tokens": 0}}, "big-model.max_output_tokens: Input should be "
                                                                  "greater than or equal to 1"),
                        ({"big-model": {"max_input_tokens": 10**12}}, "big-model.max_input_tokens: Input should be "
                                                                      "less than or equal to 10000000"),
                        ({"big-model": {"max_tokens": 5}}, "big-model.max_tokens: unknown key"),
                        ({f"model-{n}": {} for n in range(10_001)}, "Dictionary should have at most 10000 items"),
                        ({"a b": {}}, "(the name): a model name, without spaces"),
                        ([1, 2], "must be a table")):
        limits.write_text(json.dumps(table), encoding="utf-8")
        with pytest.raises(InputError) as refused:
            configured_budget("big-model")
        assert str(refused.value).startswith(f"{limits}: ") and says in str(refused.value), str(refused.value)
    with limits.open("wb") as grown:  # past the size any configuration file may have, refused before it is parsed
        grown.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(InputError, match="limits.json"):
        configured_budget("big-model")


# ---------------------------------------------------------------- windows


def flat_costs(count: int, each: int = 10, fixed: int = 100) -> Costs:
    return Costs(fixed, [each] * count, [3 * each] * count)


def test_a_document_that_fits_is_one_window() -> None:
    doc = document([[f"Sentence {n}." for n in range(10)]])
    assert plan(doc, flat_costs(10), Budget(1000, 1000)) == [Window(1, 0, 10, 0)]


def test_windows_hold_whole_sentences_cover_each_once_and_fit_both_budgets() -> None:
    doc = document([[f"Sentence {n}." for n in range(i, i + 7)] for i in range(0, 70, 7)])
    budget = Budget(300, 800)
    windows = plan(doc, flat_costs(70), budget, overlap=2)
    assert len(windows) > 1
    assert [w.index for w in windows] == list(range(1, len(windows) + 1))
    assert windows[0].start == 0 and windows[-1].end == 70
    for before, after in zip(windows, windows[1:]):
        assert before.end == after.start and after.context == after.start - 2
    for window in windows:
        assert 100 + 10 * (window.end - window.context) <= budget.max_input
        assert ANSWER_SKELETON_TOKENS + 30 * (window.end - window.start) <= budget.max_output


def test_a_window_ends_at_a_block_boundary_in_its_second_half() -> None:
    doc = document([["a."] * 6, ["b."] * 6, ["c."] * 6])  # blocks start at 0, 6, 12
    windows = plan(doc, flat_costs(18), Budget(100 + 10 * 8, 10_000), overlap=0)
    assert [(w.start, w.end) for w in windows][:2] == [(0, 6), (6, 12)]  # 8 fit, cut back to the boundary at 6


def test_a_prompt_larger_than_the_budget_is_refused_with_the_numbers() -> None:
    doc = document([["x."] * 5])
    with pytest.raises(BudgetError, match="takes 500 tokens, more than --max-input-tokens 400"):
        plan(doc, flat_costs(5, fixed=500), Budget(400, 10))


def test_window_lines_mark_the_context_and_name_the_own_sentences() -> None:
    doc = document([[f"Sentence {n}." for n in range(1, 7)]])
    lines = window_lines(doc, Window(2, 3, 6, 1), total=2)
    assert lines.splitlines() == [
        "(context only: s2-s3 come before this part; read them, do not account for them)",
        "[s2] Sentence 2.", "[s3] Sentence 3.",
        "(this long document is read in parts; this is part 2 of 2: account for every sentence s4-s6, each exactly "
        "once, and only these; field paths index your own answer's lists)",
        "[s4] Sentence 4.", "[s5] Sentence 5.", "[s6] Sentence 6."]


def test_costs_count_each_sentence_line_and_its_expected_answer() -> None:
    doc = document([["abcdef."]])
    found = costs(doc, EstimateCounter(), fixed_input=50)
    assert found.inputs == [EstimateCounter().count("[s1] abcdef.") + 1]
    assert found.outputs[0] > 2 * found.inputs[0] and found.fixed_input > 50


# ---------------------------------------------------------------- the merge


def partial(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"documentPurpose": None, "participants": [], "processSteps": [], "rules": [],
                            "assignmentRule": None, "missingFields": [], "evidence": [], "sentenceCoverage": []}
    return base | fields


def by_text(text: str) -> Any:
    """A locator over one text (windows ignored): where an excerpt starts."""
    return lambda excerpt, window: (text.find(excerpt) if excerpt in text else None)


def test_one_participant_under_two_ids_becomes_one_and_every_reference_is_rewritten() -> None:
    first = partial(participants=[{"id": "manager", "name": "Team  Manager"}],
                    processSteps=[{"order": 1, "actorId": "manager", "action": "Approve."}],
                    evidence=[{"fieldPath": "participants[0]", "sourceExcerpt": "The team manager approves."},
                              {"fieldPath": "processSteps[0]", "sourceExcerpt": "The team manager approves."}],
                    sentenceCoverage=[{"sentenceId": "s1", "status": "MAPPED", "fieldPaths": ["processSteps[0]"]}])
    middle = partial(participants=[{"id": "clerk", "name": "Clerk"}],
                     evidence=[{"fieldPath": "participants[0]", "sourceExcerpt": "A clerk files it."}])
    third = partial(participants=[{"id": "clerk", "name": "Accountant"}, {"id": "mgr", "name": "team manager"}],
                    processSteps=[{"order": 1, "actorId": "mgr", "action": "Sign."},
                                  {"order": 2, "actorId": "clerk", "action": "Book."}],
                    evidence=[{"fieldPath": "participants[1].name", "sourceExcerpt": "the team manager signs"},
                              {"fieldPath": "processSteps[0]", "sourceExcerpt": "the team manager signs"},
                              {"fieldPath": "processSteps[1]", "sourceExcerpt": "the accountant books"}],
                    sentenceCoverage=[{"sentenceId": "s3", "status": "MAPPED",
                                       "fieldPaths": ["processSteps[0]", "participants[1]"]}])
    text = "The team manager approves. A clerk files it. Then the team manager signs and the accountant books."
    merged = merge(WORK_PROCEDURE_MERGE, [Partial(3, frozenset({"s3"}), third), Partial(1, frozenset({"s1"}), first),
                                          Partial(2, frozenset({"s2"}), middle)], by_text(text))
    candidate = merged.candidate
    assert candidate["participants"] == [{"id": "manager", "name": "Team  Manager"}, {"id": "clerk", "name": "Clerk"},
                                         {"id": "clerk-2", "name": "Accountant"}]
    assert candidate["processSteps"] == [{"order": 1, "actorId": "manager", "action": "Approve."},
                                         {"order": 2, "actorId": "manager", "action": "Sign."},
                                         {"order": 3, "actorId": "clerk-2", "action": "Book."}]
    paths = [entry["fieldPath"] for entry in candidate["evidence"]]
    assert paths == ["participants[0]", "processSteps[0]", "participants[1]", "participants[0].name",
                     "processSteps[1]", "processSteps[2]"]
    assert candidate["sentenceCoverage"][1]["fieldPaths"] == ["processSteps[1]", "participants[0]"]
    assert merged.origin["processSteps"] == [(1, 0), (3, 0), (3, 1)]
    assert list(candidate) == list(first)  # the contract's key order


def test_a_step_seen_twice_through_the_overlap_is_one_step_and_context_coverage_is_dropped() -> None:
    text = "Alice submits the form. Bob checks the form."
    step = {"order": 1, "actorId": "alice", "action": "Submit the form."}
    first = partial(participants=[{"id": "alice", "name": "Alice"}], processSteps=[step],
                    evidence=[{"fieldPath": "processSteps[0]", "sourceExcerpt": "Alice submits the form."}],
                    sentenceCoverage=[{"sentenceId": "s1", "status": "MAPPED", "fieldPaths": ["processSteps[0]"]}])
    second = partial(participants=[{"id": "alice", "name": "Alice"}, {"id": "bob", "name": "Bob"}],
                     processSteps=[{"order": 1, "actorId": "alice", "action": "Submits the form."},
                                   {"order": 2, "actorId": "bob", "action": "Check the form."}],
                     evidence=[{"fieldPath": "processSteps[0]", "sourceExcerpt": "Alice submits the form."},
                               {"fieldPath": "processSteps[1]", "sourceExcerpt": "Bob checks the form."}],
                     sentenceCoverage=[{"sentenceId": "s1", "status": "MAPPED", "fieldPaths": ["processSteps[0]"]},
                                       {"sentenceId": "s2", "status": "MAPPED", "fieldPaths": ["processSteps[1]"]}])
    merged = merge(WORK_PROCEDURE_MERGE, [Partial(1, frozenset({"s1"}), first), Partial(2, frozenset({"s2"}), second)],
                   by_text(text))
    assert [s["action"] for s in merged.candidate["processSteps"]] == ["Submit the form.", "Check the form."]
    assert [s["order"] for s in merged.candidate["processSteps"]] == [1, 2]
    assert len(merged.candidate["participants"]) == 2
    assert merged.candidate["evidence"] == [{"fieldPath": "processSteps[0]", "sourceExcerpt": "Alice submits the form."},
                                            {"fieldPath": "processSteps[1]", "sourceExcerpt": "Bob checks the form."}]
    assert [c["sentenceId"] for c in merged.candidate["sentenceCoverage"]] == ["s1", "s2"]
    assert merged.dropped_context == 1


def test_a_question_is_dropped_where_another_window_found_the_value() -> None:
    asks = partial(missingFields=[{"fieldPath": "assignmentRule", "question": "Who assigns?"},
                                  {"fieldPath": "documentPurpose", "question": "Why?"}])
    finds = partial(assignmentRule="The lead assigns.",
                    evidence=[{"fieldPath": "assignmentRule", "sourceExcerpt": "The lead assigns."}])
    merged = merge(WORK_PROCEDURE_MERGE, [Partial(1, frozenset(), asks), Partial(2, frozenset(), finds)], by_text(""))
    assert merged.candidate["assignmentRule"] == "The lead assigns."
    assert merged.candidate["missingFields"] == [{"fieldPath": "documentPurpose", "question": "Why?"}]
    assert merged.scalar_origin == {"assignmentRule": 2}


def test_two_evidenced_values_for_one_scalar_keep_the_first_and_need_a_person() -> None:
    one = partial(documentPurpose="Trace purchases.",
                  evidence=[{"fieldPath": "documentPurpose", "sourceExcerpt": "makes purchases traceable"}])
    same = partial(documentPurpose="trace  purchases.",
                   evidence=[{"fieldPath": "documentPurpose", "sourceExcerpt": "purchases are traced"}])
    other = partial(documentPurpose="Cut costs.",
                    evidence=[{"fieldPath": "documentPurpose", "sourceExcerpt": "this cuts costs"}])
    unbacked = partial(documentPurpose="Something else.")
    merged = merge(WORK_PROCEDURE_MERGE, [Partial(n, frozenset(), c) for n, c in
                                          enumerate([one, same, other, unbacked], start=1)], by_text(""))
    assert merged.candidate["documentPurpose"] == "Trace purchases."
    [finding] = merged.findings
    assert finding.rule_id == "MERGE_VALUE_CONFLICT" and finding.location == "$.documentPurpose"
    assert "makes purchases traceable" in finding.message and "this cuts costs" in finding.message
    assert finding.hint == {"windows": [1, 3], "values": ["Trace purchases.", "Cut costs."],
                            "excerpts": ["makes purchases traceable", "this cuts costs"]}


def test_a_path_to_an_item_its_window_lacks_is_marked_not_moved_onto_another_item() -> None:
    one = partial(rules=["Rule one."], evidence=[{"fieldPath": "rules[0]", "sourceExcerpt": "Rule one."}])
    two = partial(rules=["Rule two."], evidence=[{"fieldPath": "rules[1]", "sourceExcerpt": "Rule two."}])
    merged = merge(WORK_PROCEDURE_MERGE, [Partial(1, frozenset(), one), Partial(2, frozenset(), two)], by_text(""))
    assert [e["fieldPath"] for e in merged.candidate["evidence"]] == ["rules[0]", "window2:rules[1]"]


def test_the_merge_is_deterministic() -> None:
    windows = [Partial(n, frozenset({f"s{n}"}), partial(
        rules=[f"Rule {n}.", "Shared rule."], participants=[{"id": "p", "name": f"P{n % 2}"}],
        evidence=[{"fieldPath": "rules[0]", "sourceExcerpt": f"Rule {n}."}],
        sentenceCoverage=[{"sentenceId": f"s{n}", "status": "UNMAPPED", "fieldPaths": [], "reason": "x"}]))
        for n in range(1, 6)]
    first = merge(WORK_PROCEDURE_MERGE, windows, by_text(""))
    again = merge(WORK_PROCEDURE_MERGE, list(reversed(windows)), by_text(""))
    assert json.dumps(first.candidate) == json.dumps(again.candidate)
    assert first.candidate["rules"] == ["Rule 1.", "Shared rule.", "Rule 2.", "Rule 3.", "Rule 4.", "Rule 5."]
    assert [p["id"] for p in first.candidate["participants"]] == ["p", "p-2"]


def test_budgets_and_overlap_are_part_of_the_configuration_hash() -> None:
    from tests.support.runlog import run_config

    windows = {"max_input_tokens": 4096, "max_output_tokens": 4096, "overlap": 2}
    same = run_config(config=windows).config_hash
    assert run_config(config=dict(windows)).config_hash == same
    for key, value in (("max_input_tokens", 2048), ("max_output_tokens", 1024), ("overlap", 0)):
        assert run_config(config={**windows, key: value}).config_hash != same, key
