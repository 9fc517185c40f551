"""One numbering, one document: what a person reads names attempts and document runs one way everywhere.

``extract show`` numbers a document run's attempts 1, 2, ... in the order they were made (never a database
id) and labels each by what it is; a path means the same document run to ``show``, ``approve`` and
``reject``; overriding an earlier decision says so and needs ``--force``. Real HTTP to a scripted server, a
real SQLite file, the CLI as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.corpus import GOOD, run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer


def extract(folder: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EXTRACT_DATABASE_URL": url, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "extractor", *args], capture_output=True, text=True, env=env,
                          cwd=folder, timeout=300)


def test_show_numbers_attempts_in_order_and_titles_the_candidate_with_that_number(
        tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer]) -> None:
    url = f"sqlite:///{tmp_path}/extract.db"
    paths = write_documents(tmp_path / "docs", [1, 2, 3])
    server = llm_server(script({"m": lambda number: "repaired"}))
    summary = run(url, server, paths, "m")
    shown = {o.document_run_id: json.loads(extract(tmp_path, url, "show", str(o.document_run_id), "--format",
                                                   "json").stdout) for o in summary.outcomes}
    for view in shown.values():
        assert [(a["attempt"], a["label"], a["final"]) for a in view["attempts"]] == [
            (1, "generate", False), (2, "repair", True)]
        assert view["shown_attempt"] == 2
    # three documents, six attempts: some document's attempts have database ids other than 1 and 2
    document_run_id, view = next((d, v) for d, v in shown.items() if min(a["id"] for a in v["attempts"]) > 2)
    text = extract(tmp_path, url, "show", str(document_run_id)).stdout
    assert "candidate (attempt 2)" in text and "attempt 1 (generate):" in text and "attempt 2 (repair, final):" in text
    assert f"candidate (attempt {view['attempts'][1]['id']})" not in text


def test_a_path_means_the_same_document_run_and_overriding_a_decision_needs_force(
        tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer]) -> None:
    url = f"sqlite:///{tmp_path}/extract.db"
    [path] = write_documents(tmp_path / "docs", [1])
    doc = str(path.relative_to(tmp_path))
    behaviour = {"now": "fail"}
    server = llm_server(script({"m": lambda number: behaviour["now"]}))
    first = run(url, server, [path], "m").outcomes[0].document_run_id
    rejected = extract(tmp_path, url, "reject", doc, "--reviewer", "kim", "--reason", "invented a rule")
    assert rejected.returncode == 0, rejected.stderr
    behaviour["now"] = "error"  # the model server refuses the rerun: the newest document run is ERROR
    newest = run(url, server, [path], "m", force=True).outcomes[0].document_run_id
    assert newest != first

    shown = json.loads(extract(tmp_path, url, "show", doc, "--format", "json").stdout)
    assert (shown["document_run"]["id"], shown["document_run"]["state"]) == (newest, "ERROR")
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(GOOD), encoding="utf-8")
    by_path = extract(tmp_path, url, "approve", doc, "--reviewer", "lee", "--edited", str(fixed))
    assert by_path.returncode == 1 and f"document run {newest}, which ended ERROR" in by_path.stderr, by_path.stderr
    assert f"document run {first} (MANUAL_REVIEW" in by_path.stderr and by_path.stderr.count("\n") == 1

    reversal = extract(tmp_path, url, "approve", str(first), "--reviewer", "lee", "--edited", str(fixed))
    assert reversal.returncode == 1 and "was rejected by kim" in reversal.stderr and "invented a rule" in reversal.stderr
    assert "add --force" in reversal.stderr
    forced = extract(tmp_path, url, "approve", str(first), "--reviewer", "lee", "--edited", str(fixed), "--force")
    assert forced.returncode == 0, forced.stderr

    withdraw = extract(tmp_path, url, "reject", str(first), "--reviewer", "kim", "--reason", "still wrong")
    assert withdraw.returncode == 1 and "was approved by lee" in withdraw.stderr and "--force" in withdraw.stderr
    forced_reject = extract(tmp_path, url, "reject", str(first), "--reviewer", "kim", "--reason", "still wrong", "--force")
    assert forced_reject.returncode == 0 and "withdrew the approval by lee" in forced_reject.stdout

    # extract runs says how many of each run's documents people have decided, beside the states it ended with
    newer, older = json.loads(extract(tmp_path, url, "runs", "--format", "json").stdout)
    assert (older["counts"], older["decided"]) == ({"MANUAL_REVIEW": 1}, 1)
    assert (newer["counts"], newer["decided"]) == ({"ERROR": 1}, 0)
    table = extract(tmp_path, url, "runs").stdout
    assert "decided" in table
