"""``extractor.Contract``: a contract as the Python API takes it, by name, from a folder, or from a pydantic model."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.errors import ContractError, UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from extractor.contracts import Contract as Spec


class Contract:
    """What to extract and how to check it: a JSON Schema for the record, the standard envelope the rules need
    (evidence, sentence coverage, missing fields) and the declared checks (docs/contracts.md).

    ``Contract.named("purchase_order", contracts=["samples/contracts"])`` is the contract ``--contract`` names;
    ``Contract.from_model(PurchaseOrder, checks=[...])`` makes one from a pydantic model. Give either as ``contract=``
    to ``extract``, ``extract_many`` and ``validate`` (a name works there too).
    """

    __slots__ = ("_model", "_spec")

    def __init__(self, spec: Spec, model: type[BaseModel] | None = None) -> None:
        self._spec = spec
        self._model = model

    @classmethod
    def named(cls, name: str, *, contracts: Iterable[str | os.PathLike[str]] = ()) -> Contract:
        """The contract ``name`` (its newest version): a built-in, or one written as files in ``contracts`` (folders
        of ``<name>/v<N>/``, as ``--contracts``) or ``EXTRACT_CONTRACTS_PATH``. ``ContractError`` names the file and
        key of each problem of a broken one; ``UsageError`` lists the contracts there are when there is none."""
        from extractor.contracts import get_contract, use_dirs

        use_dirs(Path(folder) for folder in contracts)
        try:
            return cls(get_contract(name))
        except KeyError as error:
            raise UsageError(str(error.args[0])) from None

    @classmethod
    def from_model(cls, model: type[BaseModel], *, checks: Sequence[Mapping[str, Any]] = (), name: str | None = None,
                   version: int = 1, evidence: Mapping[str, Any] | None = None, guards: Mapping[str, Any] | None = None,
                   modes: Mapping[str, Any] | None = None, description: str | None = None) -> Contract:
        """The contract a pydantic model makes: its JSON Schema is the record (field descriptions are the model's
        instructions), the envelope is added, and ``checks``, ``evidence``, ``guards`` and ``modes`` are what
        ``checks.toml``'s ``[[check]]``, ``[evidence]``, ``[guards]`` and ``[modes]`` hold, as Python values (a lookup's
        ``catalogue`` may be a path: the file is copied with the contract). ``name`` defaults to the class name in
        snake case (``PurchaseOrder``: ``purchase_order``). ``Result.record`` is then an instance of ``model``.

        It is written as a contract folder under ``EXTRACT_CONTRACTS_CACHE`` (default ``~/.cache/extractor/contracts``)
        and loaded as any file contract, so its findings and content hash are a file contract's, and the CLI finds it
        for the runs that used it (docs/python-api.md#a-pydantic-model-is-a-contract)."""
        from pydantic import BaseModel

        from extractor.contracts.from_model import model_contract

        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ContractError([f"Contract.from_model takes a pydantic model class, not {model!r}"])
        return cls(model_contract(model, name=name, version=version, checks=checks, evidence=evidence, guards=guards,
                                  modes=modes, description=description), model)

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def version(self) -> int:
        return self._spec.version

    @property
    def content_hash(self) -> str:
        """sha256 over its files (schema, checks, templates, catalogues): an edit is a new configuration of a run."""
        return self._spec.content_hash

    @property
    def folder(self) -> Path:
        """Where its files are (a contract made from a model: the folder it was written to)."""
        return self._spec.folder

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON Schema the model is shown and the validator enforces: the record and the envelope."""
        return self._spec.schema

    @property
    def record_schema(self) -> dict[str, Any]:
        """The schema of the record alone, without the envelope."""
        return self._spec.record_schema

    @property
    def model(self) -> type[BaseModel] | None:
        """The pydantic model it was made from (None: a contract written as files)."""
        return self._model

    @property
    def rule_ids(self) -> list[str]:
        """The rules it runs besides the ones every contract runs, in stage order (``extract rules`` explains each)."""
        return [rule.card.rule_id for rule in self._spec.rules]

    @property
    def spec(self) -> Spec:
        """The contract as the stages read it (not part of the stable surface)."""
        return self._spec

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Contract) and (self.name, self.version, self.content_hash) == (
            other.name, other.version, other.content_hash)

    def __hash__(self) -> int:
        return hash((self.name, self.version, self.content_hash))

    def __repr__(self) -> str:
        return f"Contract({self.name!r} v{self.version}, {self.content_hash[:12]}, {self.folder})"


def resolve_contract(contract: str | Contract, contracts: Iterable[str | os.PathLike[str]] = ()) -> Contract:
    """``contract=`` as the API takes it: a name (looked up as ``Contract.named``) or a ``Contract``."""
    if isinstance(contract, Contract):
        return contract
    if isinstance(contract, str):
        return Contract.named(contract, contracts=contracts)
    raise UsageError(f"contract= takes a contract's name or an extractor.Contract, not {type(contract).__name__}")
