"""The contracts that ship with the package: their pydantic models, files and Python rules, registered once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from extractor.contracts.rag_answer import RagAnswer
from extractor.contracts.registry import Contract, contract_dir, read_json, register
from extractor.contracts.work_procedure import WorkProcedure
from extractor.resources import data_dir
from extractor.rules import EvidenceModel, content_rules
from extractor.rules import rag_answer as rag_answer_rules
from extractor.rules import work_procedure as work_procedure_rules
from extractor.rules.guards import Guards


def _builtin(name: str, version: int, pydantic: type[BaseModel], model: EvidenceModel[Any]) -> Contract:
    folder = contract_dir(name, version)
    settings = read_json(folder / "rules.json")
    return register(Contract(name=name, version=version, schema=read_json(folder / "schema.json"),
                             settings=settings, model=model,
                             rules=tuple(content_rules(name)), folder=folder, prompts=data_dir("prompts") / name,
                             pydantic=pydantic, guards=Guards.from_mapping(settings.get("guards", {}))))


WORK_PROCEDURE = _builtin("work_procedure", 1, WorkProcedure, work_procedure_rules.MODEL)
RAG_ANSWER = _builtin("rag_answer", 1, RagAnswer, rag_answer_rules.MODEL)
