"""Failure rates per ``rule_id`` per run, so a regression can be traced to the rule that started failing.

Per run and rule:

- ``final``: documents whose final attempt has the rule at error (or critical) severity, out of documents with a final
  attempt (what a person or the gate sees after the one repair);
- ``first``: documents whose first generation had it at error severity, out of documents whose first
  generation produced an answer (transport failures excluded): how often the repair had to fix it;
- ``warning``: documents whose final attempt has it as a warning.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from extractor.store import RunInfo, Store
from extractor.vocab import FAILING


@dataclass(frozen=True)
class RuleCount:
    failed: int
    evaluated: int

    @property
    def rate(self) -> float | None:
        return self.failed / self.evaluated if self.evaluated else None

    def to_json(self) -> dict[str, Any]:
        return {"failed": self.failed, "evaluated": self.evaluated, "rate": self.rate}


@dataclass(frozen=True)
class RunRuleStats:
    run: RunInfo
    documents: int
    evaluated_final: int
    evaluated_first: int
    final: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    warning: dict[str, int] = field(default_factory=dict)

    @property
    def rules(self) -> list[str]:
        return sorted(set(self.final) | set(self.first) | set(self.warning))

    def rule(self, rule_id: str) -> dict[str, RuleCount]:
        return {
            "final": RuleCount(self.final.get(rule_id, 0), self.evaluated_final),
            "first": RuleCount(self.first.get(rule_id, 0), self.evaluated_first),
            "warning": RuleCount(self.warning.get(rule_id, 0), self.evaluated_final),
        }

    def only(self, rule_id: str) -> RunRuleStats:
        """These counts for one rule alone (``extract stats --rule``)."""
        def keep(counts: dict[str, int]) -> dict[str, int]:
            return {rule: n for rule, n in counts.items() if rule == rule_id}

        return replace(self, final=keep(self.final), first=keep(self.first), warning=keep(self.warning))

    def to_json(self) -> dict[str, Any]:
        run = self.run
        return {
            "run_id": run.id,
            "started_at": run.started_at.isoformat(timespec="seconds"),
            "model": run.model,
            "prompt_version": run.prompt_version,
            "contract": f"{run.contract}@v{run.contract_version}",
            "validator_version": run.validator_version,
            "documents": self.documents,
            "evaluated_final": self.evaluated_final,
            "evaluated_first": self.evaluated_first,
            "rules": {rule: {k: v.to_json() for k, v in self.rule(rule).items()} for rule in self.rules},
        }


def rule_stats(store: Store, runs: list[RunInfo]) -> list[RunRuleStats]:
    """Per-rule counts for each run, in the order given."""
    if not runs:
        return []
    ids = [run.id for run in runs]
    document_runs = store.find_document_runs(run_ids=ids)
    finals = {d.final_attempt_id: d.run_id for d in document_runs if d.final_attempt_id is not None}
    totals = Counter(d.run_id for d in document_runs)
    evaluated_final: Counter[str] = Counter()
    evaluated_first: Counter[str] = Counter()
    final: dict[str, Counter[str]] = {run_id: Counter() for run_id in ids}
    first: dict[str, Counter[str]] = {run_id: Counter() for run_id in ids}
    warning: dict[str, Counter[str]] = {run_id: Counter() for run_id in ids}
    for run_id, _dr, attempt_id, kind, number, outcome, findings in store.attempt_findings_for_runs(ids):
        errors = {f["rule_id"] for f in findings if f.get("severity") in FAILING}
        if kind == "generate" and number == 1 and outcome not in ("transport_error", "interrupted"):
            evaluated_first[run_id] += 1
            first[run_id].update(errors)
        if attempt_id in finals:
            evaluated_final[run_id] += 1
            final[run_id].update(errors)
            warning[run_id].update({f["rule_id"] for f in findings if f.get("severity") == "warning"})
    return [
        RunRuleStats(run, totals[run.id], evaluated_final[run.id], evaluated_first[run.id],
                     dict(final[run.id]), dict(first[run.id]), dict(warning[run.id]))
        for run in runs
    ]


@dataclass(frozen=True)
class CorrectionGroup:
    """Approvals of runs with one model, prompt version and contract version, and per field path how many a
    person edited: production review as a quality measure without a gold set."""

    model: str
    prompt_version: str
    contract: str
    approved: int
    """Approvals whose changes were recorded (the share's denominator)."""
    edited: dict[str, int]
    not_recorded: int = 0
    """Approvals made before changes were recorded: left out, never counted as unedited."""

    @property
    def name(self) -> str:
        return f"{self.model} prompt {self.prompt_version} {self.contract}"

    def share(self, field_path: str) -> float | None:
        return self.edited.get(field_path, 0) / self.approved if self.approved else None

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "prompt_version": self.prompt_version, "contract": self.contract,
                "approved": self.approved, "approved_unrecorded": self.not_recorded,
                "approved_as_produced": self.edited.get("", 0),
                "fields": {name: {"edited": count, "share": self.share(name)}
                           for name, count in sorted(self.edited.items()) if name}}


def correction_stats(store: Store, run_ids: list[str] | None = None) -> list[CorrectionGroup]:
    """Per (model, prompt version, contract version) of the runs ``run_ids`` (every run when None): approvals, and
    per field path the approvals in which a person changed its value, as each decision recorded it
    (``extractor.store.approved.correction_counts``). ``edited[""]`` counts approvals as produced."""
    from extractor.store.approved import correction_counts

    groups: dict[tuple[str, str, str], tuple[Counter[str], list[int]]] = {}
    for model, prompt, contract, version, field_path, changes, count in correction_counts(store, run_ids):
        counts, totals = groups.setdefault((model, prompt, f"{contract}@v{version}"), (Counter(), [0, 0]))
        if field_path is not None:
            counts[field_path] += count
        elif changes is None:
            totals[1] += count
        else:
            totals[0] += count
            if changes == 0:
                counts[""] += count
    return [CorrectionGroup(model, prompt, contract, totals[0], dict(counts), totals[1])
            for (model, prompt, contract), (counts, totals) in sorted(groups.items())]
