"""The contracts that ship with the package, registered once.

``work_procedure`` is written as files like any user contract (``contracts/work_procedure/v1/``: schema and
checks); its pydantic model stays only to prove the schema file is what it always was. ``rag_answer`` keeps
its citation rules in code (``extractor.rules.rag_answer``) and registers through the same interface.
"""

from __future__ import annotations

from extractor.contracts import files
from extractor.contracts.rag_answer import RagAnswer
from extractor.contracts.registry import Contract, contract_dir, read_json, register
from extractor.contracts.work_procedure import WorkProcedure
from extractor.errors import ContractError
from extractor.resources import data_dir
from extractor.rules import rag_answer as rag_answer_rules
from extractor.rules.catalogue import content_rules
from extractor.rules.guards import Guards


def _rag_answer() -> Contract:
    folder = contract_dir("rag_answer", 1)
    lines: list[str] = []
    settings = files.with_calibration(read_json(folder / "rules.json"), folder, lines)
    if lines:
        raise ContractError(lines)
    hashes = files.file_hashes(folder)
    return Contract(name="rag_answer", version=1, schema=read_json(folder / "schema.json"), settings=settings,
                    model=rag_answer_rules.MODEL, rules=tuple(content_rules("rag_answer")), folder=folder,
                    prompts=data_dir("prompts") / "rag_answer", pydantic=RagAnswer,
                    content_hash=files.combined_hash(hashes), content_files=hashes,
                    guards=Guards.from_mapping(settings.get("guards", {})))


WORK_PROCEDURE = register(files.load(contract_dir("work_procedure", 1), prompts=data_dir("prompts") / "work_procedure",
                                     pydantic=WorkProcedure))
RAG_ANSWER = register(_rag_answer())
