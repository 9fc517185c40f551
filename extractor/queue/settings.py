"""What a queued batch is converted with: the run's options (``extractor.options``) as stored on the batch and
read back by every worker, with the contract as the submitter had it.

Secrets never travel: a batch names its model server (``endpoint``, one of the operator's, see
``extractor.queue.endpoints``), and each worker finds the URL and the key of that name in its own
configuration. A batch of ``extract run --queue`` may give a base URL instead: it gets the key of the
configured endpoint at that URL, if any, and no key otherwise. The judge's server is found the same way
(``judge_endpoint``, else ``judge_base_url``, else the generator's).

The contract travels as a run records it (name, version, folder of a contract written as files, content
hash): a worker uses that very contract, found in the folder the batch names or in the worker's own search
path (``extract worker --contracts``, ``EXTRACT_CONTRACTS_PATH``), and refuses a copy whose files differ
(``extractor.contracts.recorded``). A batch that names its contract only (the API's, one stored before)
gets the contract of that name the worker has.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError

from extractor.engine import AdaptiveLimit, RunSettings
from extractor.generate import Provider
from extractor.options import RunOptions, explain
from extractor.providers import ProviderSettings, from_string
from extractor.queue.endpoints import OPENAI_URL, Endpoints, normal_url

if TYPE_CHECKING:
    from extractor.contracts import Contract

Server = tuple[str | None, str | None]
"""``(base URL, key)`` of a model server in this process's configuration; ``(None, None)``: a local model."""


class BatchSettings(RunOptions):
    """The options of a queued batch, and its contract as the submitter had it."""

    contract_version: int | None = Field(default=None, description="with the next three, the contract as the submitter had "
                                         "it; None: the worker's contract of that name")
    contract_folder: str | None = None
    contract_hash: str = ""
    contract_files: dict[str, str] | None = None  # each file's sha256: a refusal names the files that changed

    def with_contract(self, contract: Contract) -> BatchSettings:
        """These settings for ``contract`` as this process has it (its version, folder and content hash)."""
        name, version, folder, digest, files = contract.ref
        return self.model_copy(update={"contract": name, "contract_version": version, "contract_folder": folder,
                                       "contract_hash": digest, "contract_files": None if files is None else dict(files)})

    def contract_spec(self, batch_id: str | None = None) -> Contract:
        """The batch's contract in this worker: the one the submitter recorded, else the one of that name."""
        from extractor.contracts import get_contract
        from extractor.contracts.recorded import Recorded, resolve

        if self.contract_version is None:
            return get_contract(self.contract)
        return resolve(Recorded(self.contract, self.contract_version, self.contract_folder, self.contract_hash,
                                self.contract_files, recorded_when=f"batch {(batch_id or '?')[:12]} was submitted"))

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BatchSettings:
        """Settings as stored; keys this version does not know are refused rather than silently dropped."""
        try:
            return cls.model_validate(value)
        except ValidationError as error:
            raise ValueError(f"batch settings this worker cannot read ({explain(error, str)}): a newer extractor "
                             "submitted them?") from None

    def options(self) -> RunOptions:
        """The run's options alone (without the contract's record)."""
        return RunOptions.model_validate({name: getattr(self, name) for name in RunOptions.model_fields})

    def key(self) -> str:
        """What makes two batches need two engines in a worker: their conversion options and their contract."""
        return self.model_dump_json(exclude=set(self.PER_BATCH))

    def server(self, endpoints: Endpoints) -> Server:
        """``(base URL, key)`` of the model server in this process's configuration: the named endpoint's own
        (``ValueError`` when this process has no such endpoint, or not for this model), else the batch's base
        URL (or ``OPENAI_BASE_URL``) with the key of the endpoint configured at that URL, if any. ``(None,
        None)`` for a local model."""
        return _server(endpoints, self.model or "local", self.endpoint, self.base_url)

    def judge_server(self, endpoints: Endpoints) -> Server:
        """The judge's server, as ``server`` finds the generator's: its own endpoint or base URL, else the
        generator's."""
        assert self.judge is not None
        if self.judge_endpoint is None and self.judge_base_url is None:
            return _server(endpoints, self.judge, self.endpoint, self.base_url)
        return _server(endpoints, self.judge, self.judge_endpoint, self.judge_base_url)

    def run_settings(self, concurrency: int, command: str, base_url: str | None, batch_id: str | None = None
                     ) -> RunSettings:
        """What a worker's engine for these settings runs with: every option but the per-batch ones (each task
        brings its batch's: ``extractor.engine.settings.Scope``)."""
        conversion = self.options().model_copy(update={name: RunOptions.model_fields[name].default
                                                       for name in self.PER_BATCH})
        return RunSettings(contract=self.contract_spec(batch_id), options=conversion, concurrency=concurrency,
                           command=command, base_url=base_url)

    def provider(self, limit: AdaptiveLimit, server: Server) -> Provider:
        """The model client of ``server``, reporting 429s and timeouts to ``limit``. Without a key a placeholder
        is sent, never a key of this process's environment."""
        from extractor.providers.openai_compat import NO_KEY_PLACEHOLDER

        base_url, key = server
        return from_string(self.model or "local", base_url=base_url, api_key=key or NO_KEY_PLACEHOLDER,
                           settings=ProviderSettings.of(self, connections=limit.maximum),
                           on_rate_limit=limit.on_rate_limit, on_timeout=limit.on_timeout)


def _server(endpoints: Endpoints, model: str, endpoint: str | None, base_url: str | None) -> Server:
    if model.strip().partition(":")[0] == "local":
        return None, None
    if endpoint is not None:
        found = endpoints.allowed(endpoint, model)
        return found.url, found.key()
    url = normal_url(base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
    configured = endpoints.at_url(url)
    return url, None if configured is None else configured.key()
