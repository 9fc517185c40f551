"""The typed part of a contract's settings (``[modes]`` of checks.toml; ``rules.json`` for a code contract):
what each rule and judge metric may do.

Seed 001's modes, per rule id and per judge metric: ``observe`` reports only, ``review`` sends the document
to a person, ``block`` sends it with a BLOCK mark. Defaults: a judge metric is ``review``; a warning is
``review`` when the contract lists it under ``needs_person`` and ``observe`` otherwise; an error rule is
always at least ``review`` (a value that breaks a deterministic rule is never passed; ``observe`` for an
error rule is refused when the contract is read).

``block`` is an admission, not a wish: for a judge metric it needs an admit-block judge calibration on
record (``extractor.judge.modes.resolve_policy``); for a calibrated lexical rule it needs the rule's own
calibration in these settings to say admit-block (``extract rules calibrate``). Deterministic rules may
block without one. The whole settings file is hashed into the run's configuration hash.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from extractor.canonical import canonical_sha256
from extractor.vocab import CalibrationVerdict, JudgeMode

CALIBRATED_RULES: dict[str, str] = {
    "EVIDENCE_WEAK_SUPPORT": "weak_support",
    "CLAIM_LOW_LEXICAL_SUPPORT": "lexical_support",
    "EVIDENCE_LOW_OCR_CONFIDENCE": "ocr_confidence",
}
"""Rules with a fitted threshold (the lexical-support rules, the OCR confidence rule) and the settings section
holding their threshold, band and calibration."""


class SettingsError(ValueError):
    """The contract's settings cannot be used; the message names the key and the problem."""


def _mode(value: Any, where: str) -> JudgeMode:
    try:
        return JudgeMode(value)
    except ValueError:
        raise SettingsError(f"{where} is {value!r}, expected observe, review or block") from None


@dataclass(frozen=True)
class Modes:
    """Per-rule and per-judge-metric modes (``settings["modes"]``), with the defaults above."""

    rules: Mapping[str, JudgeMode] = field(default_factory=dict)
    judge: Mapping[str, JudgeMode] = field(default_factory=dict)

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> Modes:
        raw = settings.get("modes") or {}
        if not isinstance(raw, dict) or set(raw) - {"rules", "judge", "comment"}:
            raise SettingsError("modes must be an object with 'rules' and 'judge' (rule id or metric -> mode)")
        rules = {key: _mode(value, f"modes.rules.{key}") for key, value in (raw.get("rules") or {}).items()}
        judge = {key: _mode(value, f"modes.judge.{key}") for key, value in (raw.get("judge") or {}).items()}
        return cls(rules, judge)


@dataclass(frozen=True)
class RuleMode:
    """The mode a rule runs in, and why it is lower than the settings asked for (if it is)."""

    mode: JudgeMode
    reason: str | None = None


def rule_mode(settings: Mapping[str, Any], modes: Modes, rule_id: str, *, error: bool,
              needs_person: Collection[str]) -> RuleMode:
    """The effective mode of ``rule_id`` under ``settings`` (see the module docstring); ``needs_person``: the
    warnings that default to review (the contract's list and the extent warnings)."""
    default = JudgeMode.review if error or rule_id in needs_person else JudgeMode.observe
    wanted = modes.rules.get(rule_id, default)
    if error and wanted is JudgeMode.observe:
        raise SettingsError(f"modes.rules.{rule_id}: observe, but {rule_id} is an error rule: a candidate that "
                            "breaks it is never passed (use review or block)")
    section = CALIBRATED_RULES.get(rule_id)
    if wanted is JudgeMode.block and section is not None:
        calibration = (settings.get(section) or {}).get("calibration") or {}
        if calibration.get("verdict") != CalibrationVerdict.admit_block:
            said = calibration.get("verdict") or "none is on record"
            return RuleMode(JudgeMode.review, f"{rule_id} block mode needs an admit-block calibration in "
                            f"{section}.calibration ({said}; run: extract rules calibrate {rule_id} LABELS.csv)")
    return RuleMode(wanted)


def approvals_required(settings: Mapping[str, Any]) -> int:
    """The approvals a record of a contract with these settings needs (checks.toml's ``[review]``)."""
    return int((settings.get("review") or {}).get("approvals", 1))


def settings_sha256(settings: Mapping[str, Any]) -> str:
    """The digest of a contract's settings as a run records it (part of the configuration hash)."""
    return canonical_sha256(settings)
