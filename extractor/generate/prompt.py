"""Versioned prompt templates (a contract's prompt folder, ``prompts/<contract>/<version>/`` for the
built-ins) rendered into a ``GenerationRequest``.

Templates use ``string.Template`` (``$name``) so JSON braces in them need no escaping. The prompt version
and the request fingerprint are recorded with every attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from string import Template
from types import MappingProxyType
from typing import Any

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
    folders = [root / version for root in (contract.prompts, contract.prompt_fallback) if root is not None]
    texts: dict[str, Template] = {}
    for part in PARTS:
        found = next((folder / f"{part}.txt" for folder in folders if (folder / f"{part}.txt").is_file()), None)
        if found is None:
            roots = [root for root in (contract.prompts, contract.prompt_fallback) if root is not None]
            known = sorted({p.name for root in roots for p in root.glob("v*")}) or ["none"]
            raise FileNotFoundError(f"no prompt {contract.name}/{version} (have: {', '.join(known)})")
        texts[part] = Template(found.read_text(encoding="utf-8"))
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
    fixed, system, shared = _fixed(prompt, contract)
    sentences = sentence_lines(document) if lines is None else lines
    user = prompt.user.substitute(**fixed, sentences=sentences)
    return GenerationRequest(
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        schema=contract.schema,
        schema_name=f"{contract.name}_v{contract.version}",
        temperature=temperature,
        max_tokens=max_tokens,
        shared=shared,
        schema_at=_schema_at(prompt, fixed, sentences, system, user),
    )


def _schema_at(prompt: PromptTemplate, fixed: Mapping[str, str], sentences: str, system: str,
               user: str) -> tuple[int, int, int] | None:
    """Where the template put the schema's text (message index, start, end): the place ``$schema`` takes, found by
    filling it with a marker. None when neither message shows it (or shows it twice)."""
    marker = "\x00"
    schema = fixed["schema"]
    for index, (template, text) in enumerate(((prompt.system, system), (prompt.user, user))):
        if "schema" not in template.get_identifiers():
            continue
        marked = template.safe_substitute(**{**fixed, "schema": marker, "sentences": sentences})
        if marked.count(marker) != 1:
            return None
        start = marked.index(marker)
        if text[start:start + len(schema)] == schema:
            return index, start, start + len(schema)
    return None


@lru_cache(maxsize=16)
def _fixed(prompt: PromptTemplate, contract: Contract) -> tuple[Mapping[str, str], str, tuple[str, ...]]:
    """What every first request of one prompt and contract repeats: the values filled in for everything but the
    sentences, the system message, and the shared texts. Built once, not per document (the field guide walks the
    whole schema)."""
    fixed = MappingProxyType({"contract_id": contract.id, "schema": contract.schema_text,
                              "fields": field_guide(contract.record_schema)})
    system = prompt.system.substitute(**fixed)
    return fixed, system, (system, *fixed_pieces(prompt.user, **fixed))


def fixed_pieces(template: Template, **fixed: str) -> tuple[str, ...]:
    """The texts of ``template`` (with ``fixed`` filled in) between the placeholders left open: the parts of a
    message that are the same for every document (``GenerationRequest.shared``)."""
    cut = "\x00"  # no template or fixed value contains NUL
    text = template.substitute(**fixed, **{name: cut for name in template.get_identifiers() if name not in fixed})
    return tuple(piece for piece in text.split(cut) if piece)


def field_guide(schema: dict[str, Any]) -> str:
    """The record's fields as the prompt lists them: path, type, whether it may be null, description.

    The generic templates show this next to the schema: models follow a described field list better than a
    schema alone, and a nullable field is marked as the one to leave null (with a question) when unstated.
    """
    from extractor.rules.generic import variants

    lines: list[str] = []

    def walk(node: dict[str, Any], path: str, depth: int) -> None:
        options, nullable = variants(schema, node)
        kinds = [str(option.get("type", "any")) for option in options]
        described = next((o.get("description") for o in [node, *options] if o.get("description")), "")
        facts = []
        for option in options:
            facts += [f"one of {', '.join(map(str, option['enum']))}"] if "enum" in option else []
            facts += [f"pattern {option['pattern']}"] if "pattern" in option else []
            facts += [f"{key} {option[key]}" for key in ("minimum", "maximum", "format") if key in option]
        if path:
            kind = " or ".join(kinds) + (" or null: null when the source does not state it, plus a missingFields "
                                         "question" if nullable else "")
            detail = "; ".join(facts)
            lines.append(f"{'  ' * depth}- {path} ({kind}{'; ' + detail if detail else ''})"
                         + (f": {described}" if described else ""))
        for option in options:
            if option.get("type") == "object":
                for name, child in option.get("properties", {}).items():
                    walk(child, f"{path}.{name}" if path else name, depth + (1 if path else 0))
            elif option.get("type") == "array":
                items = option.get("items", {})
                item_options, _ = variants(schema, items)
                if any(o.get("type") == "object" for o in item_options):
                    walk(items, f"{path}[]", depth + 1)

    walk(schema, "", 0)
    return "\n".join(lines)
