"""The operator's configuration files (endpoints, gold manifests; prices in tests/test_cost.py): each is read into
its pydantic model (``extractor.configfile``), and a broken one is refused with one line naming the file and the
key at fault. ``gold.toml`` is written with tomli-w and reads back as written, whatever the names hold."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from extractor.configfile import MAX_CONFIG_BYTES
from extractor.errors import InputError, UsageError
from extractor.evaluation.gold import manifest_text, read_manifest
from extractor.queue.endpoints import load_endpoints

GOOD_ENDPOINT = 'url = "http://127.0.0.1:9/v1/"\nkey_env = "LAB_KEY"\nmodels = ["lab-model", "openai:big"]\n'


def test_an_endpoints_file_becomes_endpoints(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.toml"
    path.write_text(f"[endpoints.lab]\n{GOOD_ENDPOINT}\n[endpoints.spare]\nurl = \"https://spare.example\"\n"
                    "models = [\"m\"]\n", "utf-8")
    endpoints = load_endpoints(path)
    lab = endpoints.get("lab")
    assert (lab.url, lab.key_env, lab.models) == ("http://127.0.0.1:9/v1", "LAB_KEY", ("openai:lab-model", "openai:big"))
    assert endpoints.get("spare").key_env is None and endpoints.source == str(path)


@pytest.mark.parametrize(("text", "problem"), [
    ("", "endpoints: missing"),
    ("[endpoints]\n", "endpoints: Dictionary should have at least 1 item after validation, not 0"),
    (f"[other]\n[endpoints.lab]\n{GOOD_ENDPOINT}", "other: unknown key"),
    (f"[endpoints.\"lab one\"]\n{GOOD_ENDPOINT}", "endpoints.\"lab one\" (the name): an endpoint name is letters, digits"),
    (f"[endpoints.lab]\n{GOOD_ENDPOINT}key = \"sk-123\"\n", "endpoints.lab.key: unknown key"),
    ("[endpoints.lab]\nurl = \"file:///etc/passwd\"\nmodels = [\"m\"]\n",
     "endpoints.lab.url: must be the http(s) base URL of an OpenAI-compatible server"),
    ("[endpoints.lab]\nurl = \"http://h\"\nmodels = []\n", "endpoints.lab.models: List should have at least 1 item"),
    ("[endpoints.lab]\nurl = \"http://h\"\nmodels = [\"a b\"]\n", "endpoints.lab.models[0]: a model name, without spaces"),
    ("[endpoints.lab]\nurl = \"http://h\"\nmodels = \"m\"\n", "endpoints.lab.models: Input should be a valid list"),
    ("[endpoints.lab]\nurl = \"http://h\"\nkey_env = \"sk-abc\"\nmodels = [\"m\"]\n",
     "endpoints.lab.key_env: names the environment variable holding the key"),
    ("[endpoints.lab\n", "the endpoints file is not TOML"),
])
def test_a_broken_endpoints_file_is_refused_naming_the_file_and_the_key(tmp_path: Path, text: str,
                                                                         problem: str) -> None:
    path = tmp_path / "endpoints.toml"
    path.write_text(text, "utf-8")
    with pytest.raises(UsageError) as refused:
        load_endpoints(path)
    assert str(refused.value).startswith(f"{path}: {problem}"), refused.value
    assert "\n" not in str(refused.value)


def test_a_configuration_file_too_large_or_not_text_is_refused_before_parsing(tmp_path: Path) -> None:
    huge = tmp_path / "endpoints.toml"
    with huge.open("wb") as out:
        out.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(UsageError, match="the endpoints file is over 64 MiB"):
        load_endpoints(huge)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[endpoints]")
    with pytest.raises(UsageError, match="binary.toml: the endpoints file is not UTF-8 text"):
        load_endpoints(binary)


@pytest.mark.parametrize(("text", "problem"), [
    ("version = 1\n", "contract: missing"),
    ('contract = "work_procedure"\nversion = true\n', "version: Input should be a valid integer"),
    ('contract = "work_procedure"\nversion = 0\n', "version: Input should be greater than or equal to 1"),
    ('contract = "work_procedure"\nversion = 1\nowner = "kim"\n', "owner: unknown key"),
    ('contract = "work_procedure"\nversion = 1\n[documents."a.md.json"]\nreviewer = 7\n',
     'documents."a.md.json".reviewer: Input should be a valid string'),
    ('contract = "work_procedure"\nversion = 1\n[documents."a.md.json"]\nreviwer = "kim"\n',
     'documents."a.md.json".reviwer: unknown key'),
])
def test_a_broken_gold_manifest_is_refused_naming_the_file_and_the_key(tmp_path: Path, text: str,
                                                                       problem: str) -> None:
    (tmp_path / "gold.toml").write_text(text, "utf-8")
    with pytest.raises(InputError) as refused:
        read_manifest(tmp_path)
    assert str(refused.value) == f"{tmp_path / 'gold.toml'}: {problem}"


def test_the_gold_manifest_written_reads_back_as_written(tmp_path: Path) -> None:
    """Names with quotes, dots, backslashes, control characters and Korean survive tomli-w and tomllib."""
    when = datetime(2026, 3, 14, 9, 26, 53, tzinfo=UTC)
    odd = 'a "quoted"\\back.slash\t\x01 파일.md.json'
    approved = SimpleNamespace(document_sha256="ab" * 32, document_path="docs/파일 \"1\".md", reviewer="kim\nlee",
                               approved_at=when, edited=True, run_id=None)
    text = manifest_text("work_procedure", 2, {odd: approved})  # type: ignore[dict-item]
    assert text.startswith("# A gold set written by `extract gold export`")
    (tmp_path / "gold.toml").write_text(text, "utf-8")
    contract, version, provenance = read_manifest(tmp_path)
    assert (contract, version) == ("work_procedure", 2)
    assert provenance == {odd: {"sha256": "ab" * 32, "path": "docs/파일 \"1\".md", "reviewer": "kim\nlee",
                                "approved_at": when, "edited": True, "run_id": ""}}
    assert tomllib.loads(text)["documents"][odd]["approved_at"] == when


@pytest.mark.parametrize(("fitted", "problem"), [
    ({"weak_suport": {"threshold": 0.7}}, "weak_suport: unknown key"),
    ({"weak_support": {"threshold": 1.7}}, "weak_support.threshold: Input should be less than or equal to 1"),
    ({"weak_support": {"threshold": "0.7"}}, "weak_support.threshold: Input should be a valid number"),
    ({"lexical_support": {"min_word_length": 2.5}}, "lexical_support.min_word_length: Input should be a valid integer"),
    ({"ocr_confidence": {"treshold": 0.6}}, "ocr_confidence.treshold: unknown key"),
    ([], "must be a table (an object of keys and values)"),
])
def test_a_broken_calibration_file_is_one_line_naming_the_file_and_the_key(tmp_path: Path, fitted: object,
                                                                            problem: str) -> None:
    """``calibration.json`` (``extract rules calibrate`` writes it; a person may edit it): its values reach the rules
    as numbers, so a wrong one is refused when the contract is read, not when a rule reads it mid-run."""
    from extractor.contracts.files import load, problems
    from tests.test_contract_files import write_contract

    folder = write_contract(tmp_path)
    assert problems(folder) == []
    (folder / "calibration.json").write_text(json.dumps(fitted), "utf-8")
    found = problems(folder)
    assert len(found) == 1 and found[0].startswith(f"{folder / 'calibration.json'}: {problem}"), found
    (folder / "calibration.json").write_text(json.dumps({"weak_support": {"threshold": 0.7, "judge_band_lower": 0.5}}),
                                             "utf-8")
    assert problems(folder) == [] and load(folder).settings["weak_support"]["threshold"] == 0.7


def test_the_calibration_file_has_a_section_per_calibrated_rule() -> None:
    from extractor.configfile import CalibrationFile
    from extractor.contracts.settings import CALIBRATED_RULES

    assert set(CalibrationFile.model_fields) == set(CALIBRATED_RULES.values())


@pytest.mark.parametrize(("evidence", "problem"), [
    ('[evidence]\nnormalisation = "lower"\n', "[evidence] normalisation: must be one of nfc_whitespace, "),
    ("[evidence]\nmax_occurrences_per_excerpt = 0\n",
     "[evidence] max_occurrences_per_excerpt: Input should be greater than or equal to 1"),
    ("[evidence]\nweak_support_threshold = true\n", "[evidence] weak_support_threshold: Input should be a valid number"),
    ('[evidence]\ntext = { items = ["code", 3] }\n', "[evidence] text.items[1]: Input should be a valid string"),
    ('[evidence]\nexmpt = ["note"]\n', "[evidence] exmpt: unknown key"),
    ("evidence = 3\n", "[evidence] must be a table"),
    ('[guards]\nsecrets = "no"\n', "[guards] secrets: Input should be a valid boolean"),
])
def test_a_broken_contract_setting_is_one_line_naming_the_file_and_the_key(tmp_path: Path, evidence: str,
                                                                           problem: str) -> None:
    from extractor.contracts.files import problems
    from tests.test_contract_files import write_contract

    folder = write_contract(tmp_path, checks=evidence)
    found = problems(folder)
    assert len(found) == 1 and found[0].startswith(f"{folder / 'checks.toml'}: {problem}"), found
