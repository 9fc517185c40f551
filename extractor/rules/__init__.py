"""The rule catalogue: every rule is one function in this package with its card beside it.

A card answers four questions (docs/design.md#rules: what is read, which normalisation, what passes, where a
failure is reported) plus whether a judge is still needed after a failure. Rule functions only say where
and why they fire (``Hit``); the registry stamps the stable ``rule_id`` and severity from the card.

Modules: ``structure`` (every contract, runs first); ``guards`` (every contract: the critical checks on any
response, parsed or not, and the extent warnings after the content rules); ``generic`` (the rules every
contract written as files gets: evidence, coverage, completeness) and ``declared`` (its ``checks.toml``
checks: references, order, values), with ``lookup`` (reference data); ``rag_answer`` (a contract whose rules
are code). Content rules run in stage order: references -> order -> values -> evidence -> coverage ->
completeness. A contract's ``EvidenceModel`` is the context its rules share and what the report, the repair
and the judge read from a checked candidate. A contract (``extractor.contracts``) holds its model and its
rules; nothing here imports a contract, so imports go one way (docs/design.md#data-flow): the rule modules
import this package for ``rule`` and ``Hit``, ``catalogue`` imports the rule modules, and the contracts import
both (``extractor.contracts.catalogue`` lists the cards of each contract's rules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, asdict, dataclass
from typing import Any, Generic, TypeVar

from extractor.document import Document
from extractor.evidence.report import EvidenceSpan, FieldState, Finding, JudgeLink, Report, SentenceState
from extractor.evidence.source import Source
from extractor.vocab import Severity

STAGES = ("structure", "critical", "references", "order", "values", "evidence", "coverage", "completeness")
C = TypeVar("C")


@dataclass(frozen=True)
class Card:
    """Documentation of one rule, printed by ``extract rules RULE_ID``: the rule id, then by name its contract
    (``*``: every contract, or a generic rule before a contract takes a copy), its stage and the four answers."""

    rule_id: str
    _: KW_ONLY
    contract: str = "*"
    stage: str
    severity: Severity = Severity.ERROR
    fires_when: str
    inputs: str
    normalisation: str
    passes: str
    location: str
    judge_needed_after_failure: str = "no"

    def to_json(self) -> dict[str, str]:
        return {key: (value.value if isinstance(value, Severity) else value) for key, value in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class Hit:
    """Where a rule fired and a message a person can act on; ``hint`` carries machine-usable help.

    ``severity`` overrides the card's only where the card says so (a judge band below an error threshold).
    """

    location: str
    message: str
    hint: dict[str, Any] | None = None
    severity: Severity | None = None


@dataclass(frozen=True)
class Rule(Generic[C]):
    card: Card
    check: Callable[[C], Iterable[Hit]]

    def run(self, context: C) -> Iterator[Finding]:
        for hit in self.check(context):
            yield Finding(self.card.rule_id, hit.severity or self.card.severity, hit.location, hit.message, hit.hint)


States = tuple[dict[str, FieldState], list[SentenceState], list[EvidenceSpan]]


@dataclass(frozen=True)
class EvidenceModel(Generic[C]):
    """How one contract's candidates are read against their source, and what each stage takes from them.

    ``context(candidate, source, settings, schema)`` builds what the contract's rules share (built once per
    candidate); ``states`` derives field states, sentence states and evidence spans for the report;
    ``links`` are the value-excerpt pairs a judge checks; ``unaccounted`` are the sentence ids the repair
    request lists as not accounted for; ``has_coverage`` says whether the contract maps every sentence.
    """

    context: Callable[[Any, Source, Mapping[str, Any], Mapping[str, Any]], C]
    states: Callable[[C, list[Finding]], States]
    links: Callable[[Report], list[JudgeLink]]
    unaccounted: Callable[[Report, Document], set[str]]
    has_coverage: bool


_REGISTRY: dict[str, Rule[Any]] = {}


def rule(card: Card) -> Callable[[Callable[[C], Iterable[Hit]]], Callable[[C], Iterable[Hit]]]:
    """Register a rule function under its card; registration order within a stage is run order."""
    if card.stage not in STAGES:
        raise ValueError(f"{card.rule_id}: unknown stage {card.stage!r}")
    rule_id = card.rule_id

    def register(check: Callable[[C], Iterable[Hit]]) -> Callable[[C], Iterable[Hit]]:
        if rule_id in _REGISTRY:
            raise ValueError(f"rule {rule_id} registered twice")
        _REGISTRY[rule_id] = Rule(card, check)
        return check

    return register


def get(rule_id: str) -> Rule[Any]:
    """The rule registered under ``rule_id``: its module has been imported (``extractor.rules.catalogue`` imports
    every rule module; a contract imports the modules of its rules)."""
    return _REGISTRY[rule_id]


def registered() -> list[Rule[Any]]:
    """Every rule registered so far, in registration order."""
    return list(_REGISTRY.values())
