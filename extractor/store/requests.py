"""Requests stored once per shape: what every document of a run repeats is a content-addressed part.

The system prompt, the template text and the schema of a run's requests are the same for every document;
only the document's sentences (and, in a repair, the first answer and the findings) are its own. A request
is split into a *template* (its JSON with each message content cut into shared texts and holes) and the
attempt's *own* texts, one per hole, in order. The template is stored once in ``request_parts`` under the
sha256 of its text; the attempt keeps the own texts. Joining them gives back exactly
``GenerationRequest.to_json()``, key order included (``assemble``).

Which texts are shared is said by the prompt renderer (``GenerationRequest.shared``); the cut itself never
loses a byte, so a wrong mark only costs space.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from extractor.canonical import canonical_json, text_sha256
from extractor.errors import StoreError

if TYPE_CHECKING:
    from extractor.generate import GenerationRequest

T = TypeVar("T")

Segments = list[str | None]
"""A message content as stored in a template: shared texts, and ``None`` for each of the attempt's own texts."""


@dataclass(frozen=True)
class StoredRequest:
    """What a request becomes in the run log: ``part`` (sha256 and template text, or None) and the attempt's
    own value for the ``request`` column (its own texts, or the whole request when it was not split)."""

    part: tuple[str, str] | None
    own: Any


def split(request: GenerationRequest) -> StoredRequest:
    """The template and own texts of ``request``; unsplit (whole, inline) when it has no shared text."""
    whole = request.to_json()
    pieces = sorted({piece for piece in request.shared if piece}, key=len, reverse=True)
    messages = whole.get("messages")
    if not pieces or not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        return StoredRequest(None, whole)
    own: list[str] = []
    template = {**whole, "messages": [{**message, "content": _cut(message["content"], pieces, own)}
                                      for message in messages]}
    text = json.dumps(template, ensure_ascii=False, separators=(",", ":"))
    if "\x00" in text:  # a text column cannot hold NUL on PostgreSQL: keep such a request whole
        return StoredRequest(None, whole)
    return StoredRequest((text_sha256(text), text), own)


def _cut(text: str, pieces: Sequence[str], own: list[str]) -> Segments:
    """``text`` as shared pieces (earliest first, the longest where two start together) and holes."""
    segments: Segments = []
    position = 0
    while True:
        found = [(start, -len(piece), piece) for piece in pieces if (start := text.find(piece, position)) >= 0]
        if not found:
            break
        start, _, piece = min(found)
        if start > position:
            own.append(text[position:start])
            segments.append(None)
        segments.append(piece)
        position = start + len(piece)
    if position < len(text):
        own.append(text[position:])
        segments.append(None)
    return segments


@lru_cache(maxsize=64)
def template(text: str) -> dict[str, Any]:
    """A request part's template, parsed once per process (a run has a handful); never mutated."""
    parsed = json.loads(text)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("messages"), list):
        raise StoreError("a request part is not a request template")
    return parsed


def assemble(template_text: str | None, own: Any, where: str) -> dict[str, Any]:
    """The request exactly as ``GenerationRequest.to_json()`` gave it; ``StoreError`` (naming ``where``) if the
    stored pieces do not fit together."""
    if template_text is None:
        if not isinstance(own, dict):
            raise StoreError(f"{where}: its request is neither stored whole nor joined to a request part")
        return own
    shape, own = _stored(template, template_text, own, where)
    texts: Iterator[str] = iter(own)
    try:
        messages = [{**message, "content": "".join(next(texts) if piece is None else piece
                                                   for piece in message["content"])}
                    for message in shape["messages"]]
    except StopIteration:
        raise StoreError(f"{where}: fewer own request texts than its request part has holes") from None
    if next(texts, None) is not None:
        raise StoreError(f"{where}: more own request texts than its request part has holes")
    return {**shape, "messages": messages}


def _stored(read: Callable[[str], T], template_text: str, own: Any, where: str) -> tuple[T, list[Any]]:
    """The request part as ``read`` makes it, and the attempt's own texts; ``StoreError`` naming ``where`` when
    either cannot be read."""
    try:
        part = read(template_text)
    except (ValueError, StoreError) as error:
        raise StoreError(f"{where}: its request part cannot be read ({error})") from None
    if not isinstance(own, list):
        raise StoreError(f"{where}: its own request texts are not a list")
    return part, own


_SENT = ("messages", "schema", "schema_name", "temperature", "max_tokens")
"""The fields of a stored request a ``GenerationRequest`` is made of (with ``schema_at`` when it has one)."""


def fingerprint(template_text: str | None, own: Any, where: str) -> str:
    """``GenerationRequest.fingerprint`` of a stored request (the check that it is what was sent); ``StoreError``
    as ``assemble`` when the pieces do not fit, ``KeyError``/``TypeError``/``ValueError`` when they are no request.

    A fingerprint is the sha256 of the request's canonical JSON, and a JSON string escapes character by character:
    so the template's text around the holes is encoded and hashed once (``_canonical``), and each request only
    adds its own escaped texts to a copy of that hash, instead of encoding and hashing all of it again.
    """
    if template_text is None:
        return _whole_fingerprint(assemble(None, own, where))
    canonical, own = _stored(_canonical, template_text, own, where)
    if len(own) != len(canonical.after):
        raise StoreError(f"{where}: {'fewer' if len(own) < len(canonical.after) else 'more'} own request texts than "
                         "its request part has holes")
    digest = canonical.head.copy()
    for text, literal in zip(own, canonical.after):
        if not isinstance(text, str):
            raise TypeError(f"an own request text is {type(text).__name__}, not text")
        digest.update(canonical_json(text)[1:-1].encode("utf-8"))
        digest.update(literal)
    return digest.hexdigest()


def _whole_fingerprint(request: dict[str, Any]) -> str:
    from extractor.generate import GenerationRequest  # not for read-only commands (docs/design.md#data-flow)

    schema_at = request.get("schema_at")
    return GenerationRequest(**{key: request[key] for key in _SENT},
                             schema_at=tuple(schema_at) if schema_at else None).fingerprint



@dataclass(frozen=True)
class _Canonical:
    """A template's canonical request JSON: the sha256 of the text before its first hole, and the UTF-8 text
    after each hole up to the next."""

    head: hashlib._Hash  # copied for each request
    after: tuple[bytes, ...]


@lru_cache(maxsize=64)
def _canonical(template_text: str) -> _Canonical:
    """What ``_whole_fingerprint`` encodes for every request of this template, cut at its holes: the fields a
    ``GenerationRequest`` keeps, keys sorted, each message's content as its escaped shared texts and holes."""
    shape = template(template_text)
    schema_at = shape.get("schema_at")
    request = {key: shape[key] for key in _SENT}
    if schema_at:
        request["schema_at"] = list(schema_at)
    pieces: list[str | None] = []
    for number, (key, value) in enumerate(sorted(request.items())):
        pieces.append(("," if number else "{") + canonical_json(key) + ":")
        if key != "messages":
            pieces.append(canonical_json(value))
            continue
        pieces.append("[")
        for index, message in enumerate(value):
            if not isinstance(message, dict) or "content" not in message:
                raise TypeError(f"message {index} of the request part is not a message with a content")
            pieces.append("," if index else "")
            for field, content in sorted(message.items()):
                pieces.append(("," if field != min(message) else "{") + canonical_json(field) + ":")
                if field == "content":
                    pieces.extend(['"', *(None if piece is None else canonical_json(piece)[1:-1] for piece in content),
                                   '"'])
                else:
                    pieces.append(canonical_json(content))
            pieces.append("}")
        pieces.append("]")
    pieces.append("}")
    literals: list[bytes] = []  # the text between holes: one more than there are holes
    text: list[str] = []
    for piece in pieces:
        if piece is None:
            literals.append("".join(text).encode("utf-8"))
            text = []
        else:
            text.append(piece)
    literals.append("".join(text).encode("utf-8"))
    return _Canonical(hashlib.sha256(literals[0]), tuple(literals[1:]))
