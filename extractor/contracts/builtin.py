"""The contracts that ship with the package: their pydantic models, files and Python rules, registered once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from extractor.contracts.merge_spec import WORK_PROCEDURE_MERGE, MergeSpec
from extractor.contracts.rag_answer import RagAnswer
from extractor.contracts.registry import Contract, contract_dir, read_json, register
from extractor.contracts.work_procedure import WorkProcedure
from extractor.resources import data_dir
from extractor.rules import EvidenceModel, content_rules
from extractor.rules import rag_answer as rag_answer_rules
from extractor.rules import work_procedure as work_procedure_rules


def _builtin(name: str, version: int, pydantic: type[BaseModel], model: EvidenceModel[Any],
             merge: MergeSpec | None = None) -> Contract:
    folder = contract_dir(name, version)
    return register(Contract(name=name, version=version, schema=read_json(folder / "schema.json"),
                             settings=read_json(folder / "rules.json"), model=model,
                             rules=tuple(content_rules(name)), folder=folder, prompts=data_dir("prompts") / name,
                             pydantic=pydantic, merge=merge))


WORK_PROCEDURE = _builtin("work_procedure", 1, WorkProcedure, work_procedure_rules.MODEL, WORK_PROCEDURE_MERGE)
RAG_ANSWER = _builtin("rag_answer", 1, RagAnswer, rag_answer_rules.MODEL)
