"""``extract compare``: the regression gate between two groups of runs (prompt, model or validator versions).

Each side is a run id or ``key=value`` filters over runs. Per document content (sha256) a side takes its
newest document run that reached a final state in the matching runs. Documents are matched across sides by
content hash; documents on one side only are listed, never silently dropped, and take no part in the
rates (the two rates must be measured on the same documents).

Per document: **pass** = READY_FOR_REVIEW with no error finding in the final attempt (after the one
repair); **fail** = MANUAL_REVIEW, or any error finding left. A provider **ERROR** (transport failure,
timeout, refused request) is **not evaluable**, not a fail: it says nothing about the prompt or model
under test, and counting it as a fail would let a provider outage block a release while counting it as a
pass would hide missing data. The same holds for a judge that could not answer (timeout, 5xx, garbage,
``not_evaluable``): the document went to a person with a ``JUDGE_UNEVALUABLE_MARKS`` mark, its judge metric
is NOT_EVALUABLE, and compare counts it as not evaluable, never as a fail. Following the gate's
conservative aggregation, missing data is reported as an explicit gap instead: a matched document not
evaluable on either side is left out of both rates, listed, and -- when the share of such documents
exceeds ``max_unevaluable`` (default 0: any gap) -- a PROMOTE becomes MANUAL_REVIEW. Without any document
evaluable on both sides the outcome is NOT_EVALUABLE.

A critical finding (a leaked secret, invented personal data, a prompt echo, a forbidden phrase: the rules that
make a document BLOCKED) in a candidate document that the baseline's same document does not have (or that has
no baseline) makes the decision BLOCK whatever rho is (critical violations always block:
docs/design.md#regression-gate); the report names each such document and rule.

Categories are document tags (``extract run --tag``) when asked for, else one category; weights default
to each category's share of the compared documents, or traffic shares given with ``--weights``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.errors import UsageError
from extractor.gate import Category, GateResult, GateSettings, decide_release, default_weights, normalise_weights
from extractor.runfilter import RunFilter
from extractor.store import RunInfo, Store
from extractor.store.info import newest_final
from extractor.vocab import FAILING, JUDGE_UNEVALUABLE_MARKS, REVIEWABLE, DocumentState, GateDecision

if TYPE_CHECKING:
    from extractor.evaluation.paired import AccuracyComparison

PASS_STATE = DocumentState.READY_FOR_REVIEW
EVALUABLE_STATES = REVIEWABLE
DEFAULT_CATEGORY = "all"
UNTAGGED = "untagged"


@dataclass(frozen=True)
class CriticalFinding:
    """One critical finding of a side's final attempt, as the report names it."""

    rule_id: str
    location: str | None
    message: str | None

    def to_json(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "location": self.location, "message": self.message}


@dataclass(frozen=True)
class SideDocument:
    sha256: str
    path: str
    document_run_id: int
    run_id: str
    state: str
    tags: list[str]
    error_rules: frozenset[str]
    rules: frozenset[str]
    critical: tuple[CriticalFinding, ...] = ()
    """The final attempt's critical findings."""
    needs_person: frozenset[str] = frozenset()

    @property
    def critical_rules(self) -> frozenset[str]:
        return frozenset(f.rule_id for f in self.critical)

    @property
    def judge_unevaluable(self) -> bool:
        """The judge gave no measurement for this document (outage, garbage, not_evaluable)."""
        return bool(self.needs_person & JUDGE_UNEVALUABLE_MARKS)

    @property
    def evaluable(self) -> bool:
        return self.state in EVALUABLE_STATES and not self.judge_unevaluable

    @property
    def why_unevaluable(self) -> str:
        if self.judge_unevaluable:
            return "judge not evaluable (" + ", ".join(sorted(self.needs_person & JUDGE_UNEVALUABLE_MARKS)) + ")"
        return self.state

    @property
    def passed(self) -> bool | None:
        """True/False for an evaluable document, None when it cannot be judged."""
        if not self.evaluable:
            return None
        return self.state == PASS_STATE and not self.error_rules

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "path": self.path, "document_run_id": self.document_run_id,
                "run_id": self.run_id, "state": self.state, "passed": self.passed,
                "error_rule_ids": sorted(self.error_rules), "critical_rule_ids": sorted(self.critical_rules)}


@dataclass(frozen=True)
class Side:
    spec: str
    filter: RunFilter
    runs: list[RunInfo]
    documents: dict[str, SideDocument]

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "selection": self.filter.describe(),
            "runs": [{"id": r.id, "model": r.model, "prompt_version": r.prompt_version,
                      "validator_version": r.validator_version, "contract": f"{r.contract}@v{r.contract_version}",
                      "contract_hash": (r.config or {}).get("contract_hash"),
                      "started_at": r.started_at.isoformat(timespec="seconds")} for r in self.runs],
            "documents": len(self.documents),
        }


@dataclass(frozen=True)
class Regression:
    """A paired document that passed in the baseline and fails in the candidate."""

    sha256: str
    path: str
    category: str
    baseline_document_run_id: int
    candidate_document_run_id: int
    candidate_state: str
    new_rule_ids: list[str]
    """Rules the candidate's final attempt broke that the baseline's did not (any severity)."""
    error_rule_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "path": self.path, "category": self.category,
                "baseline_document_run_id": self.baseline_document_run_id,
                "candidate_document_run_id": self.candidate_document_run_id, "candidate_state": self.candidate_state,
                "new_rule_ids": self.new_rule_ids, "error_rule_ids": self.error_rule_ids}


@dataclass(frozen=True)
class Improvement:
    """A paired document that failed in the baseline and passes in the candidate."""

    sha256: str
    path: str
    category: str
    fixed_rule_ids: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "path": self.path, "category": self.category,
                "fixed_rule_ids": self.fixed_rule_ids}


@dataclass(frozen=True)
class RuleRate:
    """How many of the paired documents one error rule failed on each side."""

    rule_id: str
    baseline_failed: int
    candidate_failed: int
    evaluated: int

    @property
    def change(self) -> float:
        """The candidate's failure rate minus the baseline's (positive: the candidate fails it more)."""
        return (self.candidate_failed - self.baseline_failed) / self.evaluated

    def to_json(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "baseline_failed": self.baseline_failed,
                "candidate_failed": self.candidate_failed, "evaluated": self.evaluated,
                "baseline_rate": self.baseline_failed / self.evaluated,
                "candidate_rate": self.candidate_failed / self.evaluated, "change": self.change}


@dataclass(frozen=True)
class NewCritical:
    """A candidate document with critical rules its baseline document has not (or that has no baseline)."""

    sha256: str
    path: str
    document_run_id: int
    state: str
    rule_ids: list[str]
    in_baseline: bool
    findings: tuple[CriticalFinding, ...]
    """The document's critical findings of the new rules only."""

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "path": self.path, "document_run_id": self.document_run_id, "state": self.state,
                "rule_ids": self.rule_ids, "in_baseline": self.in_baseline,
                "findings": [f.to_json() for f in self.findings]}


@dataclass
class Comparison:
    baseline: Side
    candidate: Side
    gate: GateResult
    category_of: dict[str, str]
    paired: list[str]
    unevaluable: list[str]
    only_baseline: list[str]
    only_candidate: list[str]
    regressions: list[Regression] = field(default_factory=list)
    improvements: list[Improvement] = field(default_factory=list)
    rule_rates: list[RuleRate] = field(default_factory=list)
    """Every error rule that failed on a side, the most worsened first."""
    max_unevaluable: float = 0.0
    new_critical: list[NewCritical] = field(default_factory=list)
    """Candidate documents with a critical finding their baseline lacks: each one alone makes the decision BLOCK."""
    accuracy: AccuracyComparison | None = None
    """With ``--gold``: both sides scored against gold, paired by document, and the accuracy decision."""
    pass_rate_decision: GateDecision | None = None
    """The pass-rate gate's own decision when the accuracy decision changed the release decision."""
    cost: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per side (``baseline``, ``candidate``): what the model calls of its compared documents cost, in all and
    per document (``extractor.prices``; per correct field with ``--gold``, in ``accuracy``)."""

    @property
    def decision(self) -> GateDecision:
        return self.gate.decision

    @property
    def exit_code(self) -> int:
        return self.gate.exit_code

    def to_json(self) -> dict[str, Any]:
        a, b = self.baseline.documents, self.candidate.documents
        return {
            **self.gate.to_json(),
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "matched": len(self.paired) + len(self.unevaluable),
            "compared": len(self.paired),
            "not_evaluable": [{"sha256": sha, "path": (a.get(sha) or b[sha]).path,
                               "baseline_state": a[sha].state, "candidate_state": b[sha].state,
                               "baseline": a[sha].why_unevaluable, "candidate": b[sha].why_unevaluable}
                              for sha in self.unevaluable],
            "max_unevaluable": self.max_unevaluable,
            "unmatched": {
                "baseline_only": [a[sha].to_json() for sha in self.only_baseline],
                "candidate_only": [b[sha].to_json() for sha in self.only_candidate],
            },
            "new_critical_findings": [d.to_json() for d in self.new_critical],
            "regressions": [r.to_json() for r in self.regressions],
            "improvements": [i.to_json() for i in self.improvements],
            "rule_rates": [r.to_json() for r in self.rule_rates],
            "pass_rate_decision": (self.pass_rate_decision or self.gate.decision).value,
            "cost": self.cost,
            "accuracy": None if self.accuracy is None else self.accuracy.to_json(),
        }


def select_side(store: Store, spec: str) -> Side:
    """The runs a side names and, per content hash, its newest document run in a final state."""
    selection = RunFilter.parse(spec)
    runs = selection.select(store)
    if not runs:
        raise UsageError(f"{spec!r} selects no run (see `extract runs`)")
    contracts = sorted({(r.contract, r.contract_version) for r in runs})
    if len(contracts) > 1:
        raise UsageError(f"{spec!r} mixes contracts {', '.join(f'{c}@v{v}' for c, v in contracts)}; add contract=NAME")
    chosen = newest_final(store.find_document_runs(run_ids=[r.id for r in runs]))
    findings = store.findings_of_attempts(d.final_attempt_id for d in chosen.values() if d.final_attempt_id)
    documents = {}
    for sha, d in chosen.items():
        final = findings.get(d.final_attempt_id or -1, [])
        documents[sha] = SideDocument(
            sha256=sha, path=d.path, document_run_id=d.id, run_id=d.run_id, state=d.state, tags=list(d.tags or []),
            error_rules=frozenset(f["rule_id"] for f in final if f.get("severity") in FAILING),
            rules=frozenset(f["rule_id"] for f in final),
            critical=tuple(CriticalFinding(f["rule_id"], f.get("location"), f.get("message"))
                           for f in final if f.get("severity") == "critical"),
            needs_person=frozenset(d.needs_person or ()),
        )
    return Side(spec, selection, runs, documents)


def parse_weights(text: str) -> dict[str, float]:
    """``hr=0.7,finance=0.3`` -> ``{"hr": 0.7, "finance": 0.3}``."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            number = float(value)
        except ValueError:
            number = None
        if not sep or not name or number is None:
            raise UsageError(f"--weights takes category=share[,category=share], not {text!r}")
        weights[name] = number
    return weights


@dataclass(frozen=True)
class Categories:
    """What the gate's categories are and how much each weighs: one category, or the documents' tags (all of them,
    or the one starting with ``tag_prefix``), weighed by traffic shares when given (which implies tags), else by
    their shares of the compared documents."""

    by_tag: bool = False
    tag_prefix: str | None = None
    weights: Mapping[str, float] | None = None

    @property
    def tagged(self) -> bool:
        return self.by_tag or self.tag_prefix is not None or self.weights is not None

    def of(self, document: SideDocument, other: SideDocument) -> str:
        """The category of a matched document (its tags on either side)."""
        if not self.tagged:
            return DEFAULT_CATEGORY
        for tags in (document.tags, other.tags):
            for tag in tags:
                if self.tag_prefix is None or tag.startswith(self.tag_prefix):
                    return tag
        return UNTAGGED


def compare(store: Store, baseline: str, candidate: str, settings: GateSettings = GateSettings(), *,
            categories: Categories = Categories(), max_unevaluable: float = 0.0,
            accuracy: AccuracySettings | None = None) -> Comparison:
    """Both sides, their matching, the gate and the per-document and per-rule differences; with ``accuracy.gold``,
    both sides scored against it too, and a significant accuracy regression decides like the gate does
    (``extractor.evaluation.paired``: the release decision is the more severe of the two)."""
    if not 0.0 <= max_unevaluable <= 1.0:
        raise UsageError(f"max_unevaluable must be a share in [0, 1], not {max_unevaluable}")
    side_a, side_b = select_side(store, baseline), select_side(store, candidate)
    if {r.id for r in side_a.runs} == {r.id for r in side_b.runs}:
        raise UsageError("baseline and candidate select the same runs; nothing to compare")
    contract_a = {(r.contract, r.contract_version) for r in side_a.runs}
    contract_b = {(r.contract, r.contract_version) for r in side_b.runs}
    if contract_a != contract_b:
        raise UsageError("baseline and candidate use different contracts: "
                         f"{' '.join(f'{c}@v{v}' for c, v in contract_a)} vs {' '.join(f'{c}@v{v}' for c, v in contract_b)}")
    a, b = side_a.documents, side_b.documents
    matched = sorted(set(a) & set(b), key=lambda sha: (a[sha].path, sha))
    only_a = sorted(set(a) - set(b), key=lambda sha: (a[sha].path, sha))
    only_b = sorted(set(b) - set(a), key=lambda sha: (b[sha].path, sha))
    paired = [sha for sha in matched if a[sha].evaluable and b[sha].evaluable]
    unevaluable = [sha for sha in matched if sha not in set(paired)]
    category_of = {sha: categories.of(a[sha], b[sha]) for sha in matched}

    counts: Counter[str] = Counter(category_of[sha] for sha in paired)
    names = sorted(counts)
    shares = normalise_weights(categories.weights, names) if categories.weights else default_weights(counts)
    per_category = [
        Category(
            name=name,
            passed_a=sum(1 for sha in paired if category_of[sha] == name and a[sha].passed),
            n_a=counts[name],
            passed_b=sum(1 for sha in paired if category_of[sha] == name and b[sha].passed),
            n_b=counts[name],
            weight=shares[name],
        )
        for name in names
    ]
    gate = decide_release(per_category, settings)
    if gate.decision is GateDecision.NOT_EVALUABLE and not matched:
        gate = replace(gate, reason="no document is on both sides (matched by content sha256)")
    elif gate.decision is GateDecision.NOT_EVALUABLE and not paired:
        empty = [(name, side) for name, side in (("baseline", a), ("candidate", b))
                 if not any(side[sha].evaluable for sha in matched)]
        if empty:
            gate = replace(gate, reason="; ".join(
                f"no evaluable document on the {name} side ("
                + ", ".join(f"{state} {n}" for state, n in sorted(Counter(side[sha].why_unevaluable
                                                                          for sha in matched).items()))
                + ")" for name, side in empty))
        else:
            gate = replace(gate, reason=f"none of the {len(matched)} matched documents is evaluable on both sides")
    share = len(unevaluable) / len(matched) if matched else 0.0
    if gate.decision is GateDecision.PROMOTE and unevaluable and share > max_unevaluable:
        gate = replace(gate, decision=GateDecision.MANUAL_REVIEW,
                       reason=f"{gate.reason}, but {len(unevaluable)} of {len(matched)} matched documents are not "
                              f"evaluable ({share:.0%} > {max_unevaluable:.0%} allowed by --max-unevaluable)")

    new_critical = new_critical_findings(a, b)
    if new_critical:
        named = "; ".join(f"{d.path}: {', '.join(d.rule_ids)}" for d in new_critical[:5])
        more = f" (and {len(new_critical) - 5} more)" if len(new_critical) > 5 else ""
        gate = replace(gate, decision=GateDecision.BLOCK,
                       reason=f"critical finding(s) the baseline does not have, in {len(new_critical)} candidate "
                              f"document(s): {named}{more}; critical findings block whatever rho is ({gate.reason})")

    regressions, improvements = [], []
    for sha in paired:
        before, after = a[sha], b[sha]
        if before.passed and not after.passed:
            regressions.append(Regression(sha, after.path, category_of[sha], before.document_run_id,
                                          after.document_run_id, after.state, sorted(after.rules - before.rules),
                                          sorted(after.error_rules)))
        elif not before.passed and after.passed:
            improvements.append(Improvement(sha, after.path, category_of[sha], sorted(before.error_rules)))

    failing_a = Counter(rule for sha in paired for rule in a[sha].error_rules)
    failing_b = Counter(rule for sha in paired for rule in b[sha].error_rules)
    n = len(paired)
    rule_rates = sorted((RuleRate(rule, failing_a[rule], failing_b[rule], n) for rule in set(failing_a) | set(failing_b)),
                        key=lambda r: (-r.change, r.rule_id))
    scored = None
    pass_rate = None
    if accuracy is not None and accuracy.gold:
        from extractor.evaluation.paired import combined, compare_accuracy

        scored = compare_accuracy(store, side_a.runs, side_b.runs, accuracy.gold, max_drop=accuracy.max_drop,
                                  alpha=accuracy.alpha, resamples=accuracy.resamples, seed=settings.seed)
        decision = combined(gate.decision, scored.decision)
        if decision is not gate.decision:
            pass_rate = gate.decision
            gate = replace(gate, decision=decision, reason=f"{scored.reason} (pass-rate gate: {gate.decision.value}, "
                                                           f"{gate.reason})")
    result = Comparison(side_a, side_b, gate, category_of, paired, unevaluable, only_a, only_b, regressions,
                        improvements, rule_rates, max_unevaluable, new_critical, scored, pass_rate)
    result.cost = {name: side_cost(store, side, matched) for name, side in (("baseline", side_a),
                                                                            ("candidate", side_b))}
    return result


def side_cost(store: Store, side: Side, shas: list[str]) -> dict[str, Any]:
    """What the model calls of a side's document runs of ``shas`` cost, in all and per document."""
    from extractor.prices import RunModels, Spend, spend_by_key

    rows = store.spend(document_run_ids=[side.documents[sha].document_run_id for sha in shas])
    spend = spend_by_key(rows, lambda row: 0, {run.id: RunModels.of_run(run) for run in side.runs}).get(0, Spend())
    return spend.to_json() | {"documents": len(shas), "per_document_usd": spend.per(len(shas))}


@dataclass(frozen=True)
class AccuracySettings:
    """How ``compare --gold`` decides on accuracy (docs/design.md#evaluation)."""

    gold: tuple[Path, ...] = ()
    """The gold folders both sides are scored against (one per contract); none: no accuracy decision."""
    max_drop: float = 0.0
    """The F1 drop that is tolerated: BLOCK when the whole 95% interval of B - A lies below minus this."""
    alpha: float = 0.05
    """McNemar's significance level on documents fully right."""
    resamples: int = 1_000


def new_critical_findings(baseline: dict[str, SideDocument], candidate: dict[str, SideDocument]) -> list[NewCritical]:
    """Per candidate document (matched or not): the critical rules it has that its baseline document has not."""
    found = []
    for sha, document in sorted(candidate.items(), key=lambda item: (item[1].path, item[0])):
        before = baseline[sha].critical_rules if sha in baseline else frozenset()
        new = document.critical_rules - before
        if new:
            found.append(NewCritical(sha, document.path, document.document_run_id, document.state, sorted(new),
                                     sha in baseline, tuple(f for f in document.critical if f.rule_id in new)))
    return found


def plot(comparison: Comparison, path: Path) -> Path:
    """A PNG of the two posterior densities per category and the distribution of rate_B - rate_A."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from extractor.gate import beta_pdf

    gate = comparison.gate
    panels = len(gate.categories) + (1 if gate.samples_a is not None else 0)
    columns = min(3, max(panels, 1))
    rows = max(1, -(-panels // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    grid = np.linspace(0.0, 1.0, 801)
    flat = list(axes.flat)
    for axis, category in zip(flat, gate.categories):
        for posterior, label, colour in ((category.a, "baseline", "tab:blue"), (category.b, "candidate", "tab:orange")):
            low, high = posterior.interval
            density = beta_pdf(grid, posterior.a, posterior.b)
            axis.plot(grid, density, color=colour,
                      label=f"{label} {posterior.passed}/{posterior.n}  95% [{low:.2f}, {high:.2f}]")
            axis.fill_between(grid, density, where=(grid >= low) & (grid <= high), color=colour, alpha=0.15)
        axis.set_title(f"{category.name} (weight {category.weight:.2f})")
        axis.set_xlabel("pass rate")
        axis.set_xlim(0, 1)
        axis.legend(fontsize=8, loc="upper left")
    if gate.samples_a is not None and gate.samples_b is not None:
        axis = flat[len(gate.categories)]
        difference = gate.samples_b - gate.samples_a
        edges = np.linspace(min(difference.min(), -gate.settings.delta) - 1e-9, max(difference.max(), 0.0) + 1e-9, 81)
        worse = difference < -gate.settings.delta
        axis.hist(difference[~worse], bins=edges, color="tab:gray", alpha=0.7, label="B not worse by delta")
        axis.hist(difference[worse], bins=edges, color="tab:red", alpha=0.6, label="B worse by > delta (rho)")
        axis.axvline(-gate.settings.delta, color="tab:red", linestyle="--", label=f"-delta = {-gate.settings.delta:g}")
        axis.set_title(f"weighted rate B - A: rho = {gate.rho:.3f} -> {gate.decision.value}")
        axis.set_xlabel("rate_B - rate_A")
        axis.legend(fontsize=8)
    for axis in flat[panels:]:
        axis.axis("off")
    if not gate.categories:
        flat[0].text(0.5, 0.5, f"{gate.decision.value}\n{gate.reason}", ha="center", va="center", wrap=True)
        flat[0].axis("off")
    figure.suptitle(f"{comparison.baseline.spec}  vs  {comparison.candidate.spec}", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
