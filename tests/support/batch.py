"""Batches of small, varied documents for load, fault and crash tests, and the answers that pass for them.

Each document is one of the three samples (English, Korean, Russian) with a numbered title line; the
samples' candidates mark the title EXCLUDED, so every copy passes with its sample's candidate while its
content hash (and so its identity in the run log) is its own. ``answer_for`` picks that candidate from
a request's text, so a scripted server can answer any document of a batch correctly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = (  # file, candidate, a phrase only that sample's sentences contain
    ("en_purchase_approval.md", "en_purchase_approval", "Purchase Request"),
    ("ko_work_request_review.txt", "ko_work_request_review", "작업 요청"),
    ("ru_vacation_approval.txt", "ru_vacation_approval", "отпуска"),
)
CANDIDATES = {
    marker: (ROOT / "samples/expected" / f"{stem}.candidate.json").read_text(encoding="utf-8")
    for _, stem, marker in SAMPLES
}


def write_batch(folder: Path, count: int) -> list[Path]:
    """``count`` documents ``00000_<sample>`` ... in ``folder``, cycling through the samples."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        name, _, _ = SAMPLES[number % len(SAMPLES)]
        lines = (ROOT / "samples" / name).read_text(encoding="utf-8").split("\n")
        lines[0] = f"{lines[0]} {number + 1}"
        path = folder / f"{number:05d}_{name}"
        path.write_text("\n".join(lines), encoding="utf-8")
        paths.append(path)
    return paths


def write_mail_batch(folder: Path, count: int) -> list[Path]:
    """``count`` e-mails ``00000_<sample>.eml`` ... in ``folder``, cycling through the samples: each one's body is its
    sample with a numbered title line, and its one attachment the same sample numbered ``count`` higher
    (``<sample>.txt``), so every e-mail is two documents that pass with their sample's candidate."""
    from email.message import EmailMessage

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        name, _, _ = SAMPLES[number % len(SAMPLES)]
        lines = (ROOT / "samples" / name).read_text(encoding="utf-8").split("\n")
        message = EmailMessage()
        message["Subject"] = f"Request {number + 1}"
        message["From"] = "clerk@example.com"
        message["To"] = "manager@example.com"
        message.set_content("\n".join([f"{lines[0]} {number + 1}", *lines[1:]]))
        attached = "\n".join([f"{lines[0]} {number + 1 + count}", *lines[1:]]).encode()
        message.add_attachment(attached, maintype="text", subtype="plain", filename=f"{Path(name).stem}.txt")
        path = folder / f"{number:05d}_{Path(name).stem}.eml"
        path.write_bytes(message.as_bytes())
        paths.append(path)
    return paths


def request_text(request: Mapping[str, Any] | None) -> str:
    """The last message of a chat request (the document's sentences, or the repair instructions)."""
    messages = (request or {}).get("messages") or [{}]
    content = messages[-1].get("content")
    return content if isinstance(content, str) else ""


def answer_for(request: Mapping[str, Any] | None) -> str:
    """The sample candidate that passes for the document in this request (English if none matches)."""
    messages = (request or {}).get("messages") or []
    text = " ".join(m.get("content") or "" for m in messages if isinstance(m, dict))
    return next((candidate for marker, candidate in CANDIDATES.items() if marker in text), CANDIDATES["Purchase Request"])


def extract_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "extractor", *args]


def cli_env(base_url: str, db_url: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_API_KEY", "EXTRACT_MODEL")}
    return env | {"OPENAI_BASE_URL": base_url, "EXTRACT_DATABASE_URL": db_url} | extra


def run_cli(*args: str, env: Mapping[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(extract_command(*args), capture_output=True, text=True, env=dict(env), cwd=cwd,
                          timeout=timeout)


def summary_of(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON summary ``extract run --format json`` prints (the last JSON document on stdout)."""
    out = result.stdout
    return json.loads(out[out.index("{"):]) if "{" in out else {}


def scalar(db_url: str, sql: str, **params: Any) -> Any:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(sql), params).scalar()
    finally:
        engine.dispose()


def rows(db_url: str, sql: str, **params: Any) -> list[Any]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text(sql), params))
    finally:
        engine.dispose()


def final_runs_per_document(db_url: str) -> dict[int, int]:
    """For every document that has a document run: how many of its runs ended in a final state."""
    found = rows(db_url, "SELECT document_id, SUM(CASE WHEN state IN ('READY_FOR_REVIEW', 'MANUAL_REVIEW', 'ERROR') "
                         "THEN 1 ELSE 0 END) FROM document_runs GROUP BY document_id")
    return {document_id: int(count) for document_id, count in found}
