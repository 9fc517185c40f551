"""Accuracy against gold: ``extract eval``, gold sets, ``extract gold export``.

The numbers are checked against independent ones: precision, recall and F1 against scikit-learn on outcomes
logged by the perturbations that made the candidates (not by the scorer); the bootstrap intervals by their
coverage of a known F1 on simulated documents and by their seed; McNemar's p against the binomial tail counted
here.
The commands run on runs made through the real pipeline against the scripted HTTP server, on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import f1_score, precision_score, recall_score
from typer.testing import CliRunner

from extractor.cli import app
from extractor.contracts import get_contract, use_dirs
from extractor.engine import AdaptiveLimit, Engine, RunSettings
from extractor.evaluation.align import Scorer
from extractor.evaluation.metrics import (
    Interval,
    f1_of,
    mcnemar_exact,
    percentile_interval,
    resample_weights,
    resampled_sums,
)
from extractor.evaluation.values import as_date, as_number, normalised
from extractor.providers import from_string
from extractor.store import open_store
from extractor.vocab import ExitCode
from tests.support.corpus import FAST
from tests.support.llm_server import Action, Reply, ScriptedLLMServer, Status

ROOT = Path(__file__).resolve().parents[1]
PROCEDURES = [ROOT / "samples/en_purchase_approval.md", ROOT / "samples/ko_work_request_review.txt",
              ROOT / "samples/ru_vacation_approval.txt"]
ORDERS = sorted((ROOT / "samples/purchase_orders").iterdir())
GOLD = ROOT / "samples/gold"


def gold_of(path: Path) -> dict[str, Any]:
    folder = "procedures" if path in PROCEDURES else "purchase_orders"
    data: dict[str, Any] = json.loads((GOLD / folder / f"{path.name}.json").read_text(encoding="utf-8"))
    return data


def expected_candidate(path: Path) -> dict[str, Any]:
    """The sample's passing candidate (the gold record plus its questions and sentence coverage)."""
    names = {"en_purchase_approval.md": "en_purchase_approval", "ko_work_request_review.txt": "ko_work_request_review",
             "ru_vacation_approval.txt": "ru_vacation_approval", "en_purchase_order.md": "purchase_orders/en_pass",
             "ko_purchase_order.txt": "purchase_orders/ko_pass", "ru_purchase_order.txt": "purchase_orders/ru_pass"}
    data: dict[str, Any] = json.loads((ROOT / f"samples/expected/{names[path.name]}.candidate.json").read_text("utf-8"))
    return data


# ---------------------------------------------------------------- values and the scorer against scikit-learn


@pytest.mark.parametrize(("text", "number"), [("2,000", 2000.0), ("1 500", 1500.0), ("9,50", 9.5), ("0.12", 0.12),
                                              ("1.234.567,50", 1234567.5), ("10 days", None), ("PO-2026-0415", None)])
def test_numbers_are_read_only_from_whole_strings(text: str, number: float | None) -> None:
    assert as_number(text) == number


@pytest.mark.parametrize("text", ["2026-05-01", "01.05.2026", "2026. 5. 1.", "2026년 5월 1일", "1 May 2026",
                                  "May 1, 2026", "1 мая 2026 г."])
def test_dates_in_business_forms_name_the_same_day(text: str) -> None:
    assert as_date(text) is not None and as_date(text).isoformat() == "2026-05-01"
    assert normalised(text) == normalised("2026-05-01")


def test_normalised_mode_is_nfc_whitespace_and_case_only_where_asked() -> None:
    assert normalised("Cafe\u0301  au\nlait") == normalised("Café au lait")
    assert normalised("Dana") != normalised("dana") and normalised("Dana", True) == normalised("dana", True)
    assert normalised(2000) == normalised("2,000") == normalised(2000.0)
    assert normalised("10 days") != normalised("10  Days")


Effect = tuple[int, int, int]  # values made wrong, values removed (misses), values invented (false values)


def perturbations() -> list[tuple[str, Path, Callable[[dict[str, Any]], Effect]]]:
    """Ways a candidate differs from gold, each saying how many values it made wrong, removed and invented."""

    def quantity(c: dict[str, Any]) -> Effect:
        c["lineItems"][0]["quantity"] += 1
        return 1, 0, 0

    def transposed_sku(c: dict[str, Any]) -> Effect:  # one item, one wrong field (aligned by similarity)
        c["lineItems"][1]["sku"] = c["lineItems"][1]["sku"][:-2] + c["lineItems"][1]["sku"][-1:-3:-1]
        return 1, 0, 0

    def dropped_line(c: dict[str, Any]) -> Effect:
        c["lineItems"].pop()
        return 0, 5, 0

    def invented_line(c: dict[str, Any]) -> Effect:
        c["lineItems"].append({"line": 9, "sku": "999999", "description": "invented", "quantity": 1, "unitPrice": 1.0})
        return 0, 0, 5

    def asked_terms(c: dict[str, Any]) -> Effect:
        c["paymentTerms"] = None
        c["missingFields"].append({"fieldPath": "paymentTerms", "question": "What are the terms?"})
        return 0, 1, 0

    def invented_tax_id(c: dict[str, Any]) -> Effect:
        c["buyer"]["taxId"] = "123-45-67890"
        return 0, 0, 1

    def reordered_and_renamed(c: dict[str, Any]) -> Effect:  # nothing wrong: items realigned, ids followed
        c["lineItems"].reverse()
        for party in c["parties"]:
            for approval in c["approvals"]:
                if approval["approverId"] == party["id"]:
                    approval["approverId"] = "x" + party["id"]
            party["id"] = "x" + party["id"]
        return 0, 0, 0

    def wrong_approver(c: dict[str, Any]) -> Effect:  # a reference to an id that is not the right party
        c["parties"].append({"id": "zed", "name": "Zed Nobody"})
        c["approvals"][0]["approverId"] = "zed"
        return 1, 0, 1  # the reference is wrong; the invented party's name is a false value

    def spaced_and_cased(c: dict[str, Any]) -> Effect:  # wrong exactly only; text case is significant here
        c["paymentTerms"] = "  " + c["paymentTerms"].replace(" ", "  ") + " "
        return 0, 0, 0

    en, ko, ru = ORDERS
    return [("quantity", en, quantity), ("sku", ko, transposed_sku), ("dropped", en, dropped_line),
            ("invented", ru, invented_line), ("asked", ko, asked_terms), ("tax id", ru, invented_tax_id),
            ("reordered", en, reordered_and_renamed), ("approver", en, wrong_approver), ("spaced", ru, spaced_and_cased)]


def gold_values(record: Any, key: str = "") -> int:
    """Non-null scalar values of a purchase order record, party ids aside (labels, not scored)."""
    if isinstance(record, dict):
        return sum(gold_values(v, k) for k, v in record.items() if k != "evidence" and not (key == "parties" and k == "id"))
    if isinstance(record, list):
        return sum(gold_values(item, key) for item in record)
    return int(record is not None)


def test_precision_recall_f1_match_scikit_learn_on_logged_outcomes() -> None:
    use_dirs([ROOT / "samples/contracts"])
    scorer = Scorer(get_contract("purchase_order"))
    y_true: list[int] = []
    y_pred: list[int] = []
    totals = np.zeros(4)
    for _name, path, perturb in perturbations():
        gold = gold_of(path)
        candidate = expected_candidate(path)
        wrong, missed, invented = perturb(candidate)
        right = gold_values(gold) - wrong - missed
        y_true += [1] * right + [1, 0] * wrong + [1] * missed + [0] * invented
        y_pred += [1] * right + [0, 1] * wrong + [0] * missed + [1] * invented
        rows = scorer.score(gold, candidate).fields.values()
        totals += np.sum([row[:4] for row in rows], axis=0)
    gold_count, candidate_count, _exact, right_count = totals
    assert right_count / candidate_count == pytest.approx(precision_score(y_true, y_pred), abs=1e-12)
    assert right_count / gold_count == pytest.approx(recall_score(y_true, y_pred), abs=1e-12)
    assert 2 * right_count / (gold_count + candidate_count) == pytest.approx(f1_score(y_true, y_pred), abs=1e-12)


def test_needs_input_false_values_and_references_are_counted_apart() -> None:
    use_dirs([ROOT / "samples/contracts"])
    scorer = Scorer(get_contract("purchase_order"))
    en = ORDERS[0]
    candidate = expected_candidate(en)
    candidate["paymentTerms"] = None
    candidate["missingFields"].append({"fieldPath": "paymentTerms", "question": "Which terms?"})
    candidate["buyer"]["taxId"] = "999"
    fields = scorer.score(gold_of(en), candidate).fields
    assert fields["paymentTerms"][5:7] == [1, 1]  # a miss, asked as a question
    assert fields["buyer.taxId"][4] == 1  # a false value
    assert fields["supplier.taxId"][7] == 0 and fields["buyer.taxId"][7] == 0
    assert "parties[].id" not in fields  # ids are labels: compared only through references
    unchanged = expected_candidate(en)
    assert scorer.score(gold_of(en), unchanged).fields["buyer.taxId"][7] == 1  # null where gold is null, asked
    assert scorer.score(gold_of(en), None).fields["lineItems[].sku"] == [3, 0, 0, 0, 0, 3, 0, 0]


def test_case_is_folded_only_where_the_contract_compares_without_case() -> None:
    """work_procedure declares case-free comparison for participants' names only (its PARTICIPANT_NAME_DUPLICATE
    check normalises with casefold): a rule in other case is a wrong value, a name in other case a right one."""
    scorer = Scorer(get_contract("work_procedure"))
    en = PROCEDURES[0]
    candidate = expected_candidate(en)
    candidate["rules"][0] = candidate["rules"][0].upper()
    candidate["participants"][0]["name"] = candidate["participants"][0]["name"].upper()
    fields = scorer.score(gold_of(en), candidate).fields
    assert fields["rules[]"][:4] == [2, 2, 1, 1]  # aligned (the identity ignores case), then wrong: case counts
    assert fields["participants[].name"][:4] == [3, 3, 2, 3]  # wrong exactly, right normalised


def test_an_answer_that_broke_the_schema_has_its_values_and_its_evidence_scored(db_url: str, llm_server: Any) -> None:
    """The final answer lacks sentenceCoverage (SCHEMA_VIOLATION: the evidence rules never ran): its values are
    scored, and its excerpts, found in the source the way gold's are, are scored as evidence too."""
    def no_coverage(body: dict[str, Any] | None, _call: int) -> Action:
        candidate = expected_candidate(PROCEDURES[0])
        del candidate["sentenceCoverage"]
        return Reply(json.dumps(candidate))

    run_id = run_samples(db_url, llm_server(no_coverage), "broken", PROCEDURES[:1], "work_procedure")
    data = json.loads(cli(db_url, "eval", run_id, "--gold", str(GOLD / "procedures"), "--format", "json",
                          "--no-save").output)
    assert data["documents"][0]["state"] == "MANUAL_REVIEW" and data["summary"]["f1"] == 1.0
    evidence = data["evidence"]["overall"]
    assert evidence["gold"] > 0 and evidence["checked"] == evidence["overlap"] == evidence["gold"], evidence


# ---------------------------------------------------------------- bootstrap and McNemar by what they promise


def simulated_documents(rng: np.random.Generator, n: int, right_share: float) -> np.ndarray:
    """``n`` documents of (gold, candidate, exact, normalised) counts: as many candidate values as gold ones, each
    right with probability ``right_share``, so the true micro F1 (2 E[right] / (E[gold] + E[candidate])) is
    ``right_share``."""
    gold = 1 + rng.poisson(4, n)
    right = rng.binomial(gold, right_share)
    return np.column_stack([gold, gold, right, right])


def test_the_bootstrap_interval_covers_the_true_f1_about_95_percent_of_the_time() -> None:
    """200 simulated evaluations of 60 documents each, true F1 0.7: a 95% interval that covers it far less
    often is too narrow (the resamples are not of the documents), far more often too wide."""
    rng = np.random.default_rng(2024)
    covered = 0
    for trial in range(200):
        sums = resampled_sums(simulated_documents(rng, 60, 0.7), 1000, trial)
        interval = percentile_interval(2 * sums[:, 3] / (sums[:, 0] + sums[:, 1]))
        assert interval.low is not None and interval.high is not None
        covered += interval.low <= 0.7 <= interval.high
    assert 0.90 <= covered / 200 <= 0.99, covered


def test_the_paired_interval_covers_the_true_difference_and_is_zero_for_identical_runs() -> None:
    """Two runs on the same documents, true F1 0.8 and 0.7: the interval of the difference, from one set of
    resamples for both sides, covers -0.1 about 95% of the time; two identical runs differ by exactly 0."""
    rng = np.random.default_rng(7)
    covered = 0
    for trial in range(200):
        a = simulated_documents(rng, 60, 0.8)
        b = a.copy()
        b[:, 2] = b[:, 3] = rng.binomial(a[:, 3], 0.7 / 0.8)  # B gets right a share of what A got right
        sums_a, sums_b = resampled_sums(a, 1000, trial), resampled_sums(b, 1000, trial)
        difference = percentile_interval(f1_of(sums_b, 3) - f1_of(sums_a, 3))
        assert difference.low is not None and difference.high is not None
        covered += difference.low <= -0.1 <= difference.high
    assert 0.90 <= covered / 200 <= 0.99, covered
    same = resampled_sums(a, 1000, 0)
    assert percentile_interval(f1_of(same, 3) - f1_of(same, 3)) == Interval(0.0, 0.0, 0)


def test_the_resamples_are_draws_of_the_documents_reproducible_by_seed() -> None:
    counts = simulated_documents(np.random.default_rng(1), 57, 0.6)
    weights = np.vstack(list(resample_weights(57, 1000, 42)))
    assert weights.shape == (1000, 57) and (weights.sum(axis=1) == 57).all()  # each resample draws n documents
    assert 0.55 < (weights > 0).mean() < 0.72  # about 1 - 1/e of the documents appear in a resample
    first = resampled_sums(counts, 1000, 42)
    assert np.array_equal(first, resampled_sums(counts, 1000, 42))  # same seed, same resamples
    assert not np.array_equal(first, resampled_sums(counts, 1000, 43))
    assert np.array_equal(first, weights @ counts)  # the sums are those of the drawn documents
    assert resampled_sums(counts, 250, 42).shape == (250, 4)


@pytest.mark.parametrize(("only_a", "only_b"), [(0, 0), (0, 1), (3, 0), (5, 5), (10, 2), (1, 12), (40, 25), (0, 30)])
def test_mcnemar_exact_p_is_the_two_sided_binomial_tail_of_the_discordant_pairs(only_a: int, only_b: int) -> None:
    """p = min(1, 2 P(X <= min(b, c))), X ~ Binomial(b + c, 1/2), computed here by counting."""
    n = only_a + only_b
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    assert mcnemar_exact(only_a, only_b) == pytest.approx(min(1.0, 2 * tail), abs=1e-12)
    assert mcnemar_exact(only_a, only_b) == mcnemar_exact(only_b, only_a)


# ---------------------------------------------------------------- the commands on real runs


def sample_script(errors: dict[str, Callable[[dict[str, Any]], Any]]) -> Callable[[dict[str, Any] | None, int], Action]:
    """Answers each sample with its passing candidate, changed by ``errors[model]`` for the English documents."""
    markers = {"petty-cash": ROOT / "samples/en_purchase_approval.md", "PO-2026-0415": ORDERS[0],
               "PO-2026-0416": ORDERS[1], "PO-2026-0417": ORDERS[2], "Отпуск": PROCEDURES[2], "отпуск": PROCEDURES[2]}

    def answer(body: dict[str, Any] | None, _call: int) -> Action:
        body = body or {}
        user = body["messages"][1]["content"]
        path = next((p for marker, p in markers.items() if marker in user), PROCEDURES[1])
        change = errors.get(body["model"])
        if change is not None and path.name.startswith("en_"):
            outcome = change(expected_candidate(path))
            if isinstance(outcome, Status):
                return outcome
            return Reply(json.dumps(outcome, ensure_ascii=False))
        return Reply(json.dumps(expected_candidate(path), ensure_ascii=False))

    return answer


def run_samples(db_url: str, server: ScriptedLLMServer, model: str, paths: list[Path], contract: str) -> str:
    store = open_store(db_url)
    try:
        provider = from_string(f"openai:{model}", base_url=server.base_url, settings=FAST)
        settings = RunSettings(contract=get_contract(contract), concurrency=2)
        summary = asyncio.run(Engine(store, provider, settings, limit=AdaptiveLimit(2)).run([str(p) for p in paths]))
        assert summary.run_id is not None
        return summary.run_id
    finally:
        store.close()


def one_rule_changed(candidate: dict[str, Any]) -> dict[str, Any]:
    candidate["rules"][0] = "Requests above USD 10,000 need three quotes."
    return candidate


def cli(db_url: str, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--database", db_url])


def test_eval_scores_a_run_stores_it_and_runs_shows_it(db_url: str, llm_server: Any, tmp_path: Path) -> None:
    use_dirs([ROOT / "samples/contracts"])
    server = llm_server(sample_script({"worse": one_rule_changed,
                                       "down": lambda c: Status(403, {"error": {"message": "no access"}})}))
    good = run_samples(db_url, server, "good", PROCEDURES, "work_procedure")
    worse = run_samples(db_url, server, "worse", PROCEDURES, "work_procedure")
    down = run_samples(db_url, server, "down", ORDERS, "purchase_order")

    perfect = cli(db_url, "eval", good, "--gold", str(GOLD / "procedures"), "--format", "json")
    assert perfect.exit_code == 0, perfect.output
    data = json.loads(perfect.output)
    assert data["overall"]["normalised"]["f1"] == 1.0 and data["summary"]["fully_right"] == 3
    assert {g["name"] for g in data["languages"]} == {"en", "ko", "ru"}
    assert data["evidence"]["overall"]["overlap"] == data["evidence"]["overall"]["gold"] > 0

    plot = tmp_path / "fields.png"
    result = cli(db_url, "eval", worse[:8], "--gold", str(GOLD / "procedures"), "--format", "json", "--plot", str(plot))
    data = json.loads(result.output)
    overall = data["overall"]
    assert overall["counts"]["gold"] == overall["counts"]["candidate"] == 50
    assert overall["counts"]["normalised"] == 49 and overall["normalised"]["f1"] == pytest.approx(0.98)
    rules = next(f for f in data["fields"] if f["name"] == "rules[]")
    assert rules["counts"]["normalised"] == 5 and rules["normalised"]["f1"] == pytest.approx(5 / 6)
    assert data["summary"]["fully_right"] == 2 and data["bootstrap"]["resamples"] == 1000
    low, high = overall["normalised"]["f1_ci"]["low"], overall["normalised"]["f1_ci"]["high"]
    assert low < 0.98 <= high <= 1.0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    text = cli(db_url, "eval", worse, "--gold", str(GOLD / "procedures"), "--no-save")
    assert "rules[]" in text.output and "0.833" in text.output and "1000 resamples, seed 42" in text.output
    # three documents, one per language: a resample often draws none of a language, and the table says what that is
    assert " undefined)" in text.output and "(N undefined): in N of the 1000 resamples" in " ".join(text.output.split())

    # the model never answered the English order (HTTP 403): not evaluable, left out of the score as compare leaves
    # it out of the pass rates, and listed apart; the two it answered are scored
    orders = json.loads(cli(db_url, "eval", down, "--gold", str(GOLD / "purchase_orders"), "--format", "json").output)
    [unanswered] = orders["not_evaluable"]
    assert unanswered["path"].endswith("en_purchase_order.md") and unanswered["state"] == "ERROR"
    assert "the model never answered" in unanswered["why"] and "403" in unanswered["why"]
    assert orders["summary"]["not_evaluable"] == 1 and orders["summary"]["documents"] == 2
    assert not any(d["path"].endswith("en_purchase_order.md") for d in orders["documents"])
    assert orders["summary"]["without_candidate"] == 0 and orders["overall"]["counts"]["misses"] == 0
    assert orders["outcome"] is None and orders["summary"]["f1"] == 1.0

    listed = json.loads(cli(db_url, "runs", "--format", "json").output)
    by_id = {run["id"]: run for run in listed}
    assert by_id[worse]["accuracy"]["f1"] == pytest.approx(0.98)  # the saved one; --no-save kept nothing
    assert by_id[good]["accuracy"]["f1"] == 1.0 and by_id[good]["accuracy"]["gold"].endswith("procedures")
    table = cli(db_url, "runs")
    assert "accuracy (F1)" in table.output and "0.980 [" in table.output


def test_a_run_the_model_never_answered_is_not_evaluable_and_not_kept(db_url: str, llm_server: Any) -> None:
    """Every call refused: eval says NOT_EVALUABLE (exit 4) as compare does, scores nothing and keeps nothing, so
    `extract runs` shows no F1 of 0.000 for a model that was never heard."""
    server = llm_server(lambda _body, _call: Status(403, {"error": {"message": "no access"}}))
    down = run_samples(db_url, server, "down", PROCEDURES, "work_procedure")
    result = cli(db_url, "eval", down, "--gold", str(GOLD / "procedures"))
    assert result.exit_code == ExitCode.NOT_EVALUABLE, result.output
    assert "not evaluable, the model never answered (left out of every score): 3 document(s)" in result.output
    assert "NOT_EVALUABLE: the model answered none of the documents gold has" in result.output
    assert "0.000" not in result.output and "accuracy of values" not in result.output and "resamples" not in result.output
    data = json.loads(cli(db_url, "eval", down, "--gold", str(GOLD / "procedures"), "--format", "json").output)
    assert data["outcome"] == "NOT_EVALUABLE" and data["summary"]["f1"] is None and "evaluation_id" not in data
    [listed] = json.loads(cli(db_url, "runs", "--format", "json").output)
    assert listed["accuracy"] is None  # nothing kept


def test_a_gold_record_off_the_schema_is_refused_with_one_line(tmp_path: Path, llm_server: Any) -> None:
    db_url = f"sqlite:///{tmp_path / 'log.db'}"
    server = llm_server(sample_script({}))
    run_id = run_samples(db_url, server, "good", PROCEDURES, "work_procedure")
    gold = tmp_path / "gold"
    gold.mkdir()
    for path in (GOLD / "procedures").iterdir():
        (gold / path.name).write_bytes(path.read_bytes())
    broken = json.loads((gold / "en_purchase_approval.md.json").read_text("utf-8"))
    broken["processSteps"][0]["order"] = "first"
    (gold / "en_purchase_approval.md.json").write_text(json.dumps(broken), "utf-8")
    result = CliRunner().invoke(app, ["eval", run_id, "--gold", str(gold), "--database", db_url])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "en_purchase_approval.md.json" in lines[0] and "processSteps[0].order" in lines[0]
    (gold / "gold.toml").write_text('contract = "purchase_order"\nversion = 1\n', "utf-8")
    wrong = CliRunner().invoke(app, ["eval", run_id, "--gold", str(gold), "--database", db_url])
    assert wrong.exit_code == 2 and "purchase_order@v1" in wrong.stderr and "work_procedure@v1" in wrong.stderr


def test_gold_export_writes_what_reviewers_approved(tmp_path: Path, llm_server: Any) -> None:
    db_url = f"sqlite:///{tmp_path / 'log.db'}"
    server = llm_server(sample_script({}))
    run_id = run_samples(db_url, server, "good", PROCEDURES, "work_procedure")
    store = open_store(db_url)
    runs = {d.path: d.id for d in store.document_runs_for(run_id)}
    store.close()
    for path in PROCEDURES:
        result = CliRunner().invoke(app, ["approve", str(runs[str(path)]), "--reviewer", "kim", "--database", db_url])
        assert result.exit_code == 0, result.output
    out = tmp_path / "gold"
    result = CliRunner().invoke(app, ["gold", "export", str(out), "--database", db_url])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["en_purchase_approval.md.json", "gold.toml",
                                                      "ko_work_request_review.txt.json", "ru_vacation_approval.txt.json"]
    manifest = (out / "gold.toml").read_text("utf-8")
    assert 'contract = "work_procedure"' in manifest and 'reviewer = "kim"' in manifest and "edited = false" in manifest
    assert json.loads((out / "en_purchase_approval.md.json").read_text("utf-8")) == gold_of(PROCEDURES[0])
    again = CliRunner().invoke(app, ["gold", "export", str(out), "--database", db_url])
    assert again.exit_code == 2 and "--replace" in again.stderr
    scored = json.loads(CliRunner().invoke(app, ["eval", run_id, "--gold", str(out), "--format", "json",
                                                 "--database", db_url]).output)
    assert scored["overall"]["normalised"]["f1"] == 1.0


# ---------------------------------------------------------------- compare --gold


def numbered_gold(folder: Path, numbers: range) -> Path:
    """A gold folder for the numbered copies of the English procedure (tests.support.corpus)."""
    from tests.support.corpus import GOOD

    gold = folder / "gold"
    gold.mkdir()
    (gold / "gold.toml").write_text('contract = "work_procedure"\nversion = 1\n', "utf-8")
    record = {k: v for k, v in GOOD.items() if k not in ("missingFields", "sentenceCoverage")}
    for number in numbers:
        (gold / f"purchase_{number:02d}.md.json").write_text(json.dumps(record), "utf-8")
    return gold


def numbered_script(wrong: dict[str, Callable[[int], bool]]) -> Callable[[dict[str, Any] | None, int], Action]:
    """The good candidate for every numbered document, with the first rule's value changed (its evidence kept:
    it still passes every rule) where ``wrong[model](number)``."""
    from tests.support.corpus import GOOD, document_number

    def answer(body: dict[str, Any] | None, _call: int) -> Action:
        body = body or {}
        candidate = json.loads(json.dumps(GOOD))
        if wrong.get(body["model"], lambda n: False)(document_number(body)):
            candidate["rules"][0] = "Requests above USD 10,000 need three quotes."
        return Reply(json.dumps(candidate))

    return answer


def test_compare_gold_blocks_a_significant_accuracy_regression(db_url: str, llm_server: Any, tmp_path: Path) -> None:
    from tests.support.corpus import run, write_documents

    numbers = range(12)
    paths = write_documents(tmp_path / "docs", numbers)
    gold = numbered_gold(tmp_path, numbers)
    server = llm_server(numbered_script({"worse": lambda n: n < 9, "same": lambda n: n == 0, "base": lambda n: n == 0}))
    ids = {model: run(db_url, server, paths, model).run_id for model in ("base", "worse", "same")}

    plain = cli(db_url, "compare", ids["base"], ids["worse"], "--format", "json")
    assert json.loads(plain.output)["accuracy"] is None and json.loads(plain.output)["decision"] == "PROMOTE"

    blocked = cli(db_url, "compare", ids["base"], ids["worse"], "--gold", str(gold), "--format", "json")
    assert blocked.exit_code == 1, blocked.output
    data = json.loads(blocked.output)
    assert data["decision"] == "BLOCK" and data["pass_rate_decision"] == "PROMOTE"
    accuracy = data["accuracy"]
    assert accuracy["decision"] == "BLOCK" and accuracy["documents"] == 12
    assert accuracy["fully_right"] == {"both": 3, "only_baseline": 8, "only_candidate": 0,
                                       "mcnemar_exact_p": pytest.approx(2 / 2**8)}
    assert accuracy["regressed_fields"] == ["work_procedure@v1 rules[]"]
    rules = next(f for f in accuracy["fields"] if f["field"] == "rules[]")
    assert rules["f1_a"] == pytest.approx(23 / 24) and rules["f1_b"] == pytest.approx(15 / 24)
    assert accuracy["overall"]["difference_ci"]["high"] < 0
    assert accuracy["reason"].startswith("fewer documents fully right") or accuracy["reason"].startswith(
        "accuracy dropped significantly (the whole 95% interval of the F1 difference is below 0)")
    assert "below -0" not in blocked.output
    said = cli(db_url, "compare", ids["base"], ids["worse"], "--gold", str(gold), "--max-f1-drop", "0.01").output
    assert "below -0.01 (--max-f1-drop)" in said or "fewer documents fully right" in said

    # the paired interval: both sides' counts summed over the same resamples of the documents
    store = open_store(db_url)
    from extractor.evaluation.paired import compare_accuracy

    result = compare_accuracy(store, [store.get_run(ids["base"])], [store.get_run(ids["worse"])], [gold])
    store.close()
    assert result.overall is not None and result.overall.interval.high == accuracy["overall"]["difference_ci"]["high"]
    sums = {side: resampled_sums(np.array([[sum(row[i] for row in d) for i in range(4)] for d in per_document]), 1000, 42)
            for side, per_document in (("a", _rows(db_url, ids["base"], gold)), ("b", _rows(db_url, ids["worse"], gold)))}
    reference = percentile_interval(f1_of(sums["b"], 3) - f1_of(sums["a"], 3))
    assert result.overall.interval.low == pytest.approx(reference.low, abs=1e-12)
    assert result.overall.interval.high == pytest.approx(reference.high, abs=1e-12)

    same = cli(db_url, "compare", ids["base"], ids["same"], "--gold", str(gold))
    assert same.exit_code == 0 and "accuracy: PROMOTE" in same.output and "McNemar exact p = 1.0000" in same.output
    text = cli(db_url, "compare", ids["base"], ids["worse"], "--gold", str(gold))
    assert "REGRESSED" in text.output and "decision: BLOCK" in text.output


def _rows(db_url: str, run_id: str, gold: Path) -> list[list[list[int]]]:
    """Per document (in path order) the scorer's rows, read as ``compare_accuracy`` pairs them."""
    from extractor.evaluation.evaluate import score_selection

    store = open_store(db_url)
    try:
        documents, _, _, _ = score_selection(store, [store.get_run(run_id)], [gold])
    finally:
        store.close()
    return [list(d.score.fields.values()) for d in sorted(documents, key=lambda d: (d.path, d.sha256))]


# ---------------------------------------------------------------- reviewer corrections


def test_approvals_record_the_fields_a_person_changed_and_stats_show_their_share(db_url: str, llm_server: Any,
                                                                                 tmp_path: Path) -> None:
    server = llm_server(sample_script({"worse": one_rule_changed}))
    good = run_samples(db_url, server, "good", PROCEDURES, "work_procedure")
    worse = run_samples(db_url, server, "worse", PROCEDURES, "work_procedure")
    store = open_store(db_url)
    ids = {(run_id, d.path): d.id for run_id in (good, worse) for d in store.document_runs_for(run_id)}
    store.close()
    en, ko, ru = (str(p) for p in PROCEDURES)

    def approve(run_id: str, path: str, edited: dict[str, Any] | None = None) -> dict[str, Any]:
        args = ["approve", str(ids[(run_id, path)]), "--reviewer", "kim", "--format", "json"]
        if edited is not None:
            target = tmp_path / f"edited_{ids[(run_id, path)]}.json"
            target.write_text(json.dumps(edited, ensure_ascii=False), "utf-8")
            args += ["--edited", str(target)]
        result = cli(db_url, *args)
        assert result.exit_code == 0, result.output
        data: dict[str, Any] = json.loads(result.output)
        return data

    assert approve(worse, en, expected_candidate(PROCEDURES[0]))["changed_fields"] == ["rules[]"]
    corrected = expected_candidate(PROCEDURES[1])
    corrected["processSteps"][0]["actorId"] = corrected["processSteps"][-1]["actorId"]  # another participant
    assert approve(good, ko, corrected)["changed_fields"] == ["processSteps[].actorId"]
    assert approve(good, ru)["changed_fields"] == []
    again = approve(good, en)  # the same record as approved from the other run: nothing new is recorded
    assert again["outcome"] == "already" and again["changed_fields"] is None

    result = cli(db_url, "stats", "--corrections", "--format", "json")
    groups = {g["model"]: g for g in json.loads(result.output)}
    assert groups["good"]["approved"] == 2 and groups["good"]["approved_as_produced"] == 1
    assert groups["good"]["fields"] == {"processSteps[].actorId": {"edited": 1, "share": 0.5}}
    assert groups["worse"]["approved"] == 1 and groups["worse"]["fields"]["rules[]"] == {"edited": 1, "share": 1.0}
    text = cli(db_url, "stats", "--corrections", "--model", "good")
    assert "processSteps[].actorId" in text.output and "1/2 50%" in text.output and "worse" not in text.output
