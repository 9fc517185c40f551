"""What a contract tells the long-document merge (``extractor.windows.merge``): how to recognise one item
found by two windows, which ids other fields refer to, which lists are sequences, which fields are scalars.

A contract without a ``MergeSpec`` is never split into windows. A contract written as files (the built-in
``work_procedure`` included) gets its spec from its declared checks (``extractor.contracts.files``).
"""

from __future__ import annotations

from dataclasses import dataclass

EVIDENCE_KEY = "@evidence"
"""Identity key: the item's evidence, located in the source (two windows quoting one span found one item)."""


@dataclass(frozen=True)
class ListMerge:
    """One top-level list of the candidate and how its items are identified across windows.

    ``identity`` keys, any of which matching makes two items one: ``"name"`` a field compared exactly,
    ``"~name"`` a field compared after NFC, case folding and whitespace collapse, ``"~"`` the item itself
    (a list of strings) normalised so, ``EVIDENCE_KEY`` the start of its evidence in the source.
    ``id_field``: the items' ids, which other fields refer to; the merge reconciles them. ``order_field``:
    a 1-based position, renumbered in source order after the merge.
    """

    path: str
    identity: tuple[str, ...]
    id_field: str | None = None
    order_field: str | None = None


@dataclass(frozen=True)
class Reference:
    """``<path>[*].<field>`` holds an id of an item of list ``target`` (rewritten when ids are reconciled)."""

    path: str
    field: str
    target: str


@dataclass(frozen=True)
class MergeSpec:
    """The merge's whole view of a contract (lists in the order they are merged: targets of references first)."""

    lists: tuple[ListMerge, ...]
    scalars: tuple[str, ...]
    references: tuple[Reference, ...] = ()
    evidence: str = "evidence"  # entries {fieldPath, sourceExcerpt}
    missing: str = "missingFields"  # entries {fieldPath, question}
    coverage: str = "sentenceCoverage"  # entries {sentenceId, status, fieldPaths, reason}

