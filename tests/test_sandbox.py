"""Hostile files in a batch through the CLI: each costs its own document, in one INPUT_ERROR line naming the file
and the limit, while the good files of the same batch finish; no process of the run passes the reading limit.

The files are built here, at run time, with the real writers (openpyxl, python-hwpx) or as raw bytes, and read with
a reading limit of 512 MiB (``EXTRACT_READ_MEMORY``; docs/formats.md#reading-limits). What a reader's own checks
refuse first (a zip member's size, a PDF's object count) is as good an ending as the sandbox's: the line must still
be one line naming the file, never a traceback or "internal error".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.support.batch import (
    ROOT,
    answer_for,
    cli_env,
    extract_command,
    rows,
    run_cli,
    summary_of,
    write_batch,
    write_mail_batch,
)
from tests.support.hostile import (
    attachment_header,
    deep_comment,
    long_hwpx,
    many_attachments,
    many_elements_html,
    many_parameters,
    reference_loop_pdf,
    shared_string_bomb,
    sparse_text,
)
from tests.support.llm_server import Reply, ScriptedLLMServer
from tests.support.processes import PEAK, Processes, TreePeak, alive
from tests.support.redis_server import redis_server

LIMIT = 512 << 20
GOOD = ["en_purchase_approval.md", "ko_work_request_review.txt", "ru_vacation_approval.txt"]


def peak_of(out: Path) -> int:
    """Bytes: the largest peak resident size of any process of the command (``tests/support/peak.py``)."""
    return int(out.read_text()) * 1024


def test_a_batch_with_hostile_files_finishes_its_good_files(llm_server: Callable[..., ScriptedLLMServer],
                                                             tmp_path: Path) -> None:
    folder = tmp_path / "batch"
    folder.mkdir()
    for name in GOOD:
        shutil.copy(ROOT / "samples" / name, folder / name)
    loop = reference_loop_pdf(folder / "loop.pdf")  # PDFium reads it (no reference loop to follow): a document
    hostile = {
        shared_string_bomb(folder / "shared_strings.xlsx"): None,  # the memory limit, or a reader's own refusal
        long_hwpx(folder / "long.hwpx"): "text over 2,000,000 characters (the reading limit EXTRACT_READ_TEXT); refused",
        sparse_text(folder / "huge.txt"): "over the 512 MiB reading limit (EXTRACT_READ_MEMORY)",
        many_elements_html(folder / "elements.html"): None,  # the memory limit, or the deadline on a busy machine
    }
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_READ_TIMEOUT="20", EXTRACT_MAX_DOCUMENT_BYTES=str(700 << 20), EXTRACT_READERS="2")
    peak = tmp_path / "peak"
    result = run_cli_measured(peak, "run", str(folder), "--model", "openai:scripted", "--format", "json", env=env,
                              cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stdout
    outcomes = {Path(o["path"]).name: o for o in summary_of(result)["outcomes"]}
    assert {name: outcomes[name]["state"] for name in GOOD} == dict.fromkeys(GOOD, "READY_FOR_REVIEW")
    assert outcomes[loop.name]["state"] not in ("INPUT_ERROR", "ERROR"), outcomes[loop.name]
    for path, says in hostile.items():
        outcome = outcomes[path.name]
        cause = outcome["cause"]
        assert outcome["state"] == "INPUT_ERROR" and cause.startswith(f"{path}: ") and "\n" not in cause, outcome
        assert "internal error" not in cause and "MemoryError" not in cause, cause
        if says is not None:
            assert cause == f"{path}: {says}"
    assert peak_of(peak) < LIMIT + (64 << 20), f"a process of the run peaked at {peak_of(peak) >> 20} MiB"


def test_an_emails_attachments_are_taken_from_it_by_a_reader(llm_server: Callable[..., ScriptedLLMServer],
                                                             tmp_path: Path) -> None:
    """Discovery lists an e-mail alone; a reader takes its attachments from it, with the reading limits: of 105
    attachments the first 100 are read (the 99th and 100th are text, the others before them a type no reader
    reads), each a document of its own after its e-mail. An e-mail whose 20 attachments' names take the parser
    minutes ends at the reader's deadline, in one line: it was parsed nowhere else. One of 40,000 attachments (9.5
    MB, seconds to parse) is refused before it is parsed; one whose attachment's name or transfer encoding the parser
    recurses on is one line (its RecursionError ended the run)."""
    folder = tmp_path / "batch"
    folder.mkdir()
    for name in GOOD:
        shutil.copy(ROOT / "samples" / name, folder / name)
    orders = many_attachments(folder / "orders.eml", 105, binary=98)
    flood = many_attachments(folder / "flood.eml", 40_000)
    slow = many_parameters(folder / "slow.eml")
    recursing = [attachment_header(folder / "name.eml", deep_comment(b"Content-Disposition", b"attachment;")),
                 attachment_header(folder / "encoding.eml", deep_comment(b"Content-Transfer-Encoding", b"base64"))]
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_READ_TIMEOUT="3", EXTRACT_READERS="2")
    peak = tmp_path / "peak"
    result = run_cli_measured(peak, "run", str(folder), "--model", "openai:scripted", "--format", "json", env=env,
                              cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    paths = [o["path"] for o in summary_of(result)["outcomes"]]
    outcomes = {o["path"]: o for o in summary_of(result)["outcomes"]}
    attached = [f"{orders}#attachment{number}/order{number - 1}.txt" for number in (99, 100)]
    assert sorted(paths) == sorted([str(folder / name) for name in GOOD] + [str(orders), *attached, str(flood),
                                                                           str(slow), *map(str, recursing)])
    assert {name: outcomes[str(folder / name)]["state"] for name in GOOD} == dict.fromkeys(GOOD, "READY_FOR_REVIEW")
    assert all(outcomes[path]["state"] != "INPUT_ERROR" for path in [str(orders), *attached]), outcomes
    assert outcomes[str(flood)]["state"] == outcomes[str(slow)]["state"] == "INPUT_ERROR"
    assert outcomes[str(flood)]["cause"] == f"{flood}: e-mail has over 1000 MIME parts (limit 1000); refused"
    assert outcomes[str(slow)]["cause"] == f"{slow}: still reading after 3 s (the reading limit EXTRACT_READ_TIMEOUT)"
    for path in recursing:
        assert outcomes[str(path)]["state"] == "INPUT_ERROR"
        assert outcomes[str(path)]["cause"].startswith(f"{path}: not a valid e-mail (RecursionError: "), outcomes[str(path)]
    assert peak_of(peak) < LIMIT + (64 << 20), f"a process of the run peaked at {peak_of(peak) >> 20} MiB"


def test_show_and_approve_read_the_source_again_in_a_reader(llm_server: Callable[..., ScriptedLLMServer],
                                                            tmp_path: Path) -> None:
    """``extract show`` and ``approve`` read the source again with the reading limits: a source replaced by a file
    no reader may hold is one line in each, and neither command's processes pass the limit."""
    source = tmp_path / "request.txt"
    shutil.copy(ROOT / "samples" / "ko_work_request_review.txt", source)
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    env = cli_env(server.base_url, f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_MAX_DOCUMENT_BYTES=str(700 << 20))
    ran = run_cli("run", str(source), "--model", "openai:scripted", "--format", "json", env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    document_run = str(summary_of(ran)["outcomes"][0]["document_run_id"])
    source.unlink()
    sparse_text(source)  # 600 MB where the document was
    limit = f"{source}: over the 512 MiB reading limit (EXTRACT_READ_MEMORY)"
    peak = tmp_path / "peak"
    shown = run_cli_measured(peak, "show", document_run, env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"source unreadable: {limit}" in " ".join(shown.stdout.split()), shown.stdout[-3000:]
    assert peak_of(peak) < LIMIT + (64 << 20), f"a process of extract show peaked at {peak_of(peak) >> 20} MiB"
    approved = run_cli_measured(peak, "approve", document_run, "--reviewer", "Kim", env=env, cwd=tmp_path)
    assert approved.returncode != 0 and "Traceback" not in approved.stderr
    assert approved.stderr.splitlines() == [f"error: refused: cannot re-read the source to check it: {limit}; if the file "
                                            "moved, pass --source FILE"]
    assert peak_of(peak) < LIMIT + (64 << 20), f"a process of extract approve peaked at {peak_of(peak) >> 20} MiB"


def run_cli_measured(out: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``extract ARGS`` under ``tests/support/peak.py``, which writes the largest peak of its processes to ``out``."""
    return subprocess.run([sys.executable, str(PEAK), str(out), "--", *extract_command(*args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=600)


def test_split_of_a_hostile_file_is_one_line(tmp_path: Path) -> None:
    """``extract split`` reads its file in a reader of its own, with the same limits: exit 2 and one line."""
    path = sparse_text(tmp_path / "huge.txt")
    env = cli_env("http://127.0.0.1:9", f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_MAX_DOCUMENT_BYTES=str(700 << 20))
    result = run_cli("split", str(path), env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    assert result.stderr == f"error: {path}: over the 512 MiB reading limit (EXTRACT_READ_MEMORY)\n"


def test_validate_against_a_hostile_source_is_one_line(tmp_path: Path) -> None:
    """``extract validate`` reads its source as ``split`` does, in a reader of its own with the reading limits: a
    source over one is exit 2 and one line naming the file and the limit, whatever the candidate, and no process of
    the command passes the memory limit."""
    candidate = ROOT / "samples" / "expected" / "en_purchase_approval.candidate.json"
    env = cli_env("http://127.0.0.1:9", f"sqlite:///{tmp_path}/runs.db", EXTRACT_READ_MEMORY="512M",
                  EXTRACT_MAX_DOCUMENT_BYTES=str(700 << 20))
    peak = tmp_path / "peak"
    for source, says in ((sparse_text(tmp_path / "huge.txt"), "over the 512 MiB reading limit (EXTRACT_READ_MEMORY)"),
                         (long_hwpx(tmp_path / "long.hwpx"),
                          "text over 2,000,000 characters (the reading limit EXTRACT_READ_TEXT); refused")):
        result = run_cli_measured(peak, "validate", str(candidate), "--source", str(source), env=env, cwd=tmp_path)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr[-3000:]
        assert result.stderr == f"error: {source}: {says}\n"
        assert peak_of(peak) < LIMIT + (64 << 20), f"a process of extract validate peaked at {peak_of(peak) >> 20} MiB"


def test_a_queued_batch_with_hostile_files_costs_the_worker_one_document_each(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    """``extract run --queue`` of good files and bombs, read by one ``extract worker`` with 2 readers of 512 MiB: each
    bomb ends INPUT_ERROR in one line naming the file and the limit, every good file is converted, and the worker is
    still there, its process tree within the readers' limits + 300 MB (docs/formats.md#reading-limits). The e-mail,
    which the submitter's own reader takes apart before it is queued, is queued after every other file."""
    folder = tmp_path / "batch"
    good = write_batch(folder, 6)
    hostile = {  # what may end each: the limit the sandbox holds, or a reader's own refusal before it
        many_elements_html(folder / "elements.html"): ("over the 512 MiB reading limit (EXTRACT_READ_MEMORY)",
                                                       "still reading after 20 s (the reading limit EXTRACT_READ_TIMEOUT)"),
        long_hwpx(folder / "long.hwpx"): ("text over 2,000,000 characters (the reading limit EXTRACT_READ_TEXT); refused",),
        shared_string_bomb(folder / "shared_strings.xlsx"): (
            ".xlsx part xl/worksheets/sheet1.xml inflates 237 times (limit 200); refused as a zip bomb",
            "over the 512 MiB reading limit (EXTRACT_READ_MEMORY)"),
        many_attachments(folder / "flood.eml", 40_000): ("e-mail has over 1000 MIME parts (limit 1000); refused",),
    }
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    readers = 2
    with redis_server(tmp_path) as broker:
        db = f"sqlite:///{tmp_path}/runs.db"
        env = cli_env(server.base_url, db, EXTRACT_BROKER_URL=broker, EXTRACT_MODEL="openai:scripted-model",
                      OPENAI_API_KEY="test-key", EXTRACT_READ_MEMORY="512M", EXTRACT_READ_TIMEOUT="20",
                      EXTRACT_READERS=str(readers))
        workers = Processes(env, tmp_path)
        try:
            peak = tmp_path / "peak"
            worker = workers.start("worker", "--concurrency", "4", peak=peak)
            tree = TreePeak(worker.pid).start()
            result = run_cli("run", str(folder), "--queue", broker, "--format", "json", env=env, cwd=tmp_path,
                             timeout=300)
            assert worker.poll() is None, workers.log_of(worker)[-3000:]
            (pid,) = [pid for (pid,) in rows(db, "SELECT pid FROM runs WHERE command = 'extract worker'")]
            assert alive(pid)  # the one worker that started converted the whole batch, and is still there
            queued = dict(rows(db, "SELECT uploads.name, tasks.enqueued_at FROM tasks JOIN uploads ON "
                                   "uploads.id = tasks.upload_id"))
        finally:
            workers.stop_all()
        tree_peak = tree.stop()
    assert worker.returncode == 0 and "Traceback" not in workers.log_of(worker), workers.log_of(worker)[-3000:]
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    outcomes = {Path(o["path"]).name: o for o in summary_of(result)["outcomes"]}
    assert sorted(outcomes) == sorted([path.name for path in good] + [path.name for path in hostile])
    assert {path.name: outcomes[path.name]["state"] for path in good} == {path.name: "READY_FOR_REVIEW" for path in good}
    for path, endings in hostile.items():
        outcome = outcomes[path.name]
        assert outcome["state"] == "INPUT_ERROR" and outcome["cause"] in [f"{path}: {says}" for says in endings], outcome
    mail = str(folder / "flood.eml")  # taken apart by the submitter's reader, up to the deadline, after the rest
    assert max(at for name, at in queued.items() if name != mail) < queued[mail], queued
    assert peak_of(peak) < LIMIT + (64 << 20), f"a process of the worker peaked at {peak_of(peak) >> 20} MiB"
    assert tree_peak <= readers * LIMIT + (300 << 20), f"the worker's process tree peaked at {tree_peak >> 20} MiB"


def test_e_mail_bombs_before_a_queued_batchs_e_mails_hold_none_of_them(
        llm_server: Callable[..., ScriptedLLMServer], tmp_path: Path) -> None:
    """``extract run --queue`` takes a batch's e-mails apart in its CPU pool's readers, several at once: two e-mails
    whose attachments' names take the parser minutes, first in the folder, hold their readers until the deadline,
    and the good e-mails after them are taken apart meanwhile (past the soft deadline the bombs' readers let two
    more start) and queued before either bomb ends (with one reader after another they waited for both). Each bomb
    ends INPUT_ERROR in one line naming the file and the limit its reader passed, and no worker reads it again;
    nor one whose attachment's transfer encoding the parser recursed on (it ended the command with a traceback).
    Every good e-mail and its attachment is converted."""
    folder = tmp_path / "batch"
    good = write_mail_batch(folder, 6)
    slow = [many_parameters(folder / "00000_bomb1.eml"), many_parameters(folder / "00000_bomb2.eml", 19)]
    recursing = attachment_header(folder / "00000_bomb3.eml", deep_comment(b"Content-Transfer-Encoding", b"base64"))
    server = llm_server(lambda request, number: Reply(answer_for(request)))
    with redis_server(tmp_path) as broker:
        db = f"sqlite:///{tmp_path}/runs.db"
        env = cli_env(server.base_url, db, EXTRACT_BROKER_URL=broker, EXTRACT_MODEL="openai:scripted-model",
                      OPENAI_API_KEY="test-key", EXTRACT_READ_MEMORY="512M", EXTRACT_READ_TIMEOUT="20",
                      EXTRACT_READ_SOFT_TIMEOUT="1", EXTRACT_READERS="2")
        workers = Processes(env, tmp_path)
        try:
            worker = workers.start("worker", "--concurrency", "4")
            result = run_cli("run", str(folder), "--queue", broker, "--format", "json", env=env, cwd=tmp_path,
                             timeout=300)
            assert worker.poll() is None, workers.log_of(worker)[-3000:]
            queued = dict(rows(db, "SELECT uploads.name, tasks.enqueued_at FROM tasks JOIN uploads ON "
                                   "uploads.id = tasks.upload_id"))
            unread = rows(db, "SELECT uploads.name, tasks.deliveries, tasks.document_run_id FROM tasks JOIN uploads "
                              "ON uploads.id = tasks.upload_id WHERE tasks.outcome = 'INPUT_ERROR'")
        finally:
            workers.stop_all()
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "Traceback" not in workers.log_of(worker)
    outcomes = {o["path"]: o for o in summary_of(result)["outcomes"]}
    attachments = [f"{mail}#attachment1/{mail.stem.split('_', 1)[1]}.txt" for mail in good]
    assert sorted(outcomes) == sorted(map(str, [*good, *attachments, *slow, recursing]))
    assert {path: outcomes[path]["state"] for path in map(str, good)} == dict.fromkeys(map(str, good), "MANUAL_REVIEW")
    assert {path: outcomes[path]["state"] for path in attachments} == dict.fromkeys(attachments, "READY_FOR_REVIEW")
    assert max(queued[name] for name in map(str, [*good, *attachments])) < min(queued[str(bomb)] for bomb in slow), (
        queued)
    for bomb in slow:
        assert outcomes[str(bomb)]["state"] == "INPUT_ERROR"
        assert outcomes[str(bomb)]["cause"] in [f"{bomb}: {says}" for says in (
            "still reading after 20 s (the reading limit EXTRACT_READ_TIMEOUT)",
            "over the 512 MiB reading limit (EXTRACT_READ_MEMORY)")], outcomes[str(bomb)]
    assert outcomes[str(recursing)]["state"] == "INPUT_ERROR"
    assert outcomes[str(recursing)]["cause"].startswith(f"{recursing}: not a valid e-mail (RecursionError: ")
    assert sorted(unread) == [(str(bomb), 0, None) for bomb in [*slow, recursing]]  # no worker got them
