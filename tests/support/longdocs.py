"""Long documents built from the samples, and scripted answers built from a window's own sentences.

``long_document`` writes ``count`` sentences of one sample's language, a few to a paragraph, each made unique by
a ``P <copy>`` prefix: an excerpt repeated in every copy would be ambiguous evidence, and the copy number is
a word of its own so the validator's word-start index tells the copies apart. ``window_answer`` reads
a request the way the model would: the sentences after the window's part note (all of them for a document
read in one call) and answers each with a rule quoting it verbatim, so the merged candidate passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.support.batch import ROOT

SAMPLE_FILES = {"en": "en_purchase_approval.md", "ko": "ko_work_request_review.txt", "ru": "ru_vacation_approval.txt"}
_MARKER = re.compile(r"^\s*(?:#+\s*|-\s+|\d+\.\s+)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LINE = re.compile(r"^\[(s\d+)\] (.*)$")
PART_NOTE_START = "(this long document is read in parts"
CONTEXT_NOTE_START = "(context only"

Answer = dict[str, Any]


def sample_sentences(language: str) -> list[str]:
    """The sample's complete sentences (list markers removed; titles, wrapped fragments and abbreviations
    left out), so that a paragraph of them splits back into exactly them."""
    text = (ROOT / "samples" / SAMPLE_FILES[language]).read_text(encoding="utf-8")
    sentences: list[str] = []
    for line in text.splitlines():
        content = _MARKER.sub("", line).strip()
        sentences += [piece for piece in _SENTENCE_END.split(content) if piece[-1:] in (".", "!", "?")
                      and not piece.endswith("e.g.") and piece[:1].isupper() == (language != "ko")
                      and (language != "ko" or piece.endswith("다."))]
    return sentences


PER_PARAGRAPH = {"en": 6, "ko": 6, "ru": 1}
"""Sentences per paragraph: fewer blocks segment faster (pysbd pays per block), but razdel keeps a
``P 12`` prefix with the sentence before it, so Russian gets a paragraph per sentence."""


def long_document(path: Path, language: str, count: int) -> Path:
    """``count`` unique sentences of ``language`` in ``path`` (segmented back into exactly ``count``)."""
    base, per_paragraph = sample_sentences(language), PER_PARAGRAPH[language]
    lines = [f"P {n // len(base) + 1} {base[n % len(base)]}" for n in range(count)]
    paragraphs = [" ".join(lines[n:n + per_paragraph]) for n in range(0, count, per_paragraph)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return path


def own_sentences(request: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``(id, text)`` of the sentences a request asks to account for (after the part note, if there is one)."""
    messages = (request or {}).get("messages") or []
    user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    lines = user.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(PART_NOTE_START)), -1)
    found = []
    for line in lines[start + 1:]:
        match = _LINE.match(line)
        if match:
            found.append((match.group(1), match.group(2)))
    return found


def is_repair(request: Mapping[str, Any] | None) -> bool:
    return len((request or {}).get("messages") or []) > 2


def empty_candidate() -> Answer:
    return {"documentPurpose": None, "participants": [], "processSteps": [], "rules": [], "assignmentRule": None,
            "missingFields": [{"fieldPath": "documentPurpose", "question": "What is the procedure for?"},
                          {"fieldPath": "assignmentRule", "question": "Who assigns the work?"}],
            "evidence": [], "sentenceCoverage": []}


def rules_answer(sentences: list[tuple[str, str]], skip: frozenset[str] = frozenset()) -> Answer:
    """Every sentence a rule quoting it and MAPPED to that rule (those in ``skip`` left out entirely)."""
    answer = empty_candidate()
    for sentence_id, text in sentences:
        if sentence_id in skip:
            continue
        path = f"rules[{len(answer['rules'])}]"
        answer["rules"].append(text)
        answer["evidence"].append({"fieldPath": path, "sourceExcerpt": text})
        answer["sentenceCoverage"].append({"sentenceId": sentence_id, "status": "MAPPED", "fieldPaths": [path]})
    return answer


def window_answer(request: Mapping[str, Any] | None, change: Callable[[list[tuple[str, str]], Answer], None] | None = None
                  ) -> str:
    """The passing answer for the request's own sentences; ``change`` may edit it first."""
    sentences = own_sentences(request)
    answer = rules_answer(sentences)
    if change is not None:
        change(sentences, answer)
    return json.dumps(answer, ensure_ascii=False)
