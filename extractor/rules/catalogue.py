"""Every rule module imported, so every rule is registered, and the lookups that need all of them.

Apart from the package's ``__init__``, which the rule modules import for ``rule`` and ``Hit``: it cannot import
them back without an import cycle (docs/design.md#data-flow).
"""

from __future__ import annotations

from typing import Any

from extractor.rules import STAGES, Card, Rule, get, guards, merge, rag_answer, registered, structure

__all__ = ["content_rules", "lookup", "shared_cards"]
MODULES = (guards, merge, rag_answer, structure)
"""Importing them registered their rules (a contract written as files imports ``generic`` and ``declared``)."""


def lookup(rule_id: str) -> Rule[Any]:
    """Any rule of these modules by id; ``KeyError`` when none has it."""
    return get(rule_id)


def content_rules(contract: str) -> list[Rule[Any]]:
    """The rules of a contract whose rules are code that run once structure passed, in stage order."""
    rules = [r for r in registered() if r.card.contract == contract and r.card.stage != "structure"]
    return sorted(rules, key=lambda r: STAGES.index(r.card.stage))


def shared_cards() -> list[Card]:
    """The cards of the rules every contract runs (structure, the critical guards, the extent warnings)."""
    return [r.card for r in registered() if r.card.contract == "*"]
