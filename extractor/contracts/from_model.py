"""A contract made from a pydantic model (``extractor.Contract.from_model``, docs/python-api.md#a-pydantic-model-is-a-contract).

The model's JSON Schema is the record (its field descriptions reach the prompt as a file contract's do); the checks,
``[evidence]``, ``[guards]`` and ``[modes]`` are the tables ``checks.toml`` holds, given as Python values. Both are
written as a contract folder, ``<cache>/<digest>/<name>/v<N>/`` with ``schema.json``, ``checks.toml`` and the
catalogues the checks name, and loaded by the file loader (``extractor.contracts.files``): so the envelope is added,
the checks are built and checked, and the content hash is computed exactly as for a contract written by hand, the
checker process loads it from its folder as it loads any file contract, and a later ``extract show`` or ``approve
--edited`` finds it in the folder the run recorded. The folder is named by the digest of what is written in it, so
the same model and checks are one folder and one content hash, in every process.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from extractor.contracts.files import CHECKS_FILE, SCHEMA_FILE, load
from extractor.contracts.registry import SCHEMA_DIALECT, Contract, register, registered
from extractor.errors import ContractError

if TYPE_CHECKING:
    from pydantic import BaseModel

CACHE_ENV = "EXTRACT_CONTRACTS_CACHE"
"""Where contracts made from models are written (default ``$XDG_CACHE_HOME/extractor/contracts``, else
``~/.cache/extractor/contracts``)."""
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MADE: dict[tuple[Path, type[BaseModel]], Contract] = {}


def cache_root() -> Path:
    """The folder contracts made from models are written in (``CACHE_ENV``)."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base).expanduser() / "extractor" / "contracts"


def snake_name(model: type[BaseModel]) -> str:
    """``PurchaseOrder`` -> ``purchase_order``: a contract's name from its model's class name."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", model.__name__).lower()


def model_contract(model: type[BaseModel], *, name: str | None = None, version: int = 1,
                   checks: Sequence[Mapping[str, Any]] = (), evidence: Mapping[str, Any] | None = None,
                   guards: Mapping[str, Any] | None = None, modes: Mapping[str, Any] | None = None,
                   description: str | None = None) -> Contract:
    """The contract ``model`` and its checks make (module docstring); ``ContractError`` names the model and the key of
    every problem, as a file contract's name the file and the key."""
    label = f"{model.__module__}.{model.__qualname__}"
    name = name or snake_name(model)
    if not _NAME.match(name) or not isinstance(version, int) or version < 1:
        raise ContractError([f"{label}: a contract's name is lowercase letters, digits and _ (not {name!r}) and its "
                             f"version a whole number from 1 (not {version!r})"])
    try:
        record = {"$schema": SCHEMA_DIALECT, **model.model_json_schema()}
    except Exception as error:  # noqa: BLE001 - pydantic's own errors for a model it cannot describe
        raise ContractError([f"{label}: no JSON Schema for the model ({type(error).__name__}: {error})"]) from None
    copies: dict[str, bytes] = {}
    table: dict[str, Any] = {}
    if description is not None:
        table["description"] = description
    for key, value in (("evidence", evidence), ("guards", guards), ("modes", modes)):
        if value is not None:
            table[key] = dict(value)
    if checks:
        table["check"] = [_check(dict(entry), number, copies, label) for number, entry in enumerate(checks, 1)]
    files = {SCHEMA_FILE: (json.dumps(record, ensure_ascii=False, indent=2) + "\n").encode(),
             CHECKS_FILE: _toml(table, label).encode(), **copies}
    folder = _written(files, name, version).resolve()
    made = _MADE.get((folder, model))
    if made is not None:
        return made
    try:
        made = load(folder, pydantic=model)
    except ContractError as error:
        raise ContractError([_named(problem, folder, label) for problem in error.problems]) from None
    known = registered(name, version)
    if known is None:
        register(made)  # the stages that look a contract up by name (the judge's links) find this one
    elif known.content_hash != made.content_hash:
        raise ContractError([f"{label}: contract {made.id} is already known with other content ({known.folder}); "
                             "give from_model a name or version of its own"])
    _MADE[(folder, model)] = made
    return made


def _check(entry: dict[str, Any], number: int, copies: dict[str, bytes], label: str) -> dict[str, Any]:
    """One ``[[check]]`` table as written: a catalogue given as a path (a ``Path``, or a file that exists) is copied
    into the folder under its name."""
    catalogue = entry.get("catalogue")
    if isinstance(catalogue, os.PathLike) or (isinstance(catalogue, str) and Path(catalogue).expanduser().is_file()):
        path = Path(catalogue).expanduser()
        try:
            data = path.read_bytes()
        except OSError as error:
            raise ContractError([f"{label}: checks[{number}] catalogue {path}: cannot be read "
                                 f"({error.strerror or error})"]) from None
        if path.name in copies and copies[path.name] != data:
            raise ContractError([f"{label}: checks[{number}] catalogue {path}: another catalogue is named "
                                 f"{path.name} too"])
        copies[path.name] = data
        entry["catalogue"] = path.name
    return entry


def _toml(table: Mapping[str, Any], label: str) -> str:
    import tomli_w

    try:
        return tomli_w.dumps(table)
    except TypeError as error:  # a value TOML has no form for (None, an object)
        raise ContractError([f"{label}: checks: {error}"]) from None


def _written(files: Mapping[str, bytes], name: str, version: int) -> Path:
    """The folder holding ``files`` under the cache (written once: a folder of that digest holds them already)."""
    digest = hashlib.sha256(f"{name}/v{version}".encode())
    for file, data in sorted(files.items()):
        digest.update(file.encode() + b"\0" + hashlib.sha256(data).digest())
    home = cache_root() / digest.hexdigest()[:24]
    folder = home / name / f"v{version}"
    if (folder / SCHEMA_FILE).is_file():
        return folder
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=home.parent))
    try:
        inside = staging / name / f"v{version}"
        inside.mkdir(parents=True)
        for file, data in files.items():
            (inside / file).write_bytes(data)
        try:
            staging.rename(home)
        except OSError:  # another process wrote the same folder first: the same bytes
            if not (folder / SCHEMA_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _named(problem: str, folder: Path, label: str) -> str:
    """A file loader's problem line with the model in place of the file it wrote."""
    return (problem.replace(str(folder / CHECKS_FILE), f"{label} (checks)")
            .replace(str(folder / SCHEMA_FILE), f"{label} (its JSON Schema)").replace(str(folder), label))
