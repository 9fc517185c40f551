"""Human review, approved records and export, on runs produced through the real pipeline and real HTTP.

Documents and scripted answers come from ``tests.support.corpus``. Commands run in process through typer's
``CliRunner`` (the same code as ``extract ...``), and once as a real subprocess for ``show`` on a pipe.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from extractor.cli import app
from extractor.export import atomic_write
from extractor.review import resolve
from extractor.review.view import document_view
from extractor.store import open_store
from extractor.store.approved import approved_records, reviews_for
from extractor.ui.review import EVIDENCE_STYLE, source_text
from tests.support.corpus import GOOD, invented, run, script, write_documents
from tests.support.llm_server import ScriptedLLMServer

BEHAVIOUR = {0: "pass", 1: "fail", 2: "warn", 3: "garbage", 4: "error", 5: "uncovered"}


class Corpus:
    """One run of six documents (see BEHAVIOUR) in a fresh database, and a way to call ``extract``."""

    def __init__(self, db_url: str, folder: Path, server: ScriptedLLMServer) -> None:
        self.db_url, self.folder, self.server = db_url, folder, server
        self.paths = write_documents(folder / "docs", list(BEHAVIOUR))
        self.summary = run(db_url, server, self.paths, "base")
        by_path = {o.path: o for o in self.summary.outcomes}
        self.ids = {n: by_path[str(p)].document_run_id for n, p in enumerate(self.paths)}
        self.runner = CliRunner()

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return self.runner.invoke(app, [*args, "--database", self.db_url], env={"COLUMNS": "200", **(env or {})},
                                  catch_exceptions=False)

    def json(self, *args: str) -> Any:
        result = self(*args, "--format", "json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def store(self) -> Any:
        return open_store(self.db_url)


@pytest.fixture
def corpus(db_url: str, tmp_path: Path, llm_server: Callable[..., ScriptedLLMServer],
           monkeypatch: pytest.MonkeyPatch) -> Corpus:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EXTRACT_APPROVED_DATABASE_URL", raising=False)
    monkeypatch.delenv("EXTRACT_REVIEWER", raising=False)
    server = llm_server(script({"base": BEHAVIOUR.__getitem__, "other": lambda n: "pass"}))
    return Corpus(db_url, tmp_path, server)


def edited_without_second_rule() -> dict[str, Any]:
    """What a reviewer might make of the failing candidate: the invented rule and rules[1] removed,
    the sentence that held rules[1] declared UNMAPPED with a reason."""
    out = invented()
    del out["rules"][1:]
    out["evidence"] = [e for e in out["evidence"] if e["fieldPath"] != "rules[1]"]
    for entry in out["sentenceCoverage"]:
        if entry["sentenceId"] == "s15":
            entry.clear()
            entry.update({"sentenceId": "s15", "status": "UNMAPPED", "reason": "reviewer: a policy, not a step rule"})
    return out


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    return path


# ---------------------------------------------------------------- review queue and show


def test_review_lists_ready_first_then_manual_with_findings(corpus: Corpus) -> None:
    queue = corpus.json("review")
    assert [item["state"] for item in queue] == ["READY_FOR_REVIEW"] + ["MANUAL_REVIEW"] * 4
    assert queue[0]["document_run_id"] == corpus.ids[0]
    by_id = {item["document_run_id"]: item for item in queue}
    assert corpus.ids[4] not in by_id  # ERROR: nothing to review
    assert by_id[corpus.ids[1]]["errors"] == {"VALUE_WITHOUT_EVIDENCE": 1}
    assert by_id[corpus.ids[2]]["errors"] == {} and by_id[corpus.ids[2]]["warnings"] == {"STEP_ORDER_INVERTED": 1}
    assert by_id[corpus.ids[3]]["errors"] == {"OUTPUT_NOT_JSON": 1}
    assert by_id[corpus.ids[5]]["errors"] == {"SENTENCE_NOT_ACCOUNTED": 1}
    assert by_id[corpus.ids[1]]["cause"].startswith("failed validation after repair")
    assert [item["document_run_id"] for item in corpus.json("review", "--state", "ready")] == [corpus.ids[0]]

    text = corpus("review")
    assert text.exit_code == 0
    assert text.stdout.index("READY_FOR_REVIEW") < text.stdout.index("MANUAL_REVIEW")
    assert "VALUE_WITHOUT_EVIDENCE" in text.stdout and "STEP_ORDER_INVERTED" in text.stdout

    # decided documents leave the queue; a newer configuration's result of the same content joins it
    assert corpus("approve", str(corpus.ids[0]), "--reviewer", "lee").exit_code == 0
    assert corpus("reject", str(corpus.ids[3]), "--reviewer", "lee", "--reason", "not JSON").exit_code == 0
    remaining = {item["document_run_id"] for item in corpus.json("review")}
    assert remaining == {corpus.ids[1], corpus.ids[2], corpus.ids[5]}
    other = run(corpus.db_url, corpus.server, corpus.paths[:2], "other")
    newer = {o.path: o.document_run_id for o in other.outcomes}
    queue = corpus.json("review")
    assert queue[0]["document_run_id"] == newer[str(corpus.paths[1])]  # READY first; doc 0 is approved already
    assert queue[0]["alternatives"] == [corpus.ids[1]]  # one line per document, its other result named
    assert len(queue) == 3 and newer[str(corpus.paths[0])] not in {item["document_run_id"] for item in queue}
    every = {item["document_run_id"] for item in corpus.json("review", "--every-result")}
    assert every == {newer[str(corpus.paths[1])], corpus.ids[1], corpus.ids[2], corpus.ids[5]}
    assert [item["document_run_id"] for item in corpus.json("review", "--model", "base")] == [
        corpus.ids[1], corpus.ids[2], corpus.ids[5]]


def test_review_lists_a_page_and_says_how_many_wait(corpus: Corpus) -> None:
    everything = corpus.json("review", "--all")
    assert len(everything) == 5
    page = corpus("review", "--limit", "2", "--format", "json")
    assert page.exit_code == 0 and json.loads(page.stdout) == everything[:2]
    assert "listed 2 of 5 waiting; --limit N or --all for more" in page.stderr
    text = corpus("review", "--limit", "2")
    assert "2 of 5 document(s) waiting" in text.stdout and "3 more waiting: --limit N or --all" in text.stdout
    assert "more waiting" not in corpus("review").stdout  # 5 fit in the default page

    # A decision takes a document out of the queue at once (the mark the queue reads is set with the review).
    assert corpus("reject", str(corpus.ids[1]), "--reviewer", "lee", "--reason", "invented rule").exit_code == 0
    assert corpus.ids[1] not in [item["document_run_id"] for item in corpus.json("review", "--all")]
    with corpus.store() as store:
        assert store.problems() == []


def test_show_marks_every_sentence_and_highlights_evidence(corpus: Corpus) -> None:
    view = corpus.json("show", str(corpus.ids[5]))
    labels = {s["id"]: s["label"] for s in view["sentences"]}
    assert labels["s1"] == "EXCLUDED" and labels["s3"] == "MAPPED" and labels["s17"] == "UNMAPPED"
    assert labels["s18"] == "UNACCOUNTED"
    assert view["sentence_counts"] == {"EXCLUDED": 6, "MAPPED": 10, "UNACCOUNTED": 1, "UNMAPPED": 1}
    assert view["document"]["source_status"] == "unchanged" and view["text"].startswith("# Purchase")
    s12 = next(s for s in view["sentences"] if s["id"] == "s12")
    [span] = s12["evidence"]
    assert view["text"][span["start"]:span["end"]] == "The procurement officer issues the purchase order after approval"
    assert span["fieldPath"] == "processSteps[3]" and span["end"] < s12["end"]  # ", e.g. PO-..." is not evidence
    assert not next(s for s in view["sentences"] if s["id"] == "s17")["evidence"]
    assert view["missing_fields"] == GOOD["missingFields"]
    assert view["fields"]["assignmentRule"]["state"] == "NEEDS_INPUT"
    assert [(a["kind"], a["final"]) for a in view["attempts"]] == [("generate", False), ("repair", True)]
    assert all(a["findings"][0]["rule_id"] == "SENTENCE_NOT_ACCOUNTED" for a in view["attempts"])

    # the rich rendering of the same view: sentence tags, state colours, evidence underlined (or [[ ]] without colours)
    with corpus.store() as store:
        shown = document_view(store, store, resolve(store, str(corpus.ids[5])).document_run)
    assert shown.to_json()["sentences"] == view["sentences"]
    rendered = source_text(shown)
    assert "⟨s18 UNACCOUNTED⟩Questions go to the finance team." in rendered.plain
    evidence = {rendered.plain[s.start:s.end] for s in rendered.spans if s.style == EVIDENCE_STYLE}
    assert "The procurement officer issues the purchase order after approval" in evidence
    assert not any("finance team" in e for e in evidence)
    plain = source_text(shown, plain=True).plain
    assert "[[The procurement officer issues the purchase order after approval]], e.g. PO-2024-0153." in plain
    assert "⟨s17 UNMAPPED⟩This document replaces" in plain

    failing = corpus.json("show", str(corpus.ids[1]))
    assert failing["fields"]["rules[2]"] == {"state": None, "rule_id": "VALUE_WITHOUT_EVIDENCE"}
    garbage = corpus.json("show", str(corpus.ids[3]))
    assert {s["label"] for s in garbage["sentences"]} == {"NOT_EVALUATED"}
    assert garbage["attempts"][1]["raw_response"] == "Sure! Here is the JSON:"
    run_view = corpus.json("show", corpus.summary.run_id[:10])
    assert run_view["kind"] == "run" and len(run_view["documents"]) == 6


def test_show_on_a_pipe_prints_the_marked_source(corpus: Corpus) -> None:
    env = {**os.environ, "EXTRACT_DATABASE_URL": corpus.db_url, "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "extractor", "show", str(corpus.ids[1])], capture_output=True,
                            text=True, env=env, cwd=corpus.folder, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "⟨s3 MAPPED⟩[[This procedure makes every purchase" in out
    assert "⟨s1 EXCLUDED⟩" in out and "⟨s18 UNMAPPED⟩Questions go to the finance team." in out
    assert "VALUE_WITHOUT_EVIDENCE" in out and "questions for a person" in out
    assert "attempt 2 (repair, final): failed, 1 error(s)" in out


# ---------------------------------------------------------------- approve and reject


def test_approve_twice_is_idempotent_and_reject_withdraws(corpus: Corpus) -> None:
    doc = str(corpus.ids[0])
    first = corpus("approve", doc, "--reviewer", "lee", "--note", "checked against the source")
    assert first.exit_code == 0 and "approved the candidate of document run" in first.stdout
    again = corpus("approve", doc, "--reviewer", "kim")
    assert again.exit_code == 0 and again.stdout.startswith("already approved by lee at ")
    with corpus.store() as store:
        [record] = approved_records(store)
        assert record.record == GOOD and record.reviewer == "lee" and record.note == "checked against the source"
        assert record.edited is False and record.run_id == corpus.summary.run_id and record.attempt_id is not None
        assert record.evidence_spans and record.evidence_spans[0]["fieldPath"] == "documentPurpose"
        assert [(r.decision, r.reviewer) for r in reviews_for(store, corpus.ids[0])] == [("approved", "lee")]

    unforced = corpus("reject", doc, "--reviewer", "kim", "--reason", "purpose is wrong")
    assert unforced.exit_code == 1 and "was approved by lee" in unforced.stderr and "--force" in unforced.stderr
    rejected = corpus("reject", doc, "--reviewer", "kim", "--reason", "purpose is wrong", "--force")
    assert rejected.exit_code == 0 and "withdrew the approval by lee" in rejected.stdout
    assert corpus("reject", doc, "--reviewer", "kim", "--reason", "purpose is wrong").stdout.startswith("already rejected")
    with corpus.store() as store:
        assert approved_records(store) == []
        assert [r.decision for r in reviews_for(store, corpus.ids[0])] == ["approved", "rejected"]
    reversal = corpus("approve", doc, "--reviewer", "park")
    assert reversal.exit_code == 1 and "was rejected by kim" in reversal.stderr and "--force" in reversal.stderr
    decision = corpus.json("approve", doc, "--reviewer", "park", "--force")
    assert decision["outcome"] == "approved" and decision["reviewer"] == "park"
    with corpus.store() as store:
        assert [r.reviewer for r in approved_records(store)] == ["park"]


def test_manual_review_needs_a_corrected_candidate(corpus: Corpus) -> None:
    doc = str(corpus.ids[1])
    refused = corpus("approve", doc, "--reviewer", "lee")
    assert refused.exit_code == 1 and "VALUE_WITHOUT_EVIDENCE" in refused.stderr and "--edited" in refused.stderr
    still_wrong = invented()
    still_wrong["processSteps"][0]["actorId"] = "buyer"
    result = corpus("approve", doc, "--reviewer", "lee", "--edited", str(write_json(corpus.folder / "bad.json", still_wrong)))
    assert result.exit_code == 1
    assert "ACTOR_UNKNOWN" in result.stderr and "VALUE_WITHOUT_EVIDENCE" in result.stderr
    assert "refused: edited candidate has 2 error finding(s)" in result.stderr
    as_json = corpus("approve", doc, "--reviewer", "lee", "--edited", str(corpus.folder / "bad.json"), "--format", "json")
    assert as_json.exit_code == 1
    assert {f["rule_id"] for f in json.loads(as_json.stdout)["findings"]} == {"ACTOR_UNKNOWN", "VALUE_WITHOUT_EVIDENCE"}
    with corpus.store() as store:
        assert approved_records(store) == [] and reviews_for(store, corpus.ids[1]) == []

    fixed = invented()
    fixed["rules"].pop()  # the person removes the invented rule
    approved = corpus.json("approve", doc, "--reviewer", "lee", "--edited", str(write_json(corpus.folder / "fixed.json", fixed)),
                           "--note", "removed the invented CFO rule")
    assert approved["outcome"] == "approved" and approved["edited"] is True
    again = corpus("approve", doc, "--reviewer", "kim", "--edited", str(corpus.folder / "fixed.json"))
    assert again.exit_code == 0 and again.stdout.startswith("already approved by lee")
    with corpus.store() as store:
        [record] = approved_records(store)
    assert record.record == fixed and record.note == "removed the invented CFO rule"

    # a MANUAL_REVIEW result held back only by a warning can be approved as it is; unparseable ones cannot
    assert corpus("approve", str(corpus.ids[2]), "--reviewer", "lee").exit_code == 0
    garbage = corpus("approve", str(corpus.ids[3]), "--reviewer", "lee")
    assert garbage.exit_code == 1 and "no parseable candidate" in garbage.stderr
    error = corpus("approve", str(corpus.ids[4]), "--reviewer", "lee")
    assert error.exit_code == 1 and "is ERROR" in error.stderr


def test_changed_source_is_refused(corpus: Corpus) -> None:
    original = corpus.paths[0].read_bytes()
    corpus.paths[0].write_bytes(original.replace(b"three business days", b"five business days"))
    refused = corpus("approve", str(corpus.ids[0]), "--reviewer", "lee")
    assert refused.exit_code == 1 and "changed since run" in refused.stderr and refused.stderr.count("\n") == 1
    edited = corpus("approve", str(corpus.ids[0]), "--reviewer", "lee", "--edited",
                    str(write_json(corpus.folder / "same.json", GOOD)))
    assert edited.exit_code == 1 and "changed since run" in edited.stderr
    assert corpus.json("show", str(corpus.ids[0]))["document"]["source_status"] == "changed"
    moved = corpus.folder / "archive" / "purchase.md"
    moved.parent.mkdir()
    moved.write_bytes(original)
    accepted = corpus("approve", str(corpus.ids[0]), "--reviewer", "lee", "--source", str(moved))
    assert accepted.exit_code == 0, accepted.output
    corpus.paths[1].unlink()
    gone = corpus("approve", str(corpus.ids[1]), "--reviewer", "lee", "--edited", str(corpus.folder / "same.json"))
    assert gone.exit_code == 1 and "file not found" in gone.stderr and "--source" in gone.stderr


def test_doc_can_be_a_hash_prefix_or_a_path_and_ambiguity_is_an_error(corpus: Corpus) -> None:
    store = corpus.store()
    [document_run] = [d for d in store.document_runs_for(corpus.summary.run_id) if d.id == corpus.ids[0]]
    store.close()
    by_prefix = corpus.json("show", document_run.sha256[:10])
    by_path = corpus.json("show", str(corpus.paths[0]))
    by_relative = corpus.json("show", os.path.relpath(corpus.paths[0]))
    assert by_prefix["document_run"]["id"] == by_path["document_run"]["id"] == by_relative["document_run"]["id"] == corpus.ids[0]
    assert corpus("show", "docs/nothing.md").exit_code == 2

    run(corpus.db_url, corpus.server, corpus.paths[:1], "other")  # a second configuration, READY as well
    ambiguous = corpus("approve", str(corpus.paths[0]), "--reviewer", "lee")
    assert ambiguous.exit_code == 2 and "from 2 configurations" in ambiguous.stderr
    assert ambiguous.stderr.count("\n") == 1 and str(corpus.ids[0]) in ambiguous.stderr

    original = corpus.paths[0].read_text(encoding="utf-8")
    corpus.paths[0].write_text(original.replace("three business days", "five business days"), encoding="utf-8")
    run(corpus.db_url, corpus.server, corpus.paths[:1], "other")  # the same path, new content
    corpus.paths[0].write_text(original.replace("three business days", "seven business days"), encoding="utf-8")
    two = corpus("show", str(corpus.paths[0]))
    assert two.exit_code == 2 and "matches 2 documents" in two.stderr and document_run.sha256[:12] in two.stderr
    corpus.paths[0].write_text(original.replace("three business days", "five business days"), encoding="utf-8")
    current = corpus.json("show", str(corpus.paths[0]))  # the file's current content decides
    assert current["document"]["sha256"] != document_run.sha256 and current["document"]["source_status"] == "unchanged"


def test_approved_records_can_live_in_their_own_database(corpus: Corpus, tmp_path: Path) -> None:
    approved_url = f"sqlite:///{tmp_path}/approved.db"
    env = {"EXTRACT_APPROVED_DATABASE_URL": approved_url}
    assert corpus("approve", str(corpus.ids[0]), "--reviewer", "lee", env=env).exit_code == 0
    with corpus.store() as run_log, open_store(approved_url) as records:
        assert approved_records(run_log) == []
        assert [r.reviewer for r in approved_records(records)] == ["lee"]
        assert [r.decision for r in reviews_for(run_log, corpus.ids[0])] == ["approved"]  # history stays in the log
    assert corpus("approve", str(corpus.ids[0]), "--reviewer", "lee", env=env).stdout.startswith("already approved")
    queue = corpus.runner.invoke(app, ["review", "--database", corpus.db_url, "--format", "json"], env=env)
    assert corpus.ids[0] not in {item["document_run_id"] for item in json.loads(queue.stdout)}
    out = tmp_path / "approved.jsonl"
    assert corpus("export", "--out", str(out), env=env).exit_code == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1
    assert corpus("export", "--out", str(out)).exit_code == 0  # the run log's own table: empty
    assert out.read_text(encoding="utf-8") == ""


# ---------------------------------------------------------------- export


def test_export_jsonl_and_csv_carry_provenance(corpus: Corpus) -> None:
    assert corpus("approve", str(corpus.ids[0]), "--reviewer", "lee", "--note", "ok").exit_code == 0
    fixed = edited_without_second_rule()
    assert corpus("approve", str(corpus.ids[1]), "--reviewer", "kim", "--edited",
                  str(write_json(corpus.folder / "fixed.json", fixed))).exit_code == 0
    assert corpus("approve", str(corpus.ids[2]), "--reviewer", "park").exit_code == 0
    assert corpus("reject", str(corpus.ids[2]), "--reviewer", "park", "--reason", "order is wrong", "--force").exit_code == 0

    out = corpus.folder / "out" / "records.jsonl"
    out.parent.mkdir()
    result = corpus("export", "--format", "jsonl", "--out", str(out))
    assert result.exit_code == 0 and "wrote 2 approved record(s)" in result.stdout
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["provenance"]["reviewer"] for line in lines] == ["lee", "kim"]
    first = lines[0]["provenance"]
    assert lines[0]["record"] == GOOD
    assert first["document_path"] == str(corpus.paths[0]) and len(first["document_sha256"]) == 64
    assert (first["contract"], first["contract_version"], first["model"], first["prompt_version"]) == (
        "work_procedure", 1, "base", "v1")
    assert first["run_id"] == corpus.summary.run_id and first["note"] == "ok" and first["edited"] is False
    spans = {span["fieldPath"]: span for span in first["evidence_spans"]}
    assert spans["processSteps[0]"]["found"] and spans["processSteps[0]"]["sentence_ids"] == ["s9"]
    text = corpus.paths[0].read_text(encoding="utf-8")
    start, end = spans["rules[1]"]["spans"][0]
    assert text[start:end] == "Nobody may approve their own request."
    assert lines[1]["provenance"]["edited"] is True and lines[1]["record"] == fixed
    assert sorted(os.listdir(out.parent)) == ["records.jsonl"]

    table = corpus.folder / "out" / "records.csv"
    assert corpus("export", "--format", "csv", "--out", str(table), "--contract", "work_procedure").exit_code == 0
    rows = list(csv.DictReader(io.StringIO(table.read_text(encoding="utf-8"))))
    assert [row["reviewer"] for row in rows] == ["lee", "kim"]
    assert rows[0]["document_sha256"] == first["document_sha256"] and rows[1]["edited"] == "true"
    assert json.loads(rows[0]["participants"]) == GOOD["participants"] and rows[0]["assignmentRule"] == ""
    assert json.loads(rows[0]["evidence_spans"]) == first["evidence_spans"]
    assert rows[0]["documentPurpose"] == GOOD["documentPurpose"]

    assert corpus("export", "--out", str(out), "--contract", "rag_answer").exit_code == 0
    assert out.read_text(encoding="utf-8") == ""
    assert corpus("export", "--out", str(out), "--since", "2999-01-01").exit_code == 0
    assert corpus("export", "--out", str(out), "--since", "last tuesday").exit_code == 2
    assert corpus("export", "--out", str(corpus.folder / "no" / "such" / "x.jsonl")).exit_code == 2


def test_csv_export_writes_the_cells_approvals_stored_as_it_makes_them(corpus: Corpus) -> None:
    """An approval stores its record's CSV cells (``approved_records.record_cells``) and a CSV export writes rows
    from them: the file is byte for byte the one export makes from the records themselves, with records of other
    columns, in another order, with a column that appears late, and nested or hostile values (NUL among them).
    Stored cells are what is written (a planted cell shows), unless they are of another version."""
    from sqlalchemy import select, update

    from extractor.store.approved import NewApproval, approve
    from extractor.store.tables import approved_records as table

    assert corpus("approve", str(corpus.ids[0]), "--reviewer", "lee", "--note", 'ok, "fine"').exit_code == 0
    crafted = [
        {"z": "=cmd", "y": 'say "hi", ok', "x": [1, "a,b", {"q": '"'}], "w": {"n": "nested", "m": {"k": -1}},
         "v": "line\nbreak", "u": None, "t": True, "s": -3.5, "r": "Ω, 한"},
        {"y": "only y", "z": "after y"},  # columns of the first, in another order
        {"x": [], "w": {"n": "2", "m": {"k": 0}}},  # a run of the first's columns
        {"y": "NUL \x00 inside", "z": ""},  # no stored cells: made from the record
        {"late": "a column no record had", "z": "@SUM(A1)"},
    ]
    with corpus.store() as store:
        for number, record in enumerate(crafted, start=1):
            spans = [{"fieldPath": "y", "spans": [[0, 3]], "note": 'a "quote", a comma'}] if number % 2 else None
            approve(store, NewApproval(corpus.ids[number], record, reviewer="kim", evidence_spans=spans))
        with store.engine.connect() as connection:
            stored = dict(connection.execute(select(table.c.id, table.c.record_cells).order_by(table.c.id)).all())
    assert [cells is None for cells in stored.values()] == [False, False, False, False, True, False]
    out = corpus.folder / "records.csv"

    def exported() -> bytes:
        result = corpus("export", "--format", "csv", "--out", str(out))
        assert result.exit_code == 0 and "wrote 6 approved record(s)" in result.stdout, result.output
        return out.read_bytes()

    def store_cells(cells: dict[int, bytes | None]) -> None:
        with corpus.store() as store, store.engine.begin() as connection:
            for number, value in cells.items():
                connection.execute(update(table).where(table.c.id == number).values(record_cells=value))

    from_stored = exported()
    rows = list(csv.DictReader(io.StringIO(from_stored.decode("utf-8"))))
    assert [row["z"] for row in rows] == ["", "'=cmd", "after y", "", "", "'@SUM(A1)"]
    assert rows[1]["w.m.k"] == "-1" and rows[1]["v"] == "line\nbreak" and rows[1]["r"] == "Ω, 한"
    assert rows[4]["y"] == "NUL \x00 inside"
    assert json.loads(rows[1]["x"]) == crafted[0]["x"] and rows[5]["late"] == "a column no record had"
    assert json.loads(rows[1]["evidence_spans"])[0]["note"] == 'a "quote", a comma'
    store_cells(dict.fromkeys(stored))
    assert exported() == from_stored  # made from the records: the same file

    first = stored[min(stored)]
    assert first is not None
    purpose = GOOD["documentPurpose"].encode()
    store_cells({min(stored): first.replace(purpose, b"planted")})
    assert list(csv.DictReader(io.StringIO(exported().decode())))[0]["documentPurpose"] == "planted"
    store_cells({min(stored): b"0" + first.replace(purpose, b"planted")[1:]})  # another version: not used
    assert list(csv.DictReader(io.StringIO(exported().decode())))[0]["documentPurpose"] == GOOD["documentPurpose"]
    store_cells({min(stored): first.split(b"\n", 1)[0] + b"\ncut short"})  # this version, damaged: said, not guessed
    damaged = corpus("export", "--format", "csv", "--out", str(out))
    assert damaged.exit_code == 2 and damaged.output.count("\n") == 1, damaged.output
    assert "the stored CSV cells of an approved record are damaged (`extract doctor --full` names it)" in damaged.output


def test_export_never_leaves_half_a_file(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    assert corpus("approve", str(corpus.ids[0]), "--reviewer", "lee").exit_code == 0
    assert corpus("approve", str(corpus.ids[2]), "--reviewer", "lee").exit_code == 0
    folder = corpus.folder / "exports"
    folder.mkdir()
    out = folder / "records.jsonl"
    out.write_text("previous export\n", encoding="utf-8")
    import extractor.export as export_module

    real = export_module._jsonl

    def crash_after_first_record(rows: Any) -> Any:
        write = real(list(rows)[:1])

        def writer(stream: Any) -> None:
            write(stream)
            stream.flush()
            raise OSError(28, "No space left on device")

        return writer

    monkeypatch.setattr(export_module, "_jsonl", crash_after_first_record)
    result = corpus("export", "--out", str(out))
    assert result.exit_code == 2 and "No space left on device" in result.stderr
    assert out.read_text(encoding="utf-8") == "previous export\n"
    assert sorted(os.listdir(folder)) == ["records.jsonl"]
    fresh = folder / "fresh.jsonl"
    assert corpus("export", "--out", str(fresh)).exit_code == 2
    assert sorted(os.listdir(folder)) == ["records.jsonl"]

    with pytest.raises(KeyboardInterrupt):  # an interrupt mid-write also cleans up
        atomic_write(folder / "x.csv", lambda stream: (stream.write("half"), (_ for _ in ()).throw(KeyboardInterrupt)))
    assert sorted(os.listdir(folder)) == ["records.jsonl"]
    monkeypatch.undo()
    assert corpus("export", "--out", str(out)).exit_code == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert oct(out.stat().st_mode & 0o777) != "0o600"  # not the temporary file's private mode


def test_read_only_commands_do_not_create_a_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for command in (["review"], ["runs"], ["stats"], ["show", "1"], ["approve", "1", "--reviewer", "x"],
                    ["export", "--out", "x.jsonl"], ["compare", "prompt=v1", "prompt=v2"]):
        result = runner.invoke(app, command, env={"EXTRACT_DATABASE_URL": f"sqlite:///{tmp_path}/missing.db"})
        assert result.exit_code == 2 and "no run log at" in result.stderr, (command, result.output)
    assert not (tmp_path / "missing.db").exists()


def test_a_number_past_what_an_id_column_holds_names_no_document_run(corpus: Corpus) -> None:
    # a run id's prefix can be ten digits: on PostgreSQL comparing it with an INTEGER id was an error, not a miss
    shown = corpus("show", "4420105184")
    assert shown.exit_code != 0 and "4420105184" in shown.output and "Traceback" not in shown.output, shown.output
    assert len(shown.output.strip().splitlines()) == 1, shown.output
    assert corpus.json("show", str(corpus.ids[5]))["document_run"]["id"] == corpus.ids[5]  # a plain id still is one
