"""The contract a stored result was made under, found again from what its run recorded.

A run records its contract's name and version, its content hash, the sha256 of each of its files and, for a
contract written as files, its folder (``Engine.run_config``). A command that later reads the run's results
(an approval with an edit, the web review's check, ``judge run``, export) needs that same contract, not
whatever carries its name today: a catalogue edited since would check an edit against entries the run never
saw. So it is looked for, in order: among the contracts this process knows, in the folder the run recorded,
then as ``<name>/v<N>/`` in each folder of the search path (``--contracts``, ``EXTRACT_CONTRACTS_PATH``);
only a copy with the recorded content hash counts. When copies exist but differ, the error says which files
changed and what to do; when there is none, where it looked. A run recorded before content hashes were
(no hash) takes the first copy found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from extractor.contracts.files import SCHEMA_FILE, combined_hash, file_hashes, load
from extractor.contracts.registry import Contract, ContractRef, register, registered, search_dirs
from extractor.errors import UsageError


class RunRecord(Protocol):
    """What a stored run says about its contract (``extractor.store.RunInfo`` has it)."""

    @property
    def id(self) -> str: ...
    @property
    def contract(self) -> str: ...
    @property
    def contract_version(self) -> int: ...
    @property
    def config(self) -> dict[str, Any]: ...


class ContractNotAsRecorded(UsageError):
    """The contract a run used cannot be found as it was: changed since, or nowhere to be found."""


@dataclass(frozen=True)
class Recorded:
    """A contract as a run recorded it."""

    name: str
    version: int
    folder: str | None  # a contract written as files: where it was
    content_hash: str  # "" for a run recorded before contracts had content hashes
    files: Mapping[str, str] | None = None  # each file's sha256 by name; None: not recorded
    run_id: str | None = None
    recorded_when: str | None = None  # when it was recorded, if not by a run: "batch 1f2e submitted"

    @classmethod
    def of_run(cls, run: RunRecord) -> Recorded:
        config = run.config or {}
        files = config.get("contract_files")
        return cls(run.contract, run.contract_version, config.get("contract_folder"),
                   str(config.get("contract_hash") or ""), files if isinstance(files, dict) else None, run.id)

    @classmethod
    def of_ref(cls, ref: ContractRef) -> Recorded:
        name, version, folder, digest, files = ref
        return cls(name, version, folder, digest, None if files is None else dict(files))

    @property
    def label(self) -> str:
        return f"contract {self.name} v{self.version}"

    @property
    def since(self) -> str:
        if self.recorded_when:
            return self.recorded_when
        return f"run {self.run_id[:12]} used it" if self.run_id else "this run started"

    @property
    def of(self) -> str:
        return f"run {self.run_id[:12]}" if self.run_id else "this run"


def contract_of_run(run: RunRecord) -> Contract:
    """The contract ``run`` used, as it was (``ContractNotAsRecorded`` says why it cannot be had)."""
    return resolve(Recorded.of_run(run))


def resolve(recorded: Recorded | ContractRef) -> Contract:
    """The contract ``recorded`` names with the same content, in this process; see the module docstring."""
    if not isinstance(recorded, Recorded):
        recorded = Recorded.of_ref(recorded)
    known = registered(recorded.name, recorded.version)
    if known is not None and recorded.content_hash in ("", known.content_hash):
        if _intact(known):
            return known
        if recorded.files is None:  # loaded here as recorded: its files then say which changed
            recorded = replace(recorded, files=known.content_files)
    places = [Path(recorded.folder)] if recorded.folder else []
    places += [root / recorded.name / f"v{recorded.version}" for root in search_dirs()]
    differing: list[tuple[Path, dict[str, str]]] = []
    for place in dict.fromkeys(place.resolve() for place in places):
        if not (place / SCHEMA_FILE).is_file():
            continue
        files = _hashes_now(place)
        if recorded.content_hash in ("", combined_hash(files)):
            return _loaded(place, recorded)
        differing.append((place, files))
    if known is not None and (known.folder / SCHEMA_FILE).is_file() \
            and known.folder.resolve() not in {place for place, _ in differing}:
        differing.append((known.folder, _hashes_now(known.folder.resolve())))
    if differing:
        place, files = next(((p, f) for p, f in differing if str(p) == recorded.folder), differing[0])
        raise ContractNotAsRecorded(
            f"{recorded.label} changed since {recorded.since}: {_changes(recorded.files, files)} "
            f"(in {place}); put the files back as they were, or give --contracts a folder holding "
            f"{recorded.name}/v{recorded.version} as the run had it; to use the contract as it is now, "
            "run the documents again")
    where = f"its folder {recorded.folder} no longer exists and " if recorded.folder else ""
    raise ContractNotAsRecorded(
        f"{recorded.label} of {recorded.of} is not found: {where}no contracts folder "
        f"(--contracts, EXTRACT_CONTRACTS_PATH) holds {recorded.name}/v{recorded.version}; give --contracts "
        "the folder that holds it")


def _changes(then: Mapping[str, str] | None, now: Mapping[str, str]) -> str:
    """Which files differ, in one phrase (``skus.csv changed, notes.md added``)."""
    if then is None:
        return "its files changed (the run recorded no per-file hashes, so which is unknown)"
    parts = [f"{', '.join(names)} {what}" for what, names in (
        ("changed", [name for name in then if name in now and now[name] != then[name]]),
        ("added", [name for name in now if name not in then]),
        ("removed", [name for name in then if name not in now])) if names]
    return "; ".join(parts) or "its files changed"


_HASHED: dict[str, tuple[tuple[tuple[str, int, int], ...], dict[str, str]]] = {}


def _hashes_now(folder: Path) -> dict[str, str]:
    """``file_hashes(folder)``, read again only when a file's size or modification time changed (the validation
    worker and the web review ask on every call, and a catalogue may be large)."""
    state: list[tuple[str, int, int]] = []
    stack = [str(folder)]
    while stack:  # os.scandir: a quarter of the time rglob takes, measured on a contract folder
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir():
                        if entry.name != "__pycache__":
                            stack.append(entry.path)
                    elif entry.is_file():
                        stat = entry.stat()
                        state.append((entry.path, stat.st_mtime_ns, stat.st_size))
        except FileNotFoundError:
            continue
    seen = tuple(sorted(state))
    cached = _HASHED.get(str(folder))
    if cached is None or cached[0] != seen:
        cached = _HASHED[str(folder)] = (seen, file_hashes(folder) if seen else {})
    return cached[1]


def _intact(contract: Contract) -> bool:
    """Whether the files of a loaded contract are still what it was loaded from: its checks read catalogues when
    they first need them, so a contract whose folder changed since would check by entries of the new files."""
    return not contract.content_files or combined_hash(_hashes_now(contract.folder)) == contract.content_hash


_LOADED: dict[tuple[Path, str], Contract] = {}


def _loaded(folder: Path, recorded: Recorded) -> Contract:
    """The contract in ``folder`` (loaded once per content), registered when its name and version are free so
    the stages that look a contract up by name (the judge's links) find this one."""
    key = (folder, recorded.content_hash)
    if key not in _LOADED:
        _LOADED[key] = load(folder)
        if registered(recorded.name, recorded.version) is None:
            register(_LOADED[key])
    return _LOADED[key]
