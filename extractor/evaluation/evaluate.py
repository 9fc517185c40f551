"""``extract eval``: a selection of runs scored against gold sets (docs/design.md#evaluation).

Per document of the selection (its newest final document run, as ``extract compare`` picks them) the final
attempt's candidate is aligned with the document's gold record and counted (``extractor.evaluation.align``);
the counts are summed per field path, per language, per contract and overall, with bootstrap intervals over
documents (``extractor.evaluation.metrics``). A document without a final candidate (ERROR, an unparseable
answer) counts every gold value as a miss and is listed apart; documents of the selection without a gold
record, and gold records of documents the selection never ran, are listed, never silently dropped.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from extractor.document import language_of
from extractor.errors import UsageError
from extractor.evaluation.align import COLUMNS, EVIDENCE_COLUMNS, DocumentScore, Scorer
from extractor.evaluation.gold import GoldSet, load_gold, read_manifest
from extractor.evaluation.metrics import (
    CANDIDATE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    EXACT,
    GOLD,
    LEVEL,
    NORMALISED,
    Score,
    ratio,
    resampled_sums,
    scores,
)
from extractor.prices import RunModels, Spend, spend_by_key
from extractor.runfilter import RunFilter
from extractor.store.info import newest_final
from extractor.vocab import DocumentState, GateDecision

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.store import RunInfo, Store
    from extractor.store.evaluations import FinalCandidate

NO_CANDIDATE = "no final candidate"
EVIDENCE = "evidence"
"""The envelope's list of evidence entries (``{fieldPath, sourceExcerpt}``)."""


@dataclass
class ScoredDocument:
    """One document of the selection with its gold record: where it ended and its counts."""

    sha256: str
    path: str
    gold: str
    contract: str
    language: str
    document_run_id: int
    run_id: str
    state: str
    score: DocumentScore
    without_candidate: str | None = None
    """Why there is no candidate to score (its state, or an unparseable answer); None when there is one."""

    @property
    def evaluable(self) -> bool:
        """The model answered (its answer may be unusable: then every gold value is a miss). A document it never
        answered (ERROR) says nothing about its accuracy: it is left out of every score, as ``extract compare``
        leaves it out of the pass rates, and listed apart."""
        return self.state != DocumentState.ERROR

    @property
    def fully_right(self) -> bool:
        return self.without_candidate is None and self.score.fully_right


@dataclass(frozen=True)
class GroupScore:
    """A group's counts (``COLUMNS``) and its exact and normalised scores."""

    name: str
    documents: int
    counts: dict[str, int]
    exact: Score
    normalised: Score

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "documents": self.documents, "counts": self.counts,
                "exact": self.exact.to_json(), "normalised": self.normalised.to_json()}


@dataclass(frozen=True)
class EvidenceScore:
    """Evidence units (a value outside lists, or a list item) whose gold evidence the candidate's overlaps."""

    name: str
    gold: int
    checked: int
    overlap: int
    precision: Score

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "gold": self.gold, "checked": self.checked, "overlap": self.overlap,
                "precision": ratio(self.overlap, self.checked), "recall": ratio(self.overlap, self.gold),
                "precision_ci": self.precision.precision_interval.to_json(),
                "recall_ci": self.precision.recall_interval.to_json()}


@dataclass
class Evaluation:
    selection: str
    runs: list[RunInfo]
    gold: list[GoldSet]
    resamples: int
    seed: int
    documents: list[ScoredDocument]
    not_in_gold: list[dict[str, Any]] = field(default_factory=list)
    gold_not_run: list[dict[str, Any]] = field(default_factory=list)
    overall: GroupScore | None = None
    contracts: list[GroupScore] = field(default_factory=list)
    languages: list[GroupScore] = field(default_factory=list)
    fields: list[tuple[str, GroupScore]] = field(default_factory=list)
    """``(contract id, score)``, the score named by its field path."""
    evidence: list[tuple[str, EvidenceScore]] = field(default_factory=list)
    evidence_overall: EvidenceScore | None = None
    spend: Spend | None = None
    """What the model calls of the scored document runs cost (``extractor.prices``)."""
    not_evaluable: list[ScoredDocument] = field(default_factory=list)
    """Documents with a gold record the model never answered: left out of every score (``ScoredDocument.evaluable``)."""

    @property
    def outcome(self) -> str | None:
        """``NOT_EVALUABLE`` when the model answered none of the documents gold has (nothing to score: no F1, nothing
        kept), else None."""
        return GateDecision.NOT_EVALUABLE.value if self.not_evaluable and not self.documents else None

    @property
    def fully_right(self) -> int:
        return sum(d.fully_right for d in self.documents)

    @property
    def without_candidate(self) -> list[ScoredDocument]:
        return [d for d in self.documents if d.without_candidate is not None]

    def summary(self) -> dict[str, Any]:
        """The headline numbers ``extract runs`` shows and the run log keeps beside the report."""
        overall = self.overall
        return {
            "documents": len(self.documents),
            "not_evaluable": len(self.not_evaluable),
            "without_candidate": len(self.without_candidate),
            "fully_right": self.fully_right,
            "f1": None if overall is None else overall.normalised.f1,
            "f1_ci": None if overall is None else overall.normalised.f1_interval.to_json(),
            "exact_f1": None if overall is None else overall.exact.f1,
            "false_values": 0 if overall is None else overall.counts["false_values"],
            "gold_contracts": [g.contract_id for g in self.gold],
            "cost": cost_summary(self.spend, len(self.documents),
                                 0 if overall is None else overall.counts["normalised"]),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "selection": self.selection,
            "runs": [{"id": r.id, "model": r.model, "prompt_version": r.prompt_version,
                      "contract": f"{r.contract}@v{r.contract_version}",
                      "started_at": r.started_at.isoformat(timespec="seconds")} for r in self.runs],
            "gold": [{"folder": str(g.folder), "contract": g.contract_id, "records": len(g.records),
                      "sha256": g.digest()} for g in self.gold],
            "bootstrap": {"resamples": self.resamples, "seed": self.seed, "level": LEVEL,
                          "unit": "documents", "method": "percentile"},
            "summary": self.summary(),
            "overall": None if self.overall is None else self.overall.to_json(),
            "contracts": [g.to_json() for g in self.contracts],
            "languages": [g.to_json() for g in self.languages],
            "fields": [{"contract": contract, **g.to_json()} for contract, g in self.fields],
            "evidence": {"overall": None if self.evidence_overall is None else self.evidence_overall.to_json(),
                         "fields": [{"contract": contract, **e.to_json()} for contract, e in self.evidence]},
            "documents": [{"sha256": d.sha256, "path": d.path, "gold": d.gold, "contract": d.contract,
                           "language": d.language, "document_run_id": d.document_run_id, "run_id": d.run_id,
                           "state": d.state, "without_candidate": d.without_candidate,
                           "fully_right": d.fully_right} for d in self.documents],
            "not_evaluable": [{"sha256": d.sha256, "path": d.path, "gold": d.gold, "document_run_id": d.document_run_id,
                               "run_id": d.run_id, "state": d.state, "why": d.without_candidate}
                              for d in self.not_evaluable],
            "outcome": self.outcome,
            "not_in_gold": self.not_in_gold,
            "gold_not_run": self.gold_not_run,
        }


def contract_of(run: RunInfo) -> Contract:
    """The contract a run used, as it was (``extractor.contracts.recorded``; one line on why it cannot be)."""
    from extractor.contracts.recorded import contract_of_run

    return contract_of_run(run)


def evaluate(store: Store, selection: str, gold_folders: Sequence[Path], *, resamples: int = DEFAULT_RESAMPLES,
             seed: int = DEFAULT_SEED) -> Evaluation:
    """Score the selection's final candidates against the gold folders (one per contract)."""
    runs = RunFilter.parse(selection).select(store)
    if not runs:
        raise UsageError(f"{selection!r} selects no run (see `extract runs`)")
    scored, gold_sets, not_in_gold, gold_not_run = score_selection(store, runs, gold_folders)
    documents = [d for d in scored if d.evaluable]
    result = Evaluation(selection, runs, gold_sets, resamples, seed, documents, not_in_gold, gold_not_run,
                        not_evaluable=[d for d in scored if not d.evaluable])
    if documents:  # none: nothing to score (no gold record matched, or the model answered none of them)
        aggregate(result)
    result.spend = spend_of(store, runs, documents)
    return result


def spend_of(store: Store, runs: Sequence[RunInfo], documents: Sequence[ScoredDocument]) -> Spend:
    """The tokens and cost of the model calls of these documents' document runs."""
    rows = store.spend(document_run_ids=[d.document_run_id for d in documents])
    return spend_by_key(rows, lambda row: 0, {run.id: RunModels.of_run(run) for run in runs}).get(0, Spend())


def cost_summary(spend: Spend | None, documents: int, right: int) -> dict[str, Any] | None:
    """Cost in all, per document and per correct field (a value right, normalised); None amounts are unknown."""
    if spend is None:
        return None
    return spend.to_json() | {"per_document_usd": spend.per(documents), "per_correct_field_usd": spend.per(right)}


def score_selection(store: Store, runs: Sequence[RunInfo], gold_folders: Sequence[Path]) -> tuple[
        list[ScoredDocument], list[GoldSet], list[dict[str, Any]], list[dict[str, Any]]]:
    """Every document of ``runs`` that has a gold record, scored; plus what could not be paired with gold."""
    by_contract: dict[tuple[str, int], list[RunInfo]] = {}
    for run in runs:
        by_contract.setdefault((run.contract, run.contract_version), []).append(run)
    gold_sets: list[GoldSet] = []
    for folder in gold_folders:
        name, version, _ = read_manifest(folder)
        matching = by_contract.get((name, version))
        if not matching:
            contracts = ", ".join(f"{c}@v{v}" for c, v in sorted(by_contract))
            raise UsageError(f"{folder}: the gold is for {name}@v{version}, but the selected runs used {contracts}")
        gold_sets.append(load_gold(folder, contract_of(matching[0])))
    if len({(g.contract, g.version) for g in gold_sets}) < len(gold_sets):
        raise UsageError("two gold folders for one contract version: give one --gold per contract")
    run_of = {run.id: run for run in runs}
    chosen = newest_final(store.find_document_runs(run_ids=list(run_of)))
    finals = store.final_candidates(d.final_attempt_id for d in chosen.values() if d.final_attempt_id)
    sentences = store.sentences_of(d.document_id for d in chosen.values())
    documents: list[ScoredDocument] = []
    not_in_gold: list[dict[str, Any]] = []
    gold_not_run: list[dict[str, Any]] = []
    for gold in gold_sets:
        contract = contract_of(by_contract[(gold.contract, gold.version)][0])
        scorer = Scorer(contract)
        normalisation = str(contract.settings.get("evidence_normalisation", "nfc_whitespace"))
        used: set[str] = set()
        for sha, document_run in sorted(chosen.items(), key=lambda item: (item[1].path, item[0])):
            run = run_of[document_run.run_id]
            if (run.contract, run.contract_version) != (gold.contract, gold.version):
                continue
            record = gold.match(sha, document_run.path)
            if record is None:
                not_in_gold.append({"sha256": sha, "path": document_run.path, "contract": gold.contract_id})
                continue
            used.add(record.name)
            final = finals.get(document_run.final_attempt_id or -1)
            text = sentences.get(document_run.document_id, [])
            documents.append(score_document(scorer, record.record, record.evidence, document_run, final, text,
                                            gold.contract_id, record.name, normalisation))
        gold_not_run += [{"gold": str(r.path), "contract": gold.contract_id} for r in gold.records
                         if r.name not in used]
    return documents, gold_sets, not_in_gold, gold_not_run


def score_document(scorer: Scorer, gold: Mapping[str, Any], gold_evidence: Sequence[tuple[str, str]],
                   document_run: Any, final: FinalCandidate | None, sentences: list[dict[str, Any]],
                   contract: str, gold_name: str, normalisation: str) -> ScoredDocument:
    """One document: its candidate (if any) against its gold record, evidence by the sentences it cites."""
    candidate = final.candidate if final is not None and isinstance(final.candidate, dict) else None
    why = None
    if document_run.state == DocumentState.ERROR:
        why = f"{document_run.state}: the model never answered ({document_run.cause or 'no cause recorded'})"
    elif candidate is None:
        why = (f"{document_run.state}: {NO_CANDIDATE}" if final is None or final.candidate is None
               else f"{document_run.state}: the final answer is not a JSON object")
        if final is not None and final.outcome == "unparseable":
            why = f"{document_run.state}: the final answer was unparseable"
    located = locate(gold_evidence, sentences, normalisation) if gold_evidence and candidate is not None else []
    spans = final.evidence_spans if final is not None else []
    excerpts = candidate.get(EVIDENCE) if candidate is not None else None
    if not spans and isinstance(excerpts, list) and excerpts:
        # an answer that broke the schema never reached the evidence rules (docs/design.md#rules): its excerpts are
        # found the way gold's are, so its evidence is scored like its values
        cited: list[tuple[str, Any]] = locate(
            [(str(e.get("fieldPath", "")), str(e.get("sourceExcerpt", ""))) for e in excerpts if isinstance(e, dict)],
            sentences, normalisation)
    else:
        cited = [(entry.get("fieldPath", ""), entry.get("sentence_ids") or ()) for entry in spans
                 if isinstance(entry, dict)]
    score = scorer.score(gold, candidate, located, cited)
    language = language_of(" ".join(s.get("text", "") for s in sentences[:50])[:4000])  # the script of its start
    return ScoredDocument(document_run.sha256, document_run.path, gold_name, contract, language, document_run.id,
                          document_run.run_id, document_run.state, score, why)


def locate(evidence: Iterable[tuple[str, str]], sentences: list[dict[str, Any]],
           normalisation: str) -> list[tuple[str, list[str]]]:
    """Gold evidence as ``(fieldPath, ids of the sentences its excerpt lies in)``: the excerpt found, after the
    contract's normalisation and whitespace collapse, in the document's sentences as the run stored them, joined
    in order by one space (what lies between two sentences is whitespace or markup, never content)."""
    from extractor.evidence.text import NORMALISATIONS

    normalise = NORMALISATIONS.get(normalisation, NORMALISATIONS["nfc_whitespace"])

    def key(text: str) -> str:
        return " ".join(normalise(text).split())

    ordered = sorted(sentences, key=lambda s: s["start"])
    starts: list[int] = []
    pieces: list[str] = []
    length = 0
    for sentence in ordered:
        starts.append(length)
        pieces.append(key(sentence["text"]))
        length += len(pieces[-1]) + 1
    text = " ".join(pieces)
    located = []
    for path, excerpt in evidence:
        needle = key(excerpt)
        ids: list[str] = []
        position = text.find(needle) if needle else -1
        while position >= 0 and len(ids) < 100:
            first, last = bisect_right(starts, position) - 1, bisect_right(starts, position + len(needle) - 1) - 1
            ids += [ordered[i]["id"] for i in range(first, last + 1) if ordered[i]["id"] not in ids]
            position = text.find(needle, position + 1)
        located.append((path, ids))
    return located


# -- sums, scores and intervals ----------------------------------------------------------------------------------


def aggregate(result: Evaluation) -> None:
    """Fill ``result``'s group scores: overall, per contract, per language, per field; evidence apart."""
    documents = result.documents
    n = len(documents)
    width = len(COLUMNS)
    groups: dict[tuple[str, ...], int] = {("overall",): 0}
    for document in documents:
        groups.setdefault(("contract", document.contract), len(groups))
        groups.setdefault(("language", document.language), len(groups))
    for document in documents:
        for label in document.score.fields:
            groups.setdefault(("field", document.contract, label), len(groups))
    evidence_groups: dict[tuple[str, ...], int] = {("overall",): 0}
    for document in documents:
        for label in document.score.evidence:
            evidence_groups.setdefault((document.contract, label), len(evidence_groups))
    counts = np.zeros((n, len(groups), width), dtype=np.int64)
    evidence = np.zeros((n, len(evidence_groups), len(EVIDENCE_COLUMNS)), dtype=np.int64)
    for i, document in enumerate(documents):
        for label, row in document.score.fields.items():
            counts[i, groups[("field", document.contract, label)]] = row
        for label, row in document.score.evidence.items():
            evidence[i, evidence_groups[(document.contract, label)]] = row
    fields = [index for key, index in groups.items() if key[0] == "field"]
    totals = counts[:, fields].sum(axis=1)  # per document, over its fields
    counts[:, 0] = totals
    for i, document in enumerate(documents):
        counts[i, groups[("contract", document.contract)]] = totals[i]
        counts[i, groups[("language", document.language)]] = totals[i]
    evidence[:, 0] = evidence[:, 1:].sum(axis=1)
    scored = counts[:, :, :NORMALISED + 1].reshape(n, -1)
    # evidence as (gold, checked, overlap) -> the score columns (gold, candidate, -, right): P = overlap/checked
    as_scores = np.zeros((n, len(evidence_groups), NORMALISED + 1), dtype=np.int64)
    as_scores[:, :, GOLD], as_scores[:, :, CANDIDATE] = evidence[:, :, 0], evidence[:, :, 1]
    as_scores[:, :, EXACT] = as_scores[:, :, NORMALISED] = evidence[:, :, 2]
    matrix = np.hstack([scored, as_scores.reshape(n, -1)])
    resampled = resampled_sums(matrix, result.resamples, result.seed) if n else None
    step = NORMALISED + 1
    count_of = {key: counts[:, index].sum(axis=0) for key, index in groups.items()}
    members: dict[tuple[str, ...], int] = {}
    for document in documents:
        for key in (("overall",), ("contract", document.contract), ("language", document.language)):
            members[key] = members.get(key, 0) + 1

    def group(key: tuple[str, ...], name: str) -> GroupScore:
        index = groups[key]
        total = count_of[key]
        sums = None if resampled is None else resampled[:, index * step:(index + 1) * step]
        present = members.get(key) if key[0] != "field" else sum(1 for d in documents if d.contract == key[1]
                                                                   and key[2] in d.score.fields)
        return GroupScore(name, present or 0, {column: int(total[i]) for i, column in enumerate(COLUMNS)},
                          scores(total, sums, EXACT), scores(total, sums, NORMALISED))

    result.overall = group(("overall",), "overall")
    result.contracts = [group(key, key[1]) for key in groups if key[0] == "contract"]
    result.languages = sorted((group(key, key[1]) for key in groups if key[0] == "language"), key=lambda g: g.name)
    result.fields = [(key[1], group(key, key[2])) for key in groups if key[0] == "field"]
    offset = len(groups) * step
    evidence_totals = evidence.sum(axis=0)

    def evidence_score(key: tuple[str, ...], name: str) -> EvidenceScore:
        index = evidence_groups[key]
        gold, checked, overlap = (int(v) for v in evidence_totals[index])
        sums = None if resampled is None else resampled[:, offset + index * step:offset + (index + 1) * step]
        return EvidenceScore(name, gold, checked, overlap, scores([gold, checked, overlap, overlap], sums, NORMALISED))

    result.evidence_overall = evidence_score(("overall",), "overall")
    result.evidence = [(key[0], evidence_score(key, key[1])) for key in evidence_groups if key != ("overall",)]
