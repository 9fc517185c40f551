"""The JSON Schema is sent once per request: in the structured-output field where the mode carries it, in the
prompt only where nothing else does; and what every document repeats comes first (prompt-prefix caching).
Checked on the requests the scripted HTTP server received."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from extractor.cli import app
from extractor.contracts import get_contract
from extractor.generate import SCHEMA_CARRIED
from tests.support.corpus import GOOD, write_documents
from tests.support.llm_server import NO_TOOLS, Action, Reply


def answer(body: dict[str, Any] | None, _call: int) -> Action:
    return Reply(json.dumps(GOOD))


def run(tmp_path: Path, server: Any, *extra: str) -> Any:
    paths = write_documents(tmp_path / "docs", range(2))
    return CliRunner().invoke(app, ["run", *map(str, paths), "--model", "openai:m", "--base-url", server.base_url,
                                    "--database", f"sqlite:///{tmp_path / 'log.db'}", "--concurrency", "1", *extra])


def test_json_schema_mode_sends_the_schema_once_and_the_repeated_part_first(tmp_path: Path, llm_server: Any) -> None:
    server = llm_server(answer)
    result = run(tmp_path, server)
    assert result.exit_code == 0, result.output
    schema_text = get_contract("work_procedure").schema_text
    first, second = (request.json for request in server.chat_requests)
    assert first is not None and second is not None
    assert first["response_format"]["json_schema"]["schema"] == get_contract("work_procedure").schema
    prompts = ["".join(m["content"] for m in body["messages"]) for body in (first, second)]
    assert all(schema_text not in text and text.count(SCHEMA_CARRIED) == 1 for text in prompts)
    common = next(i for i, (a, b) in enumerate(zip(prompts[0], prompts[1])) if a != b)
    assert prompts[0][:common].endswith("as [id] text:\n[s1] Purchase Request Approval Procedure ")  # the number
    shown = CliRunner().invoke(app, ["show", str(tmp_path / "docs/purchase_00.md"), "--requests", "--database",
                                     f"sqlite:///{tmp_path / 'log.db'}"])
    assert SCHEMA_CARRIED in shown.output and schema_text not in shown.output


def test_a_mode_without_a_schema_field_gets_the_schema_in_the_prompt_once(tmp_path: Path, llm_server: Any) -> None:
    server = llm_server(answer, reject_response_format={"json_schema"}, rejects=NO_TOOLS)
    result = run(tmp_path, server)
    assert result.exit_code == 0, result.output
    schema_text = get_contract("work_procedure").schema_text
    sent = [r.json for r in server.chat_requests if r.json and r.json.get("response_format", {}).get("type")
            == "json_object"]
    assert sent and all("".join(m["content"] for m in body["messages"]).count(schema_text) == 1 for body in sent)
    assert all(SCHEMA_CARRIED not in "".join(m["content"] for m in body["messages"]) for body in sent)
    refused = [r.json for r in server.chat_requests if r.json and "tools" in r.json]
    assert refused and all(body["tools"][0]["function"]["parameters"] == get_contract("work_procedure").schema
                           and schema_text not in "".join(m["content"] for m in body["messages"]) for body in refused)
