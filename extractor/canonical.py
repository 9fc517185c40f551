"""Canonical JSON (sorted keys, no spaces, UTF-8 as is) and its sha256: how a value is named by its content.

Fingerprints and configuration hashes are compared across runs and machines, so every one of them must encode
the same way; this is the one encoding (a change here changes every stored hash).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
"""What ``json.dumps`` with these arguments builds anew on every call (a few microseconds, paid per value by
``extract doctor`` reading back thousands of requests)."""


def canonical_json(value: Any) -> str:
    return _ENCODER.encode(value)


def text_sha256(text: str) -> str:
    """sha256 of ``text`` as UTF-8, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_sha256(value: Any) -> str:
    """sha256 of ``value``'s canonical JSON, in hex."""
    return text_sha256(canonical_json(value))
