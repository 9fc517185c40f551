"""Evaluations against gold (``extract eval``) and what scoring reads in bulk: final candidates, sentences.

An evaluation is written once and never updated; a run's accuracy is its newest evaluation
(``latest_for_runs``). The bulk reads select only the columns scoring needs, chunked, so 10,000 documents
cost a few queries, not 10,000.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, insert, select

from extractor.store.db import utcnow, write_connection
from extractor.store.tables import attempts, documents, evaluation_runs, evaluations

CHUNK = 500


@dataclass(frozen=True)
class EvaluationInfo:
    id: int
    created_at: datetime
    selection: str
    gold: str
    gold_sha256: str
    resamples: int
    seed: int
    summary: dict[str, Any]
    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class FinalCandidate:
    """What scoring reads of a final attempt: the candidate (None when there is none) and its evidence spans."""

    attempt_id: int
    outcome: str
    candidate: Any
    evidence_spans: list[dict[str, Any]]
    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass(frozen=True)
class NewEvaluation:
    """An evaluation as ``extract eval`` writes it: what was scored (the selection, the gold folders and their
    digest, the runs), how (bootstrap resamples and seed: the same ones give the same intervals) and the result."""

    selection: str
    gold: str
    gold_sha256: str
    resamples: int
    seed: int
    summary: dict[str, Any]
    report: dict[str, Any]
    run_ids: tuple[str, ...]


def save_evaluation(engine: Engine, evaluation: NewEvaluation) -> int:
    with write_connection(engine) as connection:
        inserted = connection.execute(insert(evaluations).values(
            created_at=utcnow(), selection=evaluation.selection, gold=evaluation.gold,
            gold_sha256=evaluation.gold_sha256, resamples=evaluation.resamples, seed=evaluation.seed,
            summary=evaluation.summary, report=evaluation.report)).inserted_primary_key
        assert inserted is not None
        evaluation_id = int(inserted[0])
        scored = [{"evaluation_id": evaluation_id, "run_id": run_id} for run_id in sorted(set(evaluation.run_ids))]
        if scored:
            connection.execute(insert(evaluation_runs), scored)
        return evaluation_id


def latest_for_runs(engine: Engine, run_ids: Sequence[str]) -> dict[str, EvaluationInfo]:
    """Per run id, the newest evaluation that scored it (runs never evaluated are absent)."""
    found: dict[str, EvaluationInfo] = {}
    wanted = sorted(set(run_ids))
    columns = (evaluations.c.id, evaluations.c.created_at, evaluations.c.selection, evaluations.c.gold,
               evaluations.c.gold_sha256, evaluations.c.resamples, evaluations.c.seed, evaluations.c.summary)
    with engine.connect() as connection:
        for start in range(0, len(wanted), CHUNK):
            query = (select(evaluation_runs.c.run_id, *columns)
                     .join(evaluations, evaluations.c.id == evaluation_runs.c.evaluation_id)
                     .where(evaluation_runs.c.run_id.in_(wanted[start : start + CHUNK]))
                     .order_by(evaluations.c.created_at, evaluations.c.id))
            rows = connection.execute(query).all()
            scored = {row.id: tuple(sorted(other.run_id for other in rows if other.id == row.id)) for row in rows}
            for row in rows:
                found[row.run_id] = EvaluationInfo(row.id, row.created_at, row.selection, row.gold, row.gold_sha256,
                                                   row.resamples, row.seed, row.summary, scored[row.id])
    return found


def final_candidates(engine: Engine, attempt_ids: Iterable[int]) -> dict[int, FinalCandidate]:
    """The candidates and evidence spans of these attempts (no requests), by attempt id."""
    wanted = sorted(set(attempt_ids))
    found: dict[int, FinalCandidate] = {}
    columns = (attempts.c.id, attempts.c.outcome, attempts.c.parsed, attempts.c.parsed_is_raw, attempts.c.raw_response,
               attempts.c.evidence_spans, attempts.c.prompt_tokens, attempts.c.completion_tokens)
    with engine.connect() as connection:
        for start in range(0, len(wanted), CHUNK):
            for row in connection.execute(select(*columns).where(attempts.c.id.in_(wanted[start : start + CHUNK]))):
                candidate = row.parsed
                if row.parsed_is_raw and row.raw_response is not None:
                    candidate = json.loads(row.raw_response)
                found[row.id] = FinalCandidate(row.id, row.outcome, candidate, list(row.evidence_spans or ()),
                                               row.prompt_tokens, row.completion_tokens)
    return found


def sentences_of(engine: Engine, document_ids: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
    """The stored sentences (id, text, offsets) of these documents, by document id."""
    wanted = sorted(set(document_ids))
    found: dict[int, list[dict[str, Any]]] = {}
    with engine.connect() as connection:
        for start in range(0, len(wanted), CHUNK):
            query = select(documents.c.id, documents.c.sentences).where(documents.c.id.in_(wanted[start : start + CHUNK]))
            for document_id, sentences in connection.execute(query):
                found[document_id] = list(sentences or ())
    return found
