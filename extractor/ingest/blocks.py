"""A source given as ``{"blocks": [{"id": "s1", "text": "..."}]}`` (the ``rag_answer`` contract's source format).

Its units are fixed by the file, not by a segmenter: each block is one unit with its own id, so a
``rag_answer`` citation's ``source_id`` names exactly what the author of the source named.
"""

from __future__ import annotations

import json

from extractor.document import Block, BlockKind, Sentence
from extractor.errors import InputError
from extractor.ingest.decode import decode
from extractor.ingest.text import join_blocks

SEGMENTER_ID = "source-blocks/1"


def parse(data: bytes, path: str) -> tuple[str, list[Block], list[Sentence]]:
    """Canonical text (blocks one per line), blocks, and one unit per block carrying the block's id."""
    text, _ = decode(data, path)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise InputError(path, f"not a JSON blocks source ({error})") from None
    blocks = value.get("blocks") if isinstance(value, dict) else None
    if not isinstance(blocks, list) or not all(
        isinstance(b, dict) and isinstance(b.get("id"), str) and isinstance(b.get("text"), str) for b in blocks
    ):
        raise InputError(path, 'a .json source must be {"blocks": [{"id": "...", "text": "..."}, ...]}')
    ids = [b["id"] for b in blocks if b["text"].strip()]
    if len(set(ids)) != len(ids):
        raise InputError(path, "block ids must be unique")
    canonical, parsed = join_blocks((BlockKind.PARAGRAPH, b["text"]) for b in blocks)
    units = [Sentence(block_id, canonical[b.start:b.end], b.start, b.end, b.index) for block_id, b in zip(ids, parsed)]
    return canonical, parsed, units
