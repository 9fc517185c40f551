"""One ``extract serve`` shared by two teams, over real HTTP (uvicorn on a free port), converting in-process against
the scripted model server, on SQLite and PostgreSQL: every token reads only its owner's work unless it is
department-wide, reviews are claimed and decided compare-and-set by two API clients, a contract may need two
people's approval, approved records stream out as JSONL pages, and tokens expire and rotate."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from extractor.export import PROVENANCE_COLUMNS
from extractor.queue.settings import BatchSettings
from extractor.service.app import Service, build_service
from extractor.store import open_store
from extractor.store.tokens import create_token
from tests.support.api import bearer, finished, serving
from tests.support.batch import ROOT, answer_for, cli_env, run_cli
from tests.support.llm_server import Reply, ScriptedLLMServer

PO_SAMPLE = ROOT / "samples/purchase_orders/en_purchase_order.md"
PO_ANSWER = (ROOT / "samples/expected/purchase_orders/en_pass.candidate.json").read_text(encoding="utf-8")


def sample(name: str, title: str) -> str:
    """A sample procedure with ``title`` added to its first line: content of its own that the sample's candidate
    still passes (the candidate marks the title EXCLUDED)."""
    lines = (ROOT / "samples" / name).read_text(encoding="utf-8").split("\n")
    lines[0] = f"{lines[0]} {title}"
    return "\n".join(lines)


def answer(request: dict[str, Any] | None, _number: int) -> Reply:
    """A purchase order gets the passing purchase-order candidate, a procedure its sample's."""
    text_of = json.dumps(request, ensure_ascii=False)
    return Reply(PO_ANSWER if "lineItems" in text_of else answer_for(request))


@dataclass
class Department:
    client: httpx.Client
    service: Service
    tokens: dict[str, str]
    db_url: str
    folder: Path

    def submit(self, token: str, name: str, text_: str, contract: str | None = None,
               outcome: str = "READY_FOR_REVIEW") -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "text": text_} | ({"contract": contract} if contract else {})
        sent = self.client.post("/v1/documents/text", headers=bearer(self.tokens[token]), json=body)
        assert sent.status_code == 202, sent.text
        task = finished(self.client, self.tokens[token], sent.json()["documents"][0]["id"])
        assert task["outcome"] == outcome, task
        return task

    def get(self, token: str, path: str, **params: Any) -> httpx.Response:
        return self.client.get(path, headers=bearer(self.tokens[token]), params=params)

    def post(self, token: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return self.client.post(path, headers=bearer(self.tokens[token]), json=body if body is not None else {})

    def cli(self, *args: str) -> Any:
        return run_cli(*args, "--database", self.db_url, env=cli_env("http://127.0.0.1:9", self.db_url, COLUMNS="200"),
                       cwd=self.folder, timeout=120)


@pytest.fixture
def department(db_url: str, tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer],
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Department]:
    """Team A (submitter, reviewers kim and lee), team B (submitter, reviewer), a department-wide reviewer and an
    admin, on a service whose contracts include a purchase order that needs two people's approval."""
    from extractor.contracts import use_dirs

    contracts = tmp_path / "contracts"
    shutil.copytree(ROOT / "samples/contracts/purchase_order", contracts / "purchase_order")
    checks = contracts / "purchase_order/v1/checks.toml"
    checks.write_text(checks.read_text(encoding="utf-8") + "\n[review]\napprovals = 2\n", encoding="utf-8")
    use_dirs([contracts])
    server = llm_server(answer)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    store = open_store(db_url)
    service = build_service(store, broker=None, concurrency=2, model="openai:scripted-model")
    service.defaults = BatchSettings(model="openai:scripted-model", endpoint="default")
    engine = store.engine
    tokens = {"a-bot": create_token(engine, "a-bot", "submitter", "team-a"),
              "kim": create_token(engine, "kim", "reviewer", "team-a"),
              "lee": create_token(engine, "lee", "reviewer", "team-a"),
              "b-bot": create_token(engine, "b-bot", "submitter", "team-b"),
              "park": create_token(engine, "park", "reviewer", "team-b"),
              "audit": create_token(engine, "audit", "reviewer", all_owners=True),
              "root": create_token(engine, "root", "admin")}
    try:
        with serving(service) as url, httpx.Client(base_url=url, timeout=60) as client:
            yield Department(client, service, tokens, db_url, tmp_path)
    finally:
        service.close()
        use_dirs(())


def test_a_reviewer_of_one_team_reads_lists_and_decides_only_that_teams_work(department: Department) -> None:
    d = department
    a = d.submit("a-bot", "a.md", sample("en_purchase_approval.md", "(team A)"))
    b = d.submit("b-bot", "b.md", sample("en_purchase_approval.md", "(team B)"))
    a_run, b_run = a["document_run"], b["document_run"]

    assert d.get("kim", "/v1/me").json() == {"name": "kim", "role": "reviewer", "owner": "team-a", "all_owners": False}
    queue = d.get("kim", "/v1/review/queue").json()
    assert [item["document_run_id"] for item in queue["items"]] == [a_run] and queue["total"] == 1
    assert [item["document_run_id"] for item in d.get("park", "/v1/review/queue").json()["items"]] == [b_run]
    every = {item["document_run_id"] for item in d.get("audit", "/v1/review/queue").json()["items"]}
    assert every == {a_run, b_run} == {item["document_run_id"] for item in d.get("root", "/v1/review/queue").json()["items"]}

    # another team's ids answer as missing ones do, for every read and every decision
    missing = d.get("kim", "/v1/review/999999")
    for response in (d.get("kim", f"/v1/review/{b_run}"), d.get("kim", f"/v1/document-runs/{b_run}"),
                     d.get("kim", f"/v1/submissions/{b['id']}"), d.get("kim", f"/v1/batches/{b['batch']}"),
                     d.post("kim", f"/v1/review/{b_run}/approve"), d.post("kim", f"/v1/review/{b_run}/reject",
                                                                          {"reason": "not ours"}),
                     d.post("kim", f"/v1/review/{b_run}/claim")):
        assert response.status_code == 404 == missing.status_code, response.text
        assert response.json()["detail"].startswith("no ")
    assert [batch["batch"] for batch in d.get("kim", "/v1/batches").json()] == [a["batch"]]
    assert {batch["batch"] for batch in d.get("audit", "/v1/batches").json()} == {a["batch"], b["batch"]}
    # runs and compare mix every team's documents: department-wide tokens only
    refused = d.get("kim", "/v1/runs")
    assert refused.status_code == 403 and "reads only 'team-a'" in refused.json()["detail"]
    assert d.get("kim", "/v1/compare", baseline="model=x", candidate="model=y").status_code == 403
    assert d.get("audit", "/v1/runs").status_code == 200

    assert d.post("kim", f"/v1/review/{a_run}/approve", {"note": "ours"}).json()["outcome"] == "approved"
    assert d.post("audit", f"/v1/review/{b_run}/approve").json()["outcome"] == "approved"
    with d.service.store.engine.connect() as connection:  # the refused tries wrote nothing
        decided = connection.execute(text("SELECT document_run_id, reviewer FROM reviews ORDER BY id")).all()
    assert [tuple(row) for row in decided] == [(a_run, "kim"), (b_run, "audit")]

    # export --owner: each team's records only; both without it
    for owner, expected in (("team-a", [a_run]), ("team-b", [b_run]), (None, [a_run, b_run])):
        out = d.folder / f"{owner}.jsonl"
        done = d.cli("export", "--out", str(out), *(("--owner", owner) if owner else ()))
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert [line["provenance"]["document_sha256"] for line in lines] == [
            d.get("root", f"/v1/document-runs/{run}").json()["document"]["sha256"] for run in expected]


def test_approved_records_stream_as_jsonl_pages_owner_scoped_with_exports_provenance(department: Department) -> None:
    d = department
    runs = {team: [d.submit(f"{team}-bot", f"{team}{n}.md", sample("en_purchase_approval.md", f"{team} {n}"))
                   ["document_run"] for n in range(3)] for team in ("a", "b")}
    for team, reviewer in (("a", "kim"), ("b", "park")):
        for run in runs[team]:
            assert d.post(reviewer, f"/v1/review/{run}/approve").status_code == 200

    def pages(token: str, **params: Any) -> tuple[list[dict[str, Any]], int]:
        """Every record, following X-Next-Cursor; and how many pages it took."""
        found, cursor, count = [], None, 0
        while True:
            response = d.get(token, "/v1/approved", **params, **({"cursor": cursor} if cursor else {}))
            assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
            found += [json.loads(line) for line in response.text.splitlines()]
            count += 1
            cursor = response.headers.get("x-next-cursor")
            if cursor is None:
                return found, count
            assert response.headers["link"].startswith("</v1/approved?cursor=")
            assert count < 20

    exported = d.folder / "all.jsonl"
    assert d.cli("export", "--out", str(exported)).returncode == 0
    everything = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    streamed, count = pages("audit", limit=2)
    assert streamed == everything and count == 4  # 6 records, 2 a page, and an empty last page
    assert list(streamed[0]["provenance"]) == list(PROVENANCE_COLUMNS)
    assert streamed[0]["provenance"]["approved_by"] == ["kim"]
    sha_of = {run: d.get("root", f"/v1/document-runs/{run}").json()["document"]["sha256"]
              for team in runs for run in runs[team]}
    for token, team in (("a-bot", "a"), ("kim", "a"), ("b-bot", "b")):
        mine, _ = pages(token, limit=1)
        assert [r["provenance"]["document_sha256"] for r in mine] == [sha_of[run] for run in runs[team]], token
    just_b, _ = pages("root", owner="team-b")
    assert [r["provenance"]["document_sha256"] for r in just_b] == [sha_of[run] for run in runs["b"]]
    refused = d.get("a-bot", "/v1/approved", owner="team-b")
    assert refused.status_code == 403 and "reads only 'team-a'" in refused.json()["detail"]
    assert d.get("a-bot", "/v1/approved", cursor="2026-01-01T00:00:00~x").status_code == 422
    assert d.get("a-bot", "/v1/approved", cursor="2026-13-01T00:00:00~3").status_code == 400


def test_claims_hold_a_document_for_one_reviewer_and_concurrent_approvals_give_one_success_and_one_409(
        department: Department) -> None:
    d = department
    held = d.submit("a-bot", "held.md", sample("en_purchase_approval.md", "held"))["document_run"]
    raced = d.submit("a-bot", "raced.md", sample("ru_vacation_approval.txt", "raced"))["document_run"]

    claimed = d.post("kim", f"/v1/review/{held}/claim")
    assert claimed.status_code == 200 and claimed.json()["claim"]["reviewer"] == "kim"
    seen = d.get("lee", f"/v1/review/{held}").json()
    assert seen["claim"]["reviewer"] == "kim" and seen["claim"]["since"] == claimed.json()["claim"]["since"]
    queue = {item["document_run_id"]: item for item in d.get("lee", "/v1/review/queue").json()["items"]}
    assert queue[held]["claim"]["reviewer"] == "kim" and queue[raced]["claim"] is None
    for response in (d.post("lee", f"/v1/review/{held}/claim"), d.post("lee", f"/v1/review/{held}/approve"),
                     d.post("lee", f"/v1/review/{held}/reject", {"reason": "no"})):
        assert response.status_code == 409 and "kim has it open since" in response.json()["detail"], response.text
    assert d.post("kim", f"/v1/review/{held}/claim").json()["claim"]["since"] == claimed.json()["claim"]["since"]
    assert d.client.delete(f"/v1/review/{held}/claim", headers=bearer(d.tokens["kim"])).json()["released"] is True
    approved = d.post("lee", f"/v1/review/{held}/approve")
    assert approved.status_code == 200 and approved.json()["reviewer"] == "lee"
    assert d.get("lee", f"/v1/review/{held}").json()["claim"] is None  # a decision releases the claim

    # two reviewers approve at once, each having read the same version: one succeeds, the other is told who did
    version = d.get("kim", f"/v1/review/{raced}").json()["document_run"]["review_version"]
    barrier = threading.Barrier(2)
    answers: dict[str, httpx.Response] = {}

    def approve(name: str) -> None:
        with httpx.Client(base_url=str(d.client.base_url), timeout=60) as own:  # a client of its own
            barrier.wait()
            answers[name] = own.post(f"/v1/review/{raced}/approve", headers=bearer(d.tokens[name]),
                                     json={"version": version, "note": name})

    threads = [threading.Thread(target=approve, args=(name,)) for name in ("kim", "lee")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    codes = sorted(response.status_code for response in answers.values())
    assert codes == [200, 409], {name: response.text for name, response in answers.items()}
    winner = next(name for name, response in answers.items() if response.status_code == 200)
    loser = "lee" if winner == "kim" else "kim"
    assert f"{winner} approved document run {raced} at" in answers[loser].json()["detail"]
    with d.service.store.engine.connect() as connection:
        reviews = connection.execute(text(f"SELECT reviewer FROM reviews WHERE document_run_id = {raced}")).all()
        records = connection.execute(text("SELECT COUNT(*) FROM approved_records")).scalar()
    assert [row[0] for row in reviews] == [winner] and records == 2
    stale = d.post(loser, f"/v1/review/{raced}/reject", {"reason": "late", "version": version})
    assert stale.status_code == 409 and f"{winner} approved" in stale.json()["detail"]


def test_a_contract_that_needs_two_approvals_is_approved_and_exported_only_after_the_second(
        department: Department) -> None:
    d = department
    po = d.submit("a-bot", "po.md", PO_SAMPLE.read_text(encoding="utf-8"), contract="purchase_order")["document_run"]
    first = d.post("kim", f"/v1/review/{po}/approve", {"note": "checked the SKUs"})
    assert first.status_code == 200, first.text
    assert first.json()["outcome"] == "signed" and first.json()["approved_record_id"] is None
    assert first.json()["approvals"]["required"] == 2 and first.json()["approvals"]["given"] == 1
    assert d.get("kim", "/v1/approved").text == ""  # not approved, not exported
    out = d.folder / "po.jsonl"
    assert d.cli("export", "--out", str(out)).returncode == 0 and out.read_text(encoding="utf-8") == ""
    listed = d.cli("review")
    assert listed.returncode == 0 and "1 of 2 approvals (kim)" in listed.stdout, listed.stdout
    shown = d.get("lee", f"/v1/review/{po}").json()
    assert shown["approvals"]["given"] == 1 and shown["approvals"]["pending"][0]["reviewer"] == "kim"
    queue = d.get("lee", "/v1/review/queue").json()["items"]
    assert [(i["document_run_id"], i["approvals"]["given"]) for i in queue] == [(po, 1)]

    again = d.post("kim", f"/v1/review/{po}/approve")  # the same person twice is still one approval
    assert again.status_code == 200 and again.json()["outcome"] == "already"
    assert again.json()["approvals"]["given"] == 1
    cli_again = d.cli("approve", str(po), "--reviewer", "kim")
    assert cli_again.returncode == 0 and "you signed it off already" in cli_again.stdout, cli_again.stdout

    second = d.post("lee", f"/v1/review/{po}/approve")
    assert second.status_code == 200 and second.json()["outcome"] == "approved", second.text
    assert second.json()["approved_by"] == ["kim", "lee"]
    assert second.json()["approvals"] == {"required": 2, "given": 2, "approved_by": ["kim", "lee"], "pending": []}
    streamed = [json.loads(line) for line in d.get("kim", "/v1/approved").text.splitlines()]
    assert [r["provenance"]["approved_by"] for r in streamed] == [["kim", "lee"]]
    assert d.cli("export", "--out", str(out)).returncode == 0
    assert json.loads(out.read_text(encoding="utf-8"))["provenance"]["approved_by"] == ["kim", "lee"]
    assert d.get("kim", "/v1/review/queue").json()["items"] == []
    with d.service.store.engine.connect() as connection:
        states = connection.execute(text("SELECT reviewer, state FROM signoffs ORDER BY id")).all()
    assert [tuple(row) for row in states] == [("kim", "approved"), ("lee", "approved")]


def test_the_second_person_is_shown_and_approves_the_record_the_first_one_edited(department: Department) -> None:
    """The model's candidate has an error finding, so only a person's edit can be approved: once kim signed off an
    edit, lee is shown that record (the API and `extract show`), and lee's approval without an edit signs it off: it
    is approved and exported once, by both."""
    d = department
    source = PO_SAMPLE.read_text(encoding="utf-8").replace("net 30", "net 45")  # the candidate says 30
    po = d.submit("a-bot", "po45.md", source, contract="purchase_order", outcome="MANUAL_REVIEW")["document_run"]
    refused = d.post("lee", f"/v1/review/{po}/approve")
    assert refused.status_code == 409 and "error findings" in refused.json()["detail"], refused.text
    fixed = json.loads(PO_ANSWER.replace("net 30", "net 45"))
    edit = d.folder / "fixed.json"
    edit.write_text(json.dumps(fixed), encoding="utf-8")
    signed = d.cli("approve", str(po), "--reviewer", "kim", "--edited", str(edit))
    assert signed.returncode == 0 and "1 of 2 approvals" in signed.stdout, signed.stdout + signed.stderr
    again = d.post("kim", f"/v1/review/{po}/approve")  # kim's own record, without the edit: one approval still
    assert again.status_code == 200 and again.json()["outcome"] == "already", again.text

    shown = d.get("lee", f"/v1/review/{po}").json()
    waiting = shown["pending_record"]
    assert waiting["record"] == fixed and waiting["edited_by"] == "kim" and waiting["signed_by"] == ["kim"]
    assert waiting["changed_fields"] == ["paymentTerms"] and shown["candidate"]["paymentTerms"].startswith("net 30")
    printed = d.cli("show", str(po))
    assert printed.returncode == 0, printed.stderr
    assert "waiting for approval: the record kim signed off, edited by kim (changed: paymentTerms)" in printed.stdout
    assert "net 45 days" in printed.stdout and "net 30 days" not in printed.stdout.split("waiting for approval")[1]
    source_panel = printed.stdout.split("waiting for approval")[0]  # its evidence marks are the record's, in [[ ]]
    assert re.search(r"\[\[[^\]]*net 45 days", source_panel), source_panel

    second = d.post("lee", f"/v1/review/{po}/approve", {"version": shown["document_run"]["review_version"]})
    assert second.status_code == 200 and second.json()["outcome"] == "approved", second.text
    assert second.json()["approved_by"] == ["kim", "lee"] and second.json()["edited"] is True
    streamed = [json.loads(line) for line in d.get("lee", "/v1/approved").text.splitlines()]
    assert [(r["record"]["paymentTerms"], r["provenance"]["approved_by"]) for r in streamed] == [
        ("net 45 days after delivery", ["kim", "lee"])]
    out = d.folder / "po45.jsonl"
    assert d.cli("export", "--out", str(out)).returncode == 0
    exported = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["record"] for r in exported] == [fixed]
    with d.service.store.engine.connect() as connection:
        states = connection.execute(text("SELECT reviewer, state, edited FROM signoffs ORDER BY id")).all()
        changed = connection.execute(text(f"SELECT field_path FROM review_fields JOIN reviews ON reviews.id = "
                                          f"review_fields.review_id WHERE reviews.document_run_id = {po}")).all()
    assert [tuple(row) for row in states] == [("kim", "approved", True), ("lee", "approved", True)]
    assert [row[0] for row in changed] == ["paymentTerms"]  # the correction counts once, for the approval


def test_a_rejection_or_an_edit_starts_the_count_of_approvals_again(department: Department) -> None:
    d = department
    po = d.submit("a-bot", "po.md", PO_SAMPLE.read_text(encoding="utf-8"), contract="purchase_order")["document_run"]
    assert d.post("kim", f"/v1/review/{po}/approve").json()["outcome"] == "signed"
    assert d.post("lee", f"/v1/review/{po}/reject", {"reason": "wrong buyer"}).status_code == 200
    assert d.post("kim", f"/v1/review/{po}/approve", {"replace": True}).json()["approvals"]["given"] == 1
    with d.service.store.engine.connect() as connection:
        states = connection.execute(text("SELECT reviewer, state FROM signoffs ORDER BY id")).all()
    assert [tuple(row) for row in states] == [("kim", "superseded"), ("kim", "pending")]


def test_tokens_expire_with_a_401_that_says_so_and_rotate(department: Department, tmp_path: Path) -> None:
    d = department
    engine = d.service.store.engine
    short = create_token(engine, "temp", "submitter", "team-a", expires_in=timedelta(hours=1))
    assert d.client.get("/v1/me", headers=bearer(short)).status_code == 200
    with engine.begin() as connection:
        connection.execute(text("UPDATE api_tokens SET expires_at = :past WHERE name = 'temp'"),
                           {"past": "2026-01-01 00:00:00" if engine.dialect.name == "sqlite" else "2026-01-01T00:00:00Z"})
    expired = d.client.get("/v1/me", headers=bearer(short))
    assert expired.status_code == 401 and expired.headers["www-authenticate"] == "Bearer"
    assert expired.json()["detail"] == ("token 'temp' expired at 2026-01-01 00:00 UTC: ask an admin for a new secret "
                                        "(`extract tokens rotate temp`)")

    listed = json.loads(d.cli("tokens", "list", "--format", "json").stdout)
    by_name = {token["name"]: token for token in listed}
    assert by_name["temp"]["status"] == "expired" and by_name["temp"]["last_used_at"] is not None
    assert by_name["audit"]["all_owners"] is True and by_name["kim"]["all_owners"] is False
    assert by_name["park"]["owner"] == "team-b" and by_name["root"]["all_owners"] is True
    assert by_name["lee"]["last_used_at"] is None and by_name["lee"]["expires_at"] is not None
    table = d.cli("tokens", "list")
    assert table.returncode == 0
    row = next(line for line in table.stdout.splitlines() if line.lstrip("│ ").startswith("temp"))
    assert "expired" in row and "2026-01-01 00:00" in row and "owner team-a" in row

    rotated = d.cli("tokens", "rotate", "temp", "--expires", "30d")
    assert rotated.returncode == 0, rotated.stderr
    fresh = rotated.stdout.strip()
    assert fresh.startswith("ext_") and fresh != short
    assert d.client.get("/v1/me", headers=bearer(fresh)).json()["owner"] == "team-a"
    assert d.client.get("/v1/me", headers=bearer(short)).json()["detail"] == "unknown or revoked token"
    never = d.cli("tokens", "create", "svc", "--owner", "team-b", "--expires", "never")
    assert never.returncode == 0
    assert {t["name"]: t["expires_at"] for t in json.loads(d.cli("tokens", "list", "--format", "json").stdout)}["svc"] is None

    for args, message in ((("tokens", "create", "x", "--role", "reviewer"), "needs --owner TEAM"),
                          (("tokens", "create", "x", "--all-owners"), "--all-owners is for reviewers"),
                          (("tokens", "create", "x", "--expires", "soon"), "--expires 'soon'"),
                          (("tokens", "rotate", "nobody"), "no live token named 'nobody'")):
        refused = d.cli(*args)
        assert refused.returncode == 2 and message in refused.stderr, (args, refused.stderr)
