"""Pydantic model of the ``work_procedure`` contract, version 1 (the field names are the contract: changing one is a new version).

The JSON Schema in ``contracts/work_procedure/v1/schema.json`` is generated from these classes
(``extract contracts --write``), and a test proves the file and the model agree, so the schema the
model is shown and the schema the validator enforces cannot drift apart.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

NonEmpty = Annotated[str, Field(min_length=1)]
Identifier = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$", description="lowercase key such as 'requester'")]
SentenceId = Annotated[str, Field(pattern=r"^s[1-9][0-9]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Participant(_Strict):
    id: Identifier
    name: NonEmpty


class ProcessStep(_Strict):
    order: int = Field(ge=1, description="1-based position; orders must be exactly 1..n")
    actorId: Identifier = Field(description="id of the participant who performs the step")
    action: NonEmpty


class MissingField(_Strict):
    fieldPath: NonEmpty = Field(description="0-based path of the field the source does not state, e.g. 'assignmentRule'")
    question: NonEmpty


class Evidence(_Strict):
    fieldPath: NonEmpty = Field(description="0-based path of the value this excerpt supports, e.g. 'processSteps[1]'")
    sourceExcerpt: NonEmpty = Field(description="copied verbatim from the source text")


class CoverageStatus(StrEnum):
    MAPPED = "MAPPED"
    UNMAPPED = "UNMAPPED"
    EXCLUDED = "EXCLUDED"


class SentenceCoverage(_Strict):
    sentenceId: SentenceId
    status: CoverageStatus
    fieldPaths: list[NonEmpty] = Field(default_factory=list, description="the fields holding this sentence; needed for MAPPED")
    reason: str | None = Field(default=None, description="why no field holds it; needed for UNMAPPED and EXCLUDED")


class WorkProcedure(_Strict):
    """A business procedure: who takes part, which steps in which order, which rules hold."""

    documentPurpose: NonEmpty | None = Field(description="null when the source does not state it (ask in missingFields)")
    participants: list[Participant]
    processSteps: list[ProcessStep]
    rules: list[NonEmpty]
    assignmentRule: NonEmpty | None = Field(description="null when the source does not state it (ask in missingFields)")
    missingFields: list[MissingField]
    evidence: list[Evidence]
    sentenceCoverage: list[SentenceCoverage]
