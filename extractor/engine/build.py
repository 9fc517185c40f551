"""An engine from a run's options: what ``extract run`` and the Python API (``extractor.api``) both start a batch with.

The options are ``extractor.options.RunOptions`` (docs/runs.md#options); this process brings the contract as loaded,
the run log, how many documents it converts at once and the command recorded. What the user should read (the bundled
model is a demonstration, the judge's mode was lowered, the judge is the generator's own model) goes to ``note``: the
CLI prints it on stderr, the API keeps it with the batch. A value that cannot be used is one ``UsageError`` line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from extractor.engine.engine import Engine
from extractor.engine.settings import RunSettings
from extractor.engine.summary import Progress
from extractor.errors import UsageError
from extractor.generate.limit import AdaptiveLimit
from extractor.options import RunOptions

if TYPE_CHECKING:
    from extractor.contracts import Contract
    from extractor.store import Store


def build_engine(options: RunOptions, contract: Contract, store: Store, *, concurrency: int, command: str,
                 progress: Progress | None = None, note: Callable[[str], None] = lambda _: None) -> Engine:
    """The engine of a run here: the model server's provider (its 429s and timeouts lower the run's concurrency), the
    judge when ``options.judge`` names one, the budget when ``options.max_cost`` sets one."""
    from extractor.providers import ProviderSettings, from_string

    if options.endpoint is not None or options.judge_endpoint is not None:
        raise UsageError("an endpoint names a model server of `extract serve` and its workers; give --base-url here")
    limit = AdaptiveLimit(concurrency)
    try:
        provider = from_string(options.model or "local", base_url=options.base_url,
                               settings=ProviderSettings.of(options, connections=concurrency),
                               on_rate_limit=limit.on_rate_limit, on_timeout=limit.on_timeout)
    except (ValueError, ImportError) as error:
        raise UsageError(str(error)) from None
    if getattr(provider, "is_bundled", False):
        from extractor.providers.local import BUNDLED_MODEL_NOTE

        note(f"note: {BUNDLED_MODEL_NOTE}")
    settings = RunSettings(contract=contract, options=options, concurrency=concurrency, command=command,
                           base_url=options.base_url)
    judge = None
    if options.judge is not None:
        from extractor.judge.modes import build_judge

        judge, notes = build_judge(options, generator=provider, store=store, contract=contract,
                                   base_url=options.judge_base_url or options.base_url)
        for line in notes:
            note(line)
    try:
        return Engine(store, provider, settings, limit=limit, progress=progress, judge=judge)
    except (FileNotFoundError, ValueError) as error:  # a missing prompt version, an unknown price, a bad limits file
        raise UsageError(str(error)) from None
