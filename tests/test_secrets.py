"""The API key never reaches the run log, error messages or logs, even when the server hands it back.

``OPENAI_API_KEY`` is a unique marker. The scripted server echoes the request's ``Authorization`` header
(and so the key) into a 500 body, a 401 body and a model answer. After ``extract run`` (with the client
library's debug logging on) and the query commands, the marker must appear nowhere: not in stdout or
stderr, not in any byte of the SQLite files, not in any row of any PostgreSQL table.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, make_url, text

from extractor.vocab import ExitCode
from tests.support.batch import SAMPLES, answer_for, cli_env, extract_command, request_text, write_batch
from tests.support.llm_server import Action, Reply, ScriptedLLMServer, Status, error_body

LANGUAGES = {name[:2]: marker for name, _, marker in SAMPLES}  # en, ko, ru -> a phrase of that document


def test_the_api_key_is_never_recorded_printed_or_logged(llm_server: Callable[..., ScriptedLLMServer],
                                                          tmp_path: Path, db_url: str) -> None:
    key = f"sk-test-{uuid.uuid4().hex}LEAKMARKER"
    marker = key[8:]  # the unique part, whatever a redaction does to the prefix
    write_batch(tmp_path / "docs", 3)  # English, Korean, Russian
    seen: dict[str, int] = {}

    def script(request: dict[str, Any] | None, number: int) -> Action:
        authorization = server.requests[-1].headers.get("authorization", "")  # concurrency 1: this request
        assert marker in authorization  # the key is really sent
        answer = answer_for(request)
        language = next(lang for lang, mark in LANGUAGES.items() if mark in request_text(request) or mark in str(request))
        seen[language] = seen.get(language, 0) + 1
        if language == "en" and seen["en"] == 1:  # a 500 that quotes the request's headers, then success
            return Status(500, error_body(f"upstream failed for request with Authorization: {authorization}",
                                          type_="server_error"))
        if language == "ko":  # a key rejected with the key in the message (HTTP 401 is not retried)
            return Status(401, error_body(f"Incorrect API key provided: {key}. Header was {authorization}"))
        if language == "ru":  # a model (or a proxy) that repeats the key in its answer
            return Reply(f'{{"note": "my key is {key}", "header": "{authorization}"}}')
        return Reply(answer)

    server = llm_server(script)
    env = cli_env(server.base_url, db_url, OPENAI_API_KEY=key, OPENAI_LOG="debug")
    outputs = []
    for args in (("run", str(tmp_path / "docs"), "--model", "openai:scripted", "--concurrency", "1", "--retries", "2",
                  "--timeout", "10"),
                 ("runs",), ("review",), ("show", str(sorted((tmp_path / "docs").iterdir())[0])),
                 ("show", str(sorted((tmp_path / "docs").iterdir())[1]))):
        result = subprocess.run(extract_command(*args), capture_output=True, text=True, env=env, cwd=tmp_path,
                                timeout=300)
        outputs.append((args[0], result))
    run = outputs[0][1]
    assert run.returncode == ExitCode.NOT_EVALUABLE, run.stderr  # one document ended in ERROR (the 401)
    assert "HTTP 401" in run.stdout + run.stderr and "***" in run.stdout + run.stderr  # the cause, redacted
    assert "/chat/completions -> HTTP 200" in run.stderr and "-> HTTP 401" in run.stderr  # calls logged (OPENAI_LOG)
    assert seen == {"en": 2, "ko": 1, "ru": 2}
    for name, result in outputs:
        assert marker not in result.stdout and marker not in result.stderr, name
        if name != "run":  # only the run calls the model
            assert "Traceback" not in result.stderr, (name, result.stderr)
    dump = dump_database(db_url)
    assert "documentPurpose" in dump and "upstream failed" in dump, dump[-3000:]  # the dump sees what was recorded
    assert "my key is ***" in dump  # the answer is kept, with the key replaced
    assert marker not in dump


def dump_database(db_url: str) -> str:
    """Every byte of an SQLite database (main file, WAL, journal), or every row of every table."""
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        path = Path(url.database or "")
        files = [p for p in path.parent.glob(path.name + "*") if p.is_file()]
        assert files and all(p.exists() for p in files)
        return "\n".join(p.read_bytes().decode("latin-1") for p in files)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            tables = inspect(connection).get_table_names()
            assert "attempts" in tables
            return "\n".join(row[0] for table in tables
                             for row in connection.execute(text(f'SELECT t::text FROM "{table}" t')))
    finally:
        engine.dispose()



def test_one_redaction_helper_masks_every_form_a_credential_takes() -> None:
    from extractor.redact import redact_config, redact_text

    cases = {
        "extract run docs --api-key sk-live-abcdefghijkl --max-tokens 800": "extract run docs --api-key *** --max-tokens 800",
        "POST failed: Authorization: Bearer abc.def.ghi (401)": "POST failed: Authorization: Bearer *** (401)",
        "cannot reach postgresql://extract:s3cret@db/extract": "cannot reach postgresql://extract:***@db/extract",
        "the broker at redis://:s3cret@broker:6379/0": "the broker at redis://:***@broker:6379/0",
        "the server said: Incorrect API key sk-proj-0123456789ab": "the server said: Incorrect API key sk-***",
        "--token=abc123 --db-password hunter2 --keyboard us": "--token=*** --db-password *** --keyboard us",
        "no secret here: key points, tokens of thanks": "no secret here: key points, tokens of thanks",
    }
    for given, expected in cases.items():
        assert redact_text(given) == expected
    assert redact_text("echoed MYKEY-1234 twice: MYKEY-1234", secrets=["MYKEY-1234"]) == "echoed *** twice: ***"
    assert redact_text("a b c", secrets=["a"]) == "a b c"  # too short to be a key: ordinary text stays
    assert redact_config({"api_key": "x", "judge": {"openai-token": "y", "url": "http://u:p@h"}, "empty_key": ""}) == {
        "api_key": "***", "judge": {"openai-token": "***", "url": "http://u:***@h"}, "empty_key": ""}
