"""What a batch is converted with, as stored on the batch (JSON) and rebuilt by every worker.

Secrets never travel: a batch names its model server (``endpoint``, one of the operator's, see
``extractor.queue.endpoints``), and each worker finds the URL and the key of that name in its own
configuration. A batch of ``extract run --queue`` may give a base URL instead: it gets the key of the
configured endpoint at that URL, if any, and no key otherwise.

The contract travels as a run records it (name, version, folder of a contract written as files, content
hash): a worker uses that very contract, found in the folder the batch names or in the worker's own search
path (``extract worker --contracts``, ``EXTRACT_CONTRACTS_PATH``), and refuses a copy whose files differ
(``extractor.contracts.recorded``). A batch that names its contract only (the API's, one stored before)
gets the contract of that name the worker has.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from extractor.engine import AdaptiveLimit, RunSettings
from extractor.generate import Provider
from extractor.providers import ProviderSettings, ResponseFormat, from_string
from extractor.queue.endpoints import OPENAI_URL, Endpoints, normal_url
from extractor.vocab import DEFAULT_CONTRACT, DEFAULT_PROMPT_VERSION

if TYPE_CHECKING:
    from extractor.contracts import Contract


@dataclass(frozen=True)
class BatchSettings:
    """The options of ``extract run`` that travel with a queued batch."""

    model: str = "local"
    endpoint: str | None = None
    """The operator's name of the model server (``extractor.queue.endpoints``); None: ``base_url``."""
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
    contract_version: int | None = None
    """With the next two, the contract as the submitter had it; None: the worker's contract of that name."""
    contract_folder: str | None = None
    contract_hash: str = ""
    contract_files: dict[str, str] | None = None  # each file's sha256: a refusal names the files that changed

    def with_contract(self, contract: Contract) -> BatchSettings:
        """These settings for ``contract`` as this process has it (its version, folder and content hash)."""
        name, version, folder, digest, files = contract.ref
        return replace(self, contract=name, contract_version=version, contract_folder=folder, contract_hash=digest,
                       contract_files=None if files is None else dict(files))

    def contract_spec(self, batch_id: str | None = None) -> Contract:
        """The batch's contract in this worker: the one the submitter recorded, else the one of that name."""
        from extractor.contracts import get_contract
        from extractor.contracts.recorded import Recorded, resolve

        if self.contract_version is None:
            return get_contract(self.contract)
        return resolve(Recorded(self.contract, self.contract_version, self.contract_folder, self.contract_hash,
                                self.contract_files, recorded_when=f"batch {(batch_id or '?')[:12]} was submitted"))

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

    def server(self, endpoints: Endpoints) -> tuple[str | None, str | None]:
        """``(base URL, key)`` of the model server in this process's configuration: the named endpoint's own
        (``ValueError`` when this process has no such endpoint, or not for this model), else the batch's base
        URL (or ``OPENAI_BASE_URL``) with the key of the endpoint configured at that URL, if any. ``(None,
        None)`` for a local model."""
        if self.model.strip().partition(":")[0] == "local":
            return None, None
        if self.endpoint is not None:
            endpoint = endpoints.allowed(self.endpoint, self.model)
            return endpoint.url, endpoint.key()
        url = normal_url(self.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
        found = endpoints.at_url(url)
        return url, None if found is None else found.key()

    def run_settings(self, concurrency: int, command: str, base_url: str | None, batch_id: str | None = None
                     ) -> RunSettings:
        return RunSettings(contract=self.contract_spec(batch_id), prompt_version=self.prompt_version,
                           concurrency=concurrency, force=self.force, retry_errors=self.retry_errors,
                           max_tokens=self.max_tokens, tags=self.tags, command=command, base_url=base_url)

    def provider(self, limit: AdaptiveLimit, base_url: str | None, key: str | None) -> Provider:
        """The model client of the server ``server`` found, reporting 429s and timeouts to ``limit``. Without a
        key a placeholder is sent, never a key of this process's environment."""
        from extractor.providers.openai_compat import NO_KEY_PLACEHOLDER

        call_settings = ProviderSettings(timeout_s=self.timeout, max_transport_retries=self.retries,
                                         retry_budget_s=self.retry_budget,
                                         response_format=ResponseFormat(self.response_format),
                                         connections=limit.maximum)
        return from_string(self.model, base_url=base_url, api_key=key or NO_KEY_PLACEHOLDER, settings=call_settings,
                           on_rate_limit=limit.on_rate_limit, on_timeout=limit.on_timeout)
