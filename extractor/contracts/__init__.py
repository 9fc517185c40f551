"""Versioned output contracts, looked up by name from one registry (``registry``).

Files live in ``contracts/<name>/v<version>/`` at the project root (``extractor/_data/contracts`` in an
installed wheel): ``schema.json`` is what the model is shown and what the validator enforces;
``rules.json`` holds the contract's rule settings (thresholds, which warnings need a person). The built-in
contracts (``builtin``) are registered when this package is imported.
"""

from __future__ import annotations

from extractor.contracts import builtin as builtin
from extractor.contracts.registry import (
    SCHEMA_DIALECT,
    Contract,
    contract_dir,
    contracts,
    get_contract,
    inline_refs,
    names,
    register,
)

__all__ = ["SCHEMA_DIALECT", "Contract", "contract_dir", "contracts", "get_contract", "inline_refs",
           "names", "register"]
