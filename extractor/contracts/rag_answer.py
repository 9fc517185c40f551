"""Pydantic model of the ``rag_answer`` contract, version 1 (an answer with cited sources, docs/design.md#rules).

Constraints: non-empty summary and claim texts, at least one unique source id per claim, quotes of at
least 8 characters.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

NonEmpty = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Claim(_Strict):
    text: NonEmpty
    source_ids: list[NonEmpty] = Field(min_length=1, json_schema_extra={"uniqueItems": True})


class Citation(_Strict):
    source_id: NonEmpty
    quote: str = Field(min_length=8, description="copied verbatim from the named source block")


class RagAnswer(_Strict):
    """An answer whose every claim names its sources and whose quotes must exist in them."""

    summary: NonEmpty
    claims: list[Claim]
    citations: list[Citation]
