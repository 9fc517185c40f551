"""What a batch is converted with, as stored on the batch (JSON) and rebuilt by every worker.

Secrets never travel: an API key comes from the worker's own environment (``OPENAI_API_KEY``), and the base
URL too unless the submitter gave one explicitly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from extractor.engine import AdaptiveLimit, RunSettings
from extractor.generate import Provider
from extractor.providers import ProviderSettings, ResponseFormat, from_string
from extractor.vocab import DEFAULT_CONTRACT, DEFAULT_PROMPT_VERSION


@dataclass(frozen=True)
class BatchSettings:
    """The options of ``extract run`` that travel with a queued batch."""

    model: str = "local"
    contract: str = DEFAULT_CONTRACT
    prompt_version: str = DEFAULT_PROMPT_VERSION
    base_url: str | None = None
    max_tokens: int | None = None
    force: bool = False
    retry_errors: bool = True
    tags: tuple[str, ...] = ()
    timeout: float = 120.0
    retries: int = 3
    retry_budget: float = 300.0
    response_format: str = ResponseFormat.auto.value

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"tags": list(self.tags)}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BatchSettings:
        """Settings as stored; keys this version does not know are refused rather than silently dropped."""
        known = set(cls.__dataclass_fields__)
        unknown = set(value) - known
        if unknown:
            raise ValueError(f"batch settings with unknown keys {sorted(unknown)}: a newer extractor submitted them")
        return cls(**(value | {"tags": tuple(value.get("tags", ()))}))

    def key(self) -> tuple[Any, ...]:
        """What makes two batches share one engine (and so one worker run) in a worker."""
        return tuple(sorted((name, str(value)) for name, value in asdict(self).items()))

    def run_settings(self, concurrency: int, command: str) -> RunSettings:
        from extractor.contracts import get_contract

        return RunSettings(contract=get_contract(self.contract), prompt_version=self.prompt_version,
                           concurrency=concurrency, force=self.force, retry_errors=self.retry_errors,
                           max_tokens=self.max_tokens, tags=self.tags, command=command, base_url=self.base_url)

    def provider(self, limit: AdaptiveLimit) -> Provider:
        """The model client, reporting 429s and timeouts to ``limit``."""
        call_settings = ProviderSettings(timeout_s=self.timeout, max_transport_retries=self.retries,
                                         retry_budget_s=self.retry_budget,
                                         response_format=ResponseFormat(self.response_format),
                                         connections=limit.maximum)
        return from_string(self.model, base_url=self.base_url, settings=call_settings,
                           on_rate_limit=limit.on_rate_limit, on_timeout=limit.on_timeout)
