"""``extract serve``'s API over real HTTP (uvicorn on a free port), converting in-process against the scripted
model server, on SQLite and PostgreSQL: roles, limits, malformed bodies, and a document from upload to approval."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from extractor.queue.settings import BatchSettings
from extractor.service.app import Service, build_service
from extractor.store import open_store
from extractor.store.tokens import create_token, revoke_token
from tests.support.api import bearer, finished, serving
from tests.support.batch import ROOT, answer_for
from tests.support.llm_server import Reply, ScriptedLLMServer

LIMIT = 64 << 10
SAMPLE = ROOT / "samples" / "en_purchase_approval.md"


@pytest.fixture
def api(llm_server: Callable[..., ScriptedLLMServer], db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[httpx.Client, dict[str, str], Service]]:
    """A client on a running API, the tokens of one submitter, reviewer and admin, and the service."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    store = open_store(db_url)
    service = build_service(store, broker=None, concurrency=2, max_upload_bytes=LIMIT, model="openai:scripted-model")
    service.defaults = BatchSettings(model="openai:scripted-model", base_url=server.base_url)
    tokens = {role: create_token(store.engine, f"{role}-token", role) for role in ("submitter", "reviewer", "admin")}
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=30) as client:
            yield client, tokens, service
    finally:
        service.close()


def test_a_document_goes_from_upload_to_approval_and_each_role_does_only_its_part(
        api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, service = api
    submitter, reviewer, admin = tokens["submitter"], tokens["reviewer"], tokens["admin"]

    sent = client.post("/v1/documents", headers=bearer(submitter),
                       files=[("files", (SAMPLE.name, SAMPLE.read_bytes(), "text/markdown"))])
    assert sent.status_code == 202, sent.text
    (document,) = sent.json()["documents"]
    assert document["name"] == SAMPLE.name
    task = finished(client, submitter, document["id"])
    assert task["outcome"] == "READY_FOR_REVIEW" and task["deliveries"] == 1, task

    shown = client.get(f"/v1/document-runs/{task['document_run']}", headers=bearer(submitter)).json()
    assert shown["document_run"]["state"] == "READY_FOR_REVIEW" and shown["document"]["path"] == SAMPLE.name
    assert shown["document"]["source_status"] == "unchanged" and "Purchase Request" in shown["text"]  # from the upload
    assert shown["candidate"]["documentPurpose"].startswith("Make every purchase")
    assert [finding["severity"] for finding in shown["attempts"][0]["findings"]] == []

    assert client.get("/v1/review/queue", headers=bearer(submitter)).status_code == 403
    queue = client.get("/v1/review/queue", headers=bearer(reviewer)).json()
    assert [item["document_run_id"] for item in queue["items"]] == [task["document_run"]]
    refused = client.post(f"/v1/review/{task['document_run']}/approve", headers=bearer(submitter), json={})
    assert refused.status_code == 403 and "needs role reviewer" in refused.json()["detail"]
    approved = client.post(f"/v1/review/{task['document_run']}/approve", headers=bearer(reviewer), json={"note": "ok"})
    assert approved.status_code == 200, approved.text
    assert approved.json()["outcome"] == "approved"
    after = client.get(f"/v1/review/{task['document_run']}", headers=bearer(reviewer)).json()
    assert after["approved"]["reviewer"] == "reviewer-token" and after["reviews"][0]["decision"] == "approved"
    assert client.get("/v1/review/queue", headers=bearer(reviewer)).json()["items"] == []

    runs = client.get("/v1/runs", headers=bearer(submitter)).json()
    assert [run["command"] for run in runs] == ["extract serve"]

    new = {"model": "openai:other", "contract": "work_procedure", "prompt_version": "v1", "timeout": 30.0,
           "retries": 1, "response_format": "auto"}
    assert client.put("/v1/settings", headers=bearer(reviewer), json=new).status_code == 403
    changed = client.put("/v1/settings", headers=bearer(admin), json=new)
    assert changed.status_code == 200 and changed.json()["model"] == "openai:other"
    assert service.defaults.model == "openai:other" and service.defaults.base_url is None


def test_no_token_a_wrong_token_and_a_revoked_token_get_401(api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, service = api
    body = {"name": "a.md", "text": "# A\n\nSome text."}
    assert client.post("/v1/documents/text", json=body).status_code == 401
    assert client.post("/v1/documents/text", json=body, headers=bearer("ext_not-a-token")).status_code == 401
    assert client.get("/v1/me", headers={"Authorization": f"Basic {tokens['admin']}"}).status_code == 401
    assert client.get("/v1/me", headers=bearer(tokens["admin"])).json() == {"name": "admin-token", "role": "admin"}
    assert revoke_token(service.store.engine, "admin-token")
    assert client.get("/v1/me", headers=bearer(tokens["admin"])).status_code == 401
    assert client.get("/health").json() == {"status": "ok"}
    tokens_stored = [row[0] for row in service.store.engine.connect().exec_driver_sql("SELECT token_sha256 FROM api_tokens")]
    assert all(token not in tokens_stored for token in tokens.values()) and len(tokens_stored) == 3


def test_oversize_bodies_get_413_and_malformed_ones_422(api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, service = api
    headers = bearer(tokens["submitter"])
    just_over = client.post("/v1/documents", headers=headers, files=[("files", ("big.txt", b"a" * (LIMIT + 1), "text/plain"))])
    assert just_over.status_code == 413 and "big.txt: over the limit" in just_over.json()["detail"]
    huge = client.post("/v1/documents", headers=headers, files=[("files", ("huge.txt", b"a" * (LIMIT * 20), "text/plain"))])
    assert huge.status_code == 413 and "request body over the limit" in huge.json()["detail"]
    long_text = client.post("/v1/documents/text", headers=headers, json={"name": "t.md", "text": "é" * LIMIT})
    assert long_text.status_code == 413

    broken = client.post("/v1/documents/text", headers=headers | {"Content-Type": "application/json"},
                         content=b'{"name": "a.md", "text": ')
    assert broken.status_code == 422 and broken.json()["detail"][0]["type"] == "json_invalid"
    missing = client.post("/v1/documents/text", headers=headers, json={"name": "a.md"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "text"]
    unknown = client.post("/v1/documents/text", headers=headers, json={"name": "a.md", "text": "x", "contract": "nope"})
    assert unknown.status_code == 422
    assert client.get("/v1/submissions/no-such-id", headers=headers).status_code == 404
    assert service.store.engine.connect().exec_driver_sql("SELECT COUNT(*) FROM tasks").scalar() == 0  # none queued


def test_json_text_and_several_files_are_converted_and_openapi_docs_are_served(
        api: tuple[httpx.Client, dict[str, str], Service], tmp_path: Path) -> None:
    client, tokens, _ = api
    headers = bearer(tokens["submitter"])
    korean = ROOT / "samples" / "ko_work_request_review.txt"
    text = client.post("/v1/documents/text", headers=headers, json={"name": "purchase.md", "text": SAMPLE.read_text()})
    files = client.post("/v1/documents", headers=headers, files=[
        ("files", (korean.name, korean.read_bytes(), "text/plain")),
        ("files", ("../../etc/evil name.md", SAMPLE.read_bytes() + b"\nOne more line.\n", "text/markdown"))])
    assert text.status_code == files.status_code == 202
    ids = [d["id"] for d in text.json()["documents"] + files.json()["documents"]]
    outcomes = [finished(client, tokens["submitter"], task_id) for task_id in ids]
    assert [o["outcome"] for o in outcomes] == ["READY_FOR_REVIEW", "READY_FOR_REVIEW", "MANUAL_REVIEW"], outcomes
    assert outcomes[2]["name"] == "../../etc/evil name.md"  # recorded as given; only a scratch copy touched the disk
    batch = client.get(f"/v1/batches/{files.json()['batch']}", headers=headers).json()
    assert batch["counts"] == {"finished": 2}

    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/documents", "/v1/documents/text", "/v1/review/{document_run_id}/approve", "/v1/compare"} <= set(paths)


def test_tokens_are_created_once_listed_without_their_secret_and_revoked(tmp_path: Path) -> None:
    from tests.support.batch import run_cli

    env = {"EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/t.db", "PATH": "/usr/bin:/bin"}
    created = run_cli("tokens", "create", "alice", "--role", "reviewer", env=env, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("ext_") and len(secret) > 40
    again = run_cli("tokens", "create", "alice", env=env, cwd=tmp_path)
    assert again.returncode == 2 and "a token named 'alice' exists" in again.stderr
    bad_role = run_cli("tokens", "create", "bob", "--role", "owner", env=env, cwd=tmp_path)
    assert bad_role.returncode == 2
    listed = run_cli("tokens", "list", "--format", "json", env=env, cwd=tmp_path)
    assert [(t["name"], t["role"], t["revoked_at"]) for t in json.loads(listed.stdout)] == [("alice", "reviewer", None)]
    assert secret not in listed.stdout
    assert run_cli("tokens", "revoke", "alice", env=env, cwd=tmp_path).returncode == 0
    gone = run_cli("tokens", "revoke", "alice", env=env, cwd=tmp_path)
    assert gone.returncode == 2 and "no live token named 'alice'" in gone.stderr
    with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        from extractor.store.tokens import find_token

        assert find_token(store.engine, secret) is None
