"""What a run is given: what decides its results (contract, prompt, model settings) and how it is run."""

from __future__ import annotations

from dataclasses import dataclass

from extractor.contracts import Contract
from extractor.vocab import DEFAULT_CONCURRENCY, DEFAULT_PROMPT_VERSION, FINAL_STATES, RETRYABLE_STATES, DocumentState
from extractor.windows.plan import DEFAULT_OVERLAP


@dataclass
class RunSettings:
    """What decides results (contract, prompt, model) plus how the batch is run."""

    contract: Contract
    prompt_version: str = DEFAULT_PROMPT_VERSION
    concurrency: int = DEFAULT_CONCURRENCY
    force: bool = False
    retry_errors: bool = True
    max_tokens: int | None = None
    temperature: float = 0.0
    tags: tuple[str, ...] = ()
    command: str = ""
    base_url: str | None = None
    max_input_tokens: int | None = None  # None: the model's configured limit, else the provider's default
    max_output_tokens: int | None = None
    overlap: int = DEFAULT_OVERLAP  # sentences before a window shown to it as context
    max_cost: float | None = None  # US dollars this run may spend on generation, repair and judge calls (None: no cap)

    @property
    def retry_states(self) -> tuple[DocumentState, ...]:
        """Final states this run takes over instead of skipping (all of them with ``force``)."""
        if self.force:
            return FINAL_STATES
        return RETRYABLE_STATES if self.retry_errors else ()
