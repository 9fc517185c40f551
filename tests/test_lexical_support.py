"""Lexical support for Korean, Russian and English, and its calibration on the shipped labelled samples.

The score's calibration goes through the judge calibration machinery; its figures are checked against
scikit-learn (AUROC, MCC, and bootstrap intervals rebuilt from the same resample indices).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import matthews_corrcoef, roc_auc_score

from extractor.contracts import get_contract
from extractor.evidence.support import support_score
from extractor.judge.calibrate_rule import calibrate_rule, fit_band
from extractor.judge.calibration import bootstrap_indices
from extractor.offload import read_here as load_document
from extractor.validate import validate

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples/lexical_support").glob("*.csv"))

KO_SOURCE = "환불 요청은 구매일로부터 14일 이내에 접수해야 합니다."
KO_SUPPORTED = "구매 후 14일 안에 환불을 요청할 수 있습니다."
KO_CONTRADICTING = "환불 요청은 구매일로부터 30일 이내에 가능합니다."


def seed_000_overlap(claim: str, source: str) -> float:
    """The article's measure: shared whole words of four letters or more (what the rule used before)."""
    import re

    def words(text: str) -> set[str]:
        return {w.casefold() for w in re.findall(r"[^\W_]+", text) if len(w) >= 4}

    return len(words(claim) & words(source)) / len(words(claim))


def test_korean_supported_claim_outscores_a_contradicting_one() -> None:
    """The reported case: whole-word overlap gave the supported claim 0.00 and the contradicting one 0.50."""
    assert (seed_000_overlap(KO_SUPPORTED, KO_SOURCE), seed_000_overlap(KO_CONTRADICTING, KO_SOURCE)) == (0.0, 0.5)
    supported, contradicting = support_score(KO_SUPPORTED, KO_SOURCE), support_score(KO_CONTRADICTING, KO_SOURCE)
    assert supported is not None and contradicting is not None
    assert supported >= 0.8 and contradicting <= 0.4  # 14 -> 30 days: a changed number halves the score


def korean_rag(claim: str, folder: Path) -> set[str]:
    source = folder / "kb.txt"
    source.write_text(KO_SOURCE + "\n", encoding="utf-8")
    document = load_document(source)
    assert [s.id for s in document.sentences] == ["s1"]
    answer = {"summary": "환불 기한", "claims": [{"text": claim, "source_ids": ["s1"]}],
              "citations": [{"source_id": "s1", "quote": "구매일로부터 14일 이내에 접수해야"}]}
    return {f.rule_id for f in validate(json.dumps(answer, ensure_ascii=False), document, get_contract("rag_answer")).findings}


def test_on_a_korean_rag_answer_the_rule_passes_the_supported_claim_and_flags_the_contradicting_one(
        tmp_path: Path) -> None:
    assert korean_rag(KO_SUPPORTED, tmp_path) == set()
    assert korean_rag(KO_CONTRADICTING, tmp_path) == {"CLAIM_LOW_LEXICAL_SUPPORT"}


@pytest.mark.parametrize(("value", "excerpt", "high"), [
    ("요청자: 작업 내용을 작성한다.", "요청자가 작업 내용을 작성합니다.", True),  # endings and particles differ
    ("검토자는 요청을 승인하거나 반려한다.", "검토자가 요청을 승인하거나 반려합니다.", True),
    ("인턴은 급여 데이터에 접근할 수 있다.", "급여 데이터는 인턴이 접근할 수 없습니다.", False),  # negation
    ("Руководитель согласует заявления сотрудников.", "Заявление сотрудника согласует руководитель.", True),  # cases
    ("Счета оплачиваются в течение 45 дней.", "Счета поставщиков оплачиваются в течение 30 дней.", False),
    ("Стажёры имеют доступ к данным.", "Стажёры не имеют доступа к данным.", False),
    ("The manager approved the requests.", "Managers approve each request.", True),  # inflection
    ("Invoices are paid within 45 days.", "Invoices are paid within 30 days.", False),
    ("Payments over USD 1,000 need a second signature.", "Payments over USD 1000 need a second signature.", True),
])
def test_morphology_and_facts(value: str, excerpt: str, high: bool) -> None:
    score = support_score(value, excerpt, 3)
    assert score is not None and (score >= 0.75 if high else score <= 0.5), score


def test_the_shipped_samples_have_60_rows_per_language_with_both_labels() -> None:
    assert [path.name for path in SAMPLES] == ["en.csv", "ko.csv", "ru.csv"]
    for path in SAMPLES:
        rows = list(csv.DictReader(path.open(encoding="utf-8")))
        labels = [int(row["label"]) for row in rows]
        assert len(rows) >= 60 and 0.4 <= sum(labels) / len(labels) <= 0.6, path
        assert {row["language"] for row in rows} == {path.stem}


def test_calibration_figures_match_scikit_learn() -> None:
    calibration = calibrate_rule("EVIDENCE_WEAK_SUPPORT", SAMPLES, resamples=300)
    rows = [row for path in SAMPLES for row in csv.DictReader(path.open(encoding="utf-8"))]
    scores = np.array([support_score(row["value"], row["excerpt"], 3) for row in rows], dtype=float)
    y = np.array([int(row["label"]) for row in rows])
    auroc, mcc = calibration.report.judge.auroc, calibration.report.judge.mcc
    assert auroc is not None and mcc is not None
    assert calibration.report.cases.used == len(rows) == 240
    assert auroc.value == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    threshold = calibration.fitted_threshold
    assert mcc.value == pytest.approx(matthews_corrcoef(y, scores >= threshold), abs=1e-12)
    best = max(matthews_corrcoef(y, scores >= t) for t in np.round(np.arange(0.01, 1.0, 0.01), 2))
    assert mcc.value == pytest.approx(best, abs=1e-12)  # the fitted threshold is the MCC optimum
    values = [roc_auc_score(y[i], scores[i]) for i in bootstrap_indices(len(y), 300, 42) if len(set(y[i])) == 2]
    assert (auroc.low, auroc.high) == pytest.approx(tuple(np.percentile(values, [2.5, 97.5])))
    for language, figures in calibration.by_language.items():
        mask = np.array([row["language"] == language for row in rows])
        assert figures.n == mask.sum() and figures.auroc == pytest.approx(roc_auc_score(y[mask], scores[mask]))
    lower, upper = calibration.band
    assert lower <= threshold <= upper
    assert y[scores < lower].mean() <= 0.1 and (1 - y[scores >= upper]).mean() <= 0.1  # the safe zones
    assert calibration.settings["threshold"] == upper and calibration.settings["judge_band_lower"] == lower


def test_band_edges_on_hand_made_scores() -> None:
    y = np.array([0, 0, 0, 0, 1, 0, 1, 1, 1, 1])
    scores = np.array([0.05, 0.1, 0.2, 0.3, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9])
    assert fit_band(y, scores, 0.45, 0.1) == (0.35, 0.51)  # below 0.35 all unsupported; from 0.51 all supported
    assert fit_band(y, scores, 0.55, 0.1) == (0.35, 0.55)  # the band always holds the fitted threshold


def test_cli_calibrates_a_rule_writes_the_settings_and_the_card_still_prints(tmp_path: Path) -> None:
    settings = tmp_path / "rules.json"
    settings.write_text((ROOT / "contracts/rag_answer/v1/rules.json").read_text(encoding="utf-8"), encoding="utf-8")
    env = {**os.environ, "COLUMNS": "200"}
    run = subprocess.run([sys.executable, "-m", "extractor", "rules", "calibrate", "CLAIM_LOW_LEXICAL_SUPPORT",
                          *map(str, SAMPLES), "--settings", str(settings), "--resamples", "200"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    for expected in ("AUROC", "fitted threshold", "band: fail below", "ko: AUROC", "ru: AUROC", "en: AUROC",
                     f"written to {settings} (lexical_support)"):
        assert expected in run.stdout, run.stdout
    written = json.loads(settings.read_text(encoding="utf-8"))
    section = written["lexical_support"]
    assert section["judge_band_lower"] <= section["calibration"]["fitted_threshold"] <= section["minimum_overlap"]
    assert section["calibration"]["n"] == 240 and set(section["calibration"]["by_language"]) == {"en", "ko", "ru"}
    assert written["needs_person"] == ["CLAIM_LOW_LEXICAL_SUPPORT"]  # other keys kept

    card = subprocess.run([sys.executable, "-m", "extractor", "rules", "CLAIM_LOW_LEXICAL_SUPPORT"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert card.returncode == 0 and "judge needed after failure" in card.stdout
    wrong = subprocess.run([sys.executable, "-m", "extractor", "rules", "calibrate", "CITATION_NOT_FOUND",
                            str(SAMPLES[0])], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert wrong.returncode == 2 and "has no calibrated threshold" in wrong.stderr and wrong.stderr.count("\n") == 1


def test_cli_calibrates_without_settings_into_the_contract_that_runs_the_rule(tmp_path: Path) -> None:
    """Without --settings the file is calibration.json of --contract (which must run the rule), else of the default
    contract, else of the built-in contract that runs it; a rule every file contract runs has no owner of its own."""
    import shutil

    shutil.copytree(ROOT / "samples/contracts/purchase_order", tmp_path / "contracts/purchase_order")
    env = {**os.environ, "COLUMNS": "200"}

    def calibrate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "extractor", "rules", "calibrate", *args, "--resamples", "100"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)

    labels = list(map(str, SAMPLES))
    written = calibrate("EVIDENCE_WEAK_SUPPORT", *labels, "--contract", "purchase_order", "--contracts",
                        str(tmp_path / "contracts"))
    target = tmp_path / "contracts/purchase_order/v1/calibration.json"
    assert written.returncode == 0, written.stderr
    assert f"written to {target} (weak_support)" in written.stdout
    assert json.loads(target.read_text(encoding="utf-8"))["weak_support"]["calibration"]["n"] == 240

    for rule_id, owner in (("EVIDENCE_WEAK_SUPPORT", "work_procedure"), ("CLAIM_LOW_LEXICAL_SUPPORT", "rag_answer")):
        dry = calibrate(rule_id, *labels, "--no-write", "--format", "json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert report["written"] is False
        assert Path(report["settings_file"]).parts[-3:] == (owner, "v1", "calibration.json")

    wrong = calibrate("CLAIM_LOW_LEXICAL_SUPPORT", *labels, "--contract", "purchase_order", "--contracts",
                      str(tmp_path / "contracts"))
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "contract purchase_order v1 does not run CLAIM_LOW_LEXICAL_SUPPORT" in wrong.stderr
