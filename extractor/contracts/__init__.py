"""Versioned output contracts, looked up by name from one registry (``registry``): the one place that knows them.

A contract is a folder ``<name>/v<version>/``: ``schema.json`` (the record, JSON Schema 2020-12) and
``checks.toml`` (declared checks and evidence settings), read by ``files``; the standard envelope
(``envelope``) is added around the record. Built-ins live in ``contracts/`` at the project root
(``extractor/_data/contracts`` in an installed wheel) and are registered when this package is imported
(``builtin``); users' folders are found through ``--contracts DIR`` / ``EXTRACT_CONTRACTS_PATH``. Adding a
contract touches no module of the package.
"""

from __future__ import annotations

from extractor.contracts import builtin as builtin
from extractor.contracts.envelope import inline_refs
from extractor.contracts.files import catalogue, get_contract
from extractor.contracts.files import listing as contract_listing
from extractor.contracts.registry import (
    SCHEMA_DIALECT,
    Contract,
    contract_dir,
    contracts,
    names,
    register,
    search_dirs,
    use_dirs,
)

__all__ = ["SCHEMA_DIALECT", "Contract", "catalogue", "contract_dir", "contract_listing", "contracts",
           "get_contract", "inline_refs", "names", "register", "search_dirs", "use_dirs"]
