"""What an engine runs with: the run's options (``extractor.options``), the contract they name as loaded, and what
this process brings (its share of concurrency, the command recorded, the model server's URL as resolved); and what
each batch brings to its documents (``Scope``) when one engine serves several (a worker, docs/queue-and-api.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from extractor.contracts import Contract
from extractor.options import RunOptions
from extractor.vocab import DEFAULT_CONCURRENCY, DocumentState

if TYPE_CHECKING:
    from extractor.engine.budget import Budget


@dataclass
class RunSettings:
    """The options of a run, its contract and this process's part in it."""

    contract: Contract
    options: RunOptions = field(default_factory=lambda: RunOptions())
    concurrency: int = DEFAULT_CONCURRENCY
    command: str = ""
    base_url: str | None = None
    """The model server's URL as this process resolved it (recorded with the run)."""
    temperature: float = 0.0


@dataclass(frozen=True)
class Scope:
    """What one batch brings to each of its documents, whichever engine converts them: their tags, the earlier
    results it takes over (``force``, ``retry_errors``) and the budget its calls spend from."""

    tags: tuple[str, ...] = ()
    force: bool = False
    retry_states: tuple[DocumentState, ...] = ()
    money: Budget | None = None

    @classmethod
    def of(cls, options: RunOptions, money: Budget | None = None) -> Scope:
        return cls(options.tags, options.force, options.retry_states, money)
