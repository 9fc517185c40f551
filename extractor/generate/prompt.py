"""Versioned prompt templates (a contract's prompt folder, ``prompts/<contract>/<version>/`` for the
built-ins) rendered into a ``GenerationRequest``.

Templates use ``string.Template`` (``$name``) so JSON braces in them need no escaping. The prompt version
and the request fingerprint are recorded with every attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from string import Template

from extractor.contracts import Contract
from extractor.document import Document, Sentence
from extractor.generate import GenerationRequest
from extractor.vocab import DEFAULT_PROMPT_VERSION

PARTS = ("system", "user", "repair")


@dataclass(frozen=True)
class PromptTemplate:
    contract: str
    version: str
    system: Template
    user: Template
    repair: Template


@cache
def load_prompt(contract: Contract, version: str = DEFAULT_PROMPT_VERSION) -> PromptTemplate:
    """Read one prompt version of a contract (``<contract.prompts>/<version>/``); ``FileNotFoundError`` names
    the folder and the versions that exist."""
    folder = contract.prompts / version
    if not folder.is_dir():
        known = sorted(p.name for p in contract.prompts.glob("v*")) or ["none"]
        raise FileNotFoundError(f"no prompt {contract.name}/{version} (have: {', '.join(known)})")
    texts = {part: Template((folder / f"{part}.txt").read_text(encoding="utf-8")) for part in PARTS}
    return PromptTemplate(contract.name, version, **texts)


def sentence_line(sentence: Sentence) -> str:
    """One sentence as the prompt shows it: ``[id] text``, line breaks inside it shown as spaces."""
    return f"[{sentence.id}] {' '.join(sentence.text.split())}"


def sentence_lines(document: Document) -> str:
    """The document as ``[id] text`` lines."""
    return "\n".join(map(sentence_line, document.sentences))


def render_request(prompt: PromptTemplate, contract: Contract, document: Document, *,
                   temperature: float = 0.0, max_tokens: int | None = None,
                   lines: str | None = None) -> GenerationRequest:
    """The first request for a document: rules, the contract schema, the IDed sentences (``lines``: a window's
    sentences instead of the whole document's, ``extractor.windows.plan.window_lines``)."""
    fixed = {"contract_id": contract.id, "schema": contract.schema_text}
    system = prompt.system.substitute()
    sentences = sentence_lines(document) if lines is None else lines
    return GenerationRequest(
        messages=[{"role": "system", "content": system},
                  {"role": "user", "content": prompt.user.substitute(**fixed, sentences=sentences)}],
        schema=contract.schema,
        schema_name=f"{contract.name}_v{contract.version}",
        temperature=temperature,
        max_tokens=max_tokens,
        shared=(system, *fixed_pieces(prompt.user, **fixed)),
    )


def fixed_pieces(template: Template, **fixed: str) -> tuple[str, ...]:
    """The texts of ``template`` (with ``fixed`` filled in) between the placeholders left open: the parts of a
    message that are the same for every document (``GenerationRequest.shared``)."""
    cut = "\x00"  # no template or fixed value contains NUL
    text = template.substitute(**fixed, **{name: cut for name in template.get_identifiers() if name not in fixed})
    return tuple(piece for piece in text.split(cut) if piece)
