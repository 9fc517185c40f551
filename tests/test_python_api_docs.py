"""Every code block of docs/python-api.md runs, in order, as one program: Python blocks in one namespace, against a
scripted model server (``EXTRACT_MODEL``, ``OPENAI_BASE_URL``), in a folder of its own; and samples/notebook.py runs
as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.batch import answer_for
from tests.support.llm_server import Reply, ScriptedLLMServer

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python-api.md"
PO_PASS = json.loads((ROOT / "samples/expected/purchase_orders/en_pass.candidate.json").read_text(encoding="utf-8"))
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def order_candidate() -> str:
    """The sample purchase order's passing candidate cut to the docs' ``Order`` model (currency and line items)."""
    keep = ("currency", "lineItems")
    candidate: dict[str, Any] = {key: PO_PASS[key] for key in keep}
    candidate["missingFields"] = []
    candidate["evidence"] = [e for e in PO_PASS["evidence"] if e["fieldPath"].startswith(keep)]
    coverage = []
    for entry in PO_PASS["sentenceCoverage"]:
        paths = [path for path in entry.get("fieldPaths") or () if path.startswith(keep)]
        if entry["status"] == "MAPPED" and not paths:
            entry = {"sentenceId": entry["sentenceId"], "status": "UNMAPPED", "reason": "not part of this contract"}
        elif entry["status"] == "MAPPED":
            entry = dict(entry, fieldPaths=paths)
        coverage.append(entry)
    candidate["sentenceCoverage"] = coverage
    return json.dumps(candidate, ensure_ascii=False)


def answer(request: dict[str, Any] | None, number: int) -> Reply:
    """The procedures' expected candidates, and the docs' ``Order`` for a purchase order."""
    text = json.dumps(request or {}, ensure_ascii=False)
    if "lineItems" in text and "supplier" not in text:
        return Reply(order_candidate())
    return Reply(answer_for(request))


def environment(server: ScriptedLLMServer, folder: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "EXTRACT_DATABASE_URL")}
    return env | {"EXTRACT_MODEL": "openai:scripted", "OPENAI_BASE_URL": server.base_url,
                  "EXTRACT_CONTRACTS_CACHE": str(folder / "contract-cache"),
                  "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}


def test_every_code_block_of_the_page_runs(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 10 and {kind for kind, _ in blocks} == {"python"}, [kind for kind, _ in blocks]
    server = llm_server(answer)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    monkeypatch.chdir(tmp_path)
    for name, value in environment(server, tmp_path).items():
        monkeypatch.setenv(name, value)
    for name in ("OPENAI_API_KEY", "EXTRACT_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    page = types.ModuleType("python_api_page")  # a module of its own: pydantic resolves the page's models in it
    monkeypatch.setitem(sys.modules, page.__name__, page)
    namespace = page.__dict__
    for number, (_, code) in enumerate(blocks, 1):
        exec(compile(code, f"{PAGE.name} block {number}", "exec"), namespace)  # noqa: S102 - the page's own code
    out = capsys.readouterr().out
    assert "READY_FOR_REVIEW None" in out  # the first block's result, as the page says
    assert "['OUTPUT_NOT_JSON']" in out and "approved" in out
    assert "samples/no_such_file.md: no such file, folder or glob match" in out
    assert namespace["result"].state == "READY_FOR_REVIEW" and isinstance(namespace["result"].record,
                                                                          namespace["Order"])
    assert namespace["written"] == 1 and (tmp_path / "approved.csv").read_text(encoding="utf-8").count("\n") >= 2
    assert (tmp_path / "extract.db").exists()  # the CLI's run log, where the CLI read it


def test_the_notebook_example_runs_as_a_script(llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    server = llm_server(answer)
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    ran = subprocess.run([sys.executable, str(ROOT / "samples" / "notebook.py")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env=environment(server, tmp_path))
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = ran.stdout
    assert out.count("converting the samples") == 1  # its readers never ran the script again
    assert re.search(r"^rule_id\s+severity\s+document", out, re.MULTILINE), out
    assert "approved" in out and "exported 1 approved record(s)" in out
    exported = (tmp_path / "approved.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(exported) == 1 and json.loads(exported[0])["provenance"]["reviewer"] == "notebook"
