"""Every operation of ``extract serve``'s served ``/openapi.json`` fuzzed with schemathesis, with a token of each
role, valid and invalid inputs: no answer may be a 5xx, and every answer must be one the document describes
(status code, content type, body schema). The service converts in process against the scripted model server,
on SQLite, with one converted document so that real ids exist beside the generated ones.

Bounded: ``EXAMPLES`` examples per operation, role and mode (a few minutes in all on 2 busy cores)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from extractor.service.app import Service, build_service
from extractor.store import open_store
from extractor.store.tokens import create_token
from tests.support.api import bearer, finished, serving
from tests.support.batch import ROOT, answer_for
from tests.support.llm_server import Reply, ScriptedLLMServer

schemathesis = pytest.importorskip("schemathesis", reason="needs schemathesis (pip install -e '.[test]')")

EXAMPLES = 8
"""Examples per operation, role and generation mode."""


@pytest.fixture
def served(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Any,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, str], Service]]:
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("EXTRACT_MAX_DOCUMENT_BYTES", str(64 << 10))
    store = open_store(f"sqlite:///{tmp_path}/fuzz.db")
    service = build_service(store, broker=None, concurrency=2, model="openai:scripted-model", max_pending=50)
    tokens = {role: create_token(store.engine, f"{role}-token", role, all_owners=role == "reviewer")
              for role in ("submitter", "reviewer", "admin")}
    try:
        with serving(service) as url:
            with httpx.Client(base_url=url, timeout=60) as client:
                sample = (ROOT / "samples" / "en_purchase_approval.md").read_text(encoding="utf-8")
                sent = client.post("/v1/documents/text", headers=bearer(tokens["submitter"]),
                                   json={"name": "purchase.md", "text": sample})
                assert sent.status_code == 202, sent.text
                finished(client, tokens["submitter"], sent.json()["documents"][0]["id"])
            yield url, tokens, service
    finally:
        service.close()


def test_every_operation_answers_as_its_openapi_document_says_for_every_role(
        served: tuple[str, dict[str, str], Service]) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    url, tokens, _ = served
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 17, [operation.label for operation in operations]
    calls: list[str] = []

    def fuzzing(operation: Any, mode: GenerationMode, headers: dict[str, str]) -> Callable[[], None]:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        def fuzz(case: Any) -> None:
            calls.append(operation.label)
            case.call_and_validate(headers=headers, checks=checks, timeout=60)

        return fuzz  # type: ignore[no-any-return]

    failures: list[str] = []
    for operation in operations:
        for role, token in tokens.items():
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    fuzzing(operation, mode, bearer(token))()
                except Unsatisfiable:  # nothing to make invalid: the operation takes no input (GET /health)
                    assert mode is GenerationMode.NEGATIVE, operation.label
                except Exception as error:  # noqa: BLE001 - every operation is tried; all failures are reported
                    failures.append(f"{role} {mode.value} {operation.label}: {str(error)[:1500]}")
    assert failures == [], "\n\n".join(failures)
    assert len(set(calls)) == len(operations) and len(calls) >= len(operations) * len(tokens) * 4
