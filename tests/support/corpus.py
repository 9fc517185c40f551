"""Documents and runs for the review, export, stats and compare tests, produced through the real pipeline.

Every document is the English purchase procedure with a numbered title (``# ... Procedure 7``), so all of
them have the same sentences (the title is EXCLUDED by the sample candidate) but different content
hashes, and the scripted server can tell them apart from the request. What the server answers depends on
the model name in the request and the document number: ``plan[model](number)`` is one of ``pass``,
``fail`` (an invented rule, twice: MANUAL_REVIEW with VALUE_WITHOUT_EVIDENCE), ``repaired`` (fails, then
passes after the repair), ``warn`` (swapped step order: MANUAL_REVIEW for a warning, no error),
``uncovered`` (the last sentence unaccounted, twice), ``garbage`` (not JSON, twice), ``error``
(HTTP 403: ERROR), ``leak`` (a rule carrying an AWS access key: BLOCKED at once, no repair) or ``empty``
(nothing extracted, every sentence EXCLUDED: MANUAL_REVIEW for EXTRACTION_EMPTY and EXTRACTION_MOSTLY_EXCLUDED).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from extractor.contracts import get_contract
from extractor.engine import AdaptiveLimit, Engine, RunSettings, RunSummary
from extractor.options import RunOptions
from extractor.providers import ProviderSettings, from_string
from extractor.store import open_store
from tests.support.llm_server import Action, Reply, ScriptedLLMServer, Status

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "samples/en_purchase_approval.md").read_text(encoding="utf-8")
GOOD = json.loads((ROOT / "samples/expected/en_purchase_approval.candidate.json").read_text(encoding="utf-8"))
TITLE = "# Purchase Request Approval Procedure"
FAST = ProviderSettings(timeout_s=5.0, max_transport_retries=1, retry_budget_s=5, backoff_base_s=0.01,
                        backoff_max_s=0.05)

Plan = Mapping[str, Callable[[int], str]]


def invented() -> dict[str, Any]:
    """The good candidate plus a rule the document does not state (no evidence)."""
    bad = json.loads(json.dumps(GOOD))
    bad["rules"].append("Every purchase needs the CFO's signature.")
    return bad


def swapped() -> dict[str, Any]:
    """Steps 1 and 2 with their orders swapped: only the STEP_ORDER_INVERTED warning (needs a person)."""
    out = json.loads(json.dumps(GOOD))
    out["processSteps"][0]["order"], out["processSteps"][1]["order"] = 2, 1
    return out


def uncovered() -> dict[str, Any]:
    """The good candidate without a coverage entry for the last sentence (SENTENCE_NOT_ACCOUNTED)."""
    out = json.loads(json.dumps(GOOD))
    out["sentenceCoverage"] = [c for c in out["sentenceCoverage"] if c["sentenceId"] != "s18"]
    return out


AWS_KEY = "AKIAZ7VRSQ5TQWNMBJK4"


def leaking() -> dict[str, Any]:
    """The good candidate with a rule that carries an AWS access key (SECRET_IN_OUTPUT, critical)."""
    out = json.loads(json.dumps(GOOD))
    out["rules"].append(f"Purchases are entered with the service key {AWS_KEY}.")
    return out


def empty() -> dict[str, Any]:
    """A schema-valid answer that extracts nothing: no values, questions for the two fields, all EXCLUDED."""
    return {"documentPurpose": None, "participants": [], "processSteps": [], "rules": [], "assignmentRule": None,
            "missingFields": [{"fieldPath": "documentPurpose", "question": "What is the procedure for?"},
                              {"fieldPath": "assignmentRule", "question": "Who is assigned?"}],
            "evidence": [],
            "sentenceCoverage": [{"sentenceId": c["sentenceId"], "status": "EXCLUDED", "fieldPaths": [],
                                  "reason": "not content"} for c in GOOD["sentenceCoverage"]]}


def write_documents(folder: Path, numbers: Sequence[int]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in numbers:
        path = folder / f"purchase_{number:02d}.md"
        path.write_text(SOURCE.replace(TITLE, f"{TITLE} {number}", 1), encoding="utf-8")
        paths.append(path)
    return paths


def document_number(body: dict[str, Any] | None) -> int:
    user = (body or {}).get("messages", [{}, {}])[1].get("content", "")
    match = re.search(r"Approval Procedure (\d+)", user)
    assert match, "request without a numbered document"
    return int(match.group(1))


def script(plan: Plan) -> Callable[[dict[str, Any] | None, int], Action]:
    def answer(body: dict[str, Any] | None, _call: int) -> Action:
        body = body or {}
        behaviour = plan[body["model"]](document_number(body))
        repair = len(body.get("messages", [])) > 2
        if behaviour == "pass" or (behaviour == "repaired" and repair):
            return Reply(json.dumps(GOOD))
        if behaviour in ("fail", "repaired"):
            return Reply(json.dumps(invented()))
        if behaviour == "warn":
            return Reply(json.dumps(swapped()))
        if behaviour == "uncovered":
            return Reply(json.dumps(uncovered()))
        if behaviour == "leak":
            return Reply(json.dumps(leaking()))
        if behaviour == "empty":
            return Reply(json.dumps(empty()))
        if behaviour == "garbage":
            return Reply("Sure! Here is the JSON:")
        if behaviour == "error":
            return Status(403, {"error": {"message": "key has no access", "type": "permission_error",
                                          "param": None, "code": None}})
        raise AssertionError(f"unknown behaviour {behaviour!r}")

    return answer


def run(db_url: str, server: ScriptedLLMServer, paths: Sequence[Path], model: str, *,
        tags: Sequence[str] = (), force: bool = False) -> RunSummary:
    """One ``extract run`` in process: real HTTP to the scripted server, the real store."""
    store = open_store(db_url)
    try:
        limit = AdaptiveLimit(4)
        provider = from_string(f"openai:{model}", base_url=server.base_url, settings=FAST,
                               on_rate_limit=limit.on_rate_limit)
        settings = RunSettings(contract=get_contract("work_procedure"), concurrency=4,
                               options=RunOptions(tags=tuple(tags), force=force))
        return asyncio.run(Engine(store, provider, settings, limit=limit).run([str(p) for p in paths]))
    finally:
        store.close()
