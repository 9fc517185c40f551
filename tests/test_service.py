"""``extract serve``'s API over real HTTP (uvicorn on a free port), converting in-process against the scripted
model server, on SQLite and PostgreSQL: roles, limits, malformed bodies, and a document from upload to approval."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from extractor.ingest import MAX_BYTES_ENV
from extractor.queue.endpoints import ENDPOINTS_ENV
from extractor.queue.settings import BatchSettings
from extractor.service.app import FORM_OVERHEAD_BYTES, Service, build_service
from extractor.store import open_store, tasks
from extractor.store.tokens import create_token, revoke_token
from tests.support.api import bearer, finished, serving
from tests.support.batch import ROOT, answer_for
from tests.support.llm_server import Reply, ScriptedLLMServer
from tests.support.processes import wait_for

LIMIT = 16 << 10
SAMPLE = ROOT / "samples" / "en_purchase_approval.md"


@pytest.fixture
def api(llm_server: Callable[..., ScriptedLLMServer], db_url: str,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[httpx.Client, dict[str, str], Service]]:
    """A client on a running API, the tokens of one submitter, reviewer and admin, and the service."""
    monkeypatch.setenv(MAX_BYTES_ENV, str(LIMIT))  # the one document limit: the API's and ingest's
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # the "default" endpoint (no endpoints file)
    store = open_store(db_url)
    service = build_service(store, broker=None, concurrency=2, model="openai:scripted-model")
    tokens = {role: create_token(store.engine, f"{role}-token", role, all_owners=role == "reviewer")
              for role in ("submitter", "reviewer", "admin")}
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

    assert client.get("/v1/runs", headers=bearer(submitter)).status_code == 403  # runs mix every submitter's work
    runs = client.get("/v1/runs", headers=bearer(reviewer)).json()
    assert [run["command"] for run in runs] == ["extract serve"]
    one = client.get(f"/v1/runs/{runs[0]['id']}", headers=bearer(reviewer)).json()
    assert [d["document_run_id"] for d in one["documents"]] == [task["document_run"]]
    nothing = client.get("/v1/compare", params={"baseline": "model=none", "candidate": runs[0]["id"]},
                         headers=bearer(reviewer))
    assert nothing.status_code == 400 and "'model=none' selects no run" in nothing.json()["detail"]

    new = {"endpoint": "default", "model": "openai:scripted-model", "contract": "work_procedure", "prompt_version": "v2",
           "timeout": 30.0, "retries": 1, "response_format": "auto"}
    assert client.put("/v1/settings", headers=bearer(reviewer), json=new).status_code == 403
    changed = client.put("/v1/settings", headers=bearer(admin), json=new)
    assert changed.status_code == 200 and changed.json()["prompt_version"] == "v2"
    assert service.defaults.prompt_version == "v2" and service.defaults.endpoint == "default"


def test_no_token_a_wrong_token_and_a_revoked_token_get_401(api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, service = api
    body = {"name": "a.md", "text": "# A\n\nSome text."}
    assert client.post("/v1/documents/text", json=body).status_code == 401
    assert client.post("/v1/documents/text", json=body, headers=bearer("ext_not-a-token")).status_code == 401
    assert client.get("/v1/me", headers={"Authorization": f"Basic {tokens['admin']}"}).status_code == 401
    assert client.get("/v1/me", headers=bearer(tokens["admin"])).json() == {"name": "admin-token", "role": "admin",
                                                                        "owner": "admin-token", "all_owners": True}
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
    assert client.get(f"/v1/submissions/{uuid.uuid4()}", headers=headers).status_code == 404
    assert client.get("/v1/submissions/no-such-id", headers=headers).status_code == 422
    nested = b"[" * 30_000 + b"]" * 30_000  # far past the JSON parser's recursion limit, within the body limit
    deep = client.post("/v1/documents/text", headers=headers | {"Content-Type": "application/json"}, content=nested)
    assert deep.status_code == 422 and validation_errors(deep) == [(["body"], "body_invalid")]
    assert service.store.engine.connect().exec_driver_sql("SELECT COUNT(*) FROM tasks").scalar() == 0  # none queued


def test_a_body_over_the_limit_gets_413_while_it_is_still_arriving(
        api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    """A chunked upload (no Content-Length) that passes the limit is refused at once: the answer comes while the
    client has not finished the body (it never sends the last chunk), so nothing waited for the whole of it."""
    import socket
    from urllib.parse import urlsplit

    client, tokens, service = api
    where = urlsplit(str(client.base_url))
    boundary = "b0undary"
    head = (f"POST /v1/documents HTTP/1.1\r\nHost: {where.hostname}\r\nAuthorization: Bearer {tokens['submitter']}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nTransfer-Encoding: chunked\r\n\r\n")
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    with socket.create_connection((where.hostname, where.port), timeout=30) as connection:
        connection.sendall(head.encode() + f"{len(part):x}\r\n".encode() + part + b"\r\n")
        chunk = b"a" * 4096
        for _ in range((LIMIT + FORM_OVERHEAD_BYTES) // len(chunk) + 2):  # just past the limit (document + form)
            try:
                connection.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            except (ConnectionResetError, BrokenPipeError):  # answered and closed before our last chunks went
                break
        received = b""
        while b"request body over" not in received:  # the answer, though the body's last chunk never came
            try:
                if not (part := connection.recv(65536)):
                    break
            except ConnectionResetError:  # the server closed with some of our body unread
                break
            received += part
    answer = received.decode("latin-1")
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert "request body over the limit of" in answer
    assert service.store.engine.connect().exec_driver_sql("SELECT COUNT(*) FROM tasks").scalar() == 0


@pytest.mark.parametrize(("limit", "status", "seen"), [(100, 200, [10, 10, 10]), (25, 413, [10, 10])])
def test_the_body_limit_hands_the_body_on_as_it_arrives_and_refuses_the_read_that_passes_it(
        limit: int, status: int, seen: list[int]) -> None:
    """The app gets each part of the body as it came, none held back to be joined; the read that passes the limit
    fails and the answer is 413."""
    import asyncio

    from extractor.service.limits import BodyLimit

    parts = [{"type": "http.request", "body": bytes(10), "more_body": more} for more in (True, True, False)]
    sizes: list[int] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            sizes.append(len(message["body"]))
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict[str, Any]:
        return parts.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(BodyLimit(app, limit)({"type": "http", "headers": []}, receive, send))
    assert sizes == seen and sent[0]["status"] == status


def test_an_uploads_name_is_its_base_name_and_the_name_as_sent_is_kept_with_the_submission(
        api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, service = api
    headers = bearer(tokens["submitter"])
    text = SAMPLE.read_text(encoding="utf-8")
    sent = client.post("/v1/documents", headers=headers, files=[
        ("files", (name, text.replace("\n", f" {number}\n", 1).encode(), "text/markdown"))
        for number, name in enumerate(["../../x.md", "/tmp/abs.md", "..\\..\\y.md", "notes/../"])])
    typed = client.post("/v1/documents/text", headers=headers, json={"name": "../../../etc/z.md", "text": text})
    assert sent.status_code == 202 and typed.status_code == 202, (sent.text, typed.text)
    documents = sent.json()["documents"] + typed.json()["documents"]
    assert [d["name"] for d in documents] == ["x.md", "abs.md", "y.md", "document", "z.md"]
    found = [finished(client, tokens["submitter"], d["id"]) for d in documents]
    assert [(f["name"], f["sent_name"]) for f in found] == [
        ("x.md", "../../x.md"), ("abs.md", "/tmp/abs.md"), ("y.md", "..\\..\\y.md"), ("document", "notes/../"),
        ("z.md", "../../../etc/z.md")]
    assert [f["outcome"] for f in found[:3]] + [found[4]["outcome"]] == ["READY_FOR_REVIEW"] * 4
    shown = client.get(f"/v1/document-runs/{found[0]['document_run']}", headers=headers).json()
    assert shown["document"]["path"] == "x.md" and shown["document"]["source_status"] == "unchanged"
    plain = client.post("/v1/documents/text", headers=headers, json={"name": "plain.md", "text": text + "\n"})
    assert finished(client, tokens["submitter"], plain.json()["documents"][0]["id"])["sent_name"] is None


def test_what_a_request_states_is_bounded_before_it_is_used(api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    """Tags, a contract's name and the documents of one request (an e-mail's attachments counted) have limits:
    over them is a 4xx naming the limit, and nothing is queued."""
    from email.message import EmailMessage

    from extractor.ingest.eml import MAX_ATTACHMENTS
    from extractor.options import MAX_TAG_CHARS
    from extractor.service.app import MAX_REQUEST_DOCUMENTS, MAX_TAGS

    client, tokens, service = api
    headers = bearer(tokens["submitter"])
    for body in ({"tags": ["t"] * (MAX_TAGS + 1)}, {"tags": ["t" * (MAX_TAG_CHARS + 1)]}, {"tags": ["a\nb"]},
                 {"contract": "c" * 201}):
        refused = client.post("/v1/documents/text", headers=headers, json={"name": "a.md", "text": "Text."} | body)
        assert refused.status_code == 422, (body, refused.text)
    refused = client.post("/v1/documents", headers=headers, data={"tags": ["t"] * (MAX_TAGS + 1)},
                          files=[("files", ("a.md", b"Text.", "text/markdown"))])
    assert refused.status_code == 422, refused.text

    from fastapi.testclient import TestClient

    from extractor.service.app import create_app

    service.max_upload_bytes = 2 << 20  # room for the form's own limits: 1,000 files, 1 MB a field
    with TestClient(create_app(service)) as roomy:
        files = [("files", (f"{number}.md", b"Text.", "text/markdown")) for number in range(1001)]
        for form in ({"files": files}, {"data": {"contract": "c" * ((1 << 20) + 1)}, "files": files[:1]}):
            refused = roomy.post("/v1/documents", headers=headers, **form)  # type: ignore[arg-type]
            assert refused.status_code == 422 and validation_errors(refused) == [(["body"], "body_invalid")], \
                refused.text[:300]
        mail = EmailMessage()
        mail["From"], mail["To"], mail["Subject"] = "a@example.com", "b@example.com", "orders"
        mail.set_content("The orders are attached.")
        for number in range(MAX_ATTACHMENTS):
            mail.add_attachment(f"# Order {number}\n\nText.".encode(), maintype="text", subtype="markdown",
                                filename=f"{number}.md")
        mails = MAX_REQUEST_DOCUMENTS // MAX_ATTACHMENTS  # each one a document, and its attachments too
        refused = roomy.post("/v1/documents", headers=headers,
                             files=[("files", (f"m{n}.eml", mail.as_bytes(), "message/rfc822")) for n in range(mails)])
        assert refused.status_code == 413, refused.text
        assert refused.json()["detail"].startswith(f"{mails * (MAX_ATTACHMENTS + 1)} documents in one request")
    assert service.store.engine.connect().exec_driver_sql("SELECT COUNT(*) FROM tasks").scalar() == 0


def test_a_422_says_in_words_what_was_wrong_and_never_sends_back_a_large_value(
        api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    """A value that breaks a pattern is refused saying what the field asks for (never the regular expression);
    a rejected value of a megabyte comes back cut to a few dozen characters, its length said."""
    from fastapi.testclient import TestClient

    from extractor.options import SHOWN_CHARS
    from extractor.service.app import create_app

    _, tokens, service = api
    service.max_upload_bytes = 4 << 20  # room for the megabyte values
    huge = "kor rus " * 131_072  # 1 MiB
    settings = {"endpoint": "default", "model": "openai:scripted-model", "ocr_lang": huge, "tags": ["t" * (1 << 20)]}
    with TestClient(create_app(service)) as roomy:
        answer = roomy.put("/v1/settings", headers=bearer(tokens["admin"]), json=settings)
        sent = roomy.post("/v1/documents/text", headers=bearer(tokens["submitter"]),
                          json={"name": "n" * (1 << 20), "text": "Text."})
    assert answer.status_code == 422 and len(answer.content) < 4000, len(answer.content)
    problems = {tuple(problem["loc"]): problem for problem in answer.json()["detail"]}
    assert set(problems) == {("body", "ocr_lang"), ("body", "tags", 0)}
    ocr = problems[("body", "ocr_lang")]
    assert ocr["msg"].endswith("is not Tesseract languages joined by '+', e.g. kor or rus+eng (each 3 to 16 letters, "
                               "at most 8)") and "[A-Za-z" not in ocr["msg"], ocr["msg"]
    assert ocr["input"] == huge[:SHOWN_CHARS] + f"... ({len(huge):,} characters)"
    assert problems[("body", "tags", 0)]["input"].endswith(f"... ({1 << 20:,} characters)")
    assert sent.status_code == 422 and len(sent.content) < 4000, len(sent.content)


def validation_errors(response: httpx.Response) -> list[tuple[list[str | int], str]]:
    """The 422 body as /openapi.json documents it (HTTPValidationError): a list of {loc, msg, type}."""
    detail = response.json()["detail"]
    assert isinstance(detail, list) and all(isinstance(error["msg"], str) for error in detail), detail
    return [(error["loc"], error["type"]) for error in detail]


def test_ids_and_limits_out_of_range_and_unknown_contracts_get_422_as_documented(
        api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, _ = api
    admin = bearer(tokens["admin"])
    for path, loc in (("/v1/document-runs/9223372036854775808", ["path", "document_run_id"]),
                      ("/v1/review/99999999999999999999", ["path", "document_run_id"]),
                      ("/v1/review/2147483648/approve", ["path", "document_run_id"]),
                      ("/v1/document-runs/0", ["path", "document_run_id"]),
                      ("/v1/runs?limit=100000000000000000000", ["query", "limit"]),
                      ("/v1/review/queue?limit=0", ["query", "limit"]),
                      ("/v1/batches?limit=-1", ["query", "limit"]),
                      ("/v1/batches/not-a-batch", ["path", "batch_id"]),
                      ("/v1/runs/%00", ["path", "run_id"]),
                      ("/v1/compare?baseline=%00&candidate=x", ["query", "baseline"])):
        method = "POST" if path.endswith("/approve") else "GET"
        answer = client.request(method, path, headers=admin, json={} if method == "POST" else None)
        assert answer.status_code == 422, (path, answer.status_code, answer.text)
        assert [error_loc for error_loc, _ in validation_errors(answer)] == [loc], path
    assert client.get("/v1/document-runs/2147483647", headers=admin).status_code == 404  # the largest id: just missing

    settings = {"endpoint": "default", "model": "openai:scripted-model", "contract": "nope", "prompt_version": "v1",
                "timeout": 30.0, "retries": 1, "response_format": "auto"}
    refused = [client.post("/v1/documents/text", headers=admin, json={"name": "a.md", "text": "x", "contract": ""}),
               client.post("/v1/documents", headers=admin, data={"contract": "nope"},
                           files=[("files", ("a.md", b"# A\n\nText.", "text/markdown"))]),
               client.put("/v1/settings", headers=admin, json=settings)]
    for answer in refused:  # a contract the service does not have: 422 with the documented body, not a string
        assert answer.status_code == 422 and validation_errors(answer) == [(["body", "contract"], "value_error")]
        assert "unknown contract" in answer.json()["detail"][0]["msg"]


def test_one_document_limit_decides_the_api_and_ingest(api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, _ = api
    headers = bearer(tokens["submitter"])
    text = SAMPLE.read_bytes()
    exactly = text + b"\n" * (LIMIT - len(text))  # blank lines: the same text, at the limit to the byte
    sent = client.post("/v1/documents", headers=headers, files=[("files", ("limit.md", exactly, "text/markdown"))])
    assert sent.status_code == 202, sent.text
    task = finished(client, tokens["submitter"], sent.json()["documents"][0]["id"])
    assert task["outcome"] == "READY_FOR_REVIEW", task  # what the API accepts, ingest reads
    over = client.post("/v1/documents", headers=headers, files=[("files", ("over.md", exactly + b"\n", "text/markdown"))])
    assert over.status_code == 413 and f"over the limit of {LIMIT} bytes" in over.json()["detail"]


def test_each_submitter_sees_only_its_owners_work_and_another_owners_id_is_404_like_a_missing_one(
        api: tuple[httpx.Client, dict[str, str], Service]) -> None:
    client, tokens, service = api
    engine = service.store.engine
    alice, amy = (create_token(engine, name, "submitter", owner="team-a") for name in ("alice", "amy"))
    bob = create_token(engine, "bob", "submitter")
    sent = client.post("/v1/documents/text", headers=bearer(alice),
                       json={"name": "purchase.md", "text": SAMPLE.read_text(encoding="utf-8")})
    assert sent.status_code == 202, sent.text
    batch_id, (document,) = sent.json()["batch"], sent.json()["documents"]
    task = finished(client, alice, document["id"])
    owned = (f"/v1/submissions/{task['id']}", f"/v1/batches/{batch_id}", f"/v1/document-runs/{task['document_run']}")
    missing = (f"/v1/submissions/{uuid.uuid4()}", f"/v1/batches/{uuid.uuid4().hex}",
               f"/v1/document-runs/{task['document_run'] + 1000}")

    for token in (alice, amy, tokens["reviewer"], tokens["admin"]):  # the owner's tokens, and the reviewers
        assert [client.get(path, headers=bearer(token)).status_code for path in owned] == [200, 200, 200]
        assert batch_id in [batch["batch"] for batch in client.get("/v1/batches", headers=bearer(token)).json()]
    for token in (bob, tokens["submitter"]):  # another owner: exactly as if nothing were there
        for path, absent in zip(owned, missing):
            foreign, nothing = client.get(path, headers=bearer(token)), client.get(absent, headers=bearer(token))
            assert foreign.status_code == nothing.status_code == 404, path
            assert foreign.json()["detail"].replace(path.rsplit("/", 1)[1], "ID") == \
                nothing.json()["detail"].replace(absent.rsplit("/", 1)[1], "ID")
        assert client.get("/v1/batches", headers=bearer(token)).json() == []

    # bob uploads the same content: his submission reports the document run that exists, and he may read it
    again = client.post("/v1/documents", headers=bearer(bob),
                        files=[("files", ("mine.md", SAMPLE.read_bytes(), "text/markdown"))])
    repeated = finished(client, bob, again.json()["documents"][0]["id"])
    assert repeated["outcome"] == "READY_FOR_REVIEW" and repeated["document_run"] == task["document_run"], repeated
    assert repeated["cause"].startswith(f"converted before: document run {task['document_run']} of run ")
    assert repeated["tokens"] == 0 and task["tokens"] > 0  # nothing was spent on it again
    assert client.get(f"/v1/document-runs/{task['document_run']}", headers=bearer(bob)).status_code == 200
    assert [batch["batch"] for batch in client.get("/v1/batches", headers=bearer(bob)).json()] == [again.json()["batch"]]
    assert client.get(f"/v1/batches/{again.json()['batch']}", headers=bearer(alice)).status_code == 404
    everything = client.get("/v1/batches", headers=bearer(tokens["reviewer"])).json()
    assert [batch["batch"] for batch in everything] == [again.json()["batch"], batch_id]


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
    assert (outcomes[2]["name"], outcomes[2]["sent_name"]) == ("evil name.md", "../../etc/evil name.md")
    batch = client.get(f"/v1/batches/{files.json()['batch']}", headers=headers).json()
    assert batch["counts"] == {"finished": 2}

    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/documents", "/v1/documents/text", "/v1/review/{document_run_id}/approve", "/v1/compare"} <= set(paths)


def test_tokens_are_created_once_listed_without_their_secret_and_revoked(tmp_path: Path) -> None:
    from tests.support.batch import run_cli

    env = {"EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/t.db", "PATH": "/usr/bin:/bin"}
    created = run_cli("tokens", "create", "alice", "--role", "reviewer", "--owner", "purchasing", env=env, cwd=tmp_path)
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


def test_an_in_process_service_takes_up_what_an_earlier_one_left_unfinished(
        llm_server: Callable[..., ScriptedLLMServer], db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    settings = BatchSettings(model="openai:scripted-model", base_url=server.base_url)
    with open_store(db_url) as store:  # submitted, then the service stopped before any document was converted
        batch_id, task_ids = tasks.add_batch(store.engine, settings.to_json(), "sam",
                                             [(SAMPLE.name, SAMPLE.read_bytes())])
    service = build_service(open_store(db_url), broker=None, concurrency=2, model="openai:scripted-model")
    try:
        wait_for(lambda: tasks.batch_counts(service.store.engine, batch_id) == {"finished": 1}, "the left task", 240)
    finally:
        service.close()
    with open_store(db_url) as store:
        found = tasks.get_task(store.engine, task_ids[0])
        assert found is not None and found.outcome == "READY_FOR_REVIEW" and found.deliveries == 1
        assert found.tokens == 15 and found.rule_ids == ()


def test_an_uploaded_document_is_approved_from_its_upload_by_extract_approve_and_the_local_web_review(
        api: tuple[httpx.Client, dict[str, str], Service], db_url: str, tmp_path: Path) -> None:
    """The submitter names the document: a relative path that exists nowhere, and an absolute path that exists
    on the reviewer's machine with other content (a decoy). Both are reviewed from their uploads."""
    from fastapi.testclient import TestClient

    from extractor.web.local import create_local_app
    from tests.support.batch import cli_env, run_cli

    client, tokens, service = api
    decoy = tmp_path / "reviewer" / "purchase.md"
    decoy.parent.mkdir()
    decoy.write_text("# Something else\n\nNot the text that was submitted.\n", encoding="utf-8")
    sent = client.post("/v1/documents", headers=bearer(tokens["submitter"]), files=[
        ("files", ("../../x.md", SAMPLE.read_bytes(), "text/markdown")),
        ("files", (str(decoy), SAMPLE.read_bytes() + b"\n\n", "text/markdown"))])  # other bytes, the same text
    assert sent.status_code == 202, sent.text
    relative, absolute = (finished(client, tokens["submitter"], d["id"])["document_run"] for d in sent.json()["documents"])

    env = cli_env("http://127.0.0.1:9", db_url)
    shown = run_cli("show", str(absolute), "--format", "json", env=env, cwd=decoy.parent)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["document"]["source_status"] == "unchanged"  # the upload, not the decoy
    approved = run_cli("approve", str(relative), "--reviewer", "kim", "--format", "json", env=env, cwd=decoy.parent)
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["outcome"] == "approved"

    app, login = create_local_app(lambda: (service.store, service.records), user="kim")
    with TestClient(app, base_url="http://127.0.0.1") as browser:
        assert browser.get(f"/?token={login.token}", follow_redirects=False).status_code == 303
        page = browser.get(f"/review/doc/{absolute}")
        assert page.status_code == 200 and "Purchase Request" in page.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
        assert csrf is not None
        decided = browser.post(f"/review/doc/{absolute}/approve", data={"csrf": csrf.group(1), "note": "checked"},
                               follow_redirects=False)
        assert decided.status_code == 303, decided.text  # 409 "cannot re-read the source" before
    review = client.get(f"/v1/review/{absolute}", headers=bearer(tokens["reviewer"])).json()
    assert review["approved"]["reviewer"] == "kim" and review["approved"]["note"] == "checked"
    assert decoy.read_text(encoding="utf-8").startswith("# Something else")  # untouched, and never read


def test_model_servers_are_the_operators_and_a_key_goes_only_to_its_own_endpoint(
        llm_server: Callable[..., ScriptedLLMServer], db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab, other = (llm_server(lambda request, number: Reply(answer_for(request))) for _ in range(2))
    config = tmp_path / "endpoints.toml"
    config.write_text(f"""
[endpoints.lab]
url = "{lab.base_url}"
key_env = "LAB_KEY"
models = ["lab-model"]

[endpoints.spare]
url = "{other.base_url}/"
models = ["spare-model", "openai:spare-large"]
""", encoding="utf-8")
    monkeypatch.setenv("LAB_KEY", "secret-of-the-lab")
    monkeypatch.setenv("OPENAI_API_KEY", "secret-of-openai")
    monkeypatch.setenv("OPENAI_BASE_URL", lab.base_url)
    monkeypatch.setenv(ENDPOINTS_ENV, str(config))
    store = open_store(db_url)
    service = build_service(store, broker=None, concurrency=2, model="openai:lab-model")
    admin = create_token(store.engine, "root", "admin")
    base = {"contract": "work_procedure", "prompt_version": "v1", "timeout": 30.0, "retries": 0,
            "response_format": "auto"}
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/v1/endpoints", headers=bearer(admin)).json() == [
                {"name": "lab", "models": ["openai:lab-model"]},
                {"name": "spare", "models": ["openai:spare-model", "openai:spare-large"]}]  # names, never URLs
            for hostile, loc in (({"endpoint": "lab", "model": "openai:lab-model", "base_url": "http://127.0.0.1:9/v1"},
                                  ["body", "base_url"]),
                                 ({"endpoint": "elsewhere", "model": "openai:lab-model"}, ["body", "endpoint"]),
                                 ({"endpoint": "lab", "model": "local:/etc/passwd"}, ["body", "model"]),
                                 ({"endpoint": "lab", "model": "local"}, ["body", "model"]),
                                 ({"endpoint": "lab", "model": "openai:spare-model"}, ["body", "model"])):
                refused = client.put("/v1/settings", headers=bearer(admin), json=base | hostile)
                assert refused.status_code == 422 and [e[0] for e in validation_errors(refused)] == [loc], hostile
            assert service.defaults.endpoint == "lab" and service.defaults.model == "openai:lab-model"

            def convert(name: str) -> dict[str, Any]:
                sent = client.post("/v1/documents/text", headers=bearer(admin),
                                   json={"name": name, "text": SAMPLE.read_text(encoding="utf-8")
                                         + f"\n{name} is this copy's name.\n"})
                return finished(client, admin, sent.json()["documents"][0]["id"])

            assert convert("one.md")["outcome"] in ("READY_FOR_REVIEW", "MANUAL_REVIEW")
            chosen = client.put("/v1/settings", headers=bearer(admin),
                                json=base | {"endpoint": "spare", "model": "openai:spare-model"})
            assert chosen.status_code == 200, chosen.text
            assert convert("two.md")["outcome"] in ("READY_FOR_REVIEW", "MANUAL_REVIEW")
    finally:
        service.close()
    with open_store(db_url) as store:  # a batch of `extract run --queue` naming the spare server's URL, no endpoint
        legacy = BatchSettings(model="openai:spare-model", base_url=other.base_url)
        _, (task_id,) = tasks.add_batch(store.engine, legacy.to_json(), "cli-user", [("three.md", b"# Three\n\nText.\n")])
    service = build_service(open_store(db_url), broker=None, concurrency=1, model="openai:lab-model")

    def legacy_finished() -> bool:
        found = tasks.get_task(service.store.engine, task_id)
        return found is not None and found.state == "finished"

    try:
        wait_for(legacy_finished, "the batch naming a URL")
    finally:
        service.close()

    keys = {server: {request.headers.get("authorization") for request in server.chat_requests} for server in (lab, other)}
    assert keys[lab] == {"Bearer secret-of-the-lab"}  # the lab's key, to the lab only
    assert keys[other] == {"Bearer not-needed"}, keys[other]  # no key of this machine went to the spare server
    assert {request.json["model"] for request in lab.chat_requests} == {"lab-model"}
    assert {request.json["model"] for request in other.chat_requests} == {"spare-model"}


def scraped(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` as {(sample name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.text) for sample in family.samples}


def delta(before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
          after: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, label: str) -> dict[str, float]:
    """What a counter grew by between two scrapes, per value of ``label`` (summed over its other labels; metrics
    are the process's)."""
    grown: dict[str, float] = {}
    for (sample, labels), value in after.items():
        if sample == name:
            key = dict(labels)[label]
            grown[key] = grown.get(key, 0.0) + value - before.get((sample, labels), 0.0)
    return {key: value for key, value in grown.items() if value}


def test_metrics_scraped_during_a_batch_match_the_run_log_and_health_answers(
        llm_server: Callable[..., ScriptedLLMServer], db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from extractor.service.metrics import call_outcome
    from tests.support.batch import write_batch

    def script(request: dict[str, Any] | None, number: int) -> Any:
        from tests.support.llm_server import Status

        return Status(429, headers={"Retry-After": "0"}) if number % 5 == 0 else Reply(answer_for(request))

    server = llm_server(script)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    service = build_service(open_store(db_url), broker=None, concurrency=2, model="openai:scripted-model")
    token = create_token(service.store.engine, "sam", "submitter")
    paths = write_batch(tmp_path / "docs", 12)
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/healthz").json() == {"status": "ok"}
            assert client.get("/readyz").json() == {"run_log": "ok", "status": "ok"}
            before = scraped(client)
            sent = client.post("/v1/documents", headers=bearer(token),
                               files=[("files", (path.name, path.read_bytes(), "text/markdown")) for path in paths])
            assert sent.status_code == 202, sent.text
            ids = [document["id"] for document in sent.json()["documents"]]
            wait_for(lambda: tasks.batch_counts(service.store.engine, sent.json()["batch"]).get("finished", 0) >= 3,
                     "a few documents finished")
            during = scraped(client)
            outcomes = [finished(client, token, task_id)["outcome"] for task_id in ids]
            after = scraped(client)
    finally:
        service.close()

    with open_store(db_url) as store:
        document_runs = [d for run in store.find_runs() for d in store.document_runs_for(run.id)]
        attempts = [a for d in document_runs for a in store.attempts_for(d.id)]
    states: dict[str, float] = {}
    for d in document_runs:
        states[d.state] = states.get(d.state, 0) + 1
    calls: dict[str, float] = {}
    for attempt in attempts:
        for try_ in attempt.transport:
            calls[call_outcome(try_["outcome"])] = calls.get(call_outcome(try_["outcome"]), 0) + 1
    assert calls.get("429", 0) >= 2 and calls["ok"] >= 12  # the batch met the throttling server
    assert delta(before, after, "extract_documents_total", "state") == states
    assert delta(before, after, "extract_model_calls_total", "outcome") == calls
    assert delta(before, after, "extract_tokens_total", "direction") == {
        "in": sum(a.prompt_tokens or 0 for a in attempts), "out": sum(a.completion_tokens or 0 for a in attempts)}
    assert delta(before, after, "extract_task_outcomes_total", "outcome") == {
        outcome: float(outcomes.count(outcome)) for outcome in set(outcomes)}
    latency = sum(value - before.get((name, labels), 0.0) for (name, labels), value in after.items()
                  if name == "extract_model_call_seconds_count")  # (the process's series of earlier tests grow 0)
    assert latency == sum(calls.values())
    assert 0 < sum(delta(before, during, "extract_documents_total", "state").values()) <= len(paths)  # mid-batch
    assert after[("extract_queue_depth", ())] == 0
