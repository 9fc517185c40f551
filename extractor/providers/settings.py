"""What every provider is configured with: the structured-output mode asked for and the bounds on a call.

Apart from the package's ``__init__``, which imports a provider module when one is chosen: the provider modules
import these settings from here, so the imports go one way (docs/design.md#data-flow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from extractor.vocab import ResponseFormat as ResponseFormat

if TYPE_CHECKING:
    from extractor.options import RunOptions


@dataclass(frozen=True)
class ProviderSettings:
    """Bounds on one ``generate`` call, so a dead or throttling server cannot stall a run forever."""

    timeout_s: float = 120.0  # per HTTP try
    max_transport_retries: int = 3  # retries after the first try (timeouts, resets, 429, 5xx, garbled bodies)
    retry_budget_s: float = 300.0  # total seconds of backoff + retries per call
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    n_ctx: int = 8192  # context window of local models
    response_format: ResponseFormat = ResponseFormat.auto  # OpenAI-compatible servers only
    connections: int = 100  # HTTP connections at most: the calls in flight (a run's --concurrency)
    max_body_bytes: int = 64 << 20  # an answer's body, counted after gzip/deflate: more is a malformed answer

    @classmethod
    def of(cls, options: RunOptions, *, connections: int, judge: bool = False) -> ProviderSettings:
        """The bounds a run's options set on its calls (the judge's: its own timeout), ``connections`` at most."""
        return cls(timeout_s=options.judge_timeout if judge else options.timeout,
                   max_transport_retries=options.retries, retry_budget_s=options.retry_budget,
                   response_format=options.response_format, connections=connections)
